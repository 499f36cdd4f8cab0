#include "agent/bus_bandwidth.h"

namespace fabricscope::agent {
namespace {

struct FuncName {
  CollectiveFunc func;
  const char* name;
};
constexpr FuncName kNames[] = {
    {CollectiveFunc::kAllReduce, "AllReduce"},
    {CollectiveFunc::kAllGather, "AllGather"},
    {CollectiveFunc::kReduceScatter, "ReduceScatter"},
    {CollectiveFunc::kBroadcast, "Broadcast"},
    {CollectiveFunc::kReduce, "Reduce"},
    {CollectiveFunc::kAlltoAll, "AlltoAll"},
    {CollectiveFunc::kGather, "Gather"},
    {CollectiveFunc::kScatter, "Scatter"},
    {CollectiveFunc::kSend, "Send"},
    {CollectiveFunc::kRecv, "Recv"},
};

}  // namespace

CollectiveFunc ParseCollectiveFunc(absl::string_view name) {
  for (const FuncName& f : kNames) {
    if (name == f.name) return f.func;
  }
  return CollectiveFunc::kOther;
}

const char* CollectiveFuncName(CollectiveFunc func) {
  for (const FuncName& f : kNames) {
    if (f.func == func) return f.name;
  }
  return "other";
}

uint64_t AlgorithmBytes(CollectiveFunc func, uint64_t bytes_per_rank, int32_t nranks) {
  const uint64_t n = nranks < 1 ? 1 : static_cast<uint64_t>(nranks);
  switch (func) {
    case CollectiveFunc::kReduceScatter:
    case CollectiveFunc::kAllGather:
    case CollectiveFunc::kAlltoAll:
    case CollectiveFunc::kGather:
    case CollectiveFunc::kScatter:
      return bytes_per_rank * n;
    case CollectiveFunc::kAllReduce:
    case CollectiveFunc::kBroadcast:
    case CollectiveFunc::kReduce:
    case CollectiveFunc::kSend:
    case CollectiveFunc::kRecv:
    case CollectiveFunc::kOther:
      return bytes_per_rank;
  }
  return bytes_per_rank;
}

double BusBandwidthFactor(CollectiveFunc func, int32_t nranks) {
  const double n = nranks < 1 ? 1.0 : static_cast<double>(nranks);
  switch (func) {
    case CollectiveFunc::kAllReduce:
      return 2.0 * (n - 1.0) / n;
    case CollectiveFunc::kReduceScatter:
    case CollectiveFunc::kAllGather:
    case CollectiveFunc::kAlltoAll:
    case CollectiveFunc::kGather:
    case CollectiveFunc::kScatter:
      return (n - 1.0) / n;
    case CollectiveFunc::kBroadcast:
    case CollectiveFunc::kReduce:
    case CollectiveFunc::kSend:
    case CollectiveFunc::kRecv:
      return 1.0;
    case CollectiveFunc::kOther:
      return 0.0;
  }
  return 0.0;
}

Bandwidth ComputeBandwidth(CollectiveFunc func, uint64_t bytes_per_rank, int32_t nranks,
                           int64_t duration_ns) {
  Bandwidth b;
  b.algorithm_bytes = AlgorithmBytes(func, bytes_per_rank, nranks);
  const double factor = BusBandwidthFactor(func, nranks);
  b.bus_bytes = static_cast<double>(b.algorithm_bytes) * factor;
  if (duration_ns > 0) {
    const double seconds = static_cast<double>(duration_ns) / 1e9;
    b.algbw_bytes_per_second = static_cast<double>(b.algorithm_bytes) / seconds;
    b.busbw_bytes_per_second = b.algbw_bytes_per_second * factor;
  }
  return b;
}

}  // namespace fabricscope::agent
