#include "collectors/pma_mad.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fabricscope::collectors {
namespace {

// Common MAD header byte offsets (IBTA vol. 1 13.4; struct ib_mad_hdr).
constexpr size_t kHdrBaseVersion = 0;
constexpr size_t kHdrMgmtClass = 1;
constexpr size_t kHdrClassVersion = 2;
constexpr size_t kHdrMethod = 3;  // R bit 7, Method bits 6..0
constexpr size_t kHdrStatus = 4;  // 16 bits
constexpr size_t kHdrClassSpecific = 6;
constexpr size_t kHdrTransactionId = 8;  // 64 bits
constexpr size_t kHdrAttributeId = 16;   // 16 bits, then 16 reserved bits at 18
constexpr size_t kHdrAttributeModifier = 20;

// Byte offsets inside the PerfMgt attribute data, which starts at MAD byte 64 (16.1.1).
//
// ClassPortInfo (13.4.8.1; struct ib_class_port_info).
constexpr size_t kCpiBaseVersion = 0;
constexpr size_t kCpiClassVersion = 1;
constexpr size_t kCpiCapabilityMask = 2;    // 16 bits
constexpr size_t kCpiCapMask2RespTime = 4;  // CapabilityMask2 bits 31..5, RespTimeValue 4..0
// PortSelect, common to PortCounters and PortCountersExtended (byte 0 is reserved).
constexpr size_t kPortSelect = 1;
// PortCounters (16.1.3.5; struct ib_pma_portcounters). Bytes 2-3 CounterSelect (Set only).
constexpr size_t kPcSymbolError = 4;               // 16
constexpr size_t kPcLinkErrorRecovery = 6;         // 8
constexpr size_t kPcLinkDowned = 7;                // 8
constexpr size_t kPcRcvErrors = 8;                 // 16
constexpr size_t kPcRcvRemotePhysicalErrors = 10;  // 16
constexpr size_t kPcRcvSwitchRelayErrors = 12;     // 16
constexpr size_t kPcXmitDiscards = 14;             // 16
constexpr size_t kPcXmitConstraintErrors = 16;     // 8
constexpr size_t kPcRcvConstraintErrors = 17;      // 8
// Byte 18: CounterSelect2 (Set only; reserved before release 1.2.1).
constexpr size_t kPcLinkIntegrityAndOverrun = 19;  // LocalLinkIntegrity 7..4, ExcessiveBufOvr 3..0
// Bytes 20-21 reserved.
constexpr size_t kPcVl15Dropped = 22;  // 16
constexpr size_t kPcXmitData = 24;     // 32
constexpr size_t kPcRcvData = 28;      // 32
constexpr size_t kPcXmitPackets = 32;  // 32
constexpr size_t kPcRcvPackets = 36;   // 32
constexpr size_t kPcXmitWait = 40;     // 32
// PortCountersExtended (16.1.4.11; struct ib_pma_portcounters_ext). Bytes 2-3 CounterSelect,
// 4-7 reserved, then eight 64-bit counters.
constexpr size_t kPceXmitData = 8;
constexpr size_t kPceRcvData = 16;
constexpr size_t kPceXmitPackets = 24;
constexpr size_t kPceRcvPackets = 32;
constexpr size_t kPceUnicastXmitPackets = 40;
constexpr size_t kPceUnicastRcvPackets = 48;
constexpr size_t kPceMulticastXmitPackets = 56;
constexpr size_t kPceMulticastRcvPackets = 64;

static_assert(kPcXmitWait + 4 <= kPerfMgtDataSize, "PortCounters fits the PerfMgt data");
static_assert(kPceMulticastRcvPackets + 8 <= kPerfMgtDataSize,
              "PortCountersExtended fits the PerfMgt data");
static_assert(kPerfMgtDataOffset == kMadHeaderSize + 40, "16.1.1: 40 reserved bytes");

uint16_t LoadBe16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

uint32_t LoadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

uint64_t LoadBe64(const uint8_t* p) { return (uint64_t{LoadBe32(p)} << 32) | LoadBe32(p + 4); }

void StoreBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

void StoreBe32(uint8_t* p, uint32_t v) {
  StoreBe16(p, static_cast<uint16_t>(v >> 16));
  StoreBe16(p + 2, static_cast<uint16_t>(v));
}

void StoreBe64(uint8_t* p, uint64_t v) {
  StoreBe32(p, static_cast<uint32_t>(v >> 32));
  StoreBe32(p + 4, static_cast<uint32_t>(v));
}

const char* AttributeName(uint16_t id) {
  switch (id) {
    case kPmaAttrClassPortInfo:
      return "ClassPortInfo";
    case kPmaAttrPortCounters:
      return "PortCounters";
    case kPmaAttrPortCountersExtended:
      return "PortCountersExtended";
    default:
      return "attribute";
  }
}

// Maps a non-zero MAD status to a Status (13.4 common status bits).
absl::Status StatusFromMadStatus(uint16_t status, uint16_t attribute_id) {
  const char* attr = AttributeName(attribute_id);
  if (status & kMadStatusBusy) {
    return absl::UnavailableError(
        absl::StrFormat("PMA answered %s with status 0x%04x: busy, retry later", attr, status));
  }
  if (status & kMadStatusRedirect) {
    return absl::UnimplementedError(absl::StrFormat(
        "PMA answered %s with status 0x%04x: redirect required (not followed)", attr, status));
  }
  const int code = (status & kMadStatusInvalidFieldMask) >> kMadStatusInvalidFieldShift;
  switch (code) {
    case 1:
      return absl::FailedPreconditionError(absl::StrFormat(
          "PMA answered %s with status 0x%04x: class version not supported", attr, status));
    case 2:
      return absl::UnimplementedError(absl::StrFormat(
          "PMA answered %s with status 0x%04x: method not supported", attr, status));
    case 3:
      return absl::UnimplementedError(absl::StrFormat(
          "PMA answered %s with status 0x%04x: method/attribute combination not supported", attr,
          status));
    case 7:
      return absl::OutOfRangeError(absl::StrFormat(
          "PMA answered %s with status 0x%04x: an attribute field (PortSelect?) has a bad value",
          attr, status));
    default:
      return absl::UnknownError(
          absl::StrFormat("PMA answered %s with status 0x%04x", attr, status));
  }
}

}  // namespace

