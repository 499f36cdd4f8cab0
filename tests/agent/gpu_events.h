// GPU records as the agent's ingest hands them to GpuTimeline (collectors/gpu/wire.h), for the
// GPU timeline tests.
#pragma once

#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "agent/gpu_timeline.h"
#include "collectors/gpu/wire.h"

namespace fabricscope::agent {

namespace gpu = collectors::gpu;

// The window's batch as the agent sends it when nothing waits for an analysis: the collectives
// FillBatch hands out, in order, then what it filled in.
inline void FillWindow(GpuTimeline& t, int64_t start_ns, int64_t end_ns, std::vector<int32_t> pids,
                       v1::Batch* b) {
  std::vector<v1::Collective> completed;
  t.FillBatch(start_ns, end_ns, nullptr, pids, b, &completed);
  for (v1::Collective& c : completed) *b->add_collectives() = std::move(c);
}

inline size_t FillEarly(GpuTimeline& t, int64_t until_ns, v1::Batch* b) {
  std::vector<v1::Collective> completed;
  const size_t taken = t.FillEarly(until_ns, &completed);
  for (v1::Collective& c : completed) *b->add_collectives() = std::move(c);
  return taken;
}

inline GpuEvent Event(gpu::RecordType type, int32_t pid, int32_t gpu_index, int64_t received_ns) {
  GpuEvent e;
  std::memset(&e, 0, sizeof(e));
  e.type = type;
  e.source = gpu::Source::kNcclProfiler;
  e.pid = pid;
  e.uid = 1000;
  e.gpu = gpu_index;
  e.received_ns = received_ns;
  return e;
}

// An all-reduce of `bytes` per rank over 4 ranks, GPU time [start, end].
inline GpuEvent Collective(uint64_t comm, uint64_t seq, const char* func, uint64_t bytes,
                           int64_t start, int64_t end, int64_t received_ns = 0) {
  GpuEvent e = Event(gpu::RecordType::kCollective, 4242, 3, received_ns ? received_ns : end);
  gpu::CollectiveRecord& r = e.collective;
  r.comm_hash = comm;
  r.seq = seq;
  r.count = bytes / 4;
  r.bytes = bytes;
  r.enqueue_start_ns = start - 500;
  r.enqueue_end_ns = start - 100;
  r.start_ns = start;
  r.end_ns = end;
  r.proxy_bytes = 0;
  r.rank = 1;
  r.nranks = 4;
  r.root = -1;
  r.peer = -1;
  r.nchannels = 2;
  r.timing_source = static_cast<uint8_t>(gpu::TimingSource::kKernelChannel);
  gpu::CopyFixed(r.func, func);
  gpu::CopyFixed(r.datatype, "ncclFloat32");
  gpu::CopyFixed(r.algo, "RING");
  gpu::CopyFixed(r.proto, "SIMPLE");
  return e;
}

inline GpuEvent ProxyOp(uint64_t comm, uint64_t seq, int32_t peer, bool send, uint64_t bytes) {
  GpuEvent e = Event(gpu::RecordType::kProxyOp, 4242, 3, 0);
  gpu::ProxyOpRecord& r = e.proxy_op;
  r.comm_hash = comm;
  r.op_seq = seq;
  r.bytes = bytes;
  r.rank = 1;
  r.peer = peer;
  r.is_send = send ? 1 : 0;
  gpu::CopyFixed(r.func, "AllReduce");
  return e;
}

// Channel spans of collective (comm, seq) of rank 1: {channel, start, end} each, at most 4.
inline GpuEvent Channels(uint64_t comm, uint64_t seq,
                         std::vector<std::tuple<uint8_t, int64_t, int64_t>> spans) {
  GpuEvent e = Event(gpu::RecordType::kChannels, 4242, 3, 0);
  gpu::ChannelSpansRecord& r = e.channels;
  r.comm_hash = comm;
  r.seq = seq;
  r.rank = 1;
  gpu::CopyFixed(r.func, "AllReduce");
  for (const auto& [channel, start, end] : spans) {
    r.spans[r.count].channel = channel;
    r.spans[r.count].start_ns = start;
    r.spans[r.count].end_ns = end;
    ++r.count;
  }
  return e;
}

inline GpuEvent Kernel(uint32_t device, const char* name, bool nccl, int64_t start, int64_t end) {
  GpuEvent e = Event(gpu::RecordType::kKernel, 4242, static_cast<int32_t>(device), end);
  gpu::KernelRecord& r = e.kernel;
  r.start_ns = start;
  r.end_ns = end;
  r.device = device;
  r.stream = 7;
  r.kind = static_cast<uint8_t>(gpu::ActivityKind::kKernel);
  r.is_nccl = nccl ? 1 : 0;
  r.correlation_id = 99;
  gpu::CopyFixed(r.name, name);
  return e;
}

}  // namespace fabricscope::agent
