// The table functions of the NCCL profiler plugin (collectors/nccl/profiler.h): the plugin's
// lifecycle (first init to last finalize), the v6/v5/v4 adapters, and the dispatch of events to
// the Plugin (plugin_events.cc) and, when chaining is on, to the chained plugin (chain.h).

#include "collectors/nccl/profiler.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string_view>

#include "collectors/nccl/chain.h"
#include "collectors/nccl/plugin.h"

namespace fabricscope::collectors::nccl {

namespace internal {

int ParseMask(const char* s, int fallback) {
  if (s == nullptr || *s == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 0);
  while (end != nullptr && (*end == ' ' || *end == '\n' || *end == '\t')) ++end;
  if (end == s || (end != nullptr && *end != '\0') || v < 0 || v > INT32_MAX) return fallback;
  return static_cast<int>(v);
}

}  // namespace internal

namespace {

using internal::Chain;
using internal::ContextSlot;
using internal::DecodeHandle;
using internal::Handle;
using internal::MakeHandle;
using internal::Plugin;

PluginOptions* g_options_for_testing = nullptr;

// Lifecycle: the plugin object exists from the first successful init to the last finalize.
std::mutex g_lifecycle_mu;
std::atomic<Plugin*> g_plugin{nullptr};
int g_context_count = 0;

// Our own table, to refuse a chain to ourselves.
const ProfilerV6 kSelf = {"fabricscope", Init, StartEvent, StopEvent, RecordEventState, Finalize};

void Log(Plugin* p, int level, const char* fmt, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  NcclDebugLogger logfn = p != nullptr ? p->logger() : nullptr;
  if (logfn != nullptr) logfn(level, kNcclLogProfile, __FILE__, __LINE__, fmt, a, b, c, d);
}

void* StartOurs(Plugin* p, void* context, const EventDescrV6& d) {
  switch (d.type) {
    case kEventColl:
      return p->StartOp(context, d, /*p2p=*/false);
    case kEventP2p:
      return p->StartOp(context, d, /*p2p=*/true);
    case kEventProxyOp:
      return p->StartProxyOp(context, d);
    case kEventProxyStep:
      return p->StartProxyStep(d);
    case kEventKernelCh:
      return p->StartKernelCh(context, d);
    case kEventCollApi:
      return MakeHandle(internal::kKindApi, 0, 0, d.coll_api.graph_captured);
    case kEventP2pApi:
      return MakeHandle(internal::kKindApi, 0, 0, d.p2p_api.graph_captured);
    case kEventCeColl:
      return p->StartCeColl(context, d);
    case kEventCeSync:
    case kEventCeBatch:
      return p->StartCeChild(d);
    default:
      return MakeHandle(internal::kKindOther, 0, 0);
  }
}

void StopOurs(Plugin* p, const Handle& h) {
  switch (h.kind) {
    case internal::kKindOp:
      p->StopOp(h);
      break;
    case internal::kKindProxyOp:
      p->StopProxyOp(h);
      break;
    case internal::kKindKernelCh:
      p->StopKernelCh(h);
      break;
    case internal::kKindCeChild:
      p->StopCeChild(h);
      break;
    default:
      break;
  }
}

void RecordOurs(Plugin* p, const Handle& h, EventState state, EventStateArgs* args) {
  if (h.kind == internal::kKindProxyStep) {
    p->RecordStep(h, state, args);
  } else if (h.kind == internal::kKindKernelCh) {
    p->RecordKernelCh(h, state, args);
  }
}

// A handle NCCL holds, split into ours and the chained plugin's (chain.h).
void Translate(Plugin* p, const Chain& chain, void* handle, void** ours, void** theirs) {
  const Handle h = DecodeHandle(handle);
  *ours = handle;
  *theirs = nullptr;
  if (h.kind == internal::kKindChain) {
    // A retired slot (its event stopped long ago, e.g. the CollApi of a captured graph): ours
    // was an API token at most, whose graph flag the chain handle carries.
    if (!chain.Unwrap(h, ours, theirs)) {
      *ours = h.graph ? MakeHandle(internal::kKindApi, 0, 0, true) : nullptr;
    }
    return;
  }
  if (std::atomic<void*>* field = p->ChainField(h))
    *theirs = field->load(std::memory_order_relaxed);
}

void* StartChained(Plugin* p, Chain& chain, void* context, const EventDescrV6& d) {
  EventDescrV6 mine = d;
  void* parent_theirs = nullptr;
  void* group_theirs = nullptr;
  void* group_ours = nullptr;
  ContextSlot* ctx = p->LookupContext(context, nullptr);
  // A PXN ProxyOp's parent is another process's Coll handle (ABI §6.6): not translated. (Its
  // steps' parent is the ProxyOp handle this process returned: ours.)
  const bool foreign_parent = d.type == kEventProxyOp && d.proxy_op.pid != p->pid();
  if (!foreign_parent) {
    Translate(p, chain, d.parent_obj, &mine.parent_obj, &parent_theirs);
    if (d.type == kEventColl) Translate(p, chain, d.coll.parent_group, &group_ours, &group_theirs);
    if (d.type == kEventP2p) Translate(p, chain, d.p2p.parent_group, &group_ours, &group_theirs);
  }
  void* ours = StartOurs(p, context, mine);
  void* theirs =
      chain.Start(ctx != nullptr ? ctx->chain_context : nullptr, d, parent_theirs, group_theirs);
  if (theirs == nullptr) return ours;
  if (std::atomic<void*>* field = p->ChainField(DecodeHandle(ours))) {
    field->store(theirs, std::memory_order_relaxed);
    return ours;
  }
  void* wrapped = chain.Wrap(ours, theirs);
  if (wrapped != nullptr) return wrapped;
  chain.Stop(theirs);  // no slot to remember it: close it on the chained side at once
  return ours;
}

}  // namespace

PluginOptions PluginOptions::FromEnvironment() {
  PluginOptions o;
  o.event_mask = internal::ParseMask(std::getenv(kEventMaskEnv), kDefaultEventMask);
  const char* file = std::getenv(kMaskFileEnv);
  if (file != nullptr) o.mask_file = file;
  const int pool = internal::ParseMask(std::getenv(kPoolEnv), 0);
  if (pool >= 16 && pool <= (1 << 22)) {
    o.pool_ops = static_cast<uint32_t>(pool);
    o.pool_proxy_ops = 4 * static_cast<uint32_t>(pool);
    o.pool_kernel_ch = static_cast<uint32_t>(pool);
  }
  const char* chain = std::getenv(kChainEnv);
  if (chain != nullptr) o.chain_path = chain;
  const int linger_ms = internal::ParseMask(std::getenv(kLingerEnv), 0);
  if (linger_ms >= 1 && linger_ms <= 60'000) o.linger_ns = int64_t{linger_ms} * 1'000'000;
  o.channel_spans = internal::ParseMask(std::getenv(kChannelSpansEnv), 0) == 1;
  o.socket_path = gpu::ResolveSocketPath();
  return o;
}

size_t DatatypeSize(const char* t) {
  if (t == nullptr) return 0;
  struct Entry {
    std::string_view name;
    size_t size;
  };
  // string_view compares lengths first, so that a lookup compares one to three names in full (on
  // NCCL's proxy thread, for each ProxyOp without step events: proxy_bytes.h).
  static constexpr Entry kSizes[] = {
      {"ncclInt8", 1},       {"ncclChar", 1},       {"ncclUint8", 1},  {"Unknown", 1},
      {"ncclInt32", 4},      {"ncclInt", 4},        {"ncclUint32", 4}, {"ncclInt64", 8},
      {"ncclUint64", 8},     {"ncclFloat16", 2},    {"ncclHalf", 2},   {"ncclFloat32", 4},
      {"ncclFloat", 4},      {"ncclFloat64", 8},    {"ncclDouble", 8}, {"ncclBfloat16", 2},
      {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
  };
  const std::string_view name(t, strnlen(t, 16));
  for (const Entry& e : kSizes) {
    if (e.name == name) return e.size;  // sizes first, then the bytes
  }
  return 0;
}

void SetOptionsForTesting(const PluginOptions& options) {
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  delete g_options_for_testing;
  g_options_for_testing = new PluginOptions(options);
}

PluginStats CurrentStats() {
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  PluginStats s = p != nullptr ? p->Stats() : PluginStats{};
  s.contexts = g_context_count;
  s.chained = p != nullptr && p->chain() != nullptr;
  return s;
}

namespace {

// The first init: the plugin object, its pools and (when configured) the chained plugin.
Plugin* CreatePlugin(NcclDebugLogger logfn) {
  const PluginOptions options =
      g_options_for_testing != nullptr ? *g_options_for_testing : PluginOptions::FromEnvironment();
  Plugin* p = nullptr;
  try {
    p = new Plugin(options);
  } catch (const std::exception&) {  // std::bad_alloc: pools too large for this host
    return nullptr;
  }
  p->SetLogger(logfn);
  if (!options.chain_path.empty()) {
    p->SetChain(Chain::Load(options.chain_path, 4 * options.pool_ops, logfn, &kSelf));
    if (p->chain() != nullptr) {
      Log(p, kNcclLogInfo, "fabricscope profiler: chained to a v%lu plugin (%lu %lu %lu)",
          static_cast<uint64_t>(p->chain()->version()), 0, 0, 0);
    }
  }
  return p;
}

}  // namespace

NcclResult Init(void** context, uint64_t comm_hash, int* activation_mask, const char* comm_name,
                int n_nodes, int nranks, int rank, NcclDebugLogger logfn) {
  if (context == nullptr) return kNcclInvalidArgument;
  *context = nullptr;
  if (activation_mask == nullptr || nranks <= 0 || rank < 0 || rank >= nranks) {
    if (logfn != nullptr) {
      logfn(kNcclLogWarn, kNcclLogProfile, __FILE__, __LINE__,
            "fabricscope profiler: init refused (mask %p, rank %d of %d)", activation_mask, rank,
            nranks);
    }
    return kNcclInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  Plugin* p = g_plugin.load(std::memory_order_relaxed);
  const bool created = p == nullptr;
  if (created) {
    p = CreatePlugin(logfn);
    if (p == nullptr) return kNcclSystemError;
  }
  if (Chain* chain = p->chain()) {
    // The chained plugin's context first, so that its mask is in the union AddContext stores.
    void* theirs = chain->InitContext(comm_hash, comm_name, n_nodes, nranks, rank, logfn);
    p->SetExtraMask(chain->mask());
    const NcclResult r =
        p->AddContext(context, comm_hash, activation_mask, comm_name, n_nodes, nranks, rank);
    if (r == kNcclSuccess) {
      uint32_t index = 0;
      p->LookupContext(*context, &index);
      p->context_slot(index).chain_context = theirs;
    } else {
      chain->FinalizeContext(theirs);
    }
    if (r != kNcclSuccess && created) delete p;
    if (r != kNcclSuccess) return r;
  } else {
    const NcclResult r =
        p->AddContext(context, comm_hash, activation_mask, comm_name, n_nodes, nranks, rank);
    if (r != kNcclSuccess) {
      if (created) delete p;
      return r;
    }
  }
  ++g_context_count;
  if (created) {
    g_plugin.store(p, std::memory_order_release);
    try {
      p->StartFlushThread();
    } catch (const std::exception&) {  // std::system_error: no thread; records stay unsent
      Log(p, kNcclLogWarn, "fabricscope profiler: no flush thread (%lu %lu %lu %lu)", 0, 0, 0, 0);
    }
    Log(p, kNcclLogInfo,
        "fabricscope profiler: mask %lu, pools %lu bytes, %lu collectives in flight, pid %lu",
        static_cast<uint64_t>(p->options().event_mask), p->MemoryBytes(), p->options().pool_ops,
        static_cast<uint64_t>(p->pid()));
  }
  return kNcclSuccess;
}

NcclResult InitV4(void** context, int* activation_mask, const char* comm_name, uint64_t comm_hash,
                  int n_nodes, int nranks, int rank, NcclDebugLogger logfn) {
  return Init(context, comm_hash, activation_mask, comm_name, n_nodes, nranks, rank, logfn);
}

NcclResult Finalize(void* context) {
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  Plugin* p = g_plugin.load(std::memory_order_relaxed);
  if (p == nullptr) return kNcclSuccess;
  if (Chain* chain = p->chain()) {
    if (ContextSlot* ctx = p->LookupContext(context, nullptr)) {
      chain->FinalizeContext(ctx->chain_context);
      ctx->chain_context = nullptr;
    }
  }
  if (!p->RemoveContext(context)) return kNcclSuccess;
  if (--g_context_count > 0) return kNcclSuccess;
  // The last communicator: flush what is left (waiting at most 500 ms for a connected agent's
  // full socket, Plugin::SendDatagram), join, free (and dlclose the chained plugin). NCCL
  // dlclose()s this library next (ABI §1).
  p->StopFlushThread();
  g_plugin.store(nullptr, std::memory_order_release);
  const PluginStats s = p->Stats();
  Log(p, kNcclLogInfo,
      "fabricscope profiler: finalized; records %lu, sent %lu, dropped %lu, datagrams %lu",
      s.records_emitted, s.records_sent, s.dropped, s.datagrams_sent);
  delete p;
  return kNcclSuccess;
}

NcclResult StartEvent(void* context, void** event_handle, EventDescrV6* descr) {
  if (event_handle == nullptr) return kNcclSuccess;
  *event_handle = nullptr;  // always written (ABI §6.9)
  if (descr == nullptr) return kNcclSuccess;
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr) return kNcclSuccess;
  Chain* chain = p->chain();
  *event_handle =
      chain == nullptr ? StartOurs(p, context, *descr) : StartChained(p, *chain, context, *descr);
  return kNcclSuccess;
}

NcclResult StartEventV5(void* context, void** event_handle, EventDescrV5* descr) {
  if (descr != nullptr && (descr->type & (kEventCeColl | kEventCeSync | kEventCeBatch)) != 0) {
    if (event_handle != nullptr) *event_handle = nullptr;
    return kNcclSuccess;
  }
  return StartEvent(context, event_handle, descr);
}

NcclResult StartEventV4(void* context, void** event_handle, EventDescrV4* descr) {
  if (event_handle == nullptr) return kNcclSuccess;
  *event_handle = nullptr;
  if (descr == nullptr) return kNcclSuccess;
  EventDescrV5 d{};
  d.type = descr->type;  // one byte; the padding after it may be garbage (ABI §4)
  d.parent_obj = descr->parent_obj;
  d.rank = descr->rank;
  // From offset 24 the v4 union has the v5 layout for the members we read, except that v4
  // coll/p2p lack parentGroup (left NULL here).
  static_assert(sizeof(EventDescrV4) - 24 <= sizeof(EventDescrV5) - 24);
  std::memcpy(reinterpret_cast<char*>(&d) + 24, reinterpret_cast<const char*>(descr) + 24,
              sizeof(EventDescrV4) - 24);
  if (d.type == kEventP2p) d.p2p.parent_group = nullptr;
  return StartEvent(context, event_handle, &d);
}

NcclResult StopEvent(void* event_handle) {
  const Handle h = DecodeHandle(event_handle);
  if (h.kind == 0) return kNcclSuccess;
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr) return kNcclSuccess;
  Chain* chain = p->chain();
  if (chain == nullptr) {
    StopOurs(p, h);
    return kNcclSuccess;
  }
  void* ours = nullptr;
  void* theirs = nullptr;
  Translate(p, *chain, event_handle, &ours, &theirs);
  chain->Stop(theirs);
  StopOurs(p, DecodeHandle(ours));
  if (h.kind == internal::kKindChain) chain->Retire(h, gpu::MonotonicNowNs());
  return kNcclSuccess;
}

NcclResult RecordEventState(void* event_handle, EventState state, EventStateArgs* args) {
  const Handle h = DecodeHandle(event_handle);
  if (h.kind == 0) return kNcclSuccess;
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr) return kNcclSuccess;
  Chain* chain = p->chain();
  if (chain == nullptr) {
    RecordOurs(p, h, state, args);
    return kNcclSuccess;
  }
  void* ours = nullptr;
  void* theirs = nullptr;
  Translate(p, *chain, event_handle, &ours, &theirs);
  chain->Record(theirs, state, args);
  RecordOurs(p, DecodeHandle(ours), state, args);
  return kNcclSuccess;
}

}  // namespace fabricscope::collectors::nccl
