#include "collectors/pma_mad.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "collectors/umad_perfquery.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::collectors {
namespace {

// The tests write every field at its MAD byte offset as spelled out in the spec tables (IBTA
// vol. 1 13.4 common header; 16.1.1 PerfMgt format: attribute data at MAD byte 64; 16.1.3.5
// PortCounters; 16.1.4.11 PortCountersExtended), independently of pma_mad.cc's constants.
// Values differ per field, so a swapped or shifted offset fails.
using Mad = std::array<uint8_t, 256>;

void Put16(Mad& m, size_t at, uint16_t v) {
  m[at] = static_cast<uint8_t>(v >> 8);
  m[at + 1] = static_cast<uint8_t>(v);
}
void Put32(Mad& m, size_t at, uint32_t v) {
  Put16(m, at, static_cast<uint16_t>(v >> 16));
  Put16(m, at + 2, static_cast<uint16_t>(v));
}
void Put64(Mad& m, size_t at, uint64_t v) {
  Put32(m, at, static_cast<uint32_t>(v >> 32));
  Put32(m, at + 4, static_cast<uint32_t>(v));
}

constexpr uint64_t kTid = 0x0000'0000'8badf00dull;

// A GetResp header: base version 1 (byte 0), class 0x04 (byte 1), class version 1 (byte 2),
// method 0x81 (byte 3), status (bytes 4-5), TID (bytes 8-15), attribute ID (bytes 16-17).
Mad Response(uint16_t attribute_id, uint64_t tid = kTid, uint16_t status = 0) {
  Mad m{};
  m[0] = 1;
  m[1] = 0x04;
  m[2] = 1;
  m[3] = 0x81;
  Put16(m, 4, status);
  Put64(m, 8, tid);
  Put16(m, 16, attribute_id);
  return m;
}

absl::Span<const uint8_t> S(const Mad& m) { return absl::MakeConstSpan(m); }

// ----- Request encoding -----

TEST(PmaMadTest, GetRequestHeaderMatchesTheSpecByteForByte) {
  const Mad m = BuildPerfMgtGet(0x0012, 7, 0x0102030405060708ull);
  EXPECT_EQ(m[0], 0x01);  // BaseVersion
  EXPECT_EQ(m[1], 0x04);  // MgmtClass PerfMgt
  EXPECT_EQ(m[2], 0x01);  // ClassVersion
  EXPECT_EQ(m[3], 0x01);  // R = 0, Method Get
  EXPECT_EQ(m[4], 0x00);  // Status
  EXPECT_EQ(m[5], 0x00);
  EXPECT_EQ(m[6], 0x00);  // ClassSpecific
  EXPECT_EQ(m[7], 0x00);
  const uint8_t tid[8] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};  // big-endian
  for (int i = 0; i < 8; ++i) EXPECT_EQ(m[8 + i], tid[i]) << "TID byte " << i;
  EXPECT_EQ(m[16], 0x00);  // AttributeID 0x0012
  EXPECT_EQ(m[17], 0x12);
  EXPECT_EQ(m[18], 0x00);  // Reserved
  EXPECT_EQ(m[19], 0x00);
  for (int i = 20; i < 24; ++i) EXPECT_EQ(m[i], 0x00) << "AttributeModifier byte " << i;
  for (int i = 24; i < 64; ++i) EXPECT_EQ(m[i], 0x00) << "PerfMgt reserved byte " << i;
  EXPECT_EQ(m[64], 0x00);  // attribute byte 0: reserved
  EXPECT_EQ(m[65], 7);     // attribute byte 1: PortSelect
  for (int i = 66; i < 256; ++i) EXPECT_EQ(m[i], 0x00) << "attribute byte " << i - 64;
}

TEST(PmaMadTest, ExtendedRequestCarriesItsAttributeIdAndPortSelect) {
  const Mad m = BuildPerfMgtGet(0x001D, 0xFE, 1);
  EXPECT_EQ(m[16], 0x00);
  EXPECT_EQ(m[17], 0x1D);
  EXPECT_EQ(m[65], 0xFE);
  EXPECT_EQ(m[15], 0x01);
}

TEST(PmaMadTest, ClassPortInfoRequestHasNoPortSelect) {
  const Mad m = BuildPerfMgtGet(0x0001, 9, 1);
  EXPECT_EQ(m[17], 0x01);
  for (int i = 64; i < 256; ++i) EXPECT_EQ(m[i], 0x00) << i;
}

