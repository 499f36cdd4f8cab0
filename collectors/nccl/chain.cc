#include "collectors/nccl/chain.h"

#include <dlfcn.h>

#include <cstring>

namespace fabricscope::collectors::nccl::internal {

std::unique_ptr<Chain> Chain::Load(const std::string& path, uint32_t slots, NcclDebugLogger logfn,
                                   const ProfilerV6* self) {
  auto warn = [&](const char* what, const char* detail) {
    if (logfn != nullptr) {
      logfn(kNcclLogWarn, kNcclLogProfile, __FILE__, __LINE__,
            "fabricscope profiler: chained plugin %s: %s (%s); continuing without it", path.c_str(),
            what, detail != nullptr ? detail : "");
    }
  };
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    warn("cannot be loaded", dlerror());
    return nullptr;
  }
  // NCCL 2.29+ tries v6, then v5, then v4 (src/plugin/profiler.cc); so do we.
  static constexpr struct {
    const char* symbol;
    int version;
  } kTables[] = {{"ncclProfiler_v6", 6}, {"ncclProfiler_v5", 5}, {"ncclProfiler_v4", 4}};
  for (const auto& t : kTables) {
    const void* table = dlsym(lib, t.symbol);
    if (table == nullptr) continue;
    const auto* v6 = static_cast<const ProfilerV6*>(table);
    if (t.version >= 5 && self != nullptr && v6->init == self->init) {
      dlclose(lib);
      warn("is this plugin itself", t.symbol);
      return nullptr;
    }
    return std::unique_ptr<Chain>(new Chain(lib, t.version, table, slots));
  }
  dlclose(lib);
  warn("exports no ncclProfiler_v6, _v5 or _v4", nullptr);
  return nullptr;
}

Chain::Chain(void* lib, int version, const void* table, uint32_t slots)
    : lib_(lib),
      version_(version),
      capacity_(slots),
      slots_(new Slot[slots]),
      free_(slots),
      retired_(slots) {
  if (version >= 5) {
    v6_ = static_cast<const ProfilerV6*>(table);
    name_ = v6_->name != nullptr ? v6_->name : "";
  } else {
    v4_ = static_cast<const ProfilerV4*>(table);
    name_ = v4_->name != nullptr ? v4_->name : "";
  }
}

Chain::~Chain() {
  if (lib_ != nullptr) dlclose(lib_);
}

void* Chain::InitContext(uint64_t comm_hash, const char* name, int nnodes, int nranks, int rank,
                         NcclDebugLogger logfn) {
  void* ctx = nullptr;
  NcclResult r;
  if (v6_ != nullptr) {
    r = v6_->init(&ctx, comm_hash, &mask_, name, nnodes, nranks, rank, logfn);
  } else {
    r = v4_->init(&ctx, &mask_, name, comm_hash, nnodes, nranks, rank, logfn);
  }
  if (version_ == 5) {  // NCCL's v5 adapter clears the CE bits a v5 plugin cannot take
    std::atomic_ref<int>(mask_).fetch_and(
        ~static_cast<int>(kEventCeColl | kEventCeSync | kEventCeBatch), std::memory_order_relaxed);
  } else if (version_ == 4) {
    std::atomic_ref<int>(mask_).fetch_and(0xFF, std::memory_order_relaxed);  // v4 knows bits 0-7
  }
  if (r != kNcclSuccess) {
    if (logfn != nullptr) {
      logfn(kNcclLogWarn, kNcclLogProfile, __FILE__, __LINE__,
            "fabricscope profiler: chained plugin %s: init failed (%d); this communicator is not "
            "forwarded",
            name_, r);
    }
    return nullptr;
  }
  return ctx;
}

void Chain::FinalizeContext(void* chain_context) {
  if (chain_context == nullptr) return;
  if (v6_ != nullptr) {
    v6_->finalize(chain_context);
  } else {
    v4_->finalize(chain_context);
  }
}

