#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "collectors/pcap/flow.h"
#include "collectors/pcap/packet.h"

namespace fabricscope::collectors::pcap {

// Loss and retransmission analysis of RoCEv2 traffic from captured frames. Facts used: IBTA spec
// vol. 1 9.2 (BTH), 9.3 (AETH), 9.7 (reliable service: PSNs, ACK/NAK, go-back-N, ACK timer),
// annex A17 (RoCEv2, CNP); kernel drivers/infiniband/sw/rxe/rxe_hdr.h (AETH syndromes),
// rxe_resp.c (responder PSN check), rxe_comp.c (requester NAK and retry handling).
//
// Flows. A flow is (source IP, destination IP, BTH destination QP), proto 17, ports 0: one
// direction of one connection. Every RoCE frame counts in packets/bytes (wire length) and, with
// IP ECN 0b11, ecn_ce_packets of its flow; CNPs (opcode 0x81, annex A17) count in cnps.
//
// PSN streams. PSNs are 24 bits and wrap (9.7.1), so they are compared with serial-number
// arithmetic: (a - b) mod 2^24 in (0, 2^23) means a is ahead of b. A flow has two independent
// streams, because the packets a QP sends to its peer use two PSN spaces (9.7.1): its requests
// (RC/UC SEND, RDMA WRITE, RDMA READ request, atomics) carry its own send PSNs, and its RDMA READ
// responses (RC) carry the PSNs of the peer's requests. UD and RD packets are not tracked.
//   - Requests. A request consumes one PSN, so the next is psn + 1, except an RDMA READ request,
//     which consumes one PSN per response packet (9.7.1): ceil(DMA length / path MTU), and the
//     path MTU is not on the wire. So after a READ request the next request PSN is only known to
//     be ahead, and may jump without a gap being counted. (Simplified: a request lost right after
//     a READ request is not seen as a gap.)
//   - READ responses. The FIRST or ONLY packet of a response carries its READ request's PSN, and
//     the PSNs of other requests lie between two responses (they are answered by ACKs), so FIRST
//     and ONLY may jump ahead; MIDDLE and LAST must follow on. (Simplified: a lost ONLY, or a lost
//     LAST directly followed by a new FIRST, is not seen.)
// Ahead of the expected PSN where no jump is allowed: the PSNs in between were never seen (lost
// upstream of the capture point): psn_gaps += 1, psn_gap_packets += their number, event
// kRocePsnGap [expected, psn - 1]. Behind it: retransmitted_packets += 1; the requester resends
// from the PSN the responder expects (go-back-N, 9.7). Consecutive repeated PSNs form one
// episode, which ends when the stream passes its old maximum again, or when a repeated PSN goes
// back once more (a new episode starts); each episode emits one kRoceRetransmission
// [first repeated, last repeated] when it ends (or at Flush()). A late packet after a gap
// (reordering) also counts as repeated: RoCE does not reorder within a QP, and a PSN behind the
// maximum is what go-back-N resends.
//
// ACK timeouts. A request-stream episode is "after a NAK" if, since the flow's last episode, it
// was sent a NAK PSN sequence error or an RNR NAK (both make the requester resend from the NAK's
// PSN, 9.7; rxe_comp.c) that no positive ACK at or after the NAK's PSN has resolved since, or its
// peer's READ-response stream had a gap (the requester re-issues the READ request from the first
// missing PSN; the responder never learns of it, so only the episode clears it). Otherwise the
// requester resent because its local ACK timer fired (9.7): ack_timeouts += 1 and an event
// kRoceAckTimeout [first repeated, first repeated] when the episode starts. Only RC has ACKs and
// retransmissions; a repeated PSN on UC (unreliable: no ACK, no resend) is counted and shown as a
// retransmission but never as an ACK timeout. Repeated READ responses are the responder
// answering a re-issued READ request: no ACK-timeout inference on that stream.
//
// ACK / NAK (RC ACKNOWLEDGE, opcode 0x11, with an AETH, 9.3; RC ATOMIC ACKNOWLEDGE 0x12 counts as
// an ACK). syndrome & 0xE0 (rxe_hdr.h AETH_TYPE_MASK): 0x00 ACK (acks), 0x20 RNR NAK (rnr_naks,
// kRoceRnrNak), 0x60 NAK: 0x60 PSN sequence error (naks_sequence_error, kRoceNakSequence),
// 0x61-0x64 the other NAK codes (naks_other, kRoceNakOther); other values are reserved and only
// counted in reserved_syndromes(). Event range: [NAK PSN, NAK PSN] (for a sequence error, the PSN
// the responder expects, rxe_resp.c).
//
// Pairing an ACK flow with its data flow. ACKs, NAKs and READ responses go from the responder R
// to the requester Q with the destination QP of the requester's QP Qq, while the data flow is
// (Q -> R, Qr): Qr never appears on them. The pairing is learned from PSNs: an acknowledging
// packet's PSN is in the requester's PSN space, so among the request streams from Q to R it
// belongs to the one whose highest seen PSN is nearest to it (smallest serial distance, at most
// 2^20; behind is the rule, ahead happens after a READ request, see above). Start PSNs are random
// in 2^24 (9.7.1), so QPs sharing an IP pair are told apart; a learned pairing is kept while it
// stays plausible, and a data flow already paired with another ACK flow is chosen last. ACK/NAK/RNR
// counters are incremented on the flow carrying the packet and also, when paired, on the data flow
// they concern (so summing flows counts them twice; totals() counts each once); NAK events name the
// data flow when paired, else the carrying flow. NAKs that could not be paired are counted in
// unpaired_naks().
//
// Bounds: at most max_flows flows (frames of further new flows count in untracked_packets()), at
// most max_events events between TakeEvents() calls (the rest count in dropped_events()).
// Not thread-safe: one analyzer per capture thread.
class RoceAnalyzer {
 public:
  struct Options {
    size_t max_flows = 65536;
    size_t max_events = 4096;
  };

