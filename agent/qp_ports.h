#pragma once

// Which of the node's RDMA ports each process has queue pairs on: the port a rank's network
// bytes crossed, which the NCCL profiler does not say (its ProxyOp and ProxyStep events name a
// peer and a channel, never a NIC; the net plugin's QP events, NCCL 2.28 src/transport/net_ib.cc
// ncclIbMultiSend, give `devIndex`, an index into the connection's merged device, not the HCA).
//
// The source is the kernel's RDMA resource tracking (RDMA_NLDEV_CMD_RES_QP_GET, one entry per QP
// with its device, port, owning pid and state), read through iproute2's `rdma -j res show qp`.
// NCCL's IB transport creates a connection's QPs on the NIC it chose for that connection
// (src/transport/net_ib.cc ncclIbConnect and ncclIbAccept: ncclIbCreateQp on the device of
// `comm->devs[devIndex]`), while every NIC's device context is opened at init
// (ncclIbInitDevices keeps each ibv_open_device context in ncclIbDevs), so
// the QPs, not the open /dev/infiniband/uverbs files, tell which ports a rank sends on. With
// PXN the proxy process that owns the NIC posts the QPs, and its own profiler reports the
// ProxyOps: the bytes and the QPs belong to the same pid.

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/refresh_thread.h"
#include "collectors/port.h"
#include "fabricscope/v1/gpu.pb.h"

namespace fabricscope::agent {

// One QP as `rdma -j res show qp` prints it (iproute2 rdma/res-qp.c res_qp_parse_cb and
// rdma/res.c print_link: "ifindex", "ifname" the RDMA device, "port", "lqpn", "type", "state",
// "pid", "comm"; kernel QPs carry no pid: 0 here).
struct RdmaQp {
  std::string device;  // "mlx5_0"
  uint32_t port = 0;   // 0 when the QP is not bound to a port yet (RESET)
  uint32_t lqpn = 0;
  std::string type;   // "RC", "UD", "UC", "XRC_INI", ...
  std::string state;  // "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"
  int32_t pid = 0;
};

struct RdmaQpList {
  std::vector<RdmaQp> qps;
  size_t skipped = 0;  // entries that were not objects or lacked ifname / lqpn
};

// Parses the JSON array `rdma -j res show qp` prints (one object per QP; iproute2 >= 4.17).
// Errors: InvalidArgument when the text is not a JSON array.
absl::StatusOr<RdmaQpList> ParseRdmaResQp(absl::string_view json);

// The indices into `ports` (the agent's port list) that each process has a QP on that can carry
// data: a user QP (pid > 0) bound to a port, in a state other than RESET and ERR. A QP on a
// device or port not in `ports` (not watched) is counted in *unmatched. Sorted, no duplicates.
using ProcessPorts = absl::flat_hash_map<int32_t, std::vector<uint32_t>>;
ProcessPorts PortsOfProcesses(const std::vector<RdmaQp>& qps,
                              const std::vector<collectors::PortDescriptor>& ports,
                              size_t* unmatched);

// Sets each producer's rdma_ports (GpuProducer field 10) in `w` from `map`: the Key() ("mlx5_2:1")
// of the ports at its pid's indices into `ports`, at most kMaxProducerPorts; producers whose
// pid has none are left empty (unknown).
inline constexpr size_t kMaxProducerPorts = 16;
void AttachRdmaPorts(const ProcessPorts& map, const std::vector<collectors::PortDescriptor>& ports,
                     v1::GpuWindow* w);

// Refreshes ProcessPorts every period on its own thread. The first refresh runs at
// construction's thread start; Latest() is empty until it succeeds.
class QpPortWatcher {
 public:
  struct Options {
    std::string tool = "rdma";  // iproute2's rdma; run as `tool -j res show qp`
    int64_t period_ns = 5'000'000'000;
    int64_t timeout_ns = 2'000'000'000;
    size_t max_bytes = 64u << 20;  // 64 MiB: ~300,000 QPs at ~200 bytes each
  };
  struct Stats {
    uint64_t refreshes = 0;  // successful
    uint64_t failures = 0;
    uint64_t qps = 0;        // in the latest successful refresh
    uint64_t unmatched = 0;  // of those, on ports the agent does not watch
    uint64_t processes = 0;  // processes with a QP on a watched port
    std::string last_error;  // of the latest failure; "" after a success
  };

  QpPortWatcher(Options options, std::vector<collectors::PortDescriptor> ports);
  ~QpPortWatcher();
  QpPortWatcher(const QpPortWatcher&) = delete;
  QpPortWatcher& operator=(const QpPortWatcher&) = delete;

  // The latest map; never null. Cheap: a shared_ptr copy under a mutex.
  std::shared_ptr<const ProcessPorts> Latest() const;
  Stats stats() const;
  // Runs one refresh now on the caller's thread (tests, and the first one).
  void RefreshNow();

 private:
  const Options options_;
  const std::vector<collectors::PortDescriptor> ports_;
  mutable std::mutex mu_;
  std::shared_ptr<const ProcessPorts> latest_;
  Stats stats_;
  // Failed refreshes in a row; at kStaleAfterFailures the last good map is dropped.
  static constexpr int kStaleAfterFailures = 3;
  int failures_in_a_row_ = 0;
  std::unique_ptr<RefreshThread> thread_;  // last: stopped first
};

}  // namespace fabricscope::agent
