#pragma once

// Turns completed CUPTI activity buffers into hand-off datagrams (collectors/gpu/wire.h) and
// sends them without blocking.

#include <cupti.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "collectors/cupti/activity.h"
#include "collectors/gpu/wire.h"

namespace fabricscope::collectors::cupti {

// Where finished datagrams go. In the injection library: the agent's ingest socket
// (gpu::ProducerChannel); in tests: memory.
class DatagramSink {
 public:
  virtual ~DatagramSink() = default;
  // Sends one datagram without blocking; false means it was not delivered (its records are
  // counted as dropped). Called with the batcher's lock held, on one thread at a time.
  virtual bool Send(const void* data, size_t size) = 0;
};

// The walker over an activity buffer: cuptiActivityGetNextRecord in the injection library.
// Passed in so that this library does not link libcupti.
using NextRecordFn = CUptiResult (*)(uint8_t* buffer, size_t valid_bytes, CUpti_Activity** record);

struct BatcherStats {
  uint64_t buffers = 0;          // buffers processed
  uint64_t kernels = 0;          // kernel records converted
  uint64_t memcpys = 0;          // memcpy records converted
  uint64_t unsupported = 0;      // records of other kinds, skipped
  uint64_t walk_errors = 0;      // buffers whose walk ended in an error other than the end
  uint64_t records_sent = 0;     // records in datagrams the sink accepted
  uint64_t channel_dropped = 0;  // records in datagrams the sink refused
  uint64_t cupti_dropped = 0;    // records CUPTI dropped (AddCuptiDropped)
  uint64_t datagrams_sent = 0;
  uint64_t datagrams_failed = 0;
  // What DatagramHeader::dropped_records_total carries: cupti_dropped + channel_dropped.
  uint64_t dropped_records_total() const { return cupti_dropped + channel_dropped; }
};

// Threading: every method takes one internal mutex, so ProcessBuffer may be called from CUPTI's
// worker thread and from threads that call cuptiActivityFlushAll at the same time. It runs on
// CUPTI's delivery path, never on a thread that launches kernels. Allocates only inside the
// demangler (its buffer grows to the longest name, then is reused). Large (a 64 KiB datagram
// buffer): allocate it on the heap.
class ActivityBatcher {
 public:
  ActivityBatcher(DatagramSink& sink, int32_t pid, NextRecordFn next_record);
  ActivityBatcher(const ActivityBatcher&) = delete;
  ActivityBatcher& operator=(const ActivityBatcher&) = delete;

  // Walks `valid_bytes` of `buffer` with next_record, converts kernel and memcpy records, and
  // sends them in datagrams of at most kMaxDatagramBytes (a full datagram is sent at once; the
  // rest when the buffer is done, so nothing waits in the batcher between calls). When the buffer
  // holds no records but drops were added since the last datagram, an empty datagram carries the
  // new dropped_records_total. Returns the records converted.
  size_t ProcessBuffer(uint8_t* buffer, size_t valid_bytes);

  // Adds records that CUPTI reports as dropped (cuptiActivityGetNumDroppedRecords); they reach
  // the agent in the next datagram's dropped_records_total.
  void AddCuptiDropped(uint64_t records);

  BatcherStats stats() const;

 private:
  void SendLocked();

  DatagramSink& sink_;
  const NextRecordFn next_record_;
  mutable std::mutex mu_;
  Demangler demangler_;                                        // guarded by mu_
  alignas(8) unsigned char datagram_[gpu::kMaxDatagramBytes];  // guarded by mu_
  gpu::DatagramWriter writer_;                                 // guarded by mu_
  uint64_t sequence_ = 0;                                      // guarded by mu_
  uint64_t dropped_reported_ = 0;  // guarded by mu_: total in the last datagram
  BatcherStats stats_;             // guarded by mu_
};

}  // namespace fabricscope::collectors::cupti
