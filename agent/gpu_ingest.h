#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectors/gpu/wire.h"
#include "collectors/spsc_ring.h"
#include "fabricscope/v1/gpu.pb.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

struct GpuIngestOptions {
  // Where producers connect (collectors/gpu/wire.h). The parent directory is created (0755)
  // when missing.
  std::string socket_path = collectors::gpu::kDefaultSocketPath;
  // Mode of the socket file: connecting to a unix socket needs write permission on it
  // (unix(7)). What a producer can do is bounded anyway (max_connections, validated datagrams, a
  // bounded queue); 0660 with socket_group keeps other local users from forging records.
  uint32_t socket_mode = 0660;
  // Group given to the socket (chown; the agent must be a member, or root). Empty = the agent's
  // own group. A group that does not exist, or that the agent may not give, leaves the agent's
  // group and logs a warning naming the fix; it is not an error.
  std::string socket_group = "";
  // Peer uids (SO_PEERCRED) allowed to connect; empty = any.
  std::vector<uint32_t> allowed_uids;
  size_t max_connections = 256;
  // At max_connections, a connection that has sent no well-formed datagram this long after it
  // connected is closed to admit a new one (counted: rejected_connections_total{reason=
  // "silent"}). Real producers send as soon as they connect (the NCCL plugin its communicators,
  // CUPTI its first buffer: both connect only to send), so only idle squatters go.
  absl::Duration silent_evict_after = absl::Seconds(10);
  // Where each producer's cgroup is read (<procfs_root>/<pid>/cgroup) to name its job
  // (agent/job_identity.h).
  std::string procfs_root = "/proc";
  // Records queued between the ingest thread and the pipeline thread (one 256-byte slot each);
  // a full queue drops the record and counts it (source "agent").
  size_t queue_slots = 16384;
};

// One record as the ingest thread hands it to the pipeline thread, with its origin attached.
// `pid`/`uid` come from SO_PEERCRED (trusted over what the datagram says); `gpu` is the CUDA
// device of the communicator (the producer's CommRecord for comm_hash) for collectives and proxy
// ops, the record's device for kernels, -1 when unknown.
struct GpuEvent {
  collectors::gpu::RecordType type;
  collectors::gpu::Source source;
  int32_t pid;
  uint32_t uid;
  int32_t gpu;
  int64_t received_ns;  // CLOCK_MONOTONIC when the ingest thread decoded it
  union {
    collectors::gpu::CommRecord comm;
    collectors::gpu::CollectiveRecord collective;
    collectors::gpu::ProxyOpRecord proxy_op;
    collectors::gpu::KernelRecord kernel;
    collectors::gpu::ChannelSpansRecord channels;
  };
};
static_assert(std::is_trivially_copyable_v<GpuEvent>);

// "nccl", "cupti", or "unknown" (the label of fabricscope_plugin_dropped_events_total).
const char* GpuSourceName(uint16_t source);

// The agent's endpoint for GPU records from training processes: a listening unix SOCK_SEQPACKET
// socket served by one ingest thread (epoll) that accepts many producer connections at once,
// validates every datagram (collectors/gpu/wire_decode.h), attaches the producer's pid, uid and
// GPU to each record, and pushes it to a bounded SPSC queue that the pipeline thread drains.
//
// A producer that disconnects or dies is a closed connection: everything it sent before is
// kept. Malformed datagrams, oversized ones (> kMaxDatagramBytes, MSG_TRUNC), connections over
// max_connections or from uids not allowed are dropped and counted by reason; nothing a peer
// sends can crash the agent or block the ingest thread on the pipeline.
//
// Threading: Start/Stop from the control thread; Pop from one consumer thread (the pipeline);
// Stats from any thread (takes a mutex that the ingest thread holds briefly per datagram).
class GpuIngest {
 public:
  explicit GpuIngest(GpuIngestOptions options);
  ~GpuIngest();
  GpuIngest(const GpuIngest&) = delete;
  GpuIngest& operator=(const GpuIngest&) = delete;

  // Creates the parent directory if missing, removes a stale socket file (one nobody listens
  // on), binds, sets the mode, listens and starts the ingest thread.
  // Errors: AlreadyExists when another process listens on the path; FailedPrecondition when
  // the path exists and is not a socket; Internal/PermissionDenied for failing system calls.
  absl::Status Start();
  // Stops the thread, closes every connection and removes the socket file (if it is still
  // ours). Records already queued stay available to Pop.
  void Stop();

  // Consumer: the oldest queued record, or nullptr; Release() after use.
  const GpuEvent* Peek() const { return static_cast<const GpuEvent*>(queue_.Peek()); }
  void Release() { queue_.Pop(); }

  // Cumulative counters and the connected producers, for the batch (v1::GpuIngestStats).
  void Stats(v1::GpuIngestStats* out) const;
  // Pids of the connected producers.
  std::vector<int32_t> ConnectedPids() const;
  // The job of each producer connected now or among the last kRecentJobs to have closed (their
  // records may still be queued), by pid; producers without a known job are left out.
  std::map<int32_t, v1::Job> JobsByPid() const;
  static constexpr size_t kRecentJobs = 1024;

  const std::string& socket_path() const { return options_.socket_path; }

 private:
  struct Connection {
    int fd = -1;
    pid_t pid = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    uint16_t source = 0;
    std::string process;
    uint64_t datagrams = 0;
    uint64_t records = 0;
    uint64_t dropped_reported = 0;  // the producer's cumulative DatagramHeader count
    int64_t connected_ns = 0;       // CLOCK_MONOTONIC at accept
    // comm_hash -> CUDA device, from its CommRecords (bounded: kMaxCommsPerConnection).
    std::vector<std::pair<uint64_t, int32_t>> comm_gpu;
    v1::Job cgroup_job;         // JobFromCgroupOf at accept
    v1::Job job;                // cgroup_job merged with the producer's JobRecord (MergeClaim)
    bool contradicted = false;  // counted once per connection, however often it claims
  };
  class Visitor;

  void Loop();
  void Accept();
  // Reads up to a fair share of datagrams; returns false when the connection is finished.
  bool Serve(Connection& c);
  void Close(int fd);
  // At the connection limit: closes the oldest connection that has sent no datagram for
  // silent_evict_after since it connected; false when there is none.
  bool EvictSilentLocked(int64_t now_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Drop(const char* reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const GpuIngestOptions options_;
  collectors::SpscSlotRing queue_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;  // eventfd
  ino_t socket_inode_ = 0;
  std::thread thread_;
  std::unique_ptr<uint8_t[]> buffer_;  // ingest thread: one datagram

  mutable absl::Mutex mu_;
  std::map<int, Connection> connections_ ABSL_GUARDED_BY(mu_);  // by fd
  uint64_t connections_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> rejected_ ABSL_GUARDED_BY(mu_);
  uint64_t datagrams_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t records_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unknown_records_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t job_claims_contradicted_ ABSL_GUARDED_BY(mu_) = 0;
  // Jobs of closed producers, oldest first (at most kRecentJobs).
  std::deque<std::pair<int32_t, v1::Job>> closed_jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> dropped_datagrams_ ABSL_GUARDED_BY(mu_);
  // Producer-reported drops of connections that have closed, by source name.
  std::map<std::string, uint64_t> retired_dropped_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricscope::agent