TEST(PmaMadTest, EncodeIntoALargerBufferLeavesTheRestAlone) {
  std::vector<uint8_t> buf(300, 0xAB);
  ASSERT_TRUE(EncodePerfMgtGet(0x0012, 1, 5, absl::MakeSpan(buf)).ok());
  EXPECT_EQ(buf[0], 0x01);
  EXPECT_EQ(buf[255], 0x00);
  EXPECT_EQ(buf[256], 0xAB);
  EXPECT_EQ(buf[299], 0xAB);
}

TEST(PmaMadTest, EncodeRejectsAShortBuffer) {
  std::vector<uint8_t> buf(255);
  const absl::Status s = EncodePerfMgtGet(0x0012, 1, 5, absl::MakeSpan(buf));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(PmaMadTest, HeaderDecodesEveryField) {
  Mad m = Response(0x001D, 0x1122334455667788ull, 0x001C);
  Put16(m, 6, 0xA1B2);
  Put32(m, 20, 0xC3D4E5F6);
  const absl::StatusOr<MadHeader> h = DecodeMadHeader(S(m));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->base_version, 1);
  EXPECT_EQ(h->mgmt_class, 0x04);
  EXPECT_EQ(h->class_version, 1);
  EXPECT_EQ(h->method, 0x81);
  EXPECT_EQ(h->status, 0x001C);
  EXPECT_EQ(h->class_specific, 0xA1B2);
  EXPECT_EQ(h->transaction_id, 0x1122334455667788ull);
  EXPECT_EQ(h->attribute_id, 0x001D);
  EXPECT_EQ(h->attribute_modifier, 0xC3D4E5F6u);
  EXPECT_EQ(DecodeMadHeader(S(m).subspan(0, 23)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ----- PortCounters (16.1.3.5) -----

// Attribute data offsets (MAD offset = 64 + these).
Mad PortCountersResponse() {
  Mad m = Response(0x0012);
  m[64 + 0] = 0xEE;               // reserved: ignored
  m[64 + 1] = 3;                  // PortSelect
  Put16(m, 64 + 2, 0xEEEE);       // CounterSelect: ignored in a GetResp
  Put16(m, 64 + 4, 0x0102);       // SymbolErrorCounter
  m[64 + 6] = 0x03;               // LinkErrorRecoveryCounter
  m[64 + 7] = 0x04;               // LinkDownedCounter
  Put16(m, 64 + 8, 0x0506);       // PortRcvErrors
  Put16(m, 64 + 10, 0x0708);      // PortRcvRemotePhysicalErrors
  Put16(m, 64 + 12, 0x090A);      // PortRcvSwitchRelayErrors
  Put16(m, 64 + 14, 0x0B0C);      // PortXmitDiscards
  m[64 + 16] = 0x0D;              // PortXmitConstraintErrors
  m[64 + 17] = 0x0E;              // PortRcvConstraintErrors
  m[64 + 18] = 0xEE;              // CounterSelect2 / reserved: ignored
  m[64 + 19] = 0xA5;              // LocalLinkIntegrityErrors (7..4) = 0xA, ExcessiveBuf... = 0x5
  Put16(m, 64 + 20, 0xEEEE);      // reserved: ignored
  Put16(m, 64 + 22, 0x1112);      // VL15Dropped
  Put32(m, 64 + 24, 0x21222324);  // PortXmitData
  Put32(m, 64 + 28, 0x25262728);  // PortRcvData
  Put32(m, 64 + 32, 0x292A2B2C);  // PortXmitPkts
  Put32(m, 64 + 36, 0x2D2E2F30);  // PortRcvPkts
  Put32(m, 64 + 40, 0x31323334);  // PortXmitWait
  return m;
}

TEST(PmaMadTest, PortCountersDecodeEachFieldFromItsOwnOffset) {
  const absl::StatusOr<PortCountersSample> c =
      DecodePortCountersResponse(S(PortCountersResponse()), kTid);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port_select, 3);
  EXPECT_EQ(c->symbol_error, 0x0102);
  EXPECT_EQ(c->link_error_recovery, 0x03);
  EXPECT_EQ(c->link_downed, 0x04);
  EXPECT_EQ(c->port_rcv_errors, 0x0506);
  EXPECT_EQ(c->port_rcv_remote_physical_errors, 0x0708);
  EXPECT_EQ(c->port_rcv_switch_relay_errors, 0x090A);
  EXPECT_EQ(c->port_xmit_discards, 0x0B0C);
  EXPECT_EQ(c->port_xmit_constraint_errors, 0x0D);
  EXPECT_EQ(c->port_rcv_constraint_errors, 0x0E);
  EXPECT_EQ(c->local_link_integrity_errors, 0xA);
  EXPECT_EQ(c->excessive_buffer_overrun_errors, 0x5);
  EXPECT_EQ(c->vl15_dropped, 0x1112);
  EXPECT_EQ(c->port_xmit_data, 0x21222324u);
  EXPECT_EQ(c->port_rcv_data, 0x25262728u);
  EXPECT_EQ(c->port_xmit_packets, 0x292A2B2Cu);
  EXPECT_EQ(c->port_rcv_packets, 0x2D2E2F30u);
  EXPECT_EQ(c->port_xmit_wait, 0x31323334u);
}

TEST(PmaMadTest, FourBitFieldsAreTheHighAndLowNibbleOfByte19) {
  Mad m = PortCountersResponse();
  m[64 + 19] = 0xF0;
  auto c = DecodePortCountersResponse(S(m), kTid);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->local_link_integrity_errors, 15);
  EXPECT_EQ(c->excessive_buffer_overrun_errors, 0);
  m[64 + 19] = 0x0F;
  c = DecodePortCountersResponse(S(m), kTid);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->local_link_integrity_errors, 0);
  EXPECT_EQ(c->excessive_buffer_overrun_errors, 15);
  // Neighbouring bytes do not leak into the nibbles.
  m[64 + 18] = 0xFF;
  m[64 + 19] = 0x00;
  m[64 + 20] = 0xFF;
  c = DecodePortCountersResponse(S(m), kTid);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->local_link_integrity_errors, 0);
  EXPECT_EQ(c->excessive_buffer_overrun_errors, 0);
}

