#pragma once

// Test helper: builds RoCEv2 (and other) frames byte by byte from the header layouts, and writes
// them to pcap files with libpcap, so tests can read "known" captures back. The layouts follow the
// specifications directly (IBTA vol. 1 9.2-9.3 and annex A17; RFC 791, RFC 8200, RFC 768, IEEE
// 802.1Q; pcap-linktype(7)), not the production parser, so a parser bug is not mirrored here.

#include <arpa/inet.h>
#include <pcap/pcap.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace fabricscope::testing {

using Bytes = std::vector<uint8_t>;

inline void PutBe16(Bytes* b, uint16_t v) {
  b->push_back(static_cast<uint8_t>(v >> 8));
  b->push_back(static_cast<uint8_t>(v));
}
inline void PutBe24(Bytes* b, uint32_t v) {
  b->push_back(static_cast<uint8_t>(v >> 16));
  b->push_back(static_cast<uint8_t>(v >> 8));
  b->push_back(static_cast<uint8_t>(v));
}
inline void PutBe32(Bytes* b, uint32_t v) {
  PutBe16(b, static_cast<uint16_t>(v >> 16));
  PutBe16(b, static_cast<uint16_t>(v));
}
inline void PutBe64(Bytes* b, uint64_t v) {
  PutBe32(b, static_cast<uint32_t>(v >> 32));
  PutBe32(b, static_cast<uint32_t>(v));
}
inline void SetBe16(Bytes* b, size_t off, uint16_t v) {
  (*b)[off] = static_cast<uint8_t>(v >> 8);
  (*b)[off + 1] = static_cast<uint8_t>(v);
}

// An address in text form ("10.0.0.1" or "fe80::1"); IPv4 and IPv6 must not be mixed in a frame.
struct TestAddr {
  bool v6 = false;
  uint8_t bytes[16] = {};
  static TestAddr Parse(const std::string& text) {
    TestAddr a;
    if (inet_pton(AF_INET, text.c_str(), a.bytes) == 1) return a;
    a.v6 = true;
    if (inet_pton(AF_INET6, text.c_str(), a.bytes) != 1) std::abort();
    return a;
  }
};

// RoCEv2 opcodes (IBTA vol. 1 9.2 table 38: top 3 bits transport, low 5 bits operation).
namespace roce_op {
inline constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02,
                         kSendLastImm = 0x03, kSendOnly = 0x04, kSendOnlyImm = 0x05,
                         kWriteFirst = 0x06, kWriteMiddle = 0x07, kWriteLast = 0x08,
                         kWriteLastImm = 0x09, kWriteOnly = 0x0A, kWriteOnlyImm = 0x0B,
                         kReadRequest = 0x0C, kReadRespFirst = 0x0D, kReadRespMiddle = 0x0E,
                         kReadRespLast = 0x0F, kReadRespOnly = 0x10, kAck = 0x11, kAtomicAck = 0x12,
                         kCmpSwap = 0x13, kFetchAdd = 0x14, kSendLastInv = 0x16,
                         kSendOnlyInv = 0x17;
inline constexpr uint8_t kRc = 0x00, kUc = 0x20, kRd = 0x40, kUd = 0x60;
inline constexpr uint8_t kCnp = 0x81;  // RoCEv2 CNP (annex A17.9)
}  // namespace roce_op

// Every header field of one RoCEv2 frame. Defaults: an RC SEND_ONLY, IPv4, no VLAN.
struct RoceFrame {
  std::string src = "10.0.0.1", dst = "10.0.0.2";
  uint8_t ecn = 0;   // IP ECN bits (RFC 3168): 3 = CE
  uint8_t dscp = 0;  // IP DSCP
  int vlan = -1;     // 802.1Q VLAN ID; -1 = untagged
  uint16_t sport = 49152;
  uint16_t dport = 4791;
  // BTH (IBTA vol. 1 9.2): byte 0 opcode; byte 1 SE 0x80, MigReq 0x40, PadCnt 0x30, TVer 0x0F;
  // bytes 2-3 P_Key; byte 4 FECN 0x80, BECN 0x40; bytes 5-7 DestQP; byte 8 AckReq 0x80; 9-11 PSN.
  uint8_t opcode = roce_op::kSendOnly;
  bool se = false, mig_req = false;
  uint8_t pad = 0;   // 0..3
  uint8_t tver = 0;  // 0..15
  uint16_t pkey = 0xFFFF;
  bool fecn = false, becn = false;
  uint32_t dest_qp = 0x11;
  bool ack_req = false;
  uint32_t psn = 0;
  // AETH (9.3.5): syndrome and MSN, on the opcodes that carry one.
  uint8_t syndrome = 0;
  uint32_t msn = 0;
  // RETH (9.3.3): virtual address, R_Key, DMA length.
  uint64_t reth_va = 0x1000;
  uint32_t reth_rkey = 0x1234, reth_len = 0;
  uint32_t payload_len = 0;  // bytes of payload (0xA5), before the pad bytes
  uint32_t icrc = 0;         // the 4-byte trailer; not computed (no check in the parser)
};

