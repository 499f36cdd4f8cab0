#pragma once

// Validating decoder for the GPU hand-off datagrams of collectors/gpu/wire.h, used by the agent's
// ingest endpoint on bytes that come from other processes: nothing in a datagram is trusted.

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectors/common/utf8.h"
#include "collectors/gpu/wire.h"

namespace fabricscope::collectors::gpu {

// Receives the records of one datagram, in order. Called on the decoding thread only.
class RecordVisitor {
 public:
  virtual ~RecordVisitor() = default;
  virtual void OnComm(const CommRecord& record) = 0;
  virtual void OnCollective(const CollectiveRecord& record) = 0;
  virtual void OnProxyOp(const ProxyOpRecord& record) = 0;
  virtual void OnKernel(const KernelRecord& record) = 0;
  // The producer's claimed job (a record type added after the others: visitors that predate it
  // ignore it). Only layout kJobRecordVersion is delivered; others count as unknown records.
  virtual void OnJob(const JobRecord& record) { (void)record; }
  // Per-channel kernel spans (opt-in in the NCCL plugin; visitors that predate them ignore them).
  // count is at most ChannelSpansRecord::kSpans.
  virtual void OnChannels(const ChannelSpansRecord& record) { (void)record; }
};

struct DecodeResult {
  DatagramHeader header{};
  uint32_t records = 0;          // records delivered to the visitor
  uint32_t unknown_records = 0;  // records of a type this version does not know, skipped
};

// Decodes one datagram and hands each record to `visitor` (records are copied to aligned
// storage first; the fixed strings are forced to be NUL-terminated).
// Errors (nothing is delivered for a datagram that fails validation, so a malformed datagram
// counts as one drop): InvalidArgument for a datagram shorter than its header, a wrong magic, a
// record header or payload past the end, a known record type with a payload shorter than its
// struct, trailing bytes, or a record count that disagrees with the records present;
// FailedPrecondition for an unsupported version.
absl::Status DecodeDatagram(absl::Span<const uint8_t> datagram, RecordVisitor& visitor,
                            DecodeResult* result);

// Bytes of decoded strings replaced with U+FFFD because they were not valid UTF-8, since the
// process started (GpuIngestStats.repaired_string_bytes_total).
inline std::atomic<uint64_t>& RepairedStringBytes() {
  static std::atomic<uint64_t> bytes{0};
  return bytes;
}

// A fixed char array as a string, stopping at the first NUL or at N, made valid UTF-8: bytes
// that do not form a valid sequence become U+FFFD and are counted in RepairedStringBytes() (a
// producer may send anything; protobuf cannot serialize invalid UTF-8 in a string field).
template <size_t N>
std::string FixedString(const char (&s)[N]) {
  size_t n = 0;
  bool ascii = true;
  for (; n < N && s[n] != '\0'; ++n) ascii = ascii && static_cast<unsigned char>(s[n]) < 0x80;
  if (ascii) return std::string(s, n);
  size_t repaired = 0;
  std::string out = common::ValidUtf8(std::string_view(s, n), &repaired);
  RepairedStringBytes().fetch_add(repaired, std::memory_order_relaxed);
  return out;
}

}  // namespace fabricscope::collectors::gpu