void* Chain::Start(void* chain_context, const EventDescrV6& d, void* parent_theirs,
                   void* group_theirs) {
  void* h = nullptr;
  if (version_ >= 5) {
    if (version_ == 5 && (d.type & (kEventCeColl | kEventCeSync | kEventCeBatch)) != 0) {
      return nullptr;  // as NCCL's v5 adapter: CE events are not for a v5 plugin
    }
    EventDescrV6 copy = d;
    copy.parent_obj = parent_theirs;
    if (d.type == kEventColl) copy.coll.parent_group = group_theirs;
    if (d.type == kEventP2p) copy.p2p.parent_group = group_theirs;
    v6_->start_event(chain_context, &h, &copy);
    return h;
  }
  if (d.type > kEventNetPlugin) return nullptr;  // v4 has no API, KernelLaunch or CE events
  EventDescrV4 v4{};
  v4.type = static_cast<uint8_t>(d.type);
  // v4 parents a Coll/P2p on its Group (src/plugin/profiler/profiler_v4.cc).
  v4.parent_obj = (d.type == kEventColl || d.type == kEventP2p) ? group_theirs : parent_theirs;
  v4.rank = d.rank;
  std::memcpy(reinterpret_cast<char*>(&v4) + 24, reinterpret_cast<const char*>(&d) + 24,
              sizeof(EventDescrV4) - 24);
  v4_->start_event(chain_context, &h, &v4);
  return h;
}

void Chain::Stop(void* theirs) {
  if (theirs == nullptr) return;
  if (v6_ != nullptr) {
    v6_->stop_event(theirs);
  } else {
    v4_->stop_event(theirs);
  }
}

void Chain::Record(void* theirs, EventState state, EventStateArgs* args) {
  if (theirs == nullptr) return;
  if (version_ == 4 && (state == kStateGroupStartApiStop || state == kStateGroupEndApiStart)) {
    return;  // GroupApi states: v5+
  }
  if (v6_ != nullptr) {
    v6_->record_event_state(theirs, state, args);
  } else {
    v4_->record_event_state(theirs, state, args);
  }
}

void* Chain::Wrap(void* ours, void* theirs) {
  const uint32_t index = free_.Pop();
  if (index == IndexFreeList::kNone) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Slot& s = slots_[index];
  s.ours.store(ours, std::memory_order_relaxed);
  s.theirs.store(theirs, std::memory_order_release);  // published with the handle
  const uint32_t gen = s.gen.load(std::memory_order_relaxed);
  // An API token's graph flag rides along, so that it outlives the slot (Translate).
  const Handle o = DecodeHandle(ours);
  return MakeHandle(kKindChain, gen, index, o.kind == kKindApi && o.graph);
}

bool Chain::Unwrap(const Handle& h, void** ours, void** theirs) const {
  if (h.kind != kKindChain || h.index >= capacity_) return false;
  const Slot& s = slots_[h.index];
  if ((s.gen.load(std::memory_order_acquire) & kGenMask) != h.gen) return false;
  *theirs = s.theirs.load(std::memory_order_acquire);
  *ours = s.ours.load(std::memory_order_relaxed);
  return true;
}

void Chain::Retire(const Handle& h, int64_t now_ns) {
  if (h.kind != kKindChain || h.index >= capacity_) return;
  if (!retired_.TryPush(Retired{h.index, h.gen, now_ns})) {
    dropped_.fetch_add(1, std::memory_order_relaxed);  // the slot stays used: a lost slot
  }
}

void Chain::Reclaim(int64_t now_ns, int64_t keep_ns) {
  for (;;) {
    if (head_.index == UINT32_MAX && !retired_.TryPop(&head_)) return;
    if (now_ns - head_.at_ns < keep_ns) return;
    Slot& s = slots_[head_.index];
    uint32_t gen = head_.gen;
    // Once per generation: a repeated stop retires the same slot twice.
    if (s.gen.compare_exchange_strong(gen, (head_.gen + 1) & kGenMask, std::memory_order_acq_rel)) {
      free_.Push(head_.index);
    }
    head_.index = UINT32_MAX;
  }
}

}  // namespace fabricscope::collectors::nccl::internal