absl::Status EncodePerfMgtGet(uint16_t attribute_id, uint8_t port_select, uint64_t tid,
                              absl::Span<uint8_t> out) {
  if (out.size() < kMadSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("MAD buffer is ", out.size(), " bytes, a MAD is ", kMadSize));
  }
  uint8_t* m = out.data();
  std::memset(m, 0, kMadSize);
  m[kHdrBaseVersion] = kMadBaseVersion;
  m[kHdrMgmtClass] = kMgmtClassPerfMgt;
  m[kHdrClassVersion] = kPerfMgtClassVersion;
  m[kHdrMethod] = kMadMethodGet;
  // Status, ClassSpecific, reserved and AttributeModifier stay 0.
  StoreBe64(m + kHdrTransactionId, tid);
  StoreBe16(m + kHdrAttributeId, attribute_id);
  if (attribute_id != kPmaAttrClassPortInfo) {
    m[kPerfMgtDataOffset + kPortSelect] = port_select;
  }
  return absl::OkStatus();
}

std::array<uint8_t, kMadSize> BuildPerfMgtGet(uint16_t attribute_id, uint8_t port_select,
                                              uint64_t tid) {
  std::array<uint8_t, kMadSize> mad;
  // Cannot fail: the array is exactly kMadSize.
  EncodePerfMgtGet(attribute_id, port_select, tid, absl::MakeSpan(mad)).IgnoreError();
  return mad;
}

absl::StatusOr<MadHeader> DecodeMadHeader(absl::Span<const uint8_t> mad) {
  if (mad.size() < kMadHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MAD is ", mad.size(), " bytes, shorter than its ", kMadHeaderSize, "-byte header"));
  }
  const uint8_t* m = mad.data();
  MadHeader h;
  h.base_version = m[kHdrBaseVersion];
  h.mgmt_class = m[kHdrMgmtClass];
  h.class_version = m[kHdrClassVersion];
  h.method = m[kHdrMethod];
  h.status = LoadBe16(m + kHdrStatus);
  h.class_specific = LoadBe16(m + kHdrClassSpecific);
  h.transaction_id = LoadBe64(m + kHdrTransactionId);
  h.attribute_id = LoadBe16(m + kHdrAttributeId);
  h.attribute_modifier = LoadBe32(m + kHdrAttributeModifier);
  return h;
}

absl::Status CheckPerfMgtResponse(absl::Span<const uint8_t> mad, uint16_t attribute_id,
                                  uint64_t expected_tid) {
  if (mad.size() < kMadSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("PerfMgt response is ", mad.size(), " bytes, a MAD is ", kMadSize));
  }
  const absl::StatusOr<MadHeader> h = DecodeMadHeader(mad);
  if (!h.ok()) return h.status();
  if (h->base_version != kMadBaseVersion || h->mgmt_class != kMgmtClassPerfMgt ||
      h->class_version != kPerfMgtClassVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "not a PerfMgt MAD: base version %u, class 0x%02x, class version %u (want 1, 0x04, 1)",
        h->base_version, h->mgmt_class, h->class_version));
  }
  if (h->method != kMadMethodGetResp) {
    return absl::InvalidArgumentError(
        absl::StrFormat("method 0x%02x is not GetResp (0x81)", h->method));
  }
  if (h->attribute_id != attribute_id) {
    return absl::InvalidArgumentError(
        absl::StrFormat("response is for attribute 0x%04x, the request was for %s (0x%04x)",
                        h->attribute_id, AttributeName(attribute_id), attribute_id));
  }
  if ((h->transaction_id & kTidMatchMask) != (expected_tid & kTidMatchMask)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("transaction ID 0x%016x does not match the request's 0x%08x (low 32 bits)",
                        h->transaction_id, expected_tid & kTidMatchMask));
  }
  if (h->status != 0) return StatusFromMadStatus(h->status, attribute_id);
  return absl::OkStatus();
}

