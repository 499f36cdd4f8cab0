// A profiler plugin that does nothing (but write its handles): the chained plugin of
// fabricscope_bench_nccl's "chained" rows, so that they show what forwarding itself costs.

#include <cstdint>

#include "collectors/nccl/profiler_abi.h"

namespace nccl = fabricscope::collectors::nccl;

namespace {

int g_context;
int g_event;

nccl::NcclResult Init(void** context, uint64_t, int*, const char*, int, int, int,
                      nccl::NcclDebugLogger) {
  *context = &g_context;
  return 0;
}
nccl::NcclResult Start(void*, void** handle, nccl::EventDescrV6*) {
  *handle = &g_event;
  return 0;
}
nccl::NcclResult Stop(void*) { return 0; }
nccl::NcclResult Record(void*, nccl::EventState, nccl::EventStateArgs*) { return 0; }
nccl::NcclResult Finalize(void*) { return 0; }

}  // namespace

extern "C" {
__attribute__((visibility("default"))) extern const nccl::ProfilerV6 ncclProfiler_v6;
const nccl::ProfilerV6 ncclProfiler_v6 = {"noop", Init, Start, Stop, Record, Finalize};
}
