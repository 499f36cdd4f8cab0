// A stand-in for libcupti.so.13 that drives libfabricscope-cupti.so the way CUPTI does, on a
// machine without a GPU: the injection test puts its directory first on LD_LIBRARY_PATH.
//
// FAKE_CUPTI_MODE selects the behaviour:
//   trace (default)  every call succeeds; each cuptiActivityFlushAll delivers the pending
//                    activity: FAKE_CUPTI_KERNELS kernel records (a C++ kernel, an NCCL kernel,
//                    alternating) and, when MEMCPY was enabled, as many memcpy records, in
//                    buffers requested through the registered callbacks and stamped with the
//                    registered timestamp callback. cuptiActivityGetNumDroppedRecords(NULL, 0)
//                    reports FAKE_CUPTI_DROPPED once.
//   multiple         cuptiSubscribe returns CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, as
//                    when Nsight Systems or another profiler holds the subscription.
//   fail_enable      cuptiActivityEnable returns CUPTI_ERROR_NOT_COMPATIBLE.
// cuptiFakeDestroyContext() (not a CUPTI function; the probe calls it) invokes the subscriber's
// callback for CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, as the driver does before it
// destroys a context; cuptiActivityGetNumDroppedRecords(that context, 0) then reports
// FAKE_CUPTI_CONTEXT_DROPPED once.
// Like the real CUPTI, enabling an activity kind before the timestamp callback is registered is
// refused here (CUPTI_ERROR_INVALID_OPERATION), so the test notices a wrong call order.
// The records use the CUDA 13 layouts (CUpti_ActivityKernel10, CUpti_ActivityMemcpy6), packed
// back to back as the real cuptiActivityGetNextRecord walks them (checked in activity_test.cc).

#include <cupti.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace {

CUpti_BuffersCallbackRequestFunc g_requested = nullptr;
CUpti_BuffersCallbackCompleteFunc g_completed = nullptr;
CUpti_TimestampCallbackFunc g_timestamp = nullptr;
bool g_kernel_enabled = false;
bool g_memcpy_enabled = false;
bool g_delivered = false;
bool g_dropped_reported = false;
bool g_context_dropped_reported = false;
CUpti_CallbackFunc g_callback = nullptr;
void* g_callback_userdata = nullptr;
int g_context_object;  // its address is the fake CUcontext

std::string Mode() {
  const char* m = std::getenv("FAKE_CUPTI_MODE");
  return m != nullptr ? m : "trace";
}

size_t EnvNumber(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
}

// Kernel names as CUDA reports them: mangled C++ and NCCL's C-style device kernel name
// (mangled too, it takes an argument struct).
constexpr const char* kKernelNames[] = {
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_"
    "T1_",
    "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
};

class Writer {
 public:
  template <typename Record>
  void Add(const Record& record) {
    if (buffer_ == nullptr || used_ + sizeof(Record) > size_) {
      Complete();
      size_t max_records = 0;
      g_requested(&buffer_, &size_, &max_records);
      if (buffer_ == nullptr) return;  // declined: a real CUPTI drops the record
    }
    std::memcpy(buffer_ + used_, &record, sizeof(Record));
    used_ += sizeof(Record);
  }
  void Complete() {
    if (buffer_ != nullptr) g_completed(nullptr, 0, buffer_, size_, used_);
    buffer_ = nullptr;
    size_ = used_ = 0;
  }

 private:
  uint8_t* buffer_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

void Deliver() {
  if (g_delivered || g_requested == nullptr || g_completed == nullptr) return;
  g_delivered = true;
  const size_t kernels = EnvNumber("FAKE_CUPTI_KERNELS");
  Writer writer;
  for (size_t i = 0; i < kernels && g_kernel_enabled; ++i) {
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = g_timestamp();
    k.end = k.start + 1000 + i;
    k.deviceId = 0;
    k.contextId = 1;
    k.streamId = 7 + static_cast<uint32_t>(i % 2);
    k.correlationId = static_cast<uint32_t>(100 + i);
    k.graphId = i % 2 == 0 ? 0 : 42;
    k.name = kKernelNames[i % 2];
    writer.Add(k);
    if (g_memcpy_enabled) {
      CUpti_ActivityMemcpy6 m{};
      m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
      m.bytes = 4096;
      m.start = g_timestamp();
      m.end = m.start + 500;
      m.correlationId = static_cast<uint32_t>(100000 + i);
      writer.Add(m);
    }
  }
  writer.Complete();
}

}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "FAKE_CUPTI_ERROR";
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  if (Mode() == "multiple") return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  g_callback = callback;
  g_callback_userdata = userdata;
  static int handle;
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&handle);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle) { return CUPTI_SUCCESS; }

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                         CUpti_CallbackId) {
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
  if (f == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  g_timestamp = f;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc requested,
                                                    CUpti_BuffersCallbackCompleteFunc completed) {
  if (requested == nullptr || completed == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  g_requested = requested;
  g_completed = completed;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (Mode() == "fail_enable") return CUPTI_ERROR_NOT_COMPATIBLE;
  if (g_timestamp == nullptr) return CUPTI_ERROR_INVALID_OPERATION;
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) g_kernel_enabled = true;
  if (kind == CUPTI_ACTIVITY_KIND_MEMCPY) g_memcpy_enabled = true;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) g_kernel_enabled = false;
  if (kind == CUPTI_ACTIVITY_KIND_MEMCPY) g_memcpy_enabled = false;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushPeriod(uint32_t) { return CUPTI_SUCCESS; }

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t) {
  Deliver();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t,
                                                       size_t* dropped) {
  *dropped = 0;
  if (context == nullptr && !g_dropped_reported) {
    g_dropped_reported = true;
    *dropped = EnvNumber("FAKE_CUPTI_DROPPED");
  }
  if (context == reinterpret_cast<CUcontext>(&g_context_object) && !g_context_dropped_reported) {
    g_context_dropped_reported = true;
    *dropped = EnvNumber("FAKE_CUPTI_CONTEXT_DROPPED");
  }
  return CUPTI_SUCCESS;
}

void cuptiFakeDestroyContext() {
  if (g_callback == nullptr) return;
  CUpti_ResourceData data{};
  data.context = reinterpret_cast<CUcontext>(&g_context_object);
  g_callback(g_callback_userdata, CUPTI_CB_DOMAIN_RESOURCE,
             CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, &data);
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid_bytes,
                                                CUpti_Activity** record) {
  size_t offset = 0;
  if (*record != nullptr) {
    offset = static_cast<size_t>(reinterpret_cast<uint8_t*>(*record) - buffer);
    offset += (*record)->kind == CUPTI_ACTIVITY_KIND_MEMCPY ? sizeof(CUpti_ActivityMemcpy6)
                                                            : sizeof(CUpti_ActivityKernel10);
  }
  if (offset + sizeof(CUpti_Activity) > valid_bytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + offset);
  return CUPTI_SUCCESS;
}

}  // extern "C"
