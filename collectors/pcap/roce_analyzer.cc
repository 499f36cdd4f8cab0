#include "collectors/pcap/roce_analyzer.h"

#include <tuple>

namespace fabricscope::collectors::pcap {
namespace {

// BTH opcode: top 3 bits transport, low 5 bits operation (IBTA vol. 1 9.2; rxe_hdr.h).
constexpr uint8_t kTransportMask = 0xE0;
constexpr uint8_t kOpMask = 0x1F;
constexpr uint8_t kRc = 0x00;
constexpr uint8_t kUc = 0x20;
constexpr uint8_t kRoceCnp = 0x81;  // annex A17: RoCEv2 CNP

// Operations (low 5 bits; 9.2).
constexpr uint8_t kSendFirst = 0x00;
constexpr uint8_t kWriteOnlyImm = 0x0B;
constexpr uint8_t kReadRequest = 0x0C;
constexpr uint8_t kReadRespFirst = 0x0D;
constexpr uint8_t kReadRespOnly = 0x10;
constexpr uint8_t kAcknowledge = 0x11;
constexpr uint8_t kAtomicAcknowledge = 0x12;
constexpr uint8_t kCmpSwap = 0x13;
constexpr uint8_t kFetchAdd = 0x14;
constexpr uint8_t kSendLastInv = 0x16;
constexpr uint8_t kSendOnlyInv = 0x17;

// AETH syndrome (9.3; rxe_hdr.h AETH_TYPE_MASK and the AETH_* values).
constexpr uint8_t kSyndromeTypeMask = 0xE0;
constexpr uint8_t kSyndromeAck = 0x00;
constexpr uint8_t kSyndromeRnrNak = 0x20;
constexpr uint8_t kSyndromeNak = 0x60;
constexpr uint8_t kNakPsnSequenceError = 0x60;
constexpr uint8_t kNakLastDefined = 0x64;  // invalid RD request; 0x65-0x7F reserved

// Request operations that carry a PSN of the sender's request stream: SEND and RDMA WRITE on
// RC and UC; RDMA READ request, atomics and SEND with invalidate on RC only (9.2 opcode table).
bool IsRequest(uint8_t transport, uint8_t op) {
  if (transport == kUc) return op >= kSendFirst && op <= kWriteOnlyImm;
  return (op >= kSendFirst && op <= kReadRequest) || op == kCmpSwap || op == kFetchAdd ||
         op == kSendLastInv || op == kSendOnlyInv;
}

}  // namespace

RoceAnalyzer::FlowState* RoceAnalyzer::FindState(const FlowKey& key) {
  auto it = state_.find(key);
  return it == state_.end() ? nullptr : &it->second;
}

RoceAnalyzer::FlowState* RoceAnalyzer::Lookup(const FlowKey& key) {
  auto it = state_.find(key);
  if (it != state_.end()) return &it->second;
  if (state_.size() >= options_.max_flows) return nullptr;
  auto fit = flows_.emplace(key, RoceFlowStats()).first;
  FlowState& st = state_.try_emplace(key).first->second;
  st.stats = &fit->second;
  st.id = static_cast<uint32_t>(keys_.size());
  keys_.push_back(key);
  return &st;
}

void RoceAnalyzer::Emit(const FlowKey& key, LossKind kind, int64_t ts, uint32_t first,
                        uint32_t last) {
  if (events_.size() >= options_.max_events) {
    ++dropped_events_;
    return;
  }
  events_.push_back(LossEvent{key, kind, ts, first, last});
}

std::vector<LossEvent> RoceAnalyzer::TakeEvents() {
  std::vector<LossEvent> out;
  out.swap(events_);
  return out;
}

const FlowKey* RoceAnalyzer::PairedDataFlow(const FlowKey& ack_flow) const {
  auto it = state_.find(ack_flow);
  if (it == state_.end() || !it->second.paired) return nullptr;
  return &it->second.data_flow;
}

void RoceAnalyzer::Add(const ParsedPacket& p, uint32_t* flow) {
  if (flow != nullptr) *flow = kUntracked;
  if (!p.roce) return;
  const FlowKey key = FlowKeyOf(p);
  FlowState* st = Lookup(key);
  if (st == nullptr) {
    ++untracked_packets_;
  } else if (flow != nullptr) {
    *flow = st->id;
  }

  const bool ce = p.ecn == 3;  // RFC 3168: ECN field 0b11
  ++totals_.packets;
  totals_.bytes += p.wire_len;
  if (ce) ++totals_.ecn_ce_packets;
  if (st != nullptr) {
    ++st->stats->packets;
    st->stats->bytes += p.wire_len;
    if (ce) ++st->stats->ecn_ce_packets;
  }

  if (p.bth_opcode == kRoceCnp) {
    ++totals_.cnps;
    if (st != nullptr) ++st->stats->cnps;
    return;
  }
  const uint8_t transport = p.bth_opcode & kTransportMask;
  const uint8_t op = p.bth_opcode & kOpMask;
  if (transport != kRc && transport != kUc) return;  // UD, RD: no PSN stream tracked

  if (transport == kRc && (op == kAcknowledge || op == kAtomicAcknowledge) && p.has_aeth) {
    AddAeth(key, st, p);
    return;
  }
  if (st == nullptr) return;
  if (IsRequest(transport, op)) {
    ++totals_.data_packets;
    ++st->stats->data_packets;
    if (!st->requests.started) requesters_[{key.src, key.dst}].push_back(key.qp);
    AddData(key, st, &st->requests, p, st->requests.may_jump, transport == kRc);
    st->requests.may_jump = op == kReadRequest;
    return;
  }
  if (transport == kRc && op >= kReadRespFirst && op <= kReadRespOnly) {
    ++totals_.data_packets;
    ++st->stats->data_packets;
    const bool starts_response = op == kReadRespFirst || op == kReadRespOnly;
    if (AddData(key, st, &st->responses, p, starts_response, false)) {
      // The requester sees the same gap and re-issues the READ request from its first missing
      // PSN: the coming repeat on its request stream is not an ACK timeout.
      FlowKey data_key;
      if (FlowState* d = PairFor(key, st, p.bth_psn & kPsnMask, &data_key)) {
        d->read_gap_pending = true;
      }
    }
  }
}

bool RoceAnalyzer::AddData(const FlowKey& key, FlowState* st, Stream* s, const ParsedPacket& p,
                           bool jump_ok, bool rc_requests) {
  const uint32_t psn = p.bth_psn & kPsnMask;
  if (!s->started) {
    s->started = true;
    s->expected = (psn + 1) & kPsnMask;
    return false;
  }
  const uint32_t ahead = PsnDiff(psn, s->expected);
  if (ahead < kPsnHalf) {  // at or ahead of the expected PSN: progress
    bool gap = false;
    if (ahead != 0 && !jump_ok) {
      gap = true;
      ++st->stats->psn_gaps;
      ++totals_.psn_gaps;
      st->stats->psn_gap_packets += ahead;
      totals_.psn_gap_packets += ahead;
      Emit(key, LossKind::kRocePsnGap, p.ts_ns, s->expected, (psn - 1) & kPsnMask);
    }
    if (s->in_episode) EndEpisode(key, s);
    s->expected = (psn + 1) & kPsnMask;
    return gap;
  }
  // Behind: a PSN at or before the highest seen, sent again.
  ++st->stats->retransmitted_packets;
  ++totals_.retransmitted_packets;
  if (s->in_episode) {
    const uint32_t after_last = PsnDiff(psn, s->episode_last);
    if (after_last != 0 && after_last < kPsnHalf) {  // goes on (a lost resend is skipped over)
      s->episode_last = psn;
      return false;
    }
    EndEpisode(key, s);  // went back once more: a new episode
  }
  s->in_episode = true;
  s->episode_first = s->episode_last = psn;
  s->episode_ts = p.ts_ns;
  if (rc_requests) {
    if (st->nak_pending || st->read_gap_pending) {
      st->nak_pending = st->read_gap_pending = false;  // go-back-N after a NAK
    } else {
      ++st->stats->ack_timeouts;
      ++totals_.ack_timeouts;
      Emit(key, LossKind::kRoceAckTimeout, p.ts_ns, psn, psn);
    }
  }
  return false;
}

void RoceAnalyzer::EndEpisode(const FlowKey& key, Stream* s) {
  s->in_episode = false;
  Emit(key, LossKind::kRoceRetransmission, s->episode_ts, s->episode_first, s->episode_last);
}

void RoceAnalyzer::Flush() {
  // In flows_'s (the key's) order, not the hash table's: the events come out the same each run.
  for (const auto& [key, stats] : flows_) {
    FlowState& st = state_.find(key)->second;  // flows_ and state_ hold the same keys
    if (st.requests.in_episode) EndEpisode(key, &st.requests);
    if (st.responses.in_episode) EndEpisode(key, &st.responses);
  }
}

RoceAnalyzer::FlowState* RoceAnalyzer::PairFor(const FlowKey& key, FlowState* st, uint32_t psn,
                                               FlowKey* data_key) {
  // Serial distance of `psn` from a request stream's next PSN; kPairWindow or more: not it.
  auto distance = [psn](const Stream& s) {
    if (!s.started) return kPairWindow;
    const uint32_t behind = PsnDiff(s.expected, psn);
    const uint32_t ahead = PsnDiff(psn, s.expected);
    return behind < ahead ? behind : ahead;
  };
  if (st->paired) {
    FlowState* d = FindState(st->data_flow);
    if (d != nullptr && distance(d->requests) < kPairWindow) {
      *data_key = st->data_flow;
      return d;
    }
  }
  auto it = requesters_.find({key.dst, key.src});
  if (it == requesters_.end()) return nullptr;
  FlowState* best = nullptr;
  FlowKey best_key;
  std::tuple<bool, uint32_t> best_score{true, kPairWindow};
  for (uint32_t qp : it->second) {
    FlowKey dk;
    dk.src = key.dst;
    dk.dst = key.src;
    dk.proto = 17;
    dk.qp = qp;
    if (dk == key) continue;  // both ends on one address: never the carrying flow itself
    FlowState* d = FindState(dk);
    if (d == nullptr) continue;
    const uint32_t dist = distance(d->requests);
    if (dist >= kPairWindow) continue;
    const std::tuple<bool, uint32_t> score{d->has_ack_flow && !(d->ack_flow == key), dist};
    if (best == nullptr || score < best_score) {
      best = d;
      best_key = dk;
      best_score = score;
    }
  }
  if (best == nullptr) return nullptr;
  if (st->paired && !(st->data_flow == best_key)) {
    if (FlowState* old = FindState(st->data_flow); old != nullptr && old->ack_flow == key) {
      old->has_ack_flow = false;
    }
  }
  st->paired = true;
  st->data_flow = best_key;
  best->has_ack_flow = true;
  best->ack_flow = key;
  *data_key = best_key;
  return best;
}

void RoceAnalyzer::AddAeth(const FlowKey& key, FlowState* st, const ParsedPacket& p) {
  const uint8_t syndrome = p.aeth_syndrome;
  const uint8_t type = syndrome & kSyndromeTypeMask;
  const uint32_t psn = p.bth_psn & kPsnMask;
  const bool known = type == kSyndromeAck || type == kSyndromeRnrNak ||
                     (type == kSyndromeNak && syndrome <= kNakLastDefined);
  if (!known) {
    ++reserved_syndromes_;
    return;
  }
  FlowKey data_key;
  FlowState* d = st != nullptr ? PairFor(key, st, psn, &data_key) : nullptr;
  const FlowKey& event_key = d != nullptr ? data_key : key;
  // The counter `field` on the carrying flow, on the data flow when paired, and in totals.
  auto count = [&](uint64_t RoceFlowStats::*field) {
    ++(totals_.*field);
    if (st != nullptr) ++(st->stats->*field);
    if (d != nullptr) ++(d->stats->*field);
  };
  if (type == kSyndromeAck) {
    count(&RoceFlowStats::acks);
    // A positive ACK at or after a NAK's PSN: the responder got it, the NAK is resolved.
    if (d != nullptr && d->nak_pending && PsnDiff(psn, d->nak_psn) < kPsnHalf) {
      d->nak_pending = false;
    }
    return;
  }
  if (d == nullptr) ++unpaired_naks_;
  if (type == kSyndromeRnrNak) {
    count(&RoceFlowStats::rnr_naks);
    Emit(event_key, LossKind::kRoceRnrNak, p.ts_ns, psn, psn);
  } else if (syndrome == kNakPsnSequenceError) {
    count(&RoceFlowStats::naks_sequence_error);
    Emit(event_key, LossKind::kRoceNakSequence, p.ts_ns, psn, psn);
  } else {
    count(&RoceFlowStats::naks_other);
    Emit(event_key, LossKind::kRoceNakOther, p.ts_ns, psn, psn);
    return;  // fatal NAKs (the QP goes to the error state): no resend follows
  }
  if (d != nullptr) {
    d->nak_pending = true;
    d->nak_psn = psn;
  }
}

}  // namespace fabricscope::collectors::pcap
