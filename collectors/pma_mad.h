#pragma once

// Encoding and decoding of InfiniBand Performance Management (PerfMgt) MADs: the Get requests
// and GetResp answers of ClassPortInfo, PortCounters and PortCountersExtended. Pure functions
// on byte buffers, no I/O; safe on any thread. Nothing here allocates on success (an error
// Status carries a message and does allocate).
//
// Layouts are from the IBTA InfiniBand Architecture Specification volume 1:
//   13.4      MADs: 256 bytes; the 24-byte common header (BaseVersion, MgmtClass, ClassVersion,
//             R|Method, Status, ClassSpecific, TransactionID, AttributeID, reserved,
//             AttributeModifier); management class and method values; common status bits;
//             ClassPortInfo (13.4.8.1)
//   16.1.1    PerfMgt MAD format: common header, 40 reserved bytes, 192 bytes of attribute data
//   16.1.2    PerfMgt attributes and the PerfMgt ClassPortInfo.CapabilityMask bits
//   16.1.3.5  PortCounters (attribute 0x0012)
//   16.1.4.11 PortCountersExtended (attribute 0x001D)
// Every offset below was checked field by field against the Linux kernel's include/rdma/ib_mad.h
// (struct ib_mad_hdr, IB_MGMT_* values) and include/rdma/ib_pma.h (struct ib_pma_mad,
// struct ib_pma_portcounters, struct ib_pma_portcounters_ext, IB_PMA_CLASS_CAP_*), which mirror
// the spec tables. Multi-byte fields are big-endian (network order).

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace fabricscope::collectors {

// Size of a MAD, bytes (IBTA vol. 1 13.4: every MAD that is not RMPP-segmented is 256 bytes).
inline constexpr size_t kMadSize = 256;
// Size of the common MAD header, bytes (13.4).
inline constexpr size_t kMadHeaderSize = 24;
// Offset of the PerfMgt attribute data in the MAD, bytes: 24-byte header + 40 reserved (16.1.1).
inline constexpr size_t kPerfMgtDataOffset = 64;
// Size of the PerfMgt attribute data, bytes (16.1.1).
inline constexpr size_t kPerfMgtDataSize = kMadSize - kPerfMgtDataOffset;

// Common header field values.
inline constexpr uint8_t kMadBaseVersion = 1;       // 13.4 BaseVersion of IBA MADs
inline constexpr uint8_t kMgmtClassPerfMgt = 0x04;  // 13.4 management class values
inline constexpr uint8_t kPerfMgtClassVersion = 1;  // 16.1.1 PerfMgt ClassVersion
inline constexpr uint8_t kMadMethodGet = 0x01;      // 13.4 methods: Get
inline constexpr uint8_t kMadMethodGetResp = 0x81;  // 13.4 methods: GetResp (R bit 0x80 | Get)

// PerfMgt attribute IDs (16.1.2; IB_PMA_* in include/rdma/ib_pma.h).
inline constexpr uint16_t kPmaAttrClassPortInfo = 0x0001;
inline constexpr uint16_t kPmaAttrPortCounters = 0x0012;
inline constexpr uint16_t kPmaAttrPortCountersExtended = 0x001D;

// PerfMgt ClassPortInfo.CapabilityMask bits (16.1.2; same values as IB_PMA_CLASS_CAP_* in the
// kernel's include/rdma/ib_pma.h).
inline constexpr uint16_t kPmaCapAllPortSelect = 1u << 8;
// PortCountersExtended with all eight 64-bit counters.
inline constexpr uint16_t kPmaCapExtendedWidth = 1u << 9;
// PortCountersExtended with only the four data/packet counters: the unicast/multicast fields are
// reserved ("NoIETF").
inline constexpr uint16_t kPmaCapExtendedWidthNoIetf = 1u << 10;
// PortCounters.PortXmitWait is implemented.
inline constexpr uint16_t kPmaCapXmitWait = 1u << 12;

// MAD status bits (13.4 common status field; IB_MGMT_MAD_STATUS_* in
// include/rdma/ib_mad.h): bit 0 busy, bit 1 redirect required, bits 2-4 an invalid-field code,
// bits 8-15 class-specific.
inline constexpr uint16_t kMadStatusBusy = 0x0001;
inline constexpr uint16_t kMadStatusRedirect = 0x0002;
inline constexpr uint16_t kMadStatusInvalidFieldMask = 0x001C;
inline constexpr int kMadStatusInvalidFieldShift = 2;

// The kernel's ib_umad driver overwrites the upper 32 bits of a request's TransactionID with
// its agent's hi_tid (drivers/infiniband/core/user_mad.c, ib_umad_write), so only the lower
// 32 bits identify a request in its response. Decoders compare TIDs under this mask.
inline constexpr uint64_t kTidMatchMask = 0xFFFF'FFFFull;

// The 24-byte common MAD header (13.4), host order.
struct MadHeader {
  uint8_t base_version = 0;
  uint8_t mgmt_class = 0;
  uint8_t class_version = 0;
  uint8_t method = 0;   // R bit (0x80) included
  uint16_t status = 0;  // kMadStatus* bits
  uint16_t class_specific = 0;
  uint64_t transaction_id = 0;
  uint16_t attribute_id = 0;
  uint32_t attribute_modifier = 0;
};

// PerfMgt ClassPortInfo (13.4.8.1), the fields this agent uses.
struct PerfMgtClassPortInfo {
  uint8_t base_version = 0;
  uint8_t class_version = 0;
  uint16_t capability_mask = 0;   // kPmaCap* bits
  uint32_t capability_mask2 = 0;  // 27 bits
  // Expected response time: 4.096 us x 2^resp_time_value. 5 bits.
  uint8_t resp_time_value = 0;
};

// PortCounters (16.1.3.5). Every counter saturates: it stops at all ones and does not wrap.
struct PortCountersSample {
  uint8_t port_select = 0;
  uint16_t symbol_error = 0;                     // 16 bits
  uint8_t link_error_recovery = 0;               // 8 bits
  uint8_t link_downed = 0;                       // 8 bits
  uint16_t port_rcv_errors = 0;                  // 16 bits
  uint16_t port_rcv_remote_physical_errors = 0;  // 16 bits
  uint16_t port_rcv_switch_relay_errors = 0;     // 16 bits
  uint16_t port_xmit_discards = 0;               // 16 bits
  uint8_t port_xmit_constraint_errors = 0;       // 8 bits
  uint8_t port_rcv_constraint_errors = 0;        // 8 bits
  uint8_t local_link_integrity_errors = 0;       // 4 bits (0..15)
  uint8_t excessive_buffer_overrun_errors = 0;   // 4 bits (0..15)
  uint16_t vl15_dropped = 0;                     // 16 bits
  uint32_t port_xmit_data = 0;                   // 4-octet words
  uint32_t port_rcv_data = 0;                    // 4-octet words
  uint32_t port_xmit_packets = 0;                // packets
  uint32_t port_rcv_packets = 0;                 // packets
  uint32_t port_xmit_wait = 0;  // ticks with data to send and no credit; kPmaCapXmitWait
};

// PortCountersExtended (16.1.4.11). 64-bit counters. The unicast/multicast counters are
// reserved (read 0) when the PMA advertises only kPmaCapExtendedWidthNoIetf.
struct PortCountersExtendedSample {
  uint8_t port_select = 0;
  uint64_t port_xmit_data = 0;  // 4-octet words
  uint64_t port_rcv_data = 0;   // 4-octet words
  uint64_t port_xmit_packets = 0;
  uint64_t port_rcv_packets = 0;
  uint64_t port_unicast_xmit_packets = 0;
  uint64_t port_unicast_rcv_packets = 0;
  uint64_t port_multicast_xmit_packets = 0;
  uint64_t port_multicast_rcv_packets = 0;
};

// Writes a 256-byte PerfMgt Get request into out[0..256): BaseVersion 1, class PerfMgt, class
// version 1, method Get, status 0, the given TransactionID and AttributeID, AttributeModifier 0,
// 40 reserved zero bytes, and attribute data that is zero except PortSelect (attribute byte 1,
// i.e. MAD byte 65) for every attribute but ClassPortInfo, whose byte 1 is ClassVersion and has
// no PortSelect. Bytes past 256 in `out` are not touched.
// Errors: InvalidArgument when out is shorter than kMadSize.
absl::Status EncodePerfMgtGet(uint16_t attribute_id, uint8_t port_select, uint64_t tid,
                              absl::Span<uint8_t> out);

// The same, returned by value.
std::array<uint8_t, kMadSize> BuildPerfMgtGet(uint16_t attribute_id, uint8_t port_select,
                                              uint64_t tid);

// Reads the common header of `mad`. Errors: InvalidArgument when mad is shorter than 24 bytes.
absl::StatusOr<MadHeader> DecodeMadHeader(absl::Span<const uint8_t> mad);

// Checks that `mad` is the PerfMgt GetResp to the Get of `attribute_id` with TransactionID
// `expected_tid` (lower 32 bits, kTidMatchMask) and that its status is 0.
// Errors:
//   InvalidArgument  mad shorter than kMadSize; BaseVersion, class, class version, method or
//                    attribute ID other than expected; TID mismatch.
//   Unavailable      status busy (the PMA asks to retry later).
//   Unimplemented    status redirect required (not followed here), or invalid-field code 2/3:
//                    the PMA does not support this method/attribute (e.g. no
//                    PortCountersExtended).
//   FailedPrecondition  invalid-field code 1: class version not supported.
//   OutOfRange       invalid-field code 7: an attribute field has a bad value (PortSelect names
//                    no port).
//   Unknown          any other non-zero status (reserved or class-specific bits).
absl::Status CheckPerfMgtResponse(absl::Span<const uint8_t> mad, uint16_t attribute_id,
                                  uint64_t expected_tid);

// Decode a GetResp of the named attribute after CheckPerfMgtResponse (same errors).
absl::StatusOr<PerfMgtClassPortInfo> DecodeClassPortInfoResponse(absl::Span<const uint8_t> mad,
                                                                 uint64_t expected_tid);
absl::StatusOr<PortCountersSample> DecodePortCountersResponse(absl::Span<const uint8_t> mad,
                                                              uint64_t expected_tid);
absl::StatusOr<PortCountersExtendedSample> DecodePortCountersExtendedResponse(
    absl::Span<const uint8_t> mad, uint64_t expected_tid);

}  // namespace fabricscope::collectors
