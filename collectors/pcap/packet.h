#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

namespace fabricscope::collectors::pcap {

// libpcap link-layer types this parser understands (pcap-linktype(7) / tcpdump.org LINKTYPE_*).
inline constexpr int kLinkEthernet = 1;     // DLT_EN10MB
inline constexpr int kLinkRaw = 101;        // LINKTYPE_RAW: starts at the IP header
inline constexpr int kLinkRawAlt = 12;      // DLT_RAW on Linux/BSD
inline constexpr int kLinkLinuxSll = 113;   // "any" device, cooked v1
inline constexpr int kLinkLinuxSll2 = 276;  // cooked v2

// UDP destination port of RoCEv2 (IBTA vol. 1 annex A17.2.2; kernel rxe_hdr.h ROCE_V2_UDP_DPORT).
inline constexpr uint16_t kRoceV2Port = 4791;

// An IPv4 (mapped into ::ffff:a.b.c.d) or IPv6 address.
struct IpAddress {
  std::array<uint8_t, 16> bytes{};
  // Both compare two 64-bit words inline, in the bytes' own (lexicographic) order: every flow
  // map lookup of the capture analysis compares addresses, and std::array's operators called
  // memcmp there (issue 38: the offline analysis against bare libpcap).
  bool operator==(const IpAddress& o) const { return Word(0) == o.Word(0) && Word(8) == o.Word(8); }
  bool operator<(const IpAddress& o) const {
    const uint64_t a = Word(0), b = o.Word(0);
    return a != b ? a < b : Word(8) < o.Word(8);
  }
  // Bytes [at, at + 8) as a big-endian number: ordered as the bytes are.
  uint64_t Word(size_t at) const {
    uint64_t w;
    std::memcpy(&w, bytes.data() + at, sizeof(w));
    return __builtin_bswap64(w);
  }
  bool is_v4() const {
    static constexpr std::array<uint8_t, 12> kPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    for (size_t i = 0; i < 12; ++i) {
      if (bytes[i] != kPrefix[i]) return false;
    }
    return true;
  }
  // Abseil's hash (absl::Hash, absl::flat_hash_map) of the two words == compares, each through
  // its seeded mix (a sum folded first would let traffic choose addresses that collide).
  template <typename H>
  friend H AbslHashValue(H h, const IpAddress& a) {
    return H::combine(std::move(h), a.Word(0), a.Word(8));
  }
};

// TCP flag bits (RFC 9293 3.1).
inline constexpr uint8_t kTcpFin = 0x01;
inline constexpr uint8_t kTcpSyn = 0x02;
inline constexpr uint8_t kTcpRst = 0x04;
inline constexpr uint8_t kTcpPsh = 0x08;
inline constexpr uint8_t kTcpAck = 0x10;

// The headers of one frame that the analyzers need. Plain data; filled by ParseFrame.
struct ParsedPacket {
  int64_t ts_ns = 0;       // capture time (Unix ns for files, as libpcap gives it)
  uint32_t wire_len = 0;   // original length on the wire
  uint8_t ip_version = 0;  // 4 or 6
  uint8_t ecn = 0;         // low 2 bits of IPv4 TOS / IPv6 traffic class; 3 = CE (RFC 3168)
  IpAddress src, dst;
  uint8_t l4_proto = 0;  // 6 TCP, 17 UDP
  uint16_t sport = 0, dport = 0;

  // TCP (l4_proto 6).
  uint32_t tcp_seq = 0, tcp_ack = 0;
  uint8_t tcp_flags = 0;
  uint16_t tcp_window = 0;       // raw, unscaled
  int8_t tcp_window_scale = -1;  // from a SYN's window-scale option; -1 = none
  uint32_t tcp_payload_len = 0;  // from the IP lengths, not the (possibly truncated) capture

  // RoCEv2 (UDP to port 4791): the Base Transport Header, IBTA vol. 1 9.2; rxe_hdr.h.
  bool roce = false;
  uint8_t bth_opcode = 0;  // top 3 bits transport (RC 0x00, UC 0x20, RD 0x40, UD 0x60, CNP 0x80)
  bool bth_se = false;
  uint8_t bth_pad = 0;
  uint16_t bth_pkey = 0;
  bool bth_fecn = false, bth_becn = false;
  uint32_t bth_dest_qp = 0;  // 24 bits
  bool bth_ack_req = false;
  uint32_t bth_psn = 0;  // 24 bits
  bool has_aeth = false;
  uint8_t aeth_syndrome = 0;  // 0x00-0x1F ACK, 0x20 RNR NAK, 0x60-0x63 NAK (IBTA 9.7.5.1)
  uint32_t aeth_msn = 0;
  uint32_t roce_payload_len = 0;  // after BTH (and extension headers), without the 4-byte ICRC
};

enum class ParseResult : uint8_t {
  kOk,
  kNotIp,        // ARP, LLDP, ...: skipped and counted
  kTruncated,    // the capture ended inside a header we need
  kMalformed,    // lengths or fields that cannot be right
  kUnsupported,  // a link type or IP protocol the analyzers do not look at
};

// Parses one captured frame of link type `linktype`. Only reads data[0..caplen). Never
// allocates, never reads out of bounds: every bad input gives a ParseResult, never a crash
// (tests/fuzz exercises this). On kOk, *out holds the IP, TCP or UDP/RoCEv2 fields.
ParseResult ParseFrame(int linktype, const uint8_t* data, uint32_t caplen, uint32_t wire_len,
                       int64_t ts_ns, ParsedPacket* out);

// True for RoCE opcodes that carry an AETH (IBTA vol. 1 9.2 table 38): RC/UC/RD
// RDMA READ response first/last/only, ACKNOWLEDGE, ATOMIC ACKNOWLEDGE.
bool OpcodeHasAeth(uint8_t opcode);

}  // namespace fabricscope::collectors::pcap
