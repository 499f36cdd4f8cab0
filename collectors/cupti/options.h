#pragma once

// Settings of the CUPTI injection library, read once from the environment of the training
// process at InitializeInjection (the library has no command line).

#include <cstddef>
#include <cstdint>
#include <string>

namespace fabricscope::collectors::cupti {

struct InjectionOptions {
  // FABRICSCOPE_GPU_SOCKET: the agent's ingest socket (collectors/gpu/wire.h kDefaultSocketPath).
  std::string socket_path;
  // FABRICSCOPE_CUPTI_MEMCPY=1: also record memcpy activity (CUPTI_ACTIVITY_KIND_MEMCPY).
  bool memcpy = false;
  // FABRICSCOPE_CUPTI_FLUSH_MS: period of CUPTI's own flush (cuptiActivityFlushPeriod), in ms;
  // 0 leaves flushing to full buffers and exit. Bounds how late the agent sees a kernel.
  uint32_t flush_period_ms = 100;
  // FABRICSCOPE_CUPTI_BUFFERS x FABRICSCOPE_CUPTI_BUFFER_KB: the fixed buffer pool. A kernel
  // record is 216 bytes (CUpti_ActivityKernel10), so one 1 MiB buffer holds about 4800 kernels.
  size_t buffers = 8;
  size_t buffer_bytes = 1 << 20;
  // FABRICSCOPE_CUPTI_VERBOSE=1: one line on stderr at start and a summary at exit.
  bool verbose = false;
};

// The environment lookup: std::getenv in the library, a map in tests.
using EnvLookup = const char* (*)(const char* name, void* context);

// Reads the options. Unset variables keep the defaults above; malformed or out-of-range values
// (buffers outside 1..64, buffer size outside 4..65536 KiB, flush period above 60000 ms) keep the
// default too and are described in `*warning` (empty when all were valid) so that the caller can
// print one line. The socket path defaults to kDefaultSocketPath.
InjectionOptions ParseInjectionOptions(EnvLookup lookup, void* context, std::string* warning);

}  // namespace fabricscope::collectors::cupti
