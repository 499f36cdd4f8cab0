#pragma once

// Which switch port each watched interface is cabled to, as the node's LLDP daemon heard it
// (issue 39: the fabric one hop past the host ports). The source is lldpd (Debian `lldpd`),
// which receives the LLDP frames (IEEE 802.1AB) the switches send on every port; it is read
// through its own client, `lldpcli -u SOCKET -f json0 show neighbors`, run by the
// agent: no link to liblldpctl, so a node without lldpd runs the agent all the same, host-only.
// json0 is lldpd's stable JSON layout (lldpcli(8): "every value is a list"): src/client/
// json_writer.c writes it, src/client/display.c (display_interface, display_chassis,
// display_port) names the fields read here:
//   {"lldp": [{"interface": [{"name": "eth0", "via": "LLDP",
//       "chassis": [{"id": [{"type": "mac", "value": "..."}], "name": [{"value": "leaf-3"}],
//                    "mgmt-ip": [{"value": "10.0.0.3"}, ...]}],
//       "port": [{"id": [{"type": "ifname", "value": "Ethernet1/5"}],
//                 "descr": [{"value": "to gpu-node-12"}]}]}, ...]}]}
// With no neighbour at all lldpcli prints {"lldp": [{}]}.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/refresh_thread.h"
#include "collectors/port.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// Interface name -> its neighbour (source: the protocol lldpd heard it by, lowercase: "lldp", or
// "cdpv2" and the like where lldpd is told to listen for them). An interface with several
// neighbours (a hub, or a switch and a host both sending) keeps the first lldpcli lists.
using NeighborMap = std::map<std::string, v1::PortNeighbor>;

// Parses lldpcli's json0 output. At most kMaxNeighborInterfaces interfaces are kept; entries
// that are not objects or have no name are skipped. Text fields as PortNeighbor says (printable
// ASCII, 255 bytes). Errors: InvalidArgument when the text is not json0's {"lldp": [...]}.
inline constexpr size_t kMaxNeighborInterfaces = 512;
absl::StatusOr<NeighborMap> ParseLldpcliJson0(absl::string_view json);

// Runs lldpcli against lldpd's control socket `socket` and parses its answer. Errors:
// Unavailable when lldpcli cannot be started or fails (no lldpd on that socket, or one this user
// may not read: lldpcli exits 1), DeadlineExceeded past timeout_ns, ResourceExhausted past 4 MiB
// of output, InvalidArgument for output that is not json0.
absl::StatusOr<NeighborMap> ReadLldpNeighbors(const std::string& lldpcli, const std::string& socket,
                                              int64_t timeout_ns);

// Refreshes the neighbours every period on its own thread, the first at start. Latest() is
// empty until a refresh succeeds, and again from the third failure in a row (a neighbour kept
// through a long outage could be a cable moved since). Logs once when lldpd cannot be read and
// once when it can again, and each interface whose neighbour appears, changes or goes (also
// when the map is dropped).
class LldpWatcher {
 public:
  struct Options {
    std::string lldpcli = "lldpcli";  // looked up in PATH
    std::string socket = "/run/lldpd.socket";
    int64_t period_ns = 30'000'000'000;
    int64_t timeout_ns = 5'000'000'000;
  };
  struct Stats {
    uint64_t refreshes = 0;  // successful
    uint64_t failures = 0;
    uint64_t interfaces = 0;  // with a neighbour, in the latest successful refresh
    std::string last_error;   // of the latest failure; "" after a success
  };

  explicit LldpWatcher(Options options);
  ~LldpWatcher();
  LldpWatcher(const LldpWatcher&) = delete;
  LldpWatcher& operator=(const LldpWatcher&) = delete;

  // The latest map; never null. Cheap: a shared_ptr copy under a mutex.
  std::shared_ptr<const NeighborMap> Latest() const;
  Stats stats() const;
  // One refresh now on the caller's thread (tests).
  void RefreshNow();

 private:
  void LogChanges(const NeighborMap& before, const NeighborMap& after) const;

  const Options options_;
  mutable std::mutex mu_;
  std::shared_ptr<const NeighborMap> latest_;
  Stats stats_;
  static constexpr int kStaleAfterFailures = 3;
  int failures_in_a_row_ = 0;
  std::unique_ptr<RefreshThread> thread_;  // last: stopped first
};

// Sets each port window's neighbour in `batch` from `map`, by the port's interface: its netdev
// for an RDMA port (RoCE; an InfiniBand port has none, and no LLDP), else its device. Ports
// without one are left without.
void AttachNeighbors(const NeighborMap& map, const std::vector<collectors::PortDescriptor>& ports,
                     v1::Batch* batch);

// "leaf-3 Ethernet1/5" for logs and the live page: the chassis name (else its ID) and the port
// ID (with its description in brackets when it differs).
std::string DescribeNeighbor(const v1::PortNeighbor& n);

}  // namespace fabricscope::agent