TEST(PmaMadTest, SaturatedPortCountersReadAllOnesAtEveryWidth) {
  Mad m = Response(0x0012);
  for (size_t i = 64 + 4; i < 64 + 44; ++i) m[i] = 0xFF;
  const auto c = DecodePortCountersResponse(S(m), kTid);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->symbol_error, 0xFFFF);
  EXPECT_EQ(c->link_error_recovery, 0xFF);
  EXPECT_EQ(c->link_downed, 0xFF);
  EXPECT_EQ(c->port_rcv_errors, 0xFFFF);
  EXPECT_EQ(c->port_rcv_remote_physical_errors, 0xFFFF);
  EXPECT_EQ(c->port_rcv_switch_relay_errors, 0xFFFF);
  EXPECT_EQ(c->port_xmit_discards, 0xFFFF);
  EXPECT_EQ(c->port_xmit_constraint_errors, 0xFF);
  EXPECT_EQ(c->port_rcv_constraint_errors, 0xFF);
  EXPECT_EQ(c->local_link_integrity_errors, 0xF);
  EXPECT_EQ(c->excessive_buffer_overrun_errors, 0xF);
  EXPECT_EQ(c->vl15_dropped, 0xFFFF);
  EXPECT_EQ(c->port_xmit_data, 0xFFFFFFFFu);
  EXPECT_EQ(c->port_rcv_data, 0xFFFFFFFFu);
  EXPECT_EQ(c->port_xmit_packets, 0xFFFFFFFFu);
  EXPECT_EQ(c->port_rcv_packets, 0xFFFFFFFFu);
  EXPECT_EQ(c->port_xmit_wait, 0xFFFFFFFFu);
}

// ----- PortCountersExtended (16.1.4.11) -----

Mad PortCountersExtendedResponse() {
  Mad m = Response(0x001D);
  m[64 + 1] = 2;                             // PortSelect
  Put16(m, 64 + 2, 0xEEEE);                  // CounterSelect: ignored
  Put32(m, 64 + 4, 0xEEEEEEEE);              // reserved: ignored
  Put64(m, 64 + 8, 0x0102030405060708ull);   // PortXmitData
  Put64(m, 64 + 16, 0x1112131415161718ull);  // PortRcvData
  Put64(m, 64 + 24, 0x2122232425262728ull);  // PortXmitPkts
  Put64(m, 64 + 32, 0x3132333435363738ull);  // PortRcvPkts
  Put64(m, 64 + 40, 0x4142434445464748ull);  // PortUnicastXmitPkts
  Put64(m, 64 + 48, 0x5152535455565758ull);  // PortUnicastRcvPkts
  Put64(m, 64 + 56, 0x6162636465666768ull);  // PortMulticastXmitPkts
  Put64(m, 64 + 64, 0xFFFFFFFFFFFFFFFFull);  // PortMulticastRcvPkts (at its maximum)
  return m;
}

