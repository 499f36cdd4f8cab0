#pragma once

// What the NCCL profiler benchmarks (bench_nccl_profiler.cc, bench_nccl_shapes.cc) call the
// plugin through: its core's ProfilerV5 table, linked statically, and the baseline, a table of
// empty callbacks that do only what every callback must (write *eHandle), called the same way.

#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "collectors/nccl/profiler.h"
#include "collectors/nccl/profiler_abi.h"

namespace fabricscope::bench::nccl_tables {

namespace nccl = ::fabricscope::collectors::nccl;

inline int64_t Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline nccl::NcclResult EmptyInit(void** c, uint64_t, int*, const char*, int, int, int,
                                  nccl::NcclDebugLogger) {
  *c = reinterpret_cast<void*>(1);
  return 0;
}
inline nccl::NcclResult EmptyStart(void*, void** h, nccl::EventDescrV5*) {
  *h = reinterpret_cast<void*>(2);
  return 0;
}
inline nccl::NcclResult EmptyStop(void*) { return 0; }
inline nccl::NcclResult EmptyRecord(void*, nccl::EventState, nccl::EventStateArgs*) { return 0; }
inline nccl::NcclResult EmptyFinalize(void*) { return 0; }

inline const nccl::ProfilerV5 kEmpty = {"empty",   EmptyInit,   EmptyStart,
                                        EmptyStop, EmptyRecord, EmptyFinalize};
inline const nccl::ProfilerV5 kPlugin = {"fabricscope",          nccl::Init,
                                         nccl::StartEvent,       nccl::StopEvent,
                                         nccl::RecordEventState, nccl::Finalize};

// Volatile table pointers keep the compiler from inlining either side.
inline const nccl::ProfilerV5* volatile g_empty = &kEmpty;
inline const nccl::ProfilerV5* volatile g_plugin = &kPlugin;

// NCCL reads its pid once (src/plugin/profiler.cc, ncclProfilerPluginInit: pid = getpid()) and
// copies it into each op (ncclProfilerAddPidToProxyOp), so the benchmarks read it once too: a
// getpid system call per event would be the benchmark's cost, not the plugin's.
inline const int kPid = getpid();

}  // namespace fabricscope::bench::nccl_tables