// Bytes of extension headers after the BTH for `opcode`, in order, as a list of (name, size).
// From IBTA vol. 1 9.2 table 38 (the header column) and annex A17.9 (CNP).
struct ExtHeaders {
  bool rdeth = false, deth = false, reth = false, atomiceth = false, aeth = false,
       atomicacketh = false, immdt = false, ieth = false, cnp = false;
};
inline ExtHeaders ExtHeadersFor(uint8_t opcode) {
  ExtHeaders h;
  if (opcode == 0x80 || opcode == 0x81) {
    h.cnp = true;
    return h;
  }
  const uint8_t transport = opcode & 0xE0;
  const uint8_t op = opcode & 0x1F;
  if (transport == roce_op::kUd) {
    h.deth = true;
    h.immdt = op == roce_op::kSendOnlyImm;
    return h;
  }
  if (transport == roce_op::kRd) h.rdeth = h.deth = true;
  h.reth = op == roce_op::kWriteFirst || op == roce_op::kWriteOnly ||
           op == roce_op::kWriteOnlyImm || op == roce_op::kReadRequest;
  h.immdt = op == roce_op::kSendLastImm || op == roce_op::kSendOnlyImm ||
            op == roce_op::kWriteLastImm || op == roce_op::kWriteOnlyImm;
  h.aeth = op == roce_op::kReadRespFirst || op == roce_op::kReadRespLast ||
           op == roce_op::kReadRespOnly || op == roce_op::kAck || op == roce_op::kAtomicAck;
  h.atomicacketh = op == roce_op::kAtomicAck;
  h.atomiceth = op == roce_op::kCmpSwap || op == roce_op::kFetchAdd;
  h.ieth = op == roce_op::kSendLastInv || op == roce_op::kSendOnlyInv;
  return h;
}

// The UDP payload of `f`: BTH, extension headers, payload, pad, ICRC.
inline Bytes RocePayload(const RoceFrame& f) {
  Bytes b;
  b.push_back(f.opcode);
  b.push_back(static_cast<uint8_t>((f.se ? 0x80 : 0) | (f.mig_req ? 0x40 : 0) | (f.pad & 0x3) << 4 |
                                   (f.tver & 0x0F)));
  PutBe16(&b, f.pkey);
  b.push_back(static_cast<uint8_t>((f.fecn ? 0x80 : 0) | (f.becn ? 0x40 : 0)));
  PutBe24(&b, f.dest_qp);
  b.push_back(f.ack_req ? 0x80 : 0);
  PutBe24(&b, f.psn);
  const ExtHeaders h = ExtHeadersFor(f.opcode);
  if (h.cnp) b.insert(b.end(), 16, 0);  // A17.9: 16 reserved bytes
  if (h.rdeth) PutBe32(&b, 0x00000001);
  if (h.deth) {
    PutBe32(&b, 0x12345678);  // Q_Key
    PutBe32(&b, 0x00000099);  // source QP
  }
  if (h.reth) {
    PutBe64(&b, f.reth_va);
    PutBe32(&b, f.reth_rkey);
    PutBe32(&b, f.reth_len);
  }
  if (h.atomiceth) {
    PutBe64(&b, f.reth_va);
    PutBe32(&b, f.reth_rkey);
    PutBe64(&b, 1);  // swap/add data
    PutBe64(&b, 0);  // compare data
  }
  if (h.aeth) {
    b.push_back(f.syndrome);
    PutBe24(&b, f.msn);
  }
  if (h.atomicacketh) PutBe64(&b, 42);
  if (h.immdt) PutBe32(&b, 0xC0FFEE00);
  if (h.ieth) PutBe32(&b, 0x00ABCDEF);
  b.insert(b.end(), f.payload_len, 0xA5);
  b.insert(b.end(), f.pad & 0x3, 0);
  PutBe32(&b, f.icrc);
  return b;
}