absl::StatusOr<PerfMgtClassPortInfo> DecodeClassPortInfoResponse(absl::Span<const uint8_t> mad,
                                                                 uint64_t expected_tid) {
  if (absl::Status s = CheckPerfMgtResponse(mad, kPmaAttrClassPortInfo, expected_tid); !s.ok()) {
    return s;
  }
  const uint8_t* d = mad.data() + kPerfMgtDataOffset;
  PerfMgtClassPortInfo c;
  c.base_version = d[kCpiBaseVersion];
  c.class_version = d[kCpiClassVersion];
  c.capability_mask = LoadBe16(d + kCpiCapabilityMask);
  const uint32_t cm2_rt = LoadBe32(d + kCpiCapMask2RespTime);
  c.capability_mask2 = cm2_rt >> 5;
  c.resp_time_value = static_cast<uint8_t>(cm2_rt & 0x1F);
  return c;
}

absl::StatusOr<PortCountersSample> DecodePortCountersResponse(absl::Span<const uint8_t> mad,
                                                              uint64_t expected_tid) {
  if (absl::Status s = CheckPerfMgtResponse(mad, kPmaAttrPortCounters, expected_tid); !s.ok()) {
    return s;
  }
  const uint8_t* d = mad.data() + kPerfMgtDataOffset;
  PortCountersSample c;
  c.port_select = d[kPortSelect];
  c.symbol_error = LoadBe16(d + kPcSymbolError);
  c.link_error_recovery = d[kPcLinkErrorRecovery];
  c.link_downed = d[kPcLinkDowned];
  c.port_rcv_errors = LoadBe16(d + kPcRcvErrors);
  c.port_rcv_remote_physical_errors = LoadBe16(d + kPcRcvRemotePhysicalErrors);
  c.port_rcv_switch_relay_errors = LoadBe16(d + kPcRcvSwitchRelayErrors);
  c.port_xmit_discards = LoadBe16(d + kPcXmitDiscards);
  c.port_xmit_constraint_errors = d[kPcXmitConstraintErrors];
  c.port_rcv_constraint_errors = d[kPcRcvConstraintErrors];
  c.local_link_integrity_errors = static_cast<uint8_t>(d[kPcLinkIntegrityAndOverrun] >> 4);
  c.excessive_buffer_overrun_errors = static_cast<uint8_t>(d[kPcLinkIntegrityAndOverrun] & 0x0F);
  c.vl15_dropped = LoadBe16(d + kPcVl15Dropped);
  c.port_xmit_data = LoadBe32(d + kPcXmitData);
  c.port_rcv_data = LoadBe32(d + kPcRcvData);
  c.port_xmit_packets = LoadBe32(d + kPcXmitPackets);
  c.port_rcv_packets = LoadBe32(d + kPcRcvPackets);
  c.port_xmit_wait = LoadBe32(d + kPcXmitWait);
  return c;
}

absl::StatusOr<PortCountersExtendedSample> DecodePortCountersExtendedResponse(
    absl::Span<const uint8_t> mad, uint64_t expected_tid) {
  if (absl::Status s = CheckPerfMgtResponse(mad, kPmaAttrPortCountersExtended, expected_tid);
      !s.ok()) {
    return s;
  }
  const uint8_t* d = mad.data() + kPerfMgtDataOffset;
  PortCountersExtendedSample c;
  c.port_select = d[kPortSelect];
  c.port_xmit_data = LoadBe64(d + kPceXmitData);
  c.port_rcv_data = LoadBe64(d + kPceRcvData);
  c.port_xmit_packets = LoadBe64(d + kPceXmitPackets);
  c.port_rcv_packets = LoadBe64(d + kPceRcvPackets);
  c.port_unicast_xmit_packets = LoadBe64(d + kPceUnicastXmitPackets);
  c.port_unicast_rcv_packets = LoadBe64(d + kPceUnicastRcvPackets);
  c.port_multicast_xmit_packets = LoadBe64(d + kPceMulticastXmitPackets);
  c.port_multicast_rcv_packets = LoadBe64(d + kPceMulticastRcvPackets);
  return c;
}

}  // namespace fabricscope::collectors
