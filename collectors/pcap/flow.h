#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "collectors/pcap/packet.h"

namespace fabricscope::collectors::pcap {

// A flow, directional (src -> dst). RoCEv2: (src IP, dst IP, destination QP), ports 0 and
// proto 17. TCP: the 5-tuple with qp 0.
struct FlowKey {
  IpAddress src, dst;
  uint8_t proto = 0;
  uint16_t sport = 0, dport = 0;
  uint32_t qp = 0;
  auto Tie() const { return std::tie(src, dst, proto, sport, dport, qp); }
  bool operator<(const FlowKey& o) const { return Tie() < o.Tie(); }
  bool operator==(const FlowKey& o) const { return Tie() == o.Tie(); }
  // Abseil's hash of the fields == compares (the capture analysis's per-frame maps): the four
  // address words and one word of the ports, QP and protocol, each through Abseil's seeded mix.
  // Not a sum of the fields folded first: traffic could then pick keys that share a hash (an
  // IPv6 host choosing its interface IDs per port) and turn every lookup into a scan of them.
  template <typename H>
  friend H AbslHashValue(H h, const FlowKey& k) {
    const uint64_t tail = static_cast<uint64_t>(k.proto) << 56 ^
                          static_cast<uint64_t>(k.sport) << 40 ^
                          static_cast<uint64_t>(k.dport) << 24 ^ k.qp;
    return H::combine(std::move(h), k.src.Word(0), k.src.Word(8), k.dst.Word(0), k.dst.Word(8),
                      tail);
  }
  // The reverse direction (dst -> src); for RoCE the caller must supply the peer's QP.
  FlowKey Reversed() const {
    FlowKey r = *this;
    std::swap(r.src, r.dst);
    std::swap(r.sport, r.dport);
    return r;
  }
};

// The id an analyzer gives a flow it tracks (RoceAnalyzer::Add, TcpAnalyzer::Add): dense from 0
// in the order the flows appeared, for the capture window's counters (an index instead of a
// hash probe per frame). kUntracked: a frame the analyzer does not track (not its protocol, or
// its flow table was full).
inline constexpr uint32_t kUntracked = UINT32_MAX;

// The directional flow a parsed RoCEv2 or TCP frame belongs to: (src, dst, destination QP) or
// the 5-tuple, as FlowKey describes them.
FlowKey FlowKeyOf(const ParsedPacket& p);

// "10.0.0.1" / "fe80::1" text of an address.
std::string FormatAddress(const IpAddress& a);

enum class LossKind : uint8_t {
  kRocePsnGap,          // PSNs skipped: loss upstream of this capture point
  kRoceRetransmission,  // a PSN range seen again (go-back-N)
  kRoceNakSequence,     // NAK PSN sequence error (syndrome 0x60)
  kRoceRnrNak,          // receiver not ready (syndrome 0x20-0x3F)
  kRoceNakOther,        // other NAKs (0x61-0x63)
  kRoceAckTimeout,      // a retransmission with no NAK before it: the requester's ACK timer fired
  kTcpRetransmission,
  kTcpFastRetransmission,
  kTcpSpuriousRetransmission,
  kTcpOutOfOrder,
};

const char* LossKindName(LossKind k);

// One loss or retransmission seen on a flow: which flow, what, when, and the PSN range (RoCE,
// modulo 2^24) or sequence range (TCP, [first, last]).
struct LossEvent {
  FlowKey flow;
  LossKind kind;
  int64_t ts_ns = 0;
  uint32_t first = 0;
  uint32_t last = 0;
};

struct RoceFlowStats {
  uint64_t packets = 0;
  uint64_t bytes = 0;                  // wire bytes of the frames
  uint64_t data_packets = 0;           // requests/responses carrying a PSN of the data stream
  uint64_t retransmitted_packets = 0;  // data packets whose PSN was seen before
  uint64_t psn_gap_packets = 0;        // PSNs never seen (sum of gap sizes)
  uint64_t psn_gaps = 0;               // gap events
  uint64_t acks = 0;
  uint64_t naks_sequence_error = 0;
  uint64_t rnr_naks = 0;
  uint64_t naks_other = 0;
  uint64_t ack_timeouts = 0;  // inferred
  uint64_t cnps = 0;
  uint64_t ecn_ce_packets = 0;
};

struct TcpFlowStats {
  uint64_t packets = 0;
  uint64_t bytes = 0;  // wire bytes of the frames
  uint64_t payload_bytes = 0;
  // Each counted as the frames tshark flags with tcp.analysis.<name>.
  uint64_t retransmissions = 0;
  uint64_t fast_retransmissions = 0;
  uint64_t spurious_retransmissions = 0;
  uint64_t out_of_order = 0;
  uint64_t duplicate_acks = 0;
  uint64_t zero_windows = 0;
};

}  // namespace fabricscope::collectors::pcap