inline uint32_t ChecksumAdd(uint32_t sum, const uint8_t* p, size_t n) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  if (n % 2) sum += static_cast<uint32_t>(p[n - 1] << 8);
  return sum;
}
inline uint16_t ChecksumFold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// An IP packet (IPv4 with a correct header checksum, or IPv6) carrying a UDP datagram with
// `payload`. IPv4 UDP checksum is 0 (allowed, RFC 768); IPv6 gets a real one (RFC 8200 8.1).
inline Bytes UdpIpPacket(const RoceFrame& f, const Bytes& payload) {
  const TestAddr src = TestAddr::Parse(f.src), dst = TestAddr::Parse(f.dst);
  Bytes udp;
  PutBe16(&udp, f.sport);
  PutBe16(&udp, f.dport);
  PutBe16(&udp, static_cast<uint16_t>(8 + payload.size()));
  PutBe16(&udp, 0);
  udp.insert(udp.end(), payload.begin(), payload.end());
  Bytes ip;
  const uint8_t tclass = static_cast<uint8_t>(f.dscp << 2 | (f.ecn & 0x3));
  if (!src.v6) {
    ip.push_back(0x45);
    ip.push_back(tclass);
    PutBe16(&ip, static_cast<uint16_t>(20 + udp.size()));
    PutBe16(&ip, 0x1234);  // identification
    PutBe16(&ip, 0x4000);  // DF
    ip.push_back(64);
    ip.push_back(17);
    PutBe16(&ip, 0);
    ip.insert(ip.end(), src.bytes, src.bytes + 4);
    ip.insert(ip.end(), dst.bytes, dst.bytes + 4);
    SetBe16(&ip, 10, ChecksumFold(ChecksumAdd(0, ip.data(), 20)));
  } else {
    ip.push_back(static_cast<uint8_t>(0x60 | tclass >> 4));
    ip.push_back(static_cast<uint8_t>((tclass & 0x0F) << 4));
    PutBe16(&ip, 0);  // flow label low bits
    PutBe16(&ip, static_cast<uint16_t>(udp.size()));
    ip.push_back(17);
    ip.push_back(64);
    ip.insert(ip.end(), src.bytes, src.bytes + 16);
    ip.insert(ip.end(), dst.bytes, dst.bytes + 16);
    uint32_t sum = ChecksumAdd(0, src.bytes, 16);
    sum = ChecksumAdd(sum, dst.bytes, 16);
    sum += static_cast<uint32_t>(udp.size()) + 17;
    sum = ChecksumAdd(sum, udp.data(), udp.size());
    uint16_t c = ChecksumFold(sum);
    SetBe16(&udp, 6, c == 0 ? 0xFFFF : c);
  }
  ip.insert(ip.end(), udp.begin(), udp.end());
  return ip;
}

inline Bytes RoceIpPacket(const RoceFrame& f) { return UdpIpPacket(f, RocePayload(f)); }

