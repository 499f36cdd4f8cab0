#pragma once

// Lock-free building blocks of the NCCL profiler plugin's hot path: index free lists (a FIFO and
// a stack) and a bounded multi-producer multi-consumer queue. Both are allocated once (at plugin
// init) and never allocate afterwards.

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

// Older C libraries (glibc < 2.35) do not name it; the kernel refuses it before Linux 5.14
// (EINVAL), which Prefault reports.
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace fabricscope::collectors::nccl {

// Bounded MPMC queue of trivially copyable T (D. Vyukov's array queue: one sequence number per
// cell). TryPush/TryPop never block and never allocate; TryPush fails when the queue is full.
// Each cell keeps its sequence minus its own index, so that zeroed memory is an empty queue:
// the cells come from calloc untouched (a large queue's pages are not faulted in at init, see
// Prefault), not from a loop over every cell.
template <typename T>
class MpmcQueue {
 public:
  // `min_capacity` is rounded up to a power of two. Throws std::bad_alloc without memory.
  explicit MpmcQueue(size_t min_capacity) {
    size_t capacity = 2;
    while (capacity < min_capacity) capacity <<= 1;
    mask_ = capacity - 1;
    cells_ = static_cast<Cell*>(std::calloc(capacity, sizeof(Cell)));
    if (cells_ == nullptr) throw std::bad_alloc();
  }
  ~MpmcQueue() { std::free(cells_); }
  MpmcQueue(const MpmcQueue&) = delete;
  MpmcQueue& operator=(const MpmcQueue&) = delete;

  bool TryPush(const T& value) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const size_t seq = Sequence(cell).load(std::memory_order_acquire) + (pos & mask_);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          Sequence(cell).store(pos + 1 - (pos & mask_), std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  bool TryPop(T* out) {
    size_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[pos & mask_];
      const size_t seq = Sequence(cell).load(std::memory_order_acquire) + (pos & mask_);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          *out = cell.value;
          Sequence(cell).store(pos + mask_ + 1 - (pos & mask_), std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // empty
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  // Faults the cells' pages in, writable (madvise MADV_POPULATE_WRITE, Linux 5.14+; the
  // contents are unchanged, so any thread may call it while the queue is in use): the flush
  // thread does it after init, so that NCCL's threads do not take the page faults. False where
  // the kernel refuses (the pages then fault on first use).
  bool Prefault() {
    const long size = sysconf(_SC_PAGESIZE);
    const uintptr_t page = size > 0 ? static_cast<uintptr_t>(size) : 4096;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(cells_) & ~(page - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(cells_ + capacity());
    return madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE) == 0;
  }

  size_t capacity() const { return mask_ + 1; }
  size_t memory_bytes() const { return sizeof(*this) + capacity() * sizeof(Cell); }

 private:
  struct Cell {
    size_t sequence;  // its sequence minus its index; atomic through Sequence()
    T value;
  };
  static std::atomic_ref<size_t> Sequence(Cell& c) { return std::atomic_ref<size_t>(c.sequence); }
  Cell* cells_ = nullptr;
  size_t mask_ = 0;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) std::atomic<size_t> head_{0};
};

// The free slot indices 0..capacity-1, handed out oldest-freed first (a FIFO over MpmcQueue).
// FIFO, not a stack: the slot the flush thread closed last is the one whose cache lines sit,
// modified, in the flush thread's core; a LIFO would hand exactly that slot to the next event on
// NCCL's thread. Pop and Push are lock-free and may be called from any thread.
class IndexFreeList {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // Room for `capacity` indices; 0..initial-1 free (default: all), the rest added by Push as
  // their slots are constructed (SlotPool::Grow).
  explicit IndexFreeList(uint32_t capacity, uint32_t initial = UINT32_MAX)
      : capacity_(capacity), free_(capacity) {
    for (uint32_t i = 0; i < capacity && i < initial; ++i) free_.TryPush(i);
  }

  // Returns a free index, or kNone when every index is in use.
  uint32_t Pop() {
    uint32_t index = kNone;
    return free_.TryPop(&index) ? index : kNone;
  }

  // Returns `index` (obtained from Pop) to the list. Never full: at most `capacity` indices exist.
  void Push(uint32_t index) { free_.TryPush(index); }

  uint32_t capacity() const { return capacity_; }
  size_t memory_bytes() const { return sizeof(*this) + free_.memory_bytes(); }

 private:
  const uint32_t capacity_;
  MpmcQueue<uint32_t> free_;
};

// The free slot indices 0..capacity-1, handed out most-recently-freed first (a Treiber stack
// of indices with a 32-bit tag against ABA in the same 64-bit word). For the pools whose slots
// one NCCL thread both takes and frees (ProxyOp and KernelCh slots: the proxy thread), so that
// the next event reuses the slot whose lines are still in that core's cache; a FIFO cycles the
// whole pool (10 MiB of ProxyOp slots at the defaults) through memory, a miss per event.
// Pop and Push are lock-free and may be called from any thread.
class IndexStack {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  // Room for `capacity` indices; 0..initial-1 free (default: all), the rest added by Push as
  // their slots are constructed (SlotPool::Grow).
  explicit IndexStack(uint32_t capacity, uint32_t initial = UINT32_MAX)
      : capacity_(capacity), next_(new std::atomic<uint32_t>[capacity]) {
    const uint32_t n = initial < capacity ? initial : capacity;
    for (uint32_t i = 0; i < n; ++i) {
      next_[i].store(i + 1 < n ? i + 1 : kNone, std::memory_order_relaxed);
    }
    head_.store(n > 0 ? 0 : kNone, std::memory_order_release);
  }

  // Returns a free index, or kNone when every index is in use.
  uint32_t Pop() {
    uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t index = static_cast<uint32_t>(head);
      if (index == kNone) return kNone;
      // Another thread may pop `index` and push it back meanwhile: the tag then differs and the
      // exchange fails, whatever `next` was read.
      const uint32_t next = next_[index].load(std::memory_order_relaxed);
      const uint64_t replaced = ((head >> 32) + 1) << 32 | next;
      if (head_.compare_exchange_weak(head, replaced, std::memory_order_acquire,
                                      std::memory_order_acquire)) {
        return index;
      }
    }
  }

  // Returns `index` (obtained from Pop) to the list.
  void Push(uint32_t index) {
    uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      next_[index].store(static_cast<uint32_t>(head), std::memory_order_relaxed);
      const uint64_t replaced = ((head >> 32) + 1) << 32 | index;
      if (head_.compare_exchange_weak(head, replaced, std::memory_order_release,
                                      std::memory_order_relaxed)) {
        return;
      }
    }
  }

  uint32_t capacity() const { return capacity_; }
  size_t memory_bytes() const { return sizeof(*this) + capacity_ * sizeof(std::atomic<uint32_t>); }

 private:
  const uint32_t capacity_;
  std::unique_ptr<std::atomic<uint32_t>[]> next_;
  alignas(64) std::atomic<uint64_t> head_{0};  // tag << 32 | top index (kNone: empty)
};

}  // namespace fabricscope::collectors::nccl
