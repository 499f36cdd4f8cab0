#pragma once

// The local hand-off format from producers inside training processes (the NCCL profiler plugin,
// collectors/nccl, and the CUPTI injection library, collectors/cupti) to the agent's GPU ingest
// endpoint (agent/gpu_ingest.h).
//
// Transport: one unix-domain SOCK_SEQPACKET connection per producer process to
// kDefaultSocketPath (the producer's environment variable kSocketPathEnv overrides it). Message
// boundaries are kept by the socket, so each datagram (at most kMaxDatagramBytes) is exactly:
//
//   DatagramHeader | RecordHeader + payload | RecordHeader + payload | ...   (record_count records)
//
// All integers are in host byte order (producer and agent share the host). Times are
// CLOCK_MONOTONIC nanoseconds (collectors/clock.h); 0 means "unknown". Strings are fixed-size,
// NUL-padded char arrays, truncated by the producer; a reader never trusts them to be terminated.
//
// Producers send with MSG_DONTWAIT: when the agent is absent or slow, a datagram is dropped and
// its records are added to DatagramHeader::dropped_records_total, which is cumulative per process
// and source, so the agent learns about drops with the next datagram that does get through.
//
// This header has no dependencies beyond the C++ standard library so that the producer
// libraries, which are loaded into training processes, link nothing else. The validating decoder
// used by the agent is in collectors/gpu/wire_decode.h.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectors/common/utf8.h"

