#pragma once

// Storage of a pool of the NCCL profiler plugin's slots (collectors/nccl/slots.h): address
// space for all of them reserved at once (an anonymous mapping: no page is touched), and the
// slots constructed chunk by chunk, the first chunk at init and the rest by the flush thread
// (Plugin::GrowPools), so that init costs what the first collectives use and not the whole
// 21 MiB (issue 38: init <= 10 ms). Slots below constructed() stay valid for the pool's life;
// NCCL's threads only ever see indices the free lists handed out, all below it.

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace fabricscope::collectors::nccl {

template <typename T>
class SlotPool {
 public:
  // Reserves `capacity` slots and constructs the first `initial`. Throws std::bad_alloc when
  // the address space cannot be reserved (init then fails: NCCL goes on without the profiler).
  SlotPool(uint32_t capacity, uint32_t initial) : capacity_(capacity) {
    bytes_ = std::max<size_t>(1, static_cast<size_t>(capacity) * sizeof(T));
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<T*>(p);
    Grow(initial);
  }
  ~SlotPool() {
    const uint32_t n = constructed_.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i) data_[i].~T();
    munmap(data_, bytes_);
  }
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  T& operator[](uint32_t i) { return data_[i]; }
  const T& operator[](uint32_t i) const { return data_[i]; }
  uint32_t capacity() const { return capacity_; }
  // Slots constructed so far (acquire: their construction is visible to the caller).
  uint32_t constructed() const { return constructed_.load(std::memory_order_acquire); }

  // Constructs up to `n` more slots (one thread at a time: init, then the flush thread) and
  // returns the new range [first, last), empty once the pool is complete.
  std::pair<uint32_t, uint32_t> Grow(uint32_t n) {
    const uint32_t first = constructed_.load(std::memory_order_relaxed);
    const uint32_t last = static_cast<uint32_t>(std::min<uint64_t>(capacity_, uint64_t{first} + n));
    for (uint32_t i = first; i < last; ++i) new (&data_[i]) T();
    constructed_.store(last, std::memory_order_release);
    return {first, last};
  }

 private:
  const uint32_t capacity_;
  size_t bytes_ = 0;
  T* data_ = nullptr;
  std::atomic<uint32_t> constructed_{0};
};

}  // namespace fabricscope::collectors::nccl
