#include "collectors/pcap/packet.h"

#include <gtest/gtest.h>

#include <memory>

#include "tests/collectors/pcap/pcap_test_util.h"
#include "tests/collectors/pcap/roce_scenarios.h"

namespace fabricscope::testing {
namespace {

using pcap::ParsedPacket;
using pcap::ParseFrame;
using pcap::ParseResult;

// Parses `frame` from a heap copy of exactly its size, so that AddressSanitizer sees any read
// past the end.
ParseResult Parse(int linktype, const Bytes& frame, ParsedPacket* out, uint32_t wire_len = 0,
                  int64_t ts_ns = 0) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[frame.size() + (frame.empty() ? 1 : 0)]);
  std::copy(frame.begin(), frame.end(), copy.get());
  const uint32_t n = static_cast<uint32_t>(frame.size());
  return ParseFrame(linktype, copy.get(), n, wire_len != 0 ? wire_len : n, ts_ns, out);
}

// Every field the builder set, checked at its own position: the values are distinct and
// asymmetric, so a field read at a shifted offset or with a wrong mask fails.
TEST(ParseFrame, EveryBthAndAethFieldAtItsPosition) {
  RoceFrame f;
  f.src = "192.168.10.20";
  f.dst = "172.16.30.40";
  f.ecn = 1;
  f.dscp = 26;
  f.sport = 0xC123;
  f.opcode = 0x11;  // RC ACKNOWLEDGE: BTH + AETH
  f.se = true;
  f.mig_req = true;
  f.pad = 2;
  f.tver = 0x5;
  f.pkey = 0xA1B2;
  f.fecn = true;
  f.becn = false;
  f.dest_qp = 0xC3D4E5;
  f.ack_req = true;
  f.psn = 0xF60718;
  f.syndrome = 0x69;
  f.msn = 0x3A4B5C;
  f.payload_len = 0;
  const Bytes frame = RoceEthernetFrame(f);
  ParsedPacket p;
  ASSERT_EQ(Parse(pcap::kLinkEthernet, frame, &p, 1500, 123456789), ParseResult::kOk);
  EXPECT_EQ(p.ts_ns, 123456789);
  EXPECT_EQ(p.wire_len, 1500u);
  EXPECT_EQ(p.ip_version, 4);
  EXPECT_EQ(p.ecn, 1);
  EXPECT_EQ(p.src, Ip("192.168.10.20"));
  EXPECT_EQ(p.dst, Ip("172.16.30.40"));
  EXPECT_EQ(p.l4_proto, 17);
  EXPECT_EQ(p.sport, 0xC123);
  EXPECT_EQ(p.dport, 4791);
  EXPECT_TRUE(p.roce);
  EXPECT_EQ(p.bth_opcode, 0x11);
  EXPECT_TRUE(p.bth_se);
  EXPECT_EQ(p.bth_pad, 2);
  EXPECT_EQ(p.bth_pkey, 0xA1B2);
  EXPECT_TRUE(p.bth_fecn);
  EXPECT_FALSE(p.bth_becn);
  EXPECT_EQ(p.bth_dest_qp, 0xC3D4E5u);
  EXPECT_TRUE(p.bth_ack_req);
  EXPECT_EQ(p.bth_psn, 0xF60718u);
  EXPECT_TRUE(p.has_aeth);
  EXPECT_EQ(p.aeth_syndrome, 0x69);
  EXPECT_EQ(p.aeth_msn, 0x3A4B5Cu);
  EXPECT_EQ(p.roce_payload_len, 0u);  // the 2 pad bytes are not payload
}

