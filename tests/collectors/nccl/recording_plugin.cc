// A profiler plugin for the chaining test (FABRICSCOPE_NCCL_CHAIN): it records every call it
// gets, with its own contexts and handles (fresh heap words, never ours), and asks for the
// ProxyCtrl bit so that the test can see the mask union. Exports ncclProfiler_v6 (or _v5 / _v4
// when built with RECORDING_VERSION 5 / 4) and fabricscope_recording_calls() for the test.

#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "collectors/nccl/profiler_abi.h"

namespace nccl = fabricscope::collectors::nccl;

#ifndef RECORDING_VERSION
#define RECORDING_VERSION 6
#endif

extern "C" {

struct RecordingCall {
  char op;  // 'i' init, 's' start, 'e' stop (end), 'r' record, 'f' finalize
  uint64_t type;
  void* context;
  void* handle;  // start: the handle it returned; stop/record: the handle it got
  void* parent;
  int state;
};

__attribute__((visibility("default"))) size_t fabricscope_recording_calls(
    const RecordingCall** out);
}

namespace {

// Destroyed at dlclose (the plugin unloads it at its last finalize; the test keeps its own
// reference while it reads the calls).
std::mutex g_mu;
std::vector<RecordingCall> g_calls_storage;
std::vector<RecordingCall>* const g_calls = &g_calls_storage;
uint64_t g_next = 0x1000;

void Add(RecordingCall c) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_calls->push_back(c);
}
void* NewWord() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_next += 0x10;
  return reinterpret_cast<void*>(g_next);
}

nccl::NcclResult Init(void** context, uint64_t, int* mask, const char*, int, int, int,
                      nccl::NcclDebugLogger) {
  *context = NewWord();
  *mask = nccl::kEventColl | nccl::kEventProxyCtrl;
  Add({'i', 0, *context, nullptr, nullptr, 0});
  return 0;
}
[[maybe_unused]] nccl::NcclResult InitV4(void** context, int* mask, const char* name, uint64_t hash,
                                         int nnodes, int nranks, int rank,
                                         nccl::NcclDebugLogger log) {
  return Init(context, hash, mask, name, nnodes, nranks, rank, log);
}
template <typename Descr>
nccl::NcclResult Start(void* context, void** handle, Descr* d) {
  *handle = NewWord();
  Add({'s', static_cast<uint64_t>(d->type), context, *handle, d->parent_obj, 0});
  return 0;
}
nccl::NcclResult Stop(void* handle) {
  Add({'e', 0, nullptr, handle, nullptr, 0});
  return 0;
}
nccl::NcclResult Record(void* handle, nccl::EventState state, nccl::EventStateArgs*) {
  Add({'r', 0, nullptr, handle, nullptr, state});
  return 0;
}
nccl::NcclResult Finalize(void* context) {
  Add({'f', 0, context, nullptr, nullptr, 0});
  return 0;
}

}  // namespace

extern "C" {

size_t fabricscope_recording_calls(const RecordingCall** out) {
  std::lock_guard<std::mutex> lock(g_mu);
  *out = g_calls->data();
  return g_calls->size();
}

#if RECORDING_VERSION == 4
__attribute__((visibility("default"))) extern const nccl::ProfilerV4 ncclProfiler_v4;
const nccl::ProfilerV4 ncclProfiler_v4 = {"recording-v4", InitV4, Start<nccl::EventDescrV4>,
                                          Stop,           Record, Finalize};
#elif RECORDING_VERSION == 5
__attribute__((visibility("default"))) extern const nccl::ProfilerV5 ncclProfiler_v5;
const nccl::ProfilerV5 ncclProfiler_v5 = {"recording-v5", Init,   Start<nccl::EventDescrV5>,
                                          Stop,           Record, Finalize};
#else
__attribute__((visibility("default"))) extern const nccl::ProfilerV6 ncclProfiler_v6;
const nccl::ProfilerV6 ncclProfiler_v6 = {"recording-v6", Init,   Start<nccl::EventDescrV6>,
                                          Stop,           Record, Finalize};
#endif

}  // extern "C"
