#include "collectors/pcap/packet.h"

namespace fabricscope::collectors::pcap {
namespace {

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Be24(const uint8_t* p) { return uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2]; }
uint32_t Be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

constexpr uint16_t kEtherIpv4 = 0x0800;
constexpr uint16_t kEtherIpv6 = 0x86DD;

// Bytes of extension headers between the BTH and the payload, by opcode (IBTA vol. 1 9.2,
// table 38; kernel drivers/infiniband/sw/rxe/rxe_opcode.c lists the same layouts).
uint32_t ExtensionBytes(uint8_t opcode) {
  const uint8_t transport = opcode & 0xE0;
  const uint8_t op = opcode & 0x1F;
  if (opcode == 0x81 || opcode == 0x80) return 16;  // CNP: 16 reserved bytes
  uint32_t n = 0;
  if (transport == 0x60) {  // UD: DETH, + ImmDt for SEND_ONLY_IMM
    return 8 + (op == 0x05 ? 4 : 0);
  }
  if (transport == 0x40) n += 4 + 8;  // RD: RDETH + DETH
  switch (op) {
    case 0x03:
    case 0x05:
    case 0x09:
      return n + 4;  // ImmDt
    case 0x06:
    case 0x0A:
    case 0x0C:
      return n + 16;  // RETH
    case 0x0B:
      return n + 20;  // RETH + ImmDt
    case 0x0D:
    case 0x0F:
    case 0x10:
    case 0x11:
      return n + 4;  // AETH
    case 0x12:
      return n + 4 + 8;  // AETH + AtomicAckETH
    case 0x13:
    case 0x14:
      return n + 28;  // AtomicETH
    case 0x16:
    case 0x17:
      return n + 4;  // IETH
    default:
      return n;
  }
}

ParseResult ParseRoce(const uint8_t* p, uint32_t caplen_left, uint32_t udp_payload_len,
                      ParsedPacket* out) {
  if (udp_payload_len < 12) return ParseResult::kMalformed;
  if (caplen_left < 12) return ParseResult::kTruncated;
  out->roce = true;
  out->bth_opcode = p[0];
  out->bth_se = (p[1] & 0x80) != 0;
  out->bth_pad = static_cast<uint8_t>((p[1] >> 4) & 0x3);
  out->bth_pkey = Be16(p + 2);
  out->bth_fecn = (p[4] & 0x80) != 0;
  out->bth_becn = (p[4] & 0x40) != 0;
  out->bth_dest_qp = Be24(p + 5);
  out->bth_ack_req = (p[8] & 0x80) != 0;
  out->bth_psn = Be24(p + 9);
  const uint32_t ext = ExtensionBytes(out->bth_opcode);
  if (OpcodeHasAeth(out->bth_opcode)) {
    if (udp_payload_len < 16) return ParseResult::kMalformed;
    if (caplen_left < 16) return ParseResult::kTruncated;
    out->has_aeth = true;
    out->aeth_syndrome = p[12];
    out->aeth_msn = Be24(p + 13);
  }
  const uint32_t overhead = 12 + ext + 4 + out->bth_pad;  // BTH + extensions + ICRC + pad
  out->roce_payload_len = udp_payload_len > overhead ? udp_payload_len - overhead : 0;
  return ParseResult::kOk;
}

ParseResult ParseL4(const uint8_t* p, uint32_t caplen_left, uint32_t l4_len, ParsedPacket* out) {
  if (out->l4_proto == 6) {
    if (l4_len < 20) return ParseResult::kMalformed;
    if (caplen_left < 20) return ParseResult::kTruncated;
    out->sport = Be16(p);
    out->dport = Be16(p + 2);
    out->tcp_seq = Be32(p + 4);
    out->tcp_ack = Be32(p + 8);
    const uint32_t hlen = static_cast<uint32_t>(p[12] >> 4) * 4;
    if (hlen < 20 || hlen > l4_len) return ParseResult::kMalformed;
    out->tcp_flags = p[13];
    out->tcp_window = Be16(p + 14);
    out->tcp_payload_len = l4_len - hlen;
    if ((out->tcp_flags & kTcpSyn) && caplen_left >= hlen) {
      for (uint32_t i = 20; i < hlen;) {  // options (RFC 9293 3.1); window scale is kind 3
        const uint8_t kind = p[i];
        if (kind == 0) break;
        if (kind == 1) {
          ++i;
          continue;
        }
        if (i + 1 >= hlen || p[i + 1] < 2 || i + p[i + 1] > hlen) break;
        if (kind == 3 && p[i + 1] == 3) out->tcp_window_scale = static_cast<int8_t>(p[i + 2]);
        i += p[i + 1];
      }
    }
    return ParseResult::kOk;
  }
  if (out->l4_proto == 17) {
    if (l4_len < 8) return ParseResult::kMalformed;
    if (caplen_left < 8) return ParseResult::kTruncated;
    out->sport = Be16(p);
    out->dport = Be16(p + 2);
    const uint16_t udp_len = Be16(p + 4);
    if (udp_len < 8 || udp_len > l4_len) return ParseResult::kMalformed;
    if (out->dport == kRoceV2Port) return ParseRoce(p + 8, caplen_left - 8, udp_len - 8u, out);
    return ParseResult::kOk;
  }
  return ParseResult::kUnsupported;
}

ParseResult ParseIp(const uint8_t* p, uint32_t caplen, ParsedPacket* out) {
  if (caplen < 1) return ParseResult::kTruncated;
  const uint8_t version = p[0] >> 4;
  if (version == 4) {
    if (caplen < 20) return ParseResult::kTruncated;
    const uint32_t ihl = static_cast<uint32_t>(p[0] & 0x0F) * 4;
    const uint32_t total = Be16(p + 2);
    if (ihl < 20 || total < ihl) return ParseResult::kMalformed;
    if (caplen < ihl) return ParseResult::kTruncated;
    if ((Be16(p + 6) & 0x3FFF) != 0) return ParseResult::kUnsupported;  // a fragment
    out->ip_version = 4;
    out->ecn = p[1] & 0x3;
    out->l4_proto = p[9];
    out->src.bytes = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, p[12], p[13], p[14], p[15]};
    out->dst.bytes = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, p[16], p[17], p[18], p[19]};
    return ParseL4(p + ihl, caplen - ihl, total - ihl, out);
  }
  if (version == 6) {
    if (caplen < 40) return ParseResult::kTruncated;
    out->ip_version = 6;
    out->ecn = static_cast<uint8_t>((p[1] >> 4) & 0x3);
    for (int i = 0; i < 16; ++i) {
      out->src.bytes[i] = p[8 + i];
      out->dst.bytes[i] = p[24 + i];
    }
    uint32_t left = Be16(p + 4);  // payload length
    uint8_t next = p[6];
    uint32_t off = 40;
    // Hop-by-hop (0), routing (43) and destination options (60) are skipped; a fragment
    // header (44) means a fragment the analyzers do not reassemble.
    for (int guard = 0; guard < 8 && (next == 0 || next == 43 || next == 60); ++guard) {
      if (caplen < off + 2) return ParseResult::kTruncated;
      const uint32_t len = (static_cast<uint32_t>(p[off + 1]) + 1) * 8;
      if (len > left) return ParseResult::kMalformed;
      next = p[off];
      off += len;
      left -= len;
    }
    if (next == 44) return ParseResult::kUnsupported;
    if (caplen < off) return ParseResult::kTruncated;
    out->l4_proto = next;
    return ParseL4(p + off, caplen - off, left, out);
  }
  return ParseResult::kNotIp;
}

}  // namespace

