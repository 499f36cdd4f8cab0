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

  // Marks `comm` active in window number `window`. Returns the communicator forgotten to make
  // room for it (the least recently active one) when `comm` is new and the registry was full;
  // the caller then drops that communicator's state.
  std::optional<uint64_t> Touch(uint64_t comm, uint64_t window) {
    auto it = index_.find(comm);
    if (it != index_.end()) {
      it->second->second = window;
      order_.splice(order_.begin(), order_, it->second);
      return std::nullopt;
    }
    std::optional<uint64_t> evicted;
    if (index_.size() >= capacity_) {
      evicted = order_.back().first;
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    order_.emplace_front(comm, window);
    index_[comm] = order_.begin();
    return evicted;
  }

  bool Contains(uint64_t comm) const { return index_.contains(comm); }

  void Erase(uint64_t comm) {
    auto it = index_.find(comm);
    if (it == index_.end()) return;
    order_.erase(it->second);
    index_.erase(it);
  }

  // The communicators last active before window number `before`, least recently active first.
  std::vector<uint64_t> IdleSince(uint64_t before) const {
    std::vector<uint64_t> out;
    for (auto it = order_.rbegin(); it != order_.rend() && it->second < before; ++it) {
      out.push_back(it->first);
    }
    return out;
  }

  size_t size() const { return index_.size(); }

 private:
  size_t capacity_;
  std::list<std::pair<uint64_t, uint64_t>> order_;  // (comm, last window), most recent first
  absl::flat_hash_map<uint64_t, std::list<std::pair<uint64_t, uint64_t>>::iterator> index_;
};

}  // namespace fabricscope::agent