TEST(PmaMadTest, PortCountersExtendedDecodeEachFieldFromItsOwnOffset) {
  const auto c = DecodePortCountersExtendedResponse(S(PortCountersExtendedResponse()), kTid);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port_select, 2);
  EXPECT_EQ(c->port_xmit_data, 0x0102030405060708ull);
  EXPECT_EQ(c->port_rcv_data, 0x1112131415161718ull);
  EXPECT_EQ(c->port_xmit_packets, 0x2122232425262728ull);
  EXPECT_EQ(c->port_rcv_packets, 0x3132333435363738ull);
  EXPECT_EQ(c->port_unicast_xmit_packets, 0x4142434445464748ull);
  EXPECT_EQ(c->port_unicast_rcv_packets, 0x5152535455565758ull);
  EXPECT_EQ(c->port_multicast_xmit_packets, 0x6162636465666768ull);
  EXPECT_EQ(c->port_multicast_rcv_packets, 0xFFFFFFFFFFFFFFFFull);
}

// ----- ClassPortInfo (13.4.8.1) -----

TEST(PmaMadTest, ClassPortInfoDecodesCapabilityMaskAndRespTime) {
  Mad m = Response(0x0001);
  m[64 + 0] = 1;                               // BaseVersion
  m[64 + 1] = 1;                               // ClassVersion
  Put16(m, 64 + 2, 0x1600);                    // CapabilityMask: XmitWait | NoIETF | ExtendedWidth
  Put32(m, 64 + 4, (0x0123456u << 5) | 0x13);  // CapabilityMask2 (27 bits) | RespTimeValue (5)
  const auto c = DecodeClassPortInfoResponse(S(m), kTid);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->base_version, 1);
  EXPECT_EQ(c->class_version, 1);
  EXPECT_EQ(c->capability_mask, 0x1600);
  EXPECT_TRUE(c->capability_mask & kPmaCapExtendedWidth);
  EXPECT_TRUE(c->capability_mask & kPmaCapExtendedWidthNoIetf);
  EXPECT_TRUE(c->capability_mask & kPmaCapXmitWait);
  EXPECT_FALSE(c->capability_mask & kPmaCapAllPortSelect);
  EXPECT_EQ(c->capability_mask2, 0x0123456u);
  EXPECT_EQ(c->resp_time_value, 0x13);
}

// ----- Rejections -----

