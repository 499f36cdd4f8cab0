// libfabricscope-cupti.so: the CUPTI injection library. The CUDA driver loads it into a
// training process when CUDA_INJECTION64_PATH names it, and calls InitializeInjection() once,
// during cuInit. From then on CUPTI records kernel (and optionally memcpy) activity into buffers
// from a fixed pool; completed buffers are converted into KernelRecords and sent to the agent's
// GPU ingest socket (collectors/gpu/wire.h) without blocking.
//
// Never harms the application: every failure at start-up (no driver, no GPU, another CUPTI
// client holding the subscription, an out-of-memory pool) prints one line on stderr and leaves
// the process running without tracing; at run time a missing or slow agent only costs counted
// drops. Exports InitializeInjection and nothing else (version script).

#include <cupti.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>

#include "collectors/cupti/batcher.h"
#include "collectors/cupti/buffer_pool.h"
#include "collectors/cupti/options.h"
#include "collectors/gpu/job_identity.h"
#include "collectors/gpu/producer.h"

namespace fabricscope::collectors::cupti {
namespace {

constexpr char kTag[] = "fabricscope-cupti";

class ChannelSink : public DatagramSink {
 public:
  ChannelSink(std::string path, int32_t pid) : channel_(gpu::Source::kCupti, std::move(path)) {
    // The job this process claims goes first on every connection (gpu/job_identity.h).
    channel_.SetJob(gpu::JobOfThisProcess(), pid);
  }
  bool Send(const void* data, size_t size) override { return channel_.Send(data, size); }
  bool connected() const { return channel_.connected(); }

 private:
  gpu::ProducerChannel channel_;  // used under the batcher's lock only
};

// Everything the callbacks need. Created once and never destroyed: CUPTI may call back on its
// own threads until the very end of the process, after static destructors have run.
struct State {
  InjectionOptions options;
  std::unique_ptr<BufferPool> pool;
  std::unique_ptr<ChannelSink> sink;
  std::unique_ptr<ActivityBatcher> batcher;
  CUpti_SubscriberHandle subscriber = nullptr;
  pid_t pid = 0;
};

std::atomic<State*> g_state{nullptr};
std::atomic<bool> g_initialized{false};

const char* ResultString(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr) return "unknown";
  return text;
}

// CUPTI's timestamp source: CLOCK_MONOTONIC ns, the agent's clock (collectors/clock.h). CUPTI
// converts GPU timestamps into this clock by linear interpolation (cupti_activity.h,
// cuptiActivityRegisterTimestampCallback), so records line up with the agent's port samples.
uint64_t CUPTIAPI MonotonicTimestamp() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  State* state = g_state.load(std::memory_order_acquire);
  uint8_t* b = state != nullptr ? state->pool->Acquire() : nullptr;
  *buffer = b;  // nullptr declines: CUPTI drops records and counts them
  *size = b != nullptr ? state->pool->buffer_bytes() : 0;
  *max_records = 0;  // fill the buffer
}

void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                              size_t /*size*/, size_t valid_size) {
  State* state = g_state.load(std::memory_order_acquire);
  if (state == nullptr) return;
  // Since CUDA 6 buffers are global (context NULL, stream 0): this reads the global queue's
  // count, which CUPTI resets on each call.
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS &&
      dropped > 0) {
    state->batcher->AddCuptiDropped(dropped);
  }
  state->batcher->ProcessBuffer(buffer, valid_size);
  if (buffer != nullptr) state->pool->Release(buffer);
}

void CUPTIAPI OnCallback(void* /*userdata*/, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
    return;
  }
  State* state = g_state.load(std::memory_order_acquire);
  if (state == nullptr) return;
  // Nested resource callbacks (another context destroyed from within the flush) do not flush again.
  static thread_local bool flushing = false;
  if (flushing) return;
  flushing = true;
  // The context's records must leave while it still exists (this callback runs before the driver
  // starts destroying it): deliver every buffer, then collect the drops CUPTI counted for it.
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  flushing = false;
  const auto* resource = static_cast<const CUpti_ResourceData*>(data);
  size_t dropped = 0;
  if (resource != nullptr &&
      cuptiActivityGetNumDroppedRecords(resource->context, 0, &dropped) == CUPTI_SUCCESS &&
      dropped > 0) {
    state->batcher->AddCuptiDropped(dropped);
    state->batcher->ProcessBuffer(nullptr, 0);  // report them now
  }
}

void AtExit() {
  State* state = g_state.load(std::memory_order_acquire);
  if (state == nullptr || getpid() != state->pid) return;  // a fork()ed child: not ours to flush
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped > 0) {
    state->batcher->AddCuptiDropped(dropped);
    state->batcher->ProcessBuffer(nullptr, 0);
  }
  if (state->options.verbose) {
    const BatcherStats s = state->batcher->stats();
    std::fprintf(
        stderr,
        "%s: exit: %llu kernels, %llu memcpys, %llu records sent in %llu datagrams to "
        "%s, %llu dropped (cupti %llu, channel %llu), pool exhausted %llu times\n",
        kTag, static_cast<unsigned long long>(s.kernels),
        static_cast<unsigned long long>(s.memcpys), static_cast<unsigned long long>(s.records_sent),
        static_cast<unsigned long long>(s.datagrams_sent), state->options.socket_path.c_str(),
        static_cast<unsigned long long>(s.dropped_records_total()),
        static_cast<unsigned long long>(s.cupti_dropped),
        static_cast<unsigned long long>(s.channel_dropped),
        static_cast<unsigned long long>(state->pool->exhausted()));
  }
}

