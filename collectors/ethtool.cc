#include "collectors/ethtool.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectors/clock.h"
#include "collectors/counter_meaning.h"
#include "collectors/sysfs_ports.h"

namespace fabricscope::collectors {
namespace {

// Open() re-reads names when the stat count changes between GSSET_INFO and GSTRINGS.
constexpr int kOpenAttempts = 3;

// Maps an ioctl errno to a status: ENODEV (no such interface) NotFound, EOPNOTSUPP (driver has no
// such ethtool operation) Unimplemented, EPERM/EACCES PermissionDenied, anything else
// Unavailable.
absl::Status ErrnoStatus(int err, absl::string_view what) {
  const std::string msg = absl::StrCat(what, ": ", strerror(err));
  switch (err) {
    case ENODEV:
      return absl::NotFoundError(msg);
    case EOPNOTSUPP:
      return absl::UnimplementedError(msg);
    case EPERM:
    case EACCES:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

// An ifreq for SIOCETHTOOL on `ifname` (shorter than IFNAMSIZ, checked by the caller) pointing at
// `data`. Does not allocate.
ifreq EthtoolRequest(const char* ifname, size_t len, void* data) {
  ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  std::memcpy(ifr.ifr_name, ifname, len);
  ifr.ifr_data = static_cast<char*>(data);
  return ifr;
}

// The size of the interface's ETH_SS_STATS string set (ETHTOOL_GSSET_INFO: the kernel clears
// the set's bit in sset_mask when the driver has no such set, net/ethtool/ioctl.c
// ethtool_get_sset_info). Errors: see ErrnoStatus; Unimplemented when the set is absent.
absl::StatusOr<uint32_t> StatsCount(int fd, const std::string& ifname) {
  // struct ethtool_sset_info followed by one __u32 of data[].
  alignas(8) unsigned char buf[offsetof(ethtool_sset_info, data) + sizeof(uint32_t)] = {};
  const uint32_t cmd = ETHTOOL_GSSET_INFO;
  const uint64_t mask = uint64_t{1} << ETH_SS_STATS;
  std::memcpy(buf + offsetof(ethtool_sset_info, cmd), &cmd, sizeof(cmd));
  std::memcpy(buf + offsetof(ethtool_sset_info, sset_mask), &mask, sizeof(mask));
  ifreq ifr = EthtoolRequest(ifname.c_str(), ifname.size(), buf);
  if (ioctl(fd, SIOCETHTOOL, &ifr) != 0) return ErrnoStatus(errno, "ETHTOOL_GSSET_INFO");
  uint64_t got_mask = 0;
  std::memcpy(&got_mask, buf + offsetof(ethtool_sset_info, sset_mask), sizeof(got_mask));
  if ((got_mask & mask) == 0) return absl::UnimplementedError("driver has no ETH_SS_STATS set");
  uint32_t count = 0;
  std::memcpy(&count, buf + offsetof(ethtool_sset_info, data), sizeof(count));
  return count;
}

}  // namespace

// Memory the kernel writes stats or strings into, ending right before an inaccessible page.
//
// Until kernel commit 7b07be1ff1cb ("ethtool: Avoid overflowing userspace buffer on stats
// query", December 2025, v6.19 and stable backports), ETHTOOL_GSTATS and ETHTOOL_GSTRINGS ignore
// the n_stats/len the caller passes and write as many entries as the driver has *now*
// (net/ethtool/ioctl.c ethtool_get_stats, ethtool_get_strings). A driver whose set grew since it
// was counted (mlx5 adds per-priority PFC stats when PFC is enabled, per-channel stats when
// channels are added) writes past a plain buffer. Here copy_to_user hits the guard page instead
// and the ioctl fails with EFAULT. Kernels with that commit copy nothing and answer n_stats (or
// len) = 0 on a mismatch; both cases are caught by comparing the count that comes back.
class EthtoolCollector::StatsBuffer {
 public:
  StatsBuffer() = default;
  StatsBuffer(StatsBuffer&& o) noexcept { *this = std::move(o); }
  StatsBuffer& operator=(StatsBuffer&& o) noexcept {
    std::swap(map_, o.map_);
    std::swap(map_len_, o.map_len_);
    std::swap(data_, o.data_);
    return *this;
  }
  ~StatsBuffer() {
    if (map_ != nullptr) munmap(map_, map_len_);
  }

  // At least `bytes` writable bytes, 8-byte aligned, followed by a PROT_NONE page.
  // Errors: ResourceExhausted when mmap or mprotect fails.
  static absl::StatusOr<StatsBuffer> Create(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    bytes = (std::max<size_t>(bytes, 8) + 7) / 8 * 8;
    const size_t usable = (bytes + page - 1) / page * page;
    StatsBuffer b;
    b.map_len_ = usable + page;
    void* map =
        mmap(nullptr, b.map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("mmap: ", strerror(errno)));
    }
    b.map_ = map;
    unsigned char* base = static_cast<unsigned char*>(map);
    if (mprotect(base + usable, page, PROT_NONE) != 0) {
      return absl::ResourceExhaustedError(absl::StrCat("mprotect: ", strerror(errno)));
    }
    b.data_ = base + usable - bytes;
    return b;
  }

  unsigned char* data() const { return data_; }

 private:
  void* map_ = nullptr;
  size_t map_len_ = 0;
  unsigned char* data_ = nullptr;
};

struct EthtoolCollector::Interface {
  struct Cost {
    std::atomic<uint64_t> ns_sum{0};
    std::atomic<uint64_t> reads{0};
  };
  std::string name;
  uint32_t n_stats = 0;  // the driver's ETH_SS_STATS count at Open
  StatsBuffer buffer;    // struct ethtool_stats + n_stats x __u64
  uint32_t first_slot = 0;
  uint32_t slot_count = 0;
  std::unique_ptr<Cost> cost = std::make_unique<Cost>();
};

bool IsDefaultRoceStat(absl::string_view name) { return IsTableEthtoolStat(name); }

std::vector<std::string> StringSetNames(const unsigned char* strings, uint32_t count) {
  std::vector<std::string> names;
  names.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    const char* s = reinterpret_cast<const char*>(strings + size_t{i} * ETH_GSTRING_LEN);
    names.emplace_back(s, strnlen(s, ETH_GSTRING_LEN));
  }
  return names;
}

EthtoolCollector::EthtoolCollector() = default;

EthtoolCollector::~EthtoolCollector() {
  if (fd_ >= 0) close(fd_);
}

// Reads ifname's ETH_SS_STATS names into *names, with retries; else the last attempt's error.
absl::Status EthtoolCollector::ReadStatNames(const std::string& ifname,
                                             std::vector<std::string>* names) const {
  // Count, names, count again: retried when the driver's set changes in between.
  absl::Status failure;
  for (int attempt = 0; attempt < kOpenAttempts; ++attempt) {
    absl::StatusOr<uint32_t> count = StatsCount(fd_, ifname);
    if (!count.ok()) {
      failure = count.status();
      break;
    }
    const size_t header = offsetof(ethtool_gstrings, data);
    absl::StatusOr<StatsBuffer> buf = StatsBuffer::Create(header + *count * ETH_GSTRING_LEN);
    if (!buf.ok()) {
      failure = buf.status();
      break;
    }
    const uint32_t cmd = ETHTOOL_GSTRINGS, set = ETH_SS_STATS, len = *count;
    unsigned char* p = buf->data();
    std::memcpy(p + offsetof(ethtool_gstrings, cmd), &cmd, sizeof(cmd));
    std::memcpy(p + offsetof(ethtool_gstrings, string_set), &set, sizeof(set));
    std::memcpy(p + offsetof(ethtool_gstrings, len), &len, sizeof(len));
    ifreq ifr = EthtoolRequest(ifname.c_str(), ifname.size(), p);
    if (ioctl(fd_, SIOCETHTOOL, &ifr) != 0) {
      const int err = errno;
      failure = ErrnoStatus(err, "ETHTOOL_GSTRINGS");
      if (err == EFAULT) continue;  // the set grew into the guard page
      break;
    }
    uint32_t got = 0;
    std::memcpy(&got, p + offsetof(ethtool_gstrings, len), sizeof(got));
    absl::StatusOr<uint32_t> again = StatsCount(fd_, ifname);
    if (got != *count || !again.ok() || *again != *count) {
      failure = absl::AbortedError("the driver's stat count changed while reading names");
      continue;
    }
    *names = StringSetNames(p + header, *count);
    failure = absl::OkStatus();
    break;
  }
  return failure;
}

// Adds a slot and a counter of *port per selected stat; returns how many repeat an earlier name.
size_t EthtoolCollector::AddSelectedStats(const std::vector<std::string>& names,
                                          const EthtoolSelection& sel, PortDescriptor* port) {
  const uint32_t iface = static_cast<uint32_t>(ifaces_.size());
  std::set<std::string> names_taken;
  size_t duplicates = 0;
  for (uint32_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    if (name.empty() || !(sel.all || IsDefaultRoceStat(name))) continue;
    if (!names_taken.insert(name).second) {
      ++duplicates;  // a counter is known by (port, group, name): keep the first
      continue;
    }
    slots_.push_back(Slot{iface, i});
    CounterDescriptor d;
    d.name = name;
    d.group = "ethtool";
    d.role = CounterRole::kOther;
    d.meaning = MeaningOf(d.group, d.name).meaning;
    d.spec = CounterSpec{64, CounterBehavior::kWrapping, 1};
    d.tick_divisor = tick_divisor_;
    port->counters.push_back(std::move(d));
  }
  return duplicates;
}

absl::StatusOr<std::unique_ptr<EthtoolCollector>> EthtoolCollector::Open(
    std::vector<std::string> ifnames, const EthtoolSelection& sel, uint32_t tick_divisor,
    std::vector<std::string>* notes, const std::string& sysfs_root) {
  auto note = [notes](std::string line) {
    if (notes != nullptr) notes->push_back(std::move(line));
  };
  std::unique_ptr<EthtoolCollector> c(new EthtoolCollector());
  c->tick_divisor_ = tick_divisor == 0 ? 1 : tick_divisor;
  c->fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (c->fd_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("socket(AF_INET, SOCK_DGRAM) for SIOCETHTOOL: ", strerror(errno)));
  }
  std::set<std::string> seen;
  for (std::string& ifname : ifnames) {
    if (ifname.empty() || ifname.size() >= IFNAMSIZ || ifname.find('/') != std::string::npos) {
      note(absl::StrCat("\"", ifname, "\": not an interface name, no ethtool stats"));
      continue;
    }
    if (!seen.insert(ifname).second) continue;

    std::vector<std::string> names;
    const absl::Status failure = c->ReadStatNames(ifname, &names);
    if (!failure.ok()) {
      note(absl::StrCat(ifname, ": no ethtool stats (", failure.message(), ")"));
      continue;
    }

    PortDescriptor port;
    port.device = ifname;
    port.rdma = false;
    if (auto dp = ReadSmallFile(absl::StrCat(sysfs_root, "/class/net/", ifname, "/dev_port"), 64);
        dp.ok()) {
      uint32_t v = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*dp), &v)) port.port = v;
    }
    const uint32_t first_slot = static_cast<uint32_t>(c->slots_.size());
    const size_t duplicates = c->AddSelectedStats(names, sel, &port);
    if (duplicates > 0) {
      note(absl::StrCat(ifname, ": ", duplicates,
                        " ethtool stats repeat an earlier name and are "
                        "not sampled"));
    }
    if (port.counters.empty()) {
      note(absl::StrCat(ifname, ": none of its ", names.size(),
                        " ethtool stats is selected (RoCE stats are mlx5 names), not sampled"));
      continue;
    }
    absl::StatusOr<StatsBuffer> stats =
        StatsBuffer::Create(offsetof(ethtool_stats, data) + names.size() * sizeof(uint64_t));
    if (!stats.ok()) {
      c->slots_.resize(first_slot);
      note(absl::StrCat(ifname, ": ", stats.status().message(), ", not sampled"));
      continue;
    }
    Interface entry;
    entry.name = ifname;
    entry.n_stats = static_cast<uint32_t>(names.size());
    entry.buffer = std::move(*stats);
    entry.first_slot = first_slot;
    entry.slot_count = static_cast<uint32_t>(c->slots_.size()) - first_slot;
    c->ifaces_.push_back(std::move(entry));
    c->ports_.push_back(std::move(port));
  }
  if (c->slots_.empty()) {
    return absl::FailedPreconditionError(
        ifnames.empty()
            ? std::string("no interface to read ethtool stats from")
            : absl::StrCat("no ethtool stat selected on any of ", ifnames.size(), " interfaces"));
  }
  return c;
}

