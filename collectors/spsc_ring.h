#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace fabricscope::collectors {

// Single-producer single-consumer ring of fixed-size byte slots, sized once at construction.
//
// Threading: exactly one producer thread calls BeginWrite/CommitWrite and exactly one consumer
// thread calls Peek/Pop; dropped() may be read from any thread. No call allocates, locks or
// blocks, so the producer may be a real-time sampler. A full ring refuses the write
// (BeginWrite returns nullptr) and counts the drop: the producer never waits.
class SpscSlotRing {
 public:
  // capacity: number of slots (rounded up to a power of two, at least 2);
  // slot_bytes: bytes per slot (rounded up to 8 for alignment of 64-bit fields).
  SpscSlotRing(size_t capacity, size_t slot_bytes)
      : capacity_(RoundUpPow2(capacity < 2 ? 2 : capacity)),
        mask_(capacity_ - 1),
        slot_bytes_((slot_bytes + 7) & ~size_t{7}),
        storage_(new uint64_t[capacity_ * slot_bytes_ / 8]()) {}

  SpscSlotRing(const SpscSlotRing&) = delete;
  SpscSlotRing& operator=(const SpscSlotRing&) = delete;

  // Producer: the next free slot, or nullptr when full (the drop is counted).
  void* BeginWrite() {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    if (head - tail_.load(std::memory_order_acquire) >= capacity_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    return SlotAt(head);
  }
  // Producer: publishes the slot returned by the last successful BeginWrite.
  void CommitWrite() {
    head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  // Consumer: the oldest published slot, or nullptr when empty.
  const void* Peek() const {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail == head_.load(std::memory_order_acquire)) return nullptr;
    return SlotAt(tail);
  }
  // Consumer: releases the slot returned by Peek.
  void Pop() { tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  size_t capacity() const { return capacity_; }
  size_t slot_bytes() const { return slot_bytes_; }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  size_t memory_bytes() const { return capacity_ * slot_bytes_; }

 private:
  static size_t RoundUpPow2(size_t v) {
    size_t p = 1;
    while (p < v) p <<= 1;
    return p;
  }
  void* SlotAt(uint64_t index) const {
    return reinterpret_cast<char*>(storage_.get()) + (index & mask_) * slot_bytes_;
  }

  const size_t capacity_;
  const size_t mask_;
  const size_t slot_bytes_;
  std::unique_ptr<uint64_t[]> storage_;
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) std::atomic<uint64_t> dropped_{0};
};

}  // namespace fabricscope::collectors
