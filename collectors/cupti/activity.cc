#include "collectors/cupti/activity.h"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>

namespace fabricscope::collectors::cupti {

Demangler::~Demangler() { std::free(buffer_); }

const char* Demangler::Demangle(const char* name) {
  // Itanium C++ ABI mangled names start with "_Z" (ABI section 5.1.2); anything else (extern "C"
  // kernels) is already readable, and __cxa_demangle would treat it as a type name.
  if (name == nullptr || std::strncmp(name, "_Z", 2) != 0) return name;
  int status = 0;
  size_t capacity = capacity_;
  char* out = abi::__cxa_demangle(name, buffer_, &capacity, &status);
  if (status != 0 || out == nullptr) return name;  // buffer_ is untouched on failure
  buffer_ = out;                                   // may have been realloc'd
  capacity_ = capacity;
  return buffer_;
}

bool IsNcclKernelName(std::string_view name) {
  if (name.starts_with("void ")) name.remove_prefix(5);
  return name.starts_with("ncclDevKernel") || name.starts_with("ncclKernel");
}

const char* MemcpyKindName(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
      return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
      return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    default:
      return "unknown";
  }
}

ConvertResult ConvertActivity(const CUpti_Activity& record, Demangler& demangler,
                              gpu::KernelRecord* out) {
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      *out = gpu::KernelRecord{};
      out->start_ns = static_cast<int64_t>(k.start);
      out->end_ns = static_cast<int64_t>(k.end);
      out->correlation_id = k.correlationId;
      out->graph_id = k.graphId;
      out->bytes = 0;
      out->device = k.deviceId;
      out->context = k.contextId;
      out->stream = k.streamId;
      out->kind = static_cast<uint8_t>(gpu::ActivityKind::kKernel);
      // Mark on the full demangled name, before truncation can cut it.
      const char* name = demangler.Demangle(k.name);
      out->is_nccl = name != nullptr && IsNcclKernelName(name) ? 1 : 0;
      gpu::CopyFixed(out->name, name);
      return ConvertResult::kKernel;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& m = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
      *out = gpu::KernelRecord{};
      out->start_ns = static_cast<int64_t>(m.start);
      out->end_ns = static_cast<int64_t>(m.end);
      out->correlation_id = m.correlationId;
      out->graph_id = m.graphId;
      out->bytes = m.bytes;
      out->device = m.deviceId;
      out->context = m.contextId;
      out->stream = m.streamId;
      out->kind = static_cast<uint8_t>(gpu::ActivityKind::kMemcpy);
      out->memcpy_kind = m.copyKind;
      char name[32] = "[memcpy ";
      std::strncat(name, MemcpyKindName(m.copyKind), sizeof(name) - std::strlen(name) - 2);
      std::strcat(name, "]");
      gpu::CopyFixed(out->name, name);
      return ConvertResult::kMemcpy;
    }
    default:
      return ConvertResult::kUnsupported;
  }
}

}  // namespace fabricscope::collectors::cupti
