#include "collectors/gpu/wire_decode.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace fabricscope::collectors::gpu {
namespace {

// Copies a payload of at least sizeof(T) bytes into a zeroed T (extra bytes are a newer
// producer's additions and are ignored) and terminates its char arrays.
template <typename T>
T Load(const uint8_t* payload) {
  T value;
  std::memcpy(&value, payload, sizeof(T));
  return value;
}

template <size_t N>
void Terminate(char (&s)[N]) {
  s[N - 1] = '\0';
}

// The struct a known record type carries (its payload may be longer: a newer producer's
// additions are ignored); 0 for an unknown type.
size_t StructSize(uint16_t type) {
  switch (static_cast<RecordType>(type)) {
    case RecordType::kComm:
      return sizeof(CommRecord);
    case RecordType::kCollective:
      return sizeof(CollectiveRecord);
    case RecordType::kProxyOp:
      return sizeof(ProxyOpRecord);
    case RecordType::kKernel:
      return sizeof(KernelRecord);
    case RecordType::kJob:
      return sizeof(JobRecord);
    case RecordType::kChannels:
      return sizeof(ChannelSpansRecord);
  }
  return 0;
}

// Hands a JobRecord of layout kJobRecordVersion to the visitor; false for another layout.
bool DeliverJob(const uint8_t* payload, RecordVisitor& visitor) {
  JobRecord r = Load<JobRecord>(payload);
  if (r.version != kJobRecordVersion) return false;
  Terminate(r.id);
  Terminate(r.name);
  Terminate(r.slurm_job_id);
  Terminate(r.slurm_sluid);
  Terminate(r.user);
  Terminate(r.step);
  Terminate(r.pod_namespace);
  Terminate(r.pod);
  Terminate(r.pod_uid);
  visitor.OnJob(r);
  return true;
}

}  // namespace

absl::Status DecodeDatagram(absl::Span<const uint8_t> datagram, RecordVisitor& visitor,
                            DecodeResult* result) {
  DecodeResult local;
  DecodeResult& out = result != nullptr ? *result : local;
  out = DecodeResult{};
  if (datagram.size() < sizeof(DatagramHeader)) {
    return absl::InvalidArgumentError(absl::StrCat("GPU datagram of ", datagram.size(),
                                                   " bytes is shorter than its 40-byte header"));
  }
  DatagramHeader header;
  std::memcpy(&header, datagram.data(), sizeof(header));
  if (header.magic != kWireMagic) {
    return absl::InvalidArgumentError(absl::StrCat("GPU datagram has magic 0x",
                                                   absl::Hex(header.magic), ", expected 0x",
                                                   absl::Hex(kWireMagic)));
  }
  if (header.version != kWireVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU datagram version ", header.version,
                     " is not supported (this agent reads version ", kWireVersion, ")"));
  }

  // First pass: validate the framing completely, so a bad datagram delivers nothing.
  size_t offset = sizeof(DatagramHeader);
  uint32_t seen = 0;
  while (offset < datagram.size()) {
    if (datagram.size() - offset < sizeof(RecordHeader)) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU datagram: truncated record header at byte ", offset));
    }
    RecordHeader rh;
    std::memcpy(&rh, datagram.data() + offset, sizeof(rh));
    offset += sizeof(rh);
    if (datagram.size() - offset < rh.size) {
      return absl::InvalidArgumentError(absl::StrCat("GPU datagram: record ", seen, " claims ",
                                                     rh.size, " bytes, only ",
                                                     datagram.size() - offset, " remain"));
    }
    const size_t need = StructSize(rh.type);
    if (rh.size < need) {
      return absl::InvalidArgumentError(absl::StrCat("GPU datagram: record ", seen, " of type ",
                                                     rh.type, " has ", rh.size, " bytes, expected ",
                                                     need));
    }
    offset += rh.size;
    ++seen;
  }
  if (seen != header.record_count) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU datagram: header says ", header.record_count, " records, found ", seen));
  }

  // Second pass: deliver.
  out.header = header;
  offset = sizeof(DatagramHeader);
  while (offset < datagram.size()) {
    RecordHeader rh;
    std::memcpy(&rh, datagram.data() + offset, sizeof(rh));
    const uint8_t* payload = datagram.data() + offset + sizeof(rh);
    offset += sizeof(rh) + rh.size;
    switch (static_cast<RecordType>(rh.type)) {
      case RecordType::kComm: {
        CommRecord r = Load<CommRecord>(payload);
        Terminate(r.name);
        visitor.OnComm(r);
        break;
      }
      case RecordType::kCollective: {
        CollectiveRecord r = Load<CollectiveRecord>(payload);
        Terminate(r.func);
        Terminate(r.datatype);
        Terminate(r.algo);
        Terminate(r.proto);
        visitor.OnCollective(r);
        break;
      }
      case RecordType::kProxyOp: {
        ProxyOpRecord r = Load<ProxyOpRecord>(payload);
        Terminate(r.func);
        visitor.OnProxyOp(r);
        break;
      }
      case RecordType::kKernel: {
        KernelRecord r = Load<KernelRecord>(payload);
        Terminate(r.name);
        visitor.OnKernel(r);
        break;
      }
      case RecordType::kChannels: {
        ChannelSpansRecord r = Load<ChannelSpansRecord>(payload);
        Terminate(r.func);
        // A count past the array is a lying producer: clamped, never read past the spans.
        r.count = std::min<uint8_t>(r.count, ChannelSpansRecord::kSpans);
        visitor.OnChannels(r);
        break;
      }
      case RecordType::kJob:
        if (!DeliverJob(payload, visitor)) {  // a newer layout: skipped like an unknown type
          ++out.unknown_records;
          continue;
        }
        break;
      default:
        ++out.unknown_records;
        continue;
    }
    ++out.records;
  }
  return absl::OkStatus();
}

}  // namespace fabricscope::collectors::gpu