namespace fabricscope::collectors::gpu {

inline constexpr uint32_t kWireMagic = 0x50475346;  // "FSGP" read as little-endian bytes
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kMaxDatagramBytes = 64 * 1024;
inline constexpr char kDefaultSocketPath[] = "/run/fabricscope/gpu.sock";
inline constexpr char kSocketPathEnv[] = "FABRICSCOPE_GPU_SOCKET";

enum class Source : uint16_t { kNcclProfiler = 1, kCupti = 2 };

enum class RecordType : uint16_t {
  kComm = 1,        // CommRecord: a communicator this process joined (sent at init and reconnect)
  kCollective = 2,  // CollectiveRecord: one collective or point-to-point operation on one rank
  kProxyOp = 3,     // ProxyOpRecord: one proxy operation (network transfers to/from one peer)
  kKernel = 4,      // KernelRecord: one GPU kernel or memcpy from CUPTI activity
  kJob = 5,         // JobRecord: the job this process claims (sent first on every connection)
  kChannels = 6,    // ChannelSpansRecord: the kernel time of up to 4 channels of one operation
};

struct DatagramHeader {
  uint32_t magic;         // kWireMagic
  uint16_t version;       // kWireVersion
  uint16_t source;        // Source
  int32_t pid;            // the producer's getpid(); the agent trusts SO_PEERCRED over this
  uint32_t record_count;  // records that follow
  uint64_t sequence;      // datagrams attempted by this producer, starting at 1 (gaps = drops);
                          // 0 = the connection's introduction (its JobRecord), not counted
  uint64_t dropped_records_total;  // records this producer dropped so far (full pool, EAGAIN)
  int64_t send_ns;                 // CLOCK_MONOTONIC when the datagram was written
};
static_assert(sizeof(DatagramHeader) == 40);

struct RecordHeader {
  uint16_t type;      // RecordType; unknown types are skipped by size
  uint16_t size;      // payload bytes that follow this header
  uint32_t reserved;  // 0
};
static_assert(sizeof(RecordHeader) == 8);

struct CommRecord {
  uint64_t comm_hash;   // NCCL's communicator hash: equal on all ranks of the communicator
  int32_t rank;         // this process's rank in the communicator
  int32_t nranks;       // communicator size
  int32_t nnodes;       // nodes the communicator spans
  int32_t cuda_device;  // the CUDA device ordinal of this rank, -1 when unknown
  char name[48];        // the communicator name from the user's config, may be empty
};
static_assert(sizeof(CommRecord) == 72);

enum class OpKind : uint8_t { kCollective = 0, kP2p = 1 };

// Where CollectiveRecord::start_ns/end_ns come from (NCCL profiler ABI §6.4,
// collectors/nccl/profiler_abi.h).
enum class TimingSource : uint8_t {
  kEnqueueOnly = 0,    // no completion signal: start/end are the CPU enqueue interval
  kKernelChannel = 1,  // earliest KernelCh start .. latest KernelCh stop, GPU clock fitted to CPU
  kProxyOp = 2,        // earliest ProxyOp start .. latest ProxyOp stop (network completion);
                       // with untimed ProxyOps (kProxyOpUntimed), the Coll's stop .. the proxy
                       // thread seeing its last KernelCh stop (GPU timers all missing)
  kCopyEngine = 3,     // CeColl start .. stop (ABI v6): the CPU enqueue of the copy-engine work,
                       // not its GPU completion (NCCL gives none), so no bandwidth is derived
};

struct CollectiveRecord {
  uint64_t comm_hash;
  uint64_t seq;    // Coll: NCCL's seqNumber (per communicator and function); P2p: plugin's
                   // own counter per communicator and function
  uint64_t count;  // NCCL's task count (AllGather/Broadcast: bytes, datatype "ncclInt8")
  uint64_t bytes;  // message bytes per rank: count x sizeof(datatype) (ABI §7)
  int64_t enqueue_start_ns;  // CPU: Coll/P2p start event
  int64_t enqueue_end_ns;    // CPU: Coll/P2p stop event (enqueued, not completed)
  int64_t start_ns;          // start of the work per timing_source; 0 when unknown
  int64_t end_ns;            // completion per timing_source; 0 when unknown
  uint64_t proxy_bytes;      // bytes moved by its proxy ops (sum of proxy-step sizes)
  int32_t rank;
  int32_t nranks;
  int32_t root;           // root rank for Broadcast/Reduce, else -1
  int32_t peer;           // P2p: remote rank, else -1
  uint32_t proxy_ops;     // proxy ops seen for it
  uint8_t kind;           // OpKind
  uint8_t timing_source;  // TimingSource
  uint8_t nchannels;
  uint8_t graph_captured;  // 1 when launched from a captured CUDA graph
  char func[16];           // "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce",
                           // "Send", "Recv"
  char datatype[16];       // "ncclFloat32", ...
  char algo[16];           // "RING", "TREE", ... (empty for P2p)
  char proto[8];           // "LL", "LL128", "SIMPLE" (empty for P2p)
};
static_assert(sizeof(CollectiveRecord) == 152);

struct ProxyOpRecord {
  uint64_t comm_hash;
  uint64_t op_seq;   // seq of the parent CollectiveRecord (same comm and func), UINT64_MAX
                     // when unknown
  int64_t start_ns;  // CPU CLOCK_MONOTONIC; 0 with kProxyOpUntimed
  int64_t end_ns;
  uint64_t bytes;      // sum of its proxy steps' transfer sizes (estimated: see flags)
  int32_t rank;        // this rank
  int32_t peer;        // the remote rank it exchanged data with
  int32_t steps;       // network transfers completed (estimated: the transfers NCCL announced)
  int32_t chunk_size;  // bytes per step as announced by NCCL
  int32_t pid;         // process that created the op (differs from the sender under PXN)
  uint8_t channel;
  uint8_t is_send;  // 1 = network send path, 0 = receive
  uint8_t kind;     // OpKind of the parent
  uint8_t flags;    // kProxyOpBytesEstimated | kProxyOpUntimed; 0 before issue 38
  char func[16];    // function of the parent operation
};
static_assert(sizeof(ProxyOpRecord) == 80);
// ProxyOpRecord::flags: no ProxyStep event was counted (the default mask subscribes none), so
// `bytes` is estimated from the ProxyOp descriptor and its collective
// (collectors/nccl/proxy_bytes.h EstimateProxyOpBytes) and `steps` is NCCL's announced count.
inline constexpr uint8_t kProxyOpBytesEstimated = 1;
// ProxyOpRecord::flags: start_ns and end_ns are 0, not read: at a mask whose KernelCh events time
// the collective and that has no ProxyStep (the default, 74), the plugin reads no clock for its
// ProxyOps (collectors/nccl/README.md "What each event costs and gives").
inline constexpr uint8_t kProxyOpUntimed = 2;

// One channel's share of an operation's kernel: NCCL profiler KernelCh events (ABI §6.4), its
// GPU start and stop timers fitted to CPU CLOCK_MONOTONIC with the same offset as the operation's
// CollectiveRecord (kernel_channel timing).
struct ChannelSpan {
  int64_t start_ns;
  int64_t end_ns;
  uint8_t channel;  // NCCL's channel id (0..63: src/include/device.h MAXCHANNELS)
  uint8_t reserved[7];
};
static_assert(sizeof(ChannelSpan) == 24);

// Up to kSpans channels of one operation, sent before its CollectiveRecord (an operation on 32
// channels takes 8). Only with the plugin's FABRICSCOPE_NCCL_CHANNEL_SPANS=1 (collectors/nccl/
// profiler.h PluginOptions::channel_spans); the agent joins them to the operation by (comm_hash,
// rank, func, seq), as it joins ProxyOpRecords.
struct ChannelSpansRecord {
  static constexpr int kSpans = 4;
  uint64_t comm_hash;
  uint64_t seq;  // the CollectiveRecord's seq
  int32_t rank;
  uint8_t kind;   // OpKind of the operation
  uint8_t count;  // spans used, 1..kSpans
  uint16_t reserved;
  char func[16];  // the CollectiveRecord's func
  ChannelSpan spans[kSpans];
};
static_assert(sizeof(ChannelSpansRecord) == 136);
static_assert(sizeof(ChannelSpansRecord) <= 152, "the plugin's Room() reserves a CollectiveRecord");

enum class ActivityKind : uint8_t { kKernel = 1, kMemcpy = 2 };

struct KernelRecord {
  int64_t start_ns;  // CLOCK_MONOTONIC (CUPTI timestamps aligned by callback)
  int64_t end_ns;
  uint64_t correlation_id;  // CUPTI correlation id (joins the launching API call)
  uint64_t graph_id;        // CUDA graph id, 0 when not launched from a graph
  uint64_t bytes;           // memcpy bytes, 0 for kernels
  uint32_t device;          // CUDA device ordinal
  uint32_t context;         // CUDA context id
  uint32_t stream;          // CUDA stream id
  uint8_t kind;             // ActivityKind
  uint8_t is_nccl;          // 1 for NCCL's kernels (name starts with "ncclDevKernel"/"ncclKernel")
  uint8_t memcpy_kind;      // CUpti_ActivityMemcpyKind for memcpy, else 0
  uint8_t reserved;
  char name[160];  // demangled kernel name, truncated
};
static_assert(sizeof(KernelRecord) == 216);

// Who launched the process, as JobRecord::scheduler (collectors/gpu/job_identity.h says which
// variables each reads).
enum class JobScheduler : uint8_t {
  kNone = 0,        // no variable named a job
  kOverride = 1,    // FABRICSCOPE_JOB_ID
  kSlurm = 2,       // SLURM_JOB_ID
  kTorchrun = 3,    // TORCHELASTIC_RUN_ID
  kKubernetes = 4,  // the pod (downward-API variables or the process's cgroup)
  kMpi = 5,         // PMIX_NAMESPACE
};

// The job a producer process claims, from its environment (collectors/gpu/job_identity.h
// JobFromEnvironment). Added after the first release of this format: an older agent skips it by
// size like any unknown type, so the datagram version did not change; the record carries its
// own layout version (kJobRecordVersion), and an agent ignores a layout it does not know. The
// agent trusts the producer's cgroup over this claim (agent/gpu_ingest.h).
inline constexpr uint16_t kJobRecordVersion = 1;
struct JobRecord {
  uint16_t version;   // kJobRecordVersion
  uint8_t scheduler;  // JobScheduler
  uint8_t reserved;
  int32_t rank;           // the launcher's global rank of this process, -1 unknown
  char id[64];            // "8812", "8812_3" (array task), a run id, a pod uid
  char name[64];          // SLURM_JOB_NAME, FABRICSCOPE_JOB_NAME
  char slurm_job_id[16];  // SLURM_JOB_ID as set (an array task's own id): what its cgroup says
  char slurm_sluid[16];   // SLURM_JOB_SLUID (Slurm 26.05+): what a cgroup v2 job directory says
  char user[32];          // SLURM_JOB_USER
  char step[16];          // SLURM_STEP_ID
  char pod_namespace[64];
  char pod[64];
  char pod_uid[40];  // 36 characters with dashes
};
static_assert(sizeof(JobRecord) == 384);

template <typename T>
struct RecordTypeOf;
template <>
struct RecordTypeOf<CommRecord> {
  static constexpr RecordType kValue = RecordType::kComm;
};
template <>
struct RecordTypeOf<CollectiveRecord> {
  static constexpr RecordType kValue = RecordType::kCollective;
};
template <>
struct RecordTypeOf<ProxyOpRecord> {
  static constexpr RecordType kValue = RecordType::kProxyOp;
};
template <>
struct RecordTypeOf<KernelRecord> {
  static constexpr RecordType kValue = RecordType::kKernel;
};
template <>
struct RecordTypeOf<ChannelSpansRecord> {
  static constexpr RecordType kValue = RecordType::kChannels;
};
template <>
struct RecordTypeOf<JobRecord> {
  static constexpr RecordType kValue = RecordType::kJob;
};

// Copies a C string into a fixed char array, truncating and NUL-padding. nullptr -> "".
// A cut inside a multi-byte UTF-8 character drops that character's leading bytes, so the field
// stays valid UTF-8 (RFC 3629 §4); the check costs one compare when nothing was cut.
template <size_t N>
inline void CopyFixed(char (&dst)[N], const char* src) {
  std::memset(dst, 0, N);
  if (src == nullptr) return;
  size_t i = 0;
  for (; i + 1 < N && src[i] != '\0'; ++i) dst[i] = src[i];
  if (src[i] == '\0') return;  // nothing was cut
  const size_t keep = common::Utf8Prefix(std::string_view(src, i + 1), i);
  std::memset(dst + keep, 0, i - keep);
}

// Builds one datagram in a caller-owned buffer. No allocation, no system calls: usable on a
// producer's flush thread. Not thread-safe; one writer per buffer.
class DatagramWriter {
 public:
  // buffer must stay valid while the writer is used; capacity at most kMaxDatagramBytes.
  DatagramWriter(void* buffer, size_t capacity, Source source, int32_t pid)
      : buf_(static_cast<unsigned char*>(buffer)), capacity_(capacity), source_(source), pid_(pid) {
    Reset();
  }