void EthtoolCollector::Sample(uint64_t tick, uint64_t* values, ReadStatus* status) {
  if (tick % tick_divisor_ != 0) {
    for (size_t s = 0; s < slots_.size(); ++s) status[s] = ReadStatus::kNotRead;
    return;
  }
  const bool measure = tick % kCostTickStride == 0;
  for (Interface& f : ifaces_) {
    unsigned char* p = f.buffer.data();
    const uint32_t cmd = ETHTOOL_GSTATS;
    std::memcpy(p + offsetof(ethtool_stats, cmd), &cmd, sizeof(cmd));
    std::memcpy(p + offsetof(ethtool_stats, n_stats), &f.n_stats, sizeof(f.n_stats));
    ifreq ifr = EthtoolRequest(f.name.c_str(), f.name.size(), p);
    const int64_t t0 = measure ? MonotonicNowNs() : 0;
    const int rc = ioctl(fd_, SIOCETHTOOL, &ifr);
    if (measure) {
      f.cost->ns_sum.fetch_add(static_cast<uint64_t>(MonotonicNowNs() - t0),
                               std::memory_order_relaxed);
      f.cost->reads.fetch_add(1, std::memory_order_relaxed);
    }
    uint32_t got = 0;
    std::memcpy(&got, p + offsetof(ethtool_stats, n_stats), sizeof(got));
    const bool ok = rc == 0 && got == f.n_stats;
    const unsigned char* data = p + offsetof(ethtool_stats, data);
    for (uint32_t s = f.first_slot; s < f.first_slot + f.slot_count; ++s) {
      if (ok) {
        std::memcpy(&values[s], data + size_t{slots_[s].stat} * sizeof(uint64_t), sizeof(uint64_t));
        status[s] = ReadStatus::kOk;
      } else {
        status[s] = ReadStatus::kError;
      }
    }
  }
}

double EthtoolCollector::ReadCostNs(size_t i) const {
  const Interface& f = ifaces_[slots_[i].iface];
  const uint64_t reads = f.cost->reads.load(std::memory_order_relaxed);
  if (reads == 0 || f.slot_count == 0) return 0;
  return static_cast<double>(f.cost->ns_sum.load(std::memory_order_relaxed)) /
         static_cast<double>(reads) / static_cast<double>(f.slot_count);
}

}  // namespace fabricscope::collectors
