#pragma once

// Known RoCEv2 captures: each scenario is a list of frames whose loss, NAKs and retransmissions
// are known by construction. Used by the analyzer tests (exact counts) and the tshark oracle test
// (every frame's decoded fields).

#include <cstdint>
#include <string>
#include <vector>

#include "tests/common/pcap_writer.h"

namespace fabricscope::testing {

// Addresses and QPs of the scenarios: requester Q and responder R.
inline constexpr char kQ[] = "10.0.0.1";
inline constexpr char kR[] = "10.0.0.2";
inline constexpr char kQ6[] = "fd00::1";
inline constexpr char kR6[] = "fd00::2";
inline constexpr uint32_t kQpQ = 0x000A21;  // the requester's QP: destination of ACKs
inline constexpr uint32_t kQpR = 0x000B31;  // the responder's QP: destination of requests

// An RC request from `src` to `dst` (destination QP `qp`).
inline RoceFrame Req(const std::string& src, const std::string& dst, uint32_t qp, uint32_t psn,
                     uint8_t opcode = roce_op::kSendOnly, uint32_t payload = 64) {
  RoceFrame f;
  f.src = src;
  f.dst = dst;
  f.dest_qp = qp;
  f.psn = psn & 0xFFFFFF;
  f.opcode = opcode;
  f.payload_len = payload;
  f.ack_req = true;
  return f;
}
// An RC ACKNOWLEDGE with AETH `syndrome` (0x00 ACK, 0x2x RNR NAK, 0x60-0x63 NAK).
inline RoceFrame Ack(const std::string& src, const std::string& dst, uint32_t qp, uint32_t psn,
                     uint8_t syndrome = 0x1F, uint32_t msn = 1) {
  RoceFrame f;
  f.src = src;
  f.dst = dst;
  f.dest_qp = qp;
  f.psn = psn & 0xFFFFFF;
  f.opcode = roce_op::kAck;
  f.syndrome = syndrome;
  f.msn = msn;
  return f;
}

// SEND_ONLY PSNs 100..109 from Q to R with 103, 104 and 107 lost before the capture point.
inline std::vector<RoceFrame> LossScenario() {
  std::vector<RoceFrame> v;
  for (uint32_t psn = 100; psn < 110; ++psn) {
    if (psn == 103 || psn == 104 || psn == 107) continue;
    v.push_back(Req(kQ, kR, kQpR, psn));
  }
  return v;
}

// RDMA WRITE 1000-1004 with 1002 lost upstream; R NAKs (sequence error, PSN 1002); Q goes back
// to 1002 and resends 1002-1004, then sends 1005, 1006 (addresses: IPv4 or IPv6).
inline std::vector<RoceFrame> GoBackNScenario(const std::string& q = kQ,
                                              const std::string& r = kR) {
  std::vector<RoceFrame> v;
  v.push_back(Req(q, r, kQpR, 1000, roce_op::kWriteOnly));
  v.push_back(Req(q, r, kQpR, 1001, roce_op::kWriteOnly));
  v.push_back(Ack(r, q, kQpQ, 1001, 0x1F, 2));
  v.push_back(Req(q, r, kQpR, 1003, roce_op::kWriteOnly));
  v.push_back(Ack(r, q, kQpQ, 1002, 0x60, 2));  // NAK PSN sequence error: R expects 1002
  v.push_back(Req(q, r, kQpR, 1004, roce_op::kWriteOnly));
  for (uint32_t psn = 1002; psn <= 1006; ++psn)
    v.push_back(Req(q, r, kQpR, psn, roce_op::kWriteOnly));
  v.push_back(Ack(r, q, kQpQ, 1006, 0x1F, 7));
  return v;
}

// SEND 500-504 seen, ACK 501, no answer: Q's ACK timer fires and it resends 502-504, then sends
// 505, 506; no ACK again: it resends 505, 506, then 507. Then a NAK (PSN 508) resolved by an ACK
// of 508 before any resend, and a resend of 508 after all: a timeout, the NAK was stale.
inline std::vector<RoceFrame> AckTimeoutScenario() {
  std::vector<RoceFrame> v;
  for (uint32_t psn = 500; psn <= 504; ++psn) v.push_back(Req(kQ, kR, kQpR, psn));
  v.push_back(Ack(kR, kQ, kQpQ, 501));
  for (uint32_t psn = 502; psn <= 506; ++psn) v.push_back(Req(kQ, kR, kQpR, psn));
  for (uint32_t psn = 505; psn <= 508; ++psn) v.push_back(Req(kQ, kR, kQpR, psn));
  v.push_back(Ack(kR, kQ, kQpQ, 508, 0x60));
  v.push_back(Ack(kR, kQ, kQpQ, 508));
  v.push_back(Req(kQ, kR, kQpR, 508));
  v.push_back(Req(kQ, kR, kQpR, 509));
  return v;
}

// SEND 2000 answered by an RNR NAK (timer code 0x0E); Q resends 2000 after the RNR timer, then
// 2001, ACKed.
inline std::vector<RoceFrame> RnrScenario() {
  return {Req(kQ, kR, kQpR, 2000), Ack(kR, kQ, kQpQ, 2000, 0x2E), Req(kQ, kR, kQpR, 2000),
          Req(kQ, kR, kQpR, 2001), Ack(kR, kQ, kQpQ, 2001)};
}

// The other NAK codes (invalid request, remote access, remote operational) and two reserved
// syndromes (0x40 type, 0x65 code), on one connection.
inline std::vector<RoceFrame> OtherNakScenario() {
  return {Req(kQ, kR, kQpR, 3000),       Ack(kR, kQ, kQpQ, 3000, 0x61),
          Req(kQ, kR, kQpR, 3001),       Ack(kR, kQ, kQpQ, 3001, 0x62),
          Req(kQ, kR, kQpR, 3002),       Ack(kR, kQ, kQpQ, 3002, 0x63),
          Ack(kR, kQ, kQpQ, 3002, 0x40), Ack(kR, kQ, kQpQ, 3002, 0x65)};
}

// Congestion: Q's requests 4000-4005, with ECN CE on 4001, 4003 and 4004 and ECT(0) on the others;
// R's notification point answers with three CNPs (opcode 0x81, BECN) to Q's QP.
inline std::vector<RoceFrame> CongestionScenario() {
  std::vector<RoceFrame> v;
  for (uint32_t psn = 4000; psn <= 4005; ++psn) {
    RoceFrame f = Req(kQ, kR, kQpR, psn, roce_op::kWriteMiddle, 1024);
    f.ecn = psn == 4001 || psn == 4003 || psn == 4004 ? 3 : 2;
    f.dscp = 26;
    v.push_back(f);
    if (psn % 2 == 1) {
      RoceFrame cnp;
      cnp.src = kR;
      cnp.dst = kQ;
      cnp.opcode = roce_op::kCnp;
      cnp.becn = true;
      cnp.dest_qp = kQpQ;
      cnp.psn = 0;
      cnp.dscp = 48;
      v.push_back(cnp);
    }
  }
  return v;
}

// PSNs across the 2^24 wrap on three QPs of one IP pair: 0x10 without a gap, 0x20 with a gap of
// {0, 1} after the wrap, 0x30 with a gap {0xFFFFFE, 0xFFFFFF, 0} across it and then a resend of
// 0xFFFFFF..2 (no NAK: an ACK timeout).
inline std::vector<RoceFrame> WrapScenario() {
  std::vector<RoceFrame> v;
  for (uint32_t psn : {0xFFFFFDu, 0xFFFFFEu, 0xFFFFFFu, 0u, 1u, 2u})
    v.push_back(Req(kQ, kR, 0x10, psn));
  for (uint32_t psn : {0xFFFFFEu, 0xFFFFFFu, 2u, 3u}) v.push_back(Req(kQ, kR, 0x20, psn));
  for (uint32_t psn : {0xFFFFFDu, 1u, 2u, 0xFFFFFFu, 0u, 1u, 2u, 3u})
    v.push_back(Req(kQ, kR, 0x30, psn));
  return v;
}

// Two connections on one IP pair (QPs 0x100/0x200 with PSNs near 0x10000, and 0x101/0x201 with
// PSNs near 0x500000) and one on another pair (10.0.1.1 -> 10.0.1.2); each has one loss and a
// NAK; the ACK flows must pair with their own data flows by PSN.
inline std::vector<RoceFrame> MultiQpScenario() {
  std::vector<RoceFrame> v;
  struct Conn {
    std::string q, r;
    uint32_t qp_q, qp_r, base;
  };
  const Conn conns[] = {{kQ, kR, 0x100, 0x200, 0x10000},
                        {kQ, kR, 0x101, 0x201, 0x500000},
                        {"10.0.1.1", "10.0.1.2", 0x102, 0x202, 0x7000}};
  // Interleaved: every connection's step i before the next step. The NAKs come after every
  // connection's PSN base + 3, in reverse order, so "the last data flow seen on the IP pair" would
  // pair them wrongly.
  for (uint32_t i = 0; i < 6; ++i) {
    for (const Conn& c : conns) {
      if (i != 2) v.push_back(Req(c.q, c.r, c.qp_r, c.base + i));  // base + 2 lost
    }
    if (i == 3) {
      for (int k = 2; k >= 0; --k) {
        v.push_back(Ack(conns[k].r, conns[k].q, conns[k].qp_q, conns[k].base + 2, 0x60));
      }
    }
  }
  for (uint32_t i = 2; i < 7; ++i) {
    for (const Conn& c : conns) v.push_back(Req(c.q, c.r, c.qp_r, c.base + i));
  }
  for (const Conn& c : conns) v.push_back(Ack(c.r, c.q, c.qp_q, c.base + 6));
  return v;
}

// An RDMA READ of 4 response packets at PSN 300 and a SEND at 304 (the READ used 300-303). The
// response MIDDLE 302 is lost upstream; Q re-issues the READ from 302 (2 packets) and resends
// the SEND 304 (go-back-N), R resends responses 302, 303, then Q sends 305.
inline std::vector<RoceFrame> ReadScenario() {
  std::vector<RoceFrame> v;
  RoceFrame read = Req(kQ, kR, kQpR, 300, roce_op::kReadRequest, 0);
  read.reth_len = 4096;
  v.push_back(read);
  v.push_back(Req(kQ, kR, kQpR, 304));
  auto resp = [](uint8_t op, uint32_t psn) {
    RoceFrame f = Req(kR, kQ, kQpQ, psn, op, 1024);
    f.ack_req = false;
    f.syndrome = 0x1F;
    f.msn = 1;
    return f;
  };
  v.push_back(resp(roce_op::kReadRespFirst, 300));
  v.push_back(resp(roce_op::kReadRespMiddle, 301));
  v.push_back(resp(roce_op::kReadRespLast, 303));
  read.psn = 302;
  read.reth_len = 2048;
  read.reth_va += 2048;
  v.push_back(read);
  v.push_back(Req(kQ, kR, kQpR, 304));
  v.push_back(resp(roce_op::kReadRespFirst, 302));
  v.push_back(resp(roce_op::kReadRespLast, 303));
  v.push_back(Ack(kR, kQ, kQpQ, 304));
  v.push_back(Req(kQ, kR, kQpR, 305));
  v.push_back(Ack(kR, kQ, kQpQ, 305));
  return v;
}

// Every opcode with an extension-header layout of its own, for the oracle test: RC, UC, UD,
// atomics, immediate data, invalidate, READ responses, ATOMIC ACKNOWLEDGE, CNP; distinct QPs,
// PSNs, P_Keys and pad counts.
inline std::vector<RoceFrame> OpcodeZooScenario() {
  std::vector<RoceFrame> v;
  const uint8_t ops[] = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
                         0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13,
                         0x14, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26,
                         0x27, 0x28, 0x29, 0x2A, 0x2B, 0x64, 0x65, 0x81};
  uint32_t i = 0;
  for (uint8_t op : ops) {
    RoceFrame f;
    f.opcode = op;
    f.dest_qp = 0x123400 + i;
    f.psn = 0xABC000 + i * 0x111;
    f.pkey = static_cast<uint16_t>(0x8000 | i);
    f.pad = static_cast<uint8_t>(i % 4);
    f.payload_len = 32 + i;
    f.se = i % 2 == 0;
    f.ack_req = i % 3 == 0;
    f.syndrome = static_cast<uint8_t>(i % 32);
    f.msn = 0x000100 + i;
    if (op == roce_op::kCnp) f.becn = true;
    v.push_back(f);
    ++i;
  }
  return v;
}

struct NamedScenario {
  std::string name;
  std::vector<RoceFrame> frames;
};
inline std::vector<NamedScenario> AllScenarios() {
  return {{"loss", LossScenario()},
          {"go_back_n", GoBackNScenario()},
          {"go_back_n_v6", GoBackNScenario(kQ6, kR6)},
          {"ack_timeout", AckTimeoutScenario()},
          {"rnr", RnrScenario()},
          {"other_nak", OtherNakScenario()},
          {"congestion", CongestionScenario()},
          {"wrap", WrapScenario()},
          {"multi_qp", MultiQpScenario()},
          {"read", ReadScenario()},
          {"opcodes", OpcodeZooScenario()}};
}

// Writes `frames` as Ethernet frames (1 us apart, from `t0_ns`) to a pcap file.
inline bool WriteScenario(const std::string& path, const std::vector<RoceFrame>& frames,
                          int64_t t0_ns = 1700000000000000000) {
  PcapWriter w(path);
  if (!w.ok()) return false;
  int64_t ts = t0_ns;
  for (const RoceFrame& f : frames) {
    w.Write(RoceEthernetFrame(f), ts);
    ts += 1000;
  }
  return true;
}

}  // namespace fabricscope::testing
