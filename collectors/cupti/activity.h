#pragma once

// Conversion of CUPTI activity records (CUDA 13 CUPTI, cupti_activity.h) into the hand-off
// KernelRecord of collectors/gpu/wire.h, with kernel-name demangling and NCCL marking.
//
// CUPTI-independent at link time: only the record layouts come from the CUPTI headers, so this
// code is tested on activity buffers built in the test. Dependency-free on purpose (libc +
// libstdc++ only): it is linked into libfabricscope-cupti.so, which is loaded into training
// processes that do not have our Debian libraries.

#include <cupti.h>

#include <cstddef>
#include <string_view>

#include "collectors/gpu/wire.h"

namespace fabricscope::collectors::cupti {

// Demangles C++ symbol names with the C++ ABI's abi::__cxa_demangle (libstdc++ <cxxabi.h>),
// reusing one malloc'd output buffer across calls (it grows, via realloc inside
// __cxa_demangle, to the longest name seen; typical kernel names need a few hundred bytes).
//
// Not thread-safe: one instance per converting thread (the batcher holds one under its lock).
class Demangler {
 public:
  Demangler() = default;
  ~Demangler();
  Demangler(const Demangler&) = delete;
  Demangler& operator=(const Demangler&) = delete;

  // Writes the demangled form of `name` into `dst` (truncated, NUL-padded, always terminated).
  // Names that are not mangled (extern "C" kernels, "ncclDevKernel_..." built as C names) or
  // that fail to demangle are copied unchanged; nullptr gives "". Returns true when the name was
  // demangled.
  template <size_t N>
  bool DemangleInto(const char* name, char (&dst)[N]) {
    const char* out = Demangle(name);
    gpu::CopyFixed(dst, out);
    return out != name && name != nullptr;
  }

  // The demangled name, or `name` itself when it is not a mangled C++ name. The pointer stays
  // valid until the next call. nullptr gives nullptr.
  const char* Demangle(const char* name);

 private:
  char* buffer_ = nullptr;  // owned, malloc'd (the __cxa_demangle contract)
  size_t capacity_ = 0;
};

// Whether a (demangled) kernel name is one of NCCL's device kernels: it starts with
// "ncclDevKernel" (NCCL >= 2.19: ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)) or "ncclKernel"
// (older releases: ncclKernel_AllReduce_RING_LL_Sum_float(...)), optionally after a "void "
// return type that the demangler prints for function templates.
bool IsNcclKernelName(std::string_view name);

// Why ConvertActivity did not produce a record.
enum class ConvertResult {
  kKernel,       // a KernelRecord of ActivityKind::kKernel was written
  kMemcpy,       // a KernelRecord of ActivityKind::kMemcpy was written
  kUnsupported,  // another activity kind (ignored)
};

// Converts one activity record into `out`.
//
// Kernel records (CUPTI_ACTIVITY_KIND_KERNEL and _CONCURRENT_KERNEL) are read as
// CUpti_ActivityKernel10, memcpy records (CUPTI_ACTIVITY_KIND_MEMCPY) as CUpti_ActivityMemcpy6:
// the record versions the CUDA 13 CUPTI headers define for those kinds. Timestamps are copied
// unchanged: they are CLOCK_MONOTONIC ns because the injection library registers a timestamp
// callback (cuptiActivityRegisterTimestampCallback) that returns CLOCK_MONOTONIC; a record with
// no timing (start and end 0, documented for lack of device memory) keeps 0 = unknown.
// Kernel names are demangled into the 160-byte field and marked is_nccl; memcpy records are
// named "[memcpy HtoD]" etc. after CUpti_ActivityMemcpyKind and carry their bytes.
// `record` must be a complete record of its kind (as cuptiActivityGetNextRecord returns them).
ConvertResult ConvertActivity(const CUpti_Activity& record, Demangler& demangler,
                              gpu::KernelRecord* out);

// Short name of a CUpti_ActivityMemcpyKind ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP", ...;
// "unknown" for values this version does not know).
const char* MemcpyKindName(uint8_t copy_kind);

}  // namespace fabricscope::collectors::cupti
