#include "collectors/cupti/batcher.h"

#include <time.h>

namespace fabricscope::collectors::cupti {
namespace {

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

ActivityBatcher::ActivityBatcher(DatagramSink& sink, int32_t pid, NextRecordFn next_record)
    : sink_(sink),
      next_record_(next_record),
      writer_(datagram_, sizeof(datagram_), gpu::Source::kCupti, pid) {}

size_t ActivityBatcher::ProcessBuffer(uint8_t* buffer, size_t valid_bytes) {
  std::lock_guard lock(mu_);
  ++stats_.buffers;
  size_t converted = 0;
  if (buffer != nullptr && valid_bytes > 0) {
    CUpti_Activity* record = nullptr;
    while (true) {
      const CUptiResult status = next_record_(buffer, valid_bytes, &record);
      if (status == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
      if (status != CUPTI_SUCCESS || record == nullptr) {
        ++stats_.walk_errors;  // CUPTI_ERROR_INVALID_KIND: an incomplete record; stop here
        break;
      }
      gpu::KernelRecord out;
      switch (ConvertActivity(*record, demangler_, &out)) {
        case ConvertResult::kKernel:
          ++stats_.kernels;
          break;
        case ConvertResult::kMemcpy:
          ++stats_.memcpys;
          break;
        case ConvertResult::kUnsupported:
          ++stats_.unsupported;
          continue;
      }
      ++converted;
      if (!writer_.Append(out)) {
        SendLocked();
        writer_.Append(out);  // always fits in an empty datagram
      }
    }
  }
  if (!writer_.empty() || stats_.dropped_records_total() != dropped_reported_) SendLocked();
  return converted;
}

void ActivityBatcher::AddCuptiDropped(uint64_t records) {
  std::lock_guard lock(mu_);
  stats_.cupti_dropped += records;
}

BatcherStats ActivityBatcher::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void ActivityBatcher::SendLocked() {
  const uint32_t records = writer_.record_count();
  // The datagram reports the drops known before it; if it fails itself, the next one reports its
  // records too (dropped_records_total is cumulative).
  const uint64_t dropped = stats_.dropped_records_total();
  const size_t size = writer_.Finish(++sequence_, dropped, MonotonicNs());
  if (sink_.Send(datagram_, size)) {
    ++stats_.datagrams_sent;
    stats_.records_sent += records;
    dropped_reported_ = dropped;
  } else {
    ++stats_.datagrams_failed;
    stats_.channel_dropped += records;
  }
  writer_.Reset();
}

}  // namespace fabricscope::collectors::cupti