// Each one-bit flag alone, so two flags swapped or read from a neighbour bit fail.
TEST(ParseFrame, EachBthFlagAlone) {
  struct Case {
    const char* name;
    void (*set)(RoceFrame*);
    bool se, fecn, becn, ack_req;
  };
  const Case cases[] = {
      {"none", [](RoceFrame*) {}, false, false, false, false},
      {"se", [](RoceFrame* f) { f->se = true; }, true, false, false, false},
      {"migreq", [](RoceFrame* f) { f->mig_req = true; }, false, false, false, false},
      {"tver", [](RoceFrame* f) { f->tver = 0xF; }, false, false, false, false},
      {"fecn", [](RoceFrame* f) { f->fecn = true; }, false, true, false, false},
      {"becn", [](RoceFrame* f) { f->becn = true; }, false, false, true, false},
      {"ackreq", [](RoceFrame* f) { f->ack_req = true; }, false, false, false, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RoceFrame f;
    f.dest_qp = 0x000001;
    f.psn = 0x000002;
    f.pad = 0;
    c.set(&f);
    ParsedPacket p;
    ASSERT_EQ(Parse(pcap::kLinkEthernet, RoceEthernetFrame(f), &p), ParseResult::kOk);
    EXPECT_EQ(p.bth_se, c.se);
    EXPECT_EQ(p.bth_fecn, c.fecn);
    EXPECT_EQ(p.bth_becn, c.becn);
    EXPECT_EQ(p.bth_ack_req, c.ack_req);
    EXPECT_EQ(p.bth_pad, 0);
    EXPECT_EQ(p.bth_dest_qp, 1u);  // FECN/BECN share the QP's word, AckReq the PSN's
    EXPECT_EQ(p.bth_psn, 2u);
  }
  for (uint8_t pad = 0; pad < 4; ++pad) {
    RoceFrame f;
    f.pad = pad;
    f.payload_len = 13;
    ParsedPacket p;
    ASSERT_EQ(Parse(pcap::kLinkEthernet, RoceEthernetFrame(f), &p), ParseResult::kOk);
    EXPECT_EQ(p.bth_pad, pad);
    EXPECT_FALSE(p.bth_se);
    EXPECT_EQ(p.roce_payload_len, 13u);
  }
}

// The extension-header layout of every opcode (the builder's table, IBTA 9.2/9.3): the payload
// length after them must come out exact, and AETH fields only where there is an AETH.
TEST(ParseFrame, PayloadLengthAfterTheExtensionHeadersOfEveryOpcode) {
  for (const RoceFrame& f : OpcodeZooScenario()) {
    SCOPED_TRACE(static_cast<int>(f.opcode));
    ParsedPacket p;
    ASSERT_EQ(Parse(pcap::kLinkEthernet, RoceEthernetFrame(f), &p), ParseResult::kOk);
    EXPECT_EQ(p.bth_opcode, f.opcode);
    EXPECT_EQ(p.bth_psn, f.psn);
    EXPECT_EQ(p.bth_dest_qp, f.dest_qp);
    EXPECT_EQ(p.roce_payload_len, f.payload_len);
    EXPECT_EQ(p.has_aeth, ExtHeadersFor(f.opcode).aeth);
    if (p.has_aeth) {
      EXPECT_EQ(p.aeth_syndrome, f.syndrome);
      EXPECT_EQ(p.aeth_msn, f.msn);
    }
    EXPECT_EQ(p.bth_becn, f.opcode == roce_op::kCnp);
  }
}

TEST(ParseFrame, Ipv6TrafficClassAndAddresses) {
  RoceFrame f;
  f.src = "fd00:1:2:3::a";
  f.dst = "fe80::1234:5678";
  f.dscp = 46;
  f.ecn = 3;
  f.psn = 0x123456;
  ParsedPacket p;
  ASSERT_EQ(Parse(pcap::kLinkEthernet, RoceEthernetFrame(f), &p), ParseResult::kOk);
  EXPECT_EQ(p.ip_version, 6);
  EXPECT_EQ(p.ecn, 3);
  EXPECT_EQ(p.src, Ip("fd00:1:2:3::a"));
  EXPECT_EQ(p.dst, Ip("fe80::1234:5678"));
  EXPECT_FALSE(p.src.is_v4());
  EXPECT_EQ(pcap::FormatAddress(p.dst), "fe80::1234:5678");
  EXPECT_EQ(p.bth_psn, 0x123456u);
  for (uint8_t ecn = 0; ecn < 4; ++ecn) {  // ECN alone, without DSCP bits beside it
    f.dscp = 0;
    f.ecn = ecn;
    ASSERT_EQ(Parse(pcap::kLinkEthernet, RoceEthernetFrame(f), &p), ParseResult::kOk);
    EXPECT_EQ(p.ecn, ecn);
    f.src = kQ;
    f.dst = kR;
    ASSERT_EQ(Parse(pcap::kLinkEthernet, RoceEthernetFrame(f), &p), ParseResult::kOk);
    EXPECT_EQ(p.ecn, ecn);
    f.src = "fd00:1:2:3::a";
    f.dst = "fe80::1234:5678";
  }
}

// The same IP packet under every link type gives the same fields.
TEST(ParseFrame, VlanSllSll2AndRawIp) {
  for (const char* family : {"v4", "v6"}) {
    SCOPED_TRACE(family);
    RoceFrame f = Ack(family[1] == '4' ? kR : kR6, family[1] == '4' ? kQ : kQ6, 0xABCDEF, 0x654321,
                      0x60, 0x00BEEF);
    const Bytes ip = RoceIpPacket(f);
    const uint16_t et = EtherTypeOf(ip);
    const std::pair<int, Bytes> framings[] = {
        {pcap::kLinkEthernet, EthernetFrame(ip, et)},
        {pcap::kLinkEthernet, EthernetFrame(ip, et, {100})},
        {pcap::kLinkEthernet, EthernetFrame(ip, et, {7, 4094})},  // QinQ: 0x88A8 then 0x8100
        {pcap::kLinkLinuxSll, SllFrame(ip, et)},
        {pcap::kLinkLinuxSll2, Sll2Frame(ip, et)},
        {pcap::kLinkRaw, ip},
        {pcap::kLinkRawAlt, ip},
    };
    for (const auto& [linktype, frame] : framings) {
      SCOPED_TRACE(linktype);
      SCOPED_TRACE(frame.size());
      ParsedPacket p;
      ASSERT_EQ(Parse(linktype, frame, &p), ParseResult::kOk);
      EXPECT_EQ(p.src, Ip(f.src));
      EXPECT_EQ(p.dst, Ip(f.dst));
      EXPECT_TRUE(p.roce);
      EXPECT_EQ(p.bth_opcode, 0x11);
      EXPECT_EQ(p.bth_dest_qp, 0xABCDEFu);
      EXPECT_EQ(p.bth_psn, 0x654321u);
      EXPECT_EQ(p.aeth_syndrome, 0x60);
      EXPECT_EQ(p.aeth_msn, 0x00BEEFu);
    }
  }
}

// Every capture length from 0 to the whole frame: below the end of the last header the parser
// needs, kTruncated; from there on, the same fields as the whole frame. Under ASan (the
// FABRICSCOPE_SANITIZE build) a read past the copy's end fails the test.
TEST(ParseFrame, TruncatedAtEveryLength) {
  struct Case {
    int linktype;
    Bytes frame;
    uint32_t headers;  // bytes up to the end of BTH (+ AETH)
  };
  std::vector<Case> cases;
  for (bool v6 : {false, true}) {
    for (uint8_t op : {roce_op::kAck, roce_op::kWriteOnly, roce_op::kReadRespMiddle}) {
      RoceFrame f = Req(v6 ? kQ6 : kQ, v6 ? kR6 : kR, 0x77, 0x12345, op, 40);
      f.syndrome = 0x1F;
      const Bytes ip = RoceIpPacket(f);
      const uint32_t l3 = (v6 ? 40 : 20) + 8 + 12 + (op == roce_op::kAck ? 4 : 0);
      const uint16_t et = EtherTypeOf(ip);
      cases.push_back({pcap::kLinkEthernet, EthernetFrame(ip, et), 14 + l3});
      cases.push_back({pcap::kLinkEthernet, EthernetFrame(ip, et, {5, 6}), 22 + l3});
      cases.push_back({pcap::kLinkLinuxSll, SllFrame(ip, et), 16 + l3});
      cases.push_back({pcap::kLinkLinuxSll2, Sll2Frame(ip, et), 20 + l3});
      cases.push_back({pcap::kLinkRaw, ip, l3});
    }
  }
  for (const Case& c : cases) {
    ParsedPacket whole;
    ASSERT_EQ(Parse(c.linktype, c.frame, &whole), ParseResult::kOk);
    for (size_t len = 0; len <= c.frame.size(); ++len) {
      SCOPED_TRACE(::testing::Message()
                   << "linktype " << c.linktype << " len " << len << " of " << c.frame.size());
      const Bytes cut(c.frame.begin(), c.frame.begin() + static_cast<std::ptrdiff_t>(len));
      ParsedPacket p;
      const ParseResult r = Parse(c.linktype, cut, &p, static_cast<uint32_t>(c.frame.size()));
      if (len < c.headers) {
        ASSERT_EQ(r, ParseResult::kTruncated);
      } else {
        ASSERT_EQ(r, ParseResult::kOk);
        EXPECT_EQ(p.bth_psn, whole.bth_psn);
        EXPECT_EQ(p.aeth_syndrome, whole.aeth_syndrome);
        EXPECT_EQ(p.roce_payload_len, whole.roce_payload_len);  // from the IP/UDP lengths
        EXPECT_EQ(p.wire_len, c.frame.size());
      }
    }
  }
  // A null buffer is a truncated one.
  ParsedPacket p;
  EXPECT_EQ(ParseFrame(pcap::kLinkEthernet, nullptr, 0, 0, 0, &p), ParseResult::kTruncated);
}

// Lengths in the headers that cannot be right: kMalformed.
TEST(ParseFrame, MalformedLengths) {
  RoceFrame f = Ack(kR, kQ, kQpQ, 5, 0x60);
  const Bytes ip = RoceIpPacket(f);  // IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4
  auto parse_ip = [](const Bytes& b) {
    ParsedPacket p;
    return Parse(pcap::kLinkRaw, b, &p);
  };
  ASSERT_EQ(parse_ip(ip), ParseResult::kOk);
  Bytes b = ip;
  b[0] = 0x44;  // IHL 4 words
  EXPECT_EQ(parse_ip(b), ParseResult::kMalformed);
  b = ip;
  SetBe16(&b, 2, 19);  // total length < header
  EXPECT_EQ(parse_ip(b), ParseResult::kMalformed);
  b = ip;
  SetBe16(&b, 2, 20 + 7);  // no room for a UDP header
  EXPECT_EQ(parse_ip(b), ParseResult::kMalformed);
  b = ip;
  SetBe16(&b, 20 + 4, 7);  // UDP length < 8
  EXPECT_EQ(parse_ip(b), ParseResult::kMalformed);
  b = ip;
  SetBe16(&b, 20 + 4, static_cast<uint16_t>(ip.size() - 20 + 1));  // UDP longer than the IP
  EXPECT_EQ(parse_ip(b), ParseResult::kMalformed);
  b = ip;
  SetBe16(&b, 20 + 4, 8 + 11);  // RoCE: no room for a BTH
  EXPECT_EQ(parse_ip(b), ParseResult::kMalformed);
  b = ip;
  SetBe16(&b, 20 + 4, 8 + 15);  // ACKNOWLEDGE: no room for its AETH
  EXPECT_EQ(parse_ip(b), ParseResult::kMalformed);
  // IPv6: a hop-by-hop header longer than the payload.
  RoceFrame f6 = f;
  f6.src = kR6;
  f6.dst = kQ6;
  Bytes v6 = RoceIpPacket(f6);
  v6[6] = 0;  // next header: hop-by-hop options
  Bytes hbh = {17, 200, 0, 0, 0, 0, 0, 0};
  v6.insert(v6.begin() + 40, hbh.begin(), hbh.end());
  SetBe16(&v6, 4, static_cast<uint16_t>(v6.size() - 40));
  EXPECT_EQ(parse_ip(v6), ParseResult::kMalformed);
  v6[41] = 0;  // a valid 8-byte hop-by-hop header: the UDP/RoCE after it parses
  ParsedPacket p;
  ASSERT_EQ(Parse(pcap::kLinkRaw, v6, &p), ParseResult::kOk);
  EXPECT_TRUE(p.roce);
  EXPECT_EQ(p.aeth_syndrome, 0x60);
}

TEST(ParseFrame, NotIp) {
  const Bytes arp(28, 0);
  ParsedPacket p;
  EXPECT_EQ(Parse(pcap::kLinkEthernet, EthernetFrame(arp, 0x0806), &p), ParseResult::kNotIp);
  EXPECT_EQ(Parse(pcap::kLinkEthernet, EthernetFrame(arp, 0x88CC), &p), ParseResult::kNotIp);
  EXPECT_EQ(Parse(pcap::kLinkEthernet, EthernetFrame(arp, 0x0806, {12}), &p), ParseResult::kNotIp);
  EXPECT_EQ(Parse(pcap::kLinkLinuxSll, SllFrame(arp, 0x0806), &p), ParseResult::kNotIp);
  EXPECT_EQ(Parse(pcap::kLinkLinuxSll2, Sll2Frame(arp, 0x0806), &p), ParseResult::kNotIp);
  Bytes notip(40, 0);
  notip[0] = 0x50;  // IP version 5
  EXPECT_EQ(Parse(pcap::kLinkRaw, notip, &p), ParseResult::kNotIp);
}

TEST(ParseFrame, FragmentsAndOtherProtocolsAreUnsupported) {
  const Bytes ip = RoceIpPacket(Req(kQ, kR, 1, 1));
  ParsedPacket p;
  Bytes b = ip;
  SetBe16(&b, 6, 0x2000);  // MF, offset 0: the first fragment
  EXPECT_EQ(Parse(pcap::kLinkRaw, b, &p), ParseResult::kUnsupported);
  SetBe16(&b, 6, 0x0010);  // offset 16 (128 bytes), last fragment
  EXPECT_EQ(Parse(pcap::kLinkRaw, b, &p), ParseResult::kUnsupported);
  SetBe16(&b, 6, 0x4000);  // DF only: a whole datagram
  EXPECT_EQ(Parse(pcap::kLinkRaw, b, &p), ParseResult::kOk);
  b[9] = 1;  // ICMP
  EXPECT_EQ(Parse(pcap::kLinkRaw, b, &p), ParseResult::kUnsupported);
  // IPv6 with a fragment header (next header 44).
  RoceFrame f6 = Req(kQ6, kR6, 1, 1);
  Bytes v6 = RoceIpPacket(f6);
  v6[6] = 44;
  Bytes frag = {17, 0, 0, 1, 0, 0, 0, 42};  // next UDP, offset 0, M
  v6.insert(v6.begin() + 40, frag.begin(), frag.end());
  SetBe16(&v6, 4, static_cast<uint16_t>(v6.size() - 40));
  EXPECT_EQ(Parse(pcap::kLinkRaw, v6, &p), ParseResult::kUnsupported);
  // An unknown link type.
  EXPECT_EQ(Parse(147, ip, &p), ParseResult::kUnsupported);
}

TEST(ParseFrame, UdpThatIsNotRoce) {
  RoceFrame f = Req(kQ, kR, 1, 1);
  f.dport = 53;
  ParsedPacket p;
  ASSERT_EQ(Parse(pcap::kLinkEthernet, RoceEthernetFrame(f), &p), ParseResult::kOk);
  EXPECT_EQ(p.l4_proto, 17);
  EXPECT_EQ(p.dport, 53);
  EXPECT_FALSE(p.roce);
}

}  // namespace
}  // namespace fabricscope::testing
