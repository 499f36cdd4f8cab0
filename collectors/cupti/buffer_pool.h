#pragma once

// The fixed pool of CUPTI activity buffers. CUPTI asks for buffers through the
// buffer-requested callback (cuptiActivityRegisterCallbacks) and hands them back full through
// buffer-completed; the injection library serves every request from this pool and never
// allocates past it. When all buffers are in flight the request is declined (CUPTI then drops
// records and counts them, cuptiActivityGetNumDroppedRecords), and the refusal is counted here.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace fabricscope::collectors::cupti {

// Threading: Acquire() and Release() are lock-free (one atomic bitmap word) and may be called
// from any thread concurrently: CUPTI requests buffers on application threads that launch work
// and on its own worker thread. No allocation or system call after Create().
class BufferPool {
 public:
  // At most this many buffers: one bit each in a 64-bit word.
  static constexpr size_t kMaxBuffers = 64;
  // CUPTI requires activity buffers aligned to ACTIVITY_RECORD_ALIGNMENT (8 bytes) in its
  // samples; buffers here are aligned to 64 (a cache line), which satisfies it.
  static constexpr size_t kAlignment = 64;

  // Allocates `count` buffers of `buffer_bytes` each, in one block. Returns nullptr when count
  // is 0 or above kMaxBuffers, when buffer_bytes is below 1 KiB or not a multiple of kAlignment,
  // or when the allocation fails.
  static std::unique_ptr<BufferPool> Create(size_t count, size_t buffer_bytes);

  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A free buffer of buffer_bytes(), or nullptr when all are in use (counted in exhausted()).
  uint8_t* Acquire();

  // Returns a buffer obtained from Acquire(). Returns false (and counts it in
  // invalid_releases()) for a pointer that is not the start of one of this pool's buffers or a
  // buffer that is not in use; the pool is unchanged then.
  bool Release(const uint8_t* buffer);

  size_t count() const { return count_; }
  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t total_bytes() const { return count_ * buffer_bytes_; }
  size_t in_use() const;
  uint64_t exhausted() const { return exhausted_.load(std::memory_order_relaxed); }
  uint64_t invalid_releases() const { return invalid_releases_.load(std::memory_order_relaxed); }

 private:
  BufferPool(uint8_t* memory, size_t count, size_t buffer_bytes);

  uint8_t* const memory_;  // owned: count_ * buffer_bytes_ bytes, kAlignment-aligned
  const size_t count_;
  const size_t buffer_bytes_;
  std::atomic<uint64_t> used_{0};  // bit i set = buffer i is handed out
  std::atomic<uint64_t> exhausted_{0};
  std::atomic<uint64_t> invalid_releases_{0};
};

}  // namespace fabricscope::collectors::cupti