  // Starts a new, empty datagram.
  void Reset() {
    used_ = sizeof(DatagramHeader);
    count_ = 0;
  }

  // Appends one record; returns false (and appends nothing) when it does not fit.
  template <typename T>
  bool Append(const T& record) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t need = sizeof(RecordHeader) + sizeof(T);
    if (used_ + need > capacity_) return false;
    RecordHeader rh{static_cast<uint16_t>(RecordTypeOf<T>::kValue),
                    static_cast<uint16_t>(sizeof(T)), 0};
    std::memcpy(buf_ + used_, &rh, sizeof(rh));
    std::memcpy(buf_ + used_ + sizeof(rh), &record, sizeof(T));
    used_ += need;
    ++count_;
    return true;
  }

  // Writes the header; returns the datagram's size in bytes. The buffer then holds the datagram.
  size_t Finish(uint64_t sequence, uint64_t dropped_records_total, int64_t send_ns) {
    DatagramHeader h{kWireMagic, kWireVersion, static_cast<uint16_t>(source_), pid_,
                     count_,     sequence,     dropped_records_total,          send_ns};
    std::memcpy(buf_, &h, sizeof(h));
    return used_;
  }

  uint32_t record_count() const { return count_; }
  bool empty() const { return count_ == 0; }
  size_t size() const { return used_; }

 private:
  unsigned char* buf_;
  size_t capacity_;
  Source source_;
  int32_t pid_;
  size_t used_ = 0;
  uint32_t count_ = 0;
};

}  // namespace fabricscope::collectors::gpu
