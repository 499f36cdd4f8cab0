// The three symbols libnccl-profiler-fabricscope.so exports (ABI §1,
// collectors/nccl/profiler_abi.h): data objects, not functions, with C linkage and default
// visibility; everything else in the library is hidden. NCCL 2.29-2.30 pick ncclProfiler_v6 (tried
// first, src/plugin/profiler.cc), NCCL 2.28 ncclProfiler_v5, NCCL 2.27 ncclProfiler_v4.

#include "collectors/nccl/profiler.h"
#include "collectors/nccl/profiler_abi.h"

namespace nccl = fabricscope::collectors::nccl;

extern "C" {

__attribute__((visibility("default"))) extern const nccl::ProfilerV6 ncclProfiler_v6;
__attribute__((visibility("default"))) extern const nccl::ProfilerV5 ncclProfiler_v5;
__attribute__((visibility("default"))) extern const nccl::ProfilerV4 ncclProfiler_v4;

const nccl::ProfilerV6 ncclProfiler_v6 = {
    "fabricscope",          nccl::Init,     nccl::StartEvent, nccl::StopEvent,
    nccl::RecordEventState, nccl::Finalize,
};

const nccl::ProfilerV5 ncclProfiler_v5 = {
    "fabricscope",          nccl::Init,     nccl::StartEventV5, nccl::StopEvent,
    nccl::RecordEventState, nccl::Finalize,
};

const nccl::ProfilerV4 ncclProfiler_v4 = {
    "fabricscope",   nccl::InitV4,           nccl::StartEventV4,
    nccl::StopEvent, nccl::RecordEventState, nccl::Finalize,
};

}  // extern "C"
