#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace fabricscope::agent {

// Collective functions as the NCCL profiler names them (collectors/gpu/wire.h
// CollectiveRecord::func), a fixed set so that metric labels stay bounded.
enum class CollectiveFunc : uint8_t {
  kOther = 0,
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAlltoAll,
  kGather,
  kScatter,
  kSend,
  kRecv,
};
inline constexpr int kCollectiveFuncCount = 11;

// "AllReduce" -> kAllReduce, ...; anything else (empty, unknown, wrong case) -> kOther.
CollectiveFunc ParseCollectiveFunc(absl::string_view name);
// The label value: "AllReduce", ..., "other".
const char* CollectiveFuncName(CollectiveFunc func);

// nccl-tests' bandwidth convention (nccl-tests doc/PERFORMANCE.md and the *GetBw functions of
// src/{all_reduce,all_gather,reduce_scatter,alltoall,gather,scatter,sendrecv}.cu), with n =
// nranks:
//
//   func                       S (algorithm bytes)            busBw factor
//   AllReduce                  bytes                          2(n-1)/n
//   ReduceScatter, AllGather   bytes x n                      (n-1)/n
//   AlltoAll, Gather, Scatter  bytes x n                      (n-1)/n
//   Broadcast, Reduce          bytes                          1
//   Send, Recv                 bytes                          1
//   other                      bytes                          0 (no convention)
//
// where `bytes` is the per-rank message size the plugin reports (count x datatype size; for
// ReduceScatter the receive count, for AllGather the send count, for AlltoAll/Gather/Scatter the
// per-peer count). algBw = S / t and busBw = algBw x factor, t the collective's duration.

// S in bytes. nranks < 1 is treated as 1.
uint64_t AlgorithmBytes(CollectiveFunc func, uint64_t bytes_per_rank, int32_t nranks);
// The busBw factor; 0 for kOther. nranks < 1 is treated as 1 (factor 0 for the (n-1)/n kinds).
double BusBandwidthFactor(CollectiveFunc func, int32_t nranks);

struct Bandwidth {
  uint64_t algorithm_bytes = 0;  // S
  double bus_bytes = 0;          // S x factor
  double algbw_bytes_per_second = 0;
  double busbw_bytes_per_second = 0;
};
// Both bandwidths in bytes/s (nccl-tests prints GB/s = 1e9 B/s). duration_ns <= 0 (unknown)
// gives 0 bandwidths but still the byte counts.
Bandwidth ComputeBandwidth(CollectiveFunc func, uint64_t bytes_per_rank, int32_t nranks,
                           int64_t duration_ns);

}  // namespace fabricscope::agent