bool OpcodeHasAeth(uint8_t opcode) {
  const uint8_t transport = opcode & 0xE0;
  if (transport != 0x00 && transport != 0x40) return false;  // RC and RD only
  const uint8_t op = opcode & 0x1F;
  return op == 0x0D || op == 0x0F || op == 0x10 || op == 0x11 || op == 0x12;
}

ParseResult ParseFrame(int linktype, const uint8_t* data, uint32_t caplen, uint32_t wire_len,
                       int64_t ts_ns, ParsedPacket* out) {
  *out = ParsedPacket();
  out->ts_ns = ts_ns;
  out->wire_len = wire_len;
  if (data == nullptr) return ParseResult::kTruncated;
  uint32_t off = 0;
  uint16_t ethertype = 0;
  switch (linktype) {
    case kLinkEthernet: {
      if (caplen < 14) return ParseResult::kTruncated;
      ethertype = Be16(data + 12);
      off = 14;
      for (int tags = 0;
           tags < 2 && (ethertype == 0x8100 || ethertype == 0x88A8 || ethertype == 0x9100);
           ++tags) {
        if (caplen < off + 4) return ParseResult::kTruncated;
        ethertype = Be16(data + off + 2);
        off += 4;
      }
      break;
    }
    case kLinkLinuxSll:
      if (caplen < 16) return ParseResult::kTruncated;
      ethertype = Be16(data + 14);
      off = 16;
      break;
    case kLinkLinuxSll2:
      if (caplen < 20) return ParseResult::kTruncated;
      ethertype = Be16(data);
      off = 20;
      break;
    case kLinkRaw:
    case kLinkRawAlt:
      return ParseIp(data, caplen, out);
    default:
      return ParseResult::kUnsupported;
  }
  if (ethertype != kEtherIpv4 && ethertype != kEtherIpv6) return ParseResult::kNotIp;
  return ParseIp(data + off, caplen - off, out);
}

}  // namespace fabricscope::collectors::pcap