void StandDown(const char* what, CUptiResult result) {
  std::fprintf(stderr, "%s: %s (%s); standing down, the application runs without kernel tracing\n",
               kTag, what, ResultString(result));
}

const char* GetEnv(const char* name, void* /*context*/) { return std::getenv(name); }

// Returns true when tracing is on.
bool Initialize() {
  std::string warning;
  auto state = std::make_unique<State>();
  state->options = ParseInjectionOptions(&GetEnv, nullptr, &warning);
  state->pid = getpid();
  if (!warning.empty()) std::fprintf(stderr, "%s: %s\n", kTag, warning.c_str());
  state->pool = BufferPool::Create(state->options.buffers, state->options.buffer_bytes);
  if (state->pool == nullptr) {
    std::fprintf(stderr, "%s: cannot allocate %zu activity buffers of %zu bytes; standing down\n",
                 kTag, state->options.buffers, state->options.buffer_bytes);
    return false;
  }
  state->sink = std::make_unique<ChannelSink>(state->options.socket_path, state->pid);
  state->batcher =
      std::make_unique<ActivityBatcher>(*state->sink, state->pid, &cuptiActivityGetNextRecord);

  // Subscribing first finds another CUPTI client (Nsight Systems, torch.profiler/Kineto, DCGM
  // profiling) before anything of ours is switched on.
  CUptiResult r = cuptiSubscribe(&state->subscriber, &OnCallback, nullptr);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    StandDown("another CUPTI client already holds the subscription", r);
    return false;
  }
  if (r != CUPTI_SUCCESS) {
    StandDown("cuptiSubscribe failed (no CUDA driver or no GPU?)", r);
    return false;
  }
  const auto fail = [&](const char* what, CUptiResult result) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiUnsubscribe(state->subscriber);
    StandDown(what, result);
    return false;  // nothing was handed to CUPTI yet (g_state is null): the state is freed
  };
  // The timestamp source must be set before any activity kind is enabled.
  if ((r = cuptiActivityRegisterTimestampCallback(&MonotonicTimestamp)) != CUPTI_SUCCESS) {
    return fail("cuptiActivityRegisterTimestampCallback failed", r);
  }
  if ((r = cuptiActivityRegisterCallbacks(&BufferRequested, &BufferCompleted)) != CUPTI_SUCCESS) {
    return fail("cuptiActivityRegisterCallbacks failed", r);
  }
  State* published = state.release();  // from here on callbacks may use it; never freed
  g_state.store(published, std::memory_order_release);
  const auto fail_published = [&](const char* what, CUptiResult result) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiUnsubscribe(published->subscriber);
    StandDown(what, result);
    return false;
  };
  if ((r = cuptiEnableCallback(1, published->subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                               CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)) != CUPTI_SUCCESS) {
    return fail_published("cuptiEnableCallback(CONTEXT_DESTROY_STARTING) failed", r);
  }
  if ((r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) != CUPTI_SUCCESS) {
    return fail_published("cuptiActivityEnable(CONCURRENT_KERNEL) failed", r);
  }
  if (published->options.memcpy &&
      (r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY)) != CUPTI_SUCCESS) {
    return fail_published("cuptiActivityEnable(MEMCPY) failed", r);
  }
  if (published->options.flush_period_ms > 0 &&
      (r = cuptiActivityFlushPeriod(published->options.flush_period_ms)) != CUPTI_SUCCESS) {
    // Not fatal: buffers still arrive when full and at exit.
    std::fprintf(stderr, "%s: cuptiActivityFlushPeriod(%u) failed (%s); flushing at exit only\n",
                 kTag, published->options.flush_period_ms, ResultString(r));
  }
  if (std::atexit(&AtExit) != 0) {
    std::fprintf(stderr, "%s: atexit failed; records still in buffers at exit will be lost\n",
                 kTag);
  }
  if (published->options.verbose) {
    std::fprintf(stderr, "%s: tracing kernels%s, %zu x %zu KiB buffers, flush every %u ms, to %s\n",
                 kTag, published->options.memcpy ? " and memcpys" : "", published->options.buffers,
                 published->options.buffer_bytes / 1024, published->options.flush_period_ms,
                 published->options.socket_path.c_str());
  }
  return true;
}

}  // namespace
}  // namespace fabricscope::collectors::cupti

// The CUDA driver's entry point for CUDA_INJECTION64_PATH libraries, called once during
// cuInit. Returns 1 whether tracing started or stood down: standing down is not an error of the
// application, and nothing in the process should change because of it.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  if (fabricscope::collectors::cupti::g_initialized.exchange(true)) return 1;
  fabricscope::collectors::cupti::Initialize();
  return 1;
}
