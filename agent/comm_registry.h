#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace fabricscope::agent {

// The communicators (by NCCL comm hash) whose state the GPU timeline keeps: cumulative totals,
// rank-pair bytes and communicator records (agent/gpu_timeline.h). At most `capacity`, so one
// window's GpuWindow never names more than the aggregator accepts (limits:
// max_communicators_per_node, exporters/ingest/message_checks.h BatchLimits, default 1024).
//
// Least recently active first out: a node that runs job after job meets new communicators for
// as long as it runs, and the ones it forgets first are those of jobs that ended longest ago.
//
// Touch and Erase are O(1) (a list and a hash map). Not thread-safe: the pipeline thread owns it.
class CommRegistry {
 public:
  explicit CommRegistry(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Marks `comm` active at `now` (any clock that does not go back). Returns the communicator
  // forgotten to make room for it (the least recently active one) when `comm` is new and the
  // registry was full; the caller then drops that communicator's state.
  std::optional<uint64_t> Touch(uint64_t comm, int64_t now) {
    auto it = index_.find(comm);
    if (it != index_.end()) {
      it->second->second = now;
      order_.splice(order_.begin(), order_, it->second);
      return std::nullopt;
    }
    std::optional<uint64_t> evicted;
    if (index_.size() >= capacity_) {
      evicted = order_.back().first;
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(comm, now);
    index_[comm] = order_.begin();
    return evicted;
  }

  bool Contains(uint64_t comm) const { return index_.contains(comm); }
  bool full() const { return index_.size() >= capacity_; }

  // The least recently active communicator for which `pred` holds, if any.
  template <typename Pred>
  std::optional<uint64_t> LeastRecent(Pred pred) const {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      if (pred(it->first)) return it->first;
    }
    return std::nullopt;
  }

  void Erase(uint64_t comm) {
    auto it = index_.find(comm);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  // The communicators last active before `before`, least recently active first.
  std::vector<uint64_t> IdleSince(int64_t before) const {
    std::vector<uint64_t> out;
    for (auto it = order_.rbegin(); it != order_.rend() && it->second < before; ++it) {
      out.push_back(it->first);
    }
    return out;
  }

  size_t size() const { return index_.size(); }

 private:
  size_t capacity_;
  std::list<std::pair<uint64_t, int64_t>> order_;  // (comm, last active), most recent first
  absl::flat_hash_map<uint64_t, std::list<std::pair<uint64_t, int64_t>>::iterator> index_;
};

}  // namespace fabricscope::agent