TEST(PmaMadTest, RejectsAnythingButAGetResp) {
  for (uint8_t method : {0x01, 0x02, 0x82, 0x06, 0x00}) {  // Get, Set, SetResp, Report, none
    Mad m = PortCountersResponse();
    m[3] = method;
    EXPECT_EQ(DecodePortCountersResponse(S(m), kTid).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "method " << int{method};
  }
}

TEST(PmaMadTest, RejectsTheWrongAttribute) {
  EXPECT_EQ(DecodePortCountersResponse(S(PortCountersExtendedResponse()), kTid).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePortCountersExtendedResponse(S(PortCountersResponse()), kTid).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeClassPortInfoResponse(S(PortCountersResponse()), kTid).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PmaMadTest, RejectsAnotherClassOrVersion) {
  Mad m = PortCountersResponse();
  m[1] = 0x01;  // LID-routed SM class
  EXPECT_EQ(DecodePortCountersResponse(S(m), kTid).status().code(),
            absl::StatusCode::kInvalidArgument);
  m = PortCountersResponse();
  m[0] = 2;  // BaseVersion
  EXPECT_EQ(DecodePortCountersResponse(S(m), kTid).status().code(),
            absl::StatusCode::kInvalidArgument);
  m = PortCountersResponse();
  m[2] = 2;  // ClassVersion
  EXPECT_EQ(DecodePortCountersResponse(S(m), kTid).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PmaMadTest, MatchesTheTidOnItsLow32BitsOnly) {
  // The kernel's ib_umad replaces the upper 32 bits with its agent's hi_tid.
  const Mad m = PortCountersResponse();
  EXPECT_TRUE(DecodePortCountersResponse(S(m), kTid | 0x0000'0042'0000'0000ull).ok());
  const absl::Status s = DecodePortCountersResponse(S(m), kTid + 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("transaction ID"), absl::string_view::npos) << s;
}

TEST(PmaMadTest, MapsTheMadStatusToACode) {
  struct Case {
    uint16_t status;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {0x0001, absl::StatusCode::kUnavailable},         // busy
      {0x0002, absl::StatusCode::kUnimplemented},       // redirect required
      {0x0004, absl::StatusCode::kFailedPrecondition},  // bad class version
      {0x0008, absl::StatusCode::kUnimplemented},       // method not supported
      {0x000C, absl::StatusCode::kUnimplemented},       // method/attribute not supported
      {0x001C, absl::StatusCode::kOutOfRange},          // bad attribute value (PortSelect)
      {0x0100, absl::StatusCode::kUnknown},             // class-specific
      {0x0010, absl::StatusCode::kUnknown},             // reserved invalid-field code 4
  };
  for (const Case& c : cases) {
    Mad m = PortCountersResponse();
    Put16(m, 4, c.status);
    EXPECT_EQ(DecodePortCountersResponse(S(m), kTid).status().code(), c.code)
        << "status 0x" << std::hex << c.status;
  }
}

TEST(PmaMadTest, RejectsShortBuffers) {
  const Mad m = PortCountersResponse();
  for (size_t n : {size_t{0}, size_t{23}, size_t{24}, size_t{64}, size_t{255}}) {
    EXPECT_EQ(DecodePortCountersResponse(S(m).subspan(0, n), kTid).status().code(),
              absl::StatusCode::kInvalidArgument)
        << n;
    EXPECT_EQ(DecodePortCountersExtendedResponse(S(m).subspan(0, n), kTid).status().code(),
              absl::StatusCode::kInvalidArgument)
        << n;
    EXPECT_EQ(DecodeClassPortInfoResponse(S(m).subspan(0, n), kTid).status().code(),
              absl::StatusCode::kInvalidArgument)
        << n;
  }
  EXPECT_EQ(DecodePortCountersResponse(absl::Span<const uint8_t>(), kTid).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ----- umad presence -----

TEST(UmadPresenceTest, NamesTheMissingSysfsClass) {
  testing::FakeTree tree;
  const absl::Status s = CheckUmadPresent(tree.Path("sys"), tree.Path("dev"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "no InfiniBand MAD device: " + tree.Path("sys") +
                             "/class/infiniband_mad is absent (no IB HCA, or the ib_umad module "
                             "is not loaded)");
}

TEST(UmadPresenceTest, NamesAnEmptyClassAndMissingDeviceNodes) {
  testing::FakeTree tree;
  tree.Write("sys/class/infiniband_mad/abi_version", "5\n");
  absl::Status s = CheckUmadPresent(tree.Path("sys"), tree.Path("dev"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("lists no umad<N> device"), absl::string_view::npos) << s;

  tree.Write("sys/class/infiniband_mad/umad0/ibdev", "mlx5_0\n");
  s = CheckUmadPresent(tree.Path("sys"), tree.Path("dev"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(tree.Path("dev") + "/infiniband/umad<N> is absent"),
            absl::string_view::npos)
      << s;

  tree.Write("dev/infiniband/umad0", "");
  EXPECT_TRUE(CheckUmadPresent(tree.Path("sys"), tree.Path("dev")).ok());
}

TEST(UmadPerfQueryTest, OpenOnANodeWithoutUmadIsUnavailableWithTheReason) {
  std::error_code ec;
  if (std::filesystem::exists("/sys/class/infiniband_mad", ec)) {
    GTEST_SKIP() << "this node has /sys/class/infiniband_mad";
  }
  const auto q = UmadPerfQuery::Open("", 1);
  ASSERT_FALSE(q.ok());
  EXPECT_EQ(q.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(q.status().message(),
            "no InfiniBand MAD device: /sys/class/infiniband_mad is absent (no IB HCA, or the "
            "ib_umad module is not loaded)");
}

TEST(UmadPerfQueryTest, OpenRejectsBadArgumentsBeforeTouchingDevices) {
  EXPECT_EQ(UmadPerfQuery::Open("", 0).status().code(), absl::StatusCode::kInvalidArgument);
  UmadPerfQueryOptions o;
  o.timeout_ms = 0;
  EXPECT_EQ(UmadPerfQuery::Open("", 1, o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fabricscope::collectors