  RoceAnalyzer() : RoceAnalyzer(Options()) {}
  explicit RoceAnalyzer(const Options& options) : options_(options) {}
  RoceAnalyzer(const RoceAnalyzer&) = delete;
  RoceAnalyzer& operator=(const RoceAnalyzer&) = delete;

  // One parsed frame (ParseFrame gave kOk); frames that are not RoCEv2 are ignored. *flow (may
  // be null) gets the frame's flow id (its index for key_of), or kUntracked.
  void Add(const ParsedPacket& p, uint32_t* flow = nullptr);
  // The key of flow id `id` (< the number of flows tracked).
  const FlowKey& key_of(uint32_t id) const { return keys_[id]; }

  // Ends every open retransmission episode (end of a capture file), emitting its event.
  void Flush();

  const std::map<FlowKey, RoceFlowStats>& flows() const { return flows_; }
  // The events since the last call, oldest first.
  std::vector<LossEvent> TakeEvents();

  // Every RoCE frame counted once (ACK/NAK counters once per packet, not per flow). Frames of
  // untracked flows count in packets, bytes, ecn_ce_packets, cnps and the ACK/NAK counters only.
  const RoceFlowStats& totals() const { return totals_; }
  uint64_t untracked_packets() const { return untracked_packets_; }
  uint64_t dropped_events() const { return dropped_events_; }
  uint64_t unpaired_naks() const { return unpaired_naks_; }
  uint64_t reserved_syndromes() const { return reserved_syndromes_; }

  // The data flow an ACK flow was paired with, if any (for tests and diagnostics).
  const FlowKey* PairedDataFlow(const FlowKey& ack_flow) const;

  static constexpr uint32_t kPsnMask = 0xFFFFFF;
  static constexpr uint32_t kPsnHalf = 0x800000;
  static constexpr uint32_t kPairWindow = 1u << 20;
  // (a - b) modulo 2^24.
  static uint32_t PsnDiff(uint32_t a, uint32_t b) { return (a - b) & kPsnMask; }

 private:
  // One PSN stream of a flow (requests, or READ responses).
  struct Stream {
    bool started = false;
    uint32_t expected = 0;  // the PSN after the highest seen
    bool may_jump = false;  // the next PSN may be ahead without a gap (after a READ request)
    bool in_episode = false;
    uint32_t episode_first = 0, episode_last = 0;
    int64_t episode_ts = 0;
  };
  struct FlowState {
    RoceFlowStats* stats = nullptr;
    uint32_t id = 0;  // its index in keys_
    Stream requests, responses;
    // A NAK (sequence error or RNR) not yet answered by a retransmission episode, nor resolved
    // by a positive ACK at or after nak_psn.
    bool nak_pending = false;
    uint32_t nak_psn = 0;
    // A gap in the peer's READ responses not yet answered by a retransmission episode (the
    // responder does not know of it, so no ACK resolves it).
    bool read_gap_pending = false;
    // For a flow carrying ACKs: the data flow they belong to; for a data flow: that ACK flow.
    bool paired = false;
    FlowKey data_flow;
    bool has_ack_flow = false;
    FlowKey ack_flow;
  };

  FlowState* Lookup(const FlowKey& key);
  FlowState* FindState(const FlowKey& key);
  // One packet of a PSN stream; true if it revealed a gap.
  bool AddData(const FlowKey& key, FlowState* st, Stream* s, const ParsedPacket& p, bool jump_ok,
               bool rc_requests);
  void EndEpisode(const FlowKey& key, Stream* s);
  void AddAeth(const FlowKey& key, FlowState* st, const ParsedPacket& p);
  // The data flow (request stream) that an acknowledging packet on `key` with `psn` concerns.
  FlowState* PairFor(const FlowKey& key, FlowState* st, uint32_t psn, FlowKey* data_key);
  void Emit(const FlowKey& key, LossKind kind, int64_t ts, uint32_t first, uint32_t last);

  Options options_;
  std::map<FlowKey, RoceFlowStats> flows_;  // ordered: flows() and Flush's event order
  // The per-frame lookup: Abseil's hash table, one probe per frame (issue 38's profile of the
  // offline analysis); its nodes stay put, as do flows_'s, which their stats point into.
  absl::node_hash_map<FlowKey, FlowState> state_;
  std::vector<FlowKey> keys_;  // by flow id
  // Flows with a request stream, by (src, dst) IP pair: their QPs, for the pairing.
  absl::flat_hash_map<std::pair<IpAddress, IpAddress>, std::vector<uint32_t>> requesters_;
  std::vector<LossEvent> events_;
  RoceFlowStats totals_;
  uint64_t untracked_packets_ = 0;
  uint64_t dropped_events_ = 0;
  uint64_t unpaired_naks_ = 0;
  uint64_t reserved_syndromes_ = 0;
};

}  // namespace fabricscope::collectors::pcap
