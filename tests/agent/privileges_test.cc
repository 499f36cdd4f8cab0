// Dropping capabilities (agent/privileges.h), in a forked child so that this test process keeps
// its own: what remains in /proc/self/status, and what the kernel then allows.
#include "agent/privileges.h"

#include <arpa/inet.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/if_ether.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>

#include "tests/common/subprocess.h"

namespace fabricscope::agent {
namespace {

// A /proc/self/status capability mask ("CapEff", "CapBnd", ...) as a number.
uint64_t CapMask(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0)
      return std::stoull(line.substr(field.size() + 1), nullptr, 16);
  }
  return ~uint64_t{0};
}

bool CanOpenPacketSocket() {
  const int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) return false;
  close(fd);
  return true;
}

using ::fabricscope::testing::InChild;

TEST(Privileges, OnlyTheKeptCapabilityRemainsAndTheKernelHonoursIt) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (capabilities to drop)";
  ASSERT_TRUE(CanOpenPacketSocket());
  EXPECT_EQ(InChild([] {
              auto kept = DropCapabilitiesExcept({CAP_NET_RAW});
              if (!kept.ok() || *kept != "net_raw") return 1;
              const uint64_t raw = uint64_t{1} << CAP_NET_RAW;
              if (CapMask("CapEff") != raw || CapMask("CapPrm") != raw) return 2;
              if (CapMask("CapBnd") != raw) return 3;  // root holds CAP_SETPCAP: bounded too
              if (!CanOpenPacketSocket()) return 4;
              // CAP_SYS_ADMIN is gone: sethostname(2) is refused.
              if (sethostname("x", 1) == 0 || errno != EPERM) return 5;
              // And with nothing kept, capture is refused too.
              kept = DropCapabilitiesExcept({});
              if (!kept.ok() || *kept != "none") return 6;
              if (CapMask("CapEff") != 0 || CanOpenPacketSocket()) return 7;
              return 0;
            }),
            0);
  EXPECT_TRUE(CanOpenPacketSocket()) << "the test process itself kept its capabilities";
}

TEST(Privileges, AKeptCapabilityThatIsNotHeldStaysAbsent) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  EXPECT_EQ(InChild([] {
              if (!DropCapabilitiesExcept({}).ok()) return 1;
              auto kept = DropCapabilitiesExcept({CAP_NET_RAW});  // no longer held
              return kept.ok() && *kept == "none" && CapMask("CapEff") == 0 ? 0 : 2;
            }),
            0);
}

// lldpd's groups (JoinGroups, for an agent run as root): joined while CAP_SETGID is held, so
// that lldpcli (4750 _lldpd:adm on Debian) runs and reaches lldpd's socket once the
// capabilities are gone; a name that is no group is skipped; without CAP_SETGID, refused.
TEST(Privileges, RootJoinsLldpdsGroupsThenReachesLldpcliWithoutCapabilities) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  if (getgrnam("_lldpd") == nullptr || getgrnam("adm") == nullptr) {
    GTEST_SKIP() << "lldpd is not installed (deploy/install-deps.sh installs it)";
  }
  EXPECT_EQ(InChild([] {
              auto joined = JoinGroups({"_lldpd", "no-such-group-here", "adm"});
              if (!joined.ok() || *joined != std::vector<std::string>{"_lldpd", "adm"}) return 1;
              std::vector<gid_t> groups(64);
              const int n = getgroups(64, groups.data());
              groups.resize(n < 0 ? 0 : static_cast<size_t>(n));
              for (const char* name : {"_lldpd", "adm"}) {
                const gid_t gid = getgrnam(name)->gr_gid;
                if (std::find(groups.begin(), groups.end(), gid) == groups.end()) return 2;
              }
              if (!DropCapabilitiesExcept({}).ok()) return 3;
              // Without CAP_DAC_OVERRIDE, exec permission comes from the groups alone: lldpcli
              // is executable by its group adm (access(2) checks with the real ids: both 0).
              if (access("/usr/sbin/lldpcli", X_OK) != 0) return 4;
              // And no more groups can be joined now.
              auto again = JoinGroups({"nogroup"});
              if (again.ok() || again.status().code() != absl::StatusCode::kPermissionDenied) {
                return 5;
              }
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace fabricscope::agent