// Link-layer framings (pcap-linktype(7)).
inline uint16_t EtherTypeOf(const Bytes& ip) {
  return !ip.empty() && (ip[0] >> 4) == 6 ? 0x86DD : 0x0800;
}
// Ethernet II with optional 802.1Q tags (outer first; TPID 0x88A8 for an outer S-tag).
inline Bytes EthernetFrame(const Bytes& l3, uint16_t ethertype,
                           const std::vector<int>& vlans = {}) {
  Bytes b = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01};
  for (size_t i = 0; i < vlans.size(); ++i) {
    PutBe16(&b, vlans.size() > 1 && i == 0 ? 0x88A8 : 0x8100);
    PutBe16(&b, static_cast<uint16_t>(3 << 13 | (vlans[i] & 0x0FFF)));  // PCP 3
  }
  PutBe16(&b, ethertype);
  b.insert(b.end(), l3.begin(), l3.end());
  return b;
}
// LINKTYPE_LINUX_SLL (113): packet type, ARPHRD, address length, 8 address bytes, protocol.
inline Bytes SllFrame(const Bytes& l3, uint16_t protocol) {
  Bytes b;
  PutBe16(&b, 0);  // sent to us
  PutBe16(&b, 1);  // ARPHRD_ETHER
  PutBe16(&b, 6);
  for (uint8_t x : {0x02, 0, 0, 0, 0, 0x01, 0, 0}) b.push_back(x);
  PutBe16(&b, protocol);
  b.insert(b.end(), l3.begin(), l3.end());
  return b;
}
// LINKTYPE_LINUX_SLL2 (276): protocol, reserved, ifindex, ARPHRD, packet type, address length,
// 8 address bytes.
inline Bytes Sll2Frame(const Bytes& l3, uint16_t protocol) {
  Bytes b;
  PutBe16(&b, protocol);
  PutBe16(&b, 0);
  PutBe32(&b, 3);  // ifindex
  PutBe16(&b, 1);  // ARPHRD_ETHER
  b.push_back(0);
  b.push_back(6);
  for (uint8_t x : {0x02, 0, 0, 0, 0, 0x01, 0, 0}) b.push_back(x);
  b.insert(b.end(), l3.begin(), l3.end());
  return b;
}

// The Ethernet frame of `f` (VLAN-tagged if f.vlan >= 0).
inline Bytes RoceEthernetFrame(const RoceFrame& f) {
  const Bytes ip = RoceIpPacket(f);
  return EthernetFrame(ip, EtherTypeOf(ip),
                       f.vlan >= 0 ? std::vector<int>{f.vlan} : std::vector<int>{});
}

// Writes frames to a pcap file (pcap_open_dead + pcap_dump_open + pcap_dump).
class PcapWriter {
 public:
  explicit PcapWriter(const std::string& path, int linktype = DLT_EN10MB, int snaplen = 65535) {
    pcap_ = pcap_open_dead(linktype, snaplen);
    if (pcap_ != nullptr) dumper_ = pcap_dump_open(pcap_, path.c_str());
  }
  ~PcapWriter() { Close(); }
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  bool ok() const { return dumper_ != nullptr; }

  // One record. `wire_len` 0 means the frame's own size (not truncated).
  void Write(const Bytes& frame, int64_t ts_ns, uint32_t wire_len = 0) {
    if (dumper_ == nullptr) return;
    pcap_pkthdr h{};
    h.ts.tv_sec = static_cast<time_t>(ts_ns / 1000000000);
    h.ts.tv_usec = static_cast<suseconds_t>(ts_ns % 1000000000 / 1000);
    h.caplen = static_cast<bpf_u_int32>(frame.size());
    h.len = wire_len != 0 ? wire_len : h.caplen;
    pcap_dump(reinterpret_cast<u_char*>(dumper_), &h, frame.data());
  }

  void Close() {
    if (dumper_ != nullptr) pcap_dump_close(dumper_);
    if (pcap_ != nullptr) pcap_close(pcap_);
    dumper_ = nullptr;
    pcap_ = nullptr;
  }

 private:
  pcap_t* pcap_ = nullptr;
  pcap_dumper_t* dumper_ = nullptr;
};

// Reads every record of a pcap file: (linktype, frames with their wire lengths and times).
struct PcapRecord {
  Bytes data;
  uint32_t wire_len = 0;
  int64_t ts_ns = 0;
};
inline bool ReadPcap(const std::string& path, int* linktype, std::vector<PcapRecord>* out) {
  char err[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  if (p == nullptr) return false;
  *linktype = pcap_datalink(p);
  pcap_pkthdr* h = nullptr;
  const u_char* data = nullptr;
  while (pcap_next_ex(p, &h, &data) == 1) {
    PcapRecord r;
    r.data.assign(data, data + h->caplen);
    r.wire_len = h->len;
    r.ts_ns = int64_t{h->ts.tv_sec} * 1000000000 + int64_t{h->ts.tv_usec} * 1000;
    out->push_back(std::move(r));
  }
  pcap_close(p);
  return true;
}

}  // namespace fabricscope::testing
