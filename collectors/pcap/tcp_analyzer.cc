#include "collectors/pcap/tcp_analyzer.h"

#include <algorithm>
#include <tuple>

namespace fabricscope::collectors::pcap {
namespace {

// Sequence-number comparisons modulo 2^32 (RFC 9293 3.4).
bool SeqGt(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }
bool SeqLe(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) <= 0; }

constexpr const char* kFlagNames[TcpAnalyzer::kFlagCount] = {
    "retransmission", "fast_retransmission", "spurious_retransmission",
    "out_of_order",   "duplicate_ack",       "zero_window",
    "keep_alive",     "keep_alive_ack",      "window_update",
    "lost_segment",   "zero_window_probe",   "zero_window_probe_ack",
    "reused_ports"};

void Count(uint32_t flags, const ParsedPacket& p, TcpFlowStats* s) {
  ++s->packets;
  s->bytes += p.wire_len;
  s->payload_bytes += p.tcp_payload_len;
  if (flags & TcpAnalyzer::kRetransmission) ++s->retransmissions;
  if (flags & TcpAnalyzer::kFastRetransmission) ++s->fast_retransmissions;
  if (flags & TcpAnalyzer::kSpuriousRetransmission) ++s->spurious_retransmissions;
  if (flags & TcpAnalyzer::kOutOfOrder) ++s->out_of_order;
  if (flags & TcpAnalyzer::kDuplicateAck) ++s->duplicate_acks;
  if (flags & TcpAnalyzer::kZeroWindow) ++s->zero_windows;
}

}  // namespace

const char* TcpAnalyzer::FlagName(int i) {
  return i >= 0 && i < kFlagCount ? kFlagNames[i] : "unknown";
}

TcpAnalyzer::TcpAnalyzer(TcpAnalyzerOptions options) : options_(options) {}

void TcpAnalyzer::Reset(Connection* c) {
  const FlowKey key = c->key;
  const uint32_t id = c->id;
  TcpFlowStats stats[2] = {c->stats[0], c->stats[1]};
  *c = Connection();
  c->key = key;
  c->id = id;
  c->stats[0] = stats[0];
  c->stats[1] = stats[1];
}

void TcpAnalyzer::Emit(const FlowKey& flow, LossKind kind, int64_t ts_ns, uint32_t first,
                       uint32_t last) {
  if (events_.size() >= options_.max_events) {
    ++totals_.events_dropped;
    return;
  }
  events_.push_back(LossEvent{flow, kind, ts_ns, first, last});
}

// Adds a new connection's entry; nullptr (the frame counted untracked) when max_flows are tracked.
TcpAnalyzer::Connection* TcpAnalyzer::AddConnection(const FlowKey& key) {
  // Also bounded by the flow ids' range: 2 per connection below kUntracked.
  if (connections_.size() >= options_.max_flows || keys_.size() >= kUntracked / 2) {
    ++totals_.untracked_frames;
    return nullptr;
  }
  auto it = connections_.emplace(key, Connection()).first;
  it->second.key = key;
  it->second.id = static_cast<uint32_t>(keys_.size());
  keys_.push_back(key);
  ++totals_.connections;
  return &it->second;
}

// The entry of p's connection (key: lower endpoint first); AddConnection's result when new.
inline TcpAnalyzer::Connection* TcpAnalyzer::FindConnection(const ParsedPacket& p,
                                                            bool lower_first) {
  FlowKey key;
  key.src = lower_first ? p.src : p.dst;
  key.dst = lower_first ? p.dst : p.src;
  key.sport = lower_first ? p.sport : p.dport;
  key.dport = lower_first ? p.dport : p.sport;
  key.proto = 6;
  auto it = connections_.find(key);
  if (it == connections_.end()) return AddConnection(key);
  return &it->second;
}

// Applies "Port numbers reused" and sets unset bases of both directions; returns kPortsReused or 0.
inline uint32_t TcpAnalyzer::UpdateBases(Connection* c, int d, uint32_t seq, uint32_t ack, bool syn,
                                         bool has_ack) {
  uint32_t flags = 0;

  // Port numbers reused: a SYN whose sequence number is not the initial one of this direction
  // (the SYN's, or one before the first sequence number seen) starts a new conversation.
  if (syn && c->dir[d].base_set && seq != c->dir[d].base_seq) {
    Reset(c);
    ++totals_.connections;
    flags |= kPortsReused;
  }
  // The initial sequence numbers, when no SYN showed them: one before the first sequence number
  // seen, or one before the first acknowledgement number of the other direction.
  if (!c->dir[d].base_set) {
    c->dir[d].base_set = true;
    c->dir[d].base_seq = syn ? seq : seq - 1;
  }
  if (has_ack && !c->dir[1 - d].base_set) {
    c->dir[1 - d].base_set = true;
    c->dir[1 - d].base_seq = ack - 1;
  }
  return flags;
}

// The retransmission rules' flags for a frame of direction d; emits its LossEvent if any.
inline uint32_t TcpAnalyzer::RetransmissionFlags(const Connection& c, int d, uint32_t seq,
                                                 uint32_t len, uint32_t nxt, int64_t now) {
  const Direction& f = c.dir[d];
  const Direction& r = c.dir[1 - d];
  uint32_t flags = 0;
  // Below nextseq; except a segment of more than one byte that starts one byte early, which
  // is what follows a zero-window probe whose byte the receiver dropped (User's Guide,
  // "TCP ZeroWindowProbe").
  const bool below = f.nextseq != 0 && SeqGt(f.nextseq, seq) && !(len > 1 && seq == f.nextseq - 1);
  const int64_t ooo_threshold = c.irtt_ns > 0 ? c.irtt_ns : options_.default_ooo_threshold_ns;
  LossKind kind = LossKind::kTcpRetransmission;
  bool event = true;
  if (below && r.dupacks >= 2 && r.lastack == seq &&
      now - r.lastack_ns < options_.fast_retransmission_window_ns) {
    flags |= kFastRetransmission | kRetransmission;
    kind = LossKind::kTcpFastRetransmission;
  } else if (len > 0 && r.lastack != 0 && SeqLe(seq + len, r.lastack)) {
    // Spurious: the reverse direction acknowledged all of its bytes already. Applies whatever
    // nextseq says (tshark flags such a segment even when it is the first one seen).
    flags |= kSpuriousRetransmission | kRetransmission;
    kind = LossKind::kTcpSpuriousRetransmission;
  } else if (below && now - f.nextseq_ns < ooo_threshold && f.nextseq != nxt) {
    flags |= kOutOfOrder;
    kind = LossKind::kTcpOutOfOrder;
  } else if (below) {
    flags |= kRetransmission;
  } else {
    event = false;
  }
  if (event) {
    FlowKey flow = c.key;
    if (d == 1) flow = flow.Reversed();
    Emit(flow, kind, now, seq, seq + std::max<uint32_t>(len, 1) - 1);
  }
  return flags;
}

// Records the time of the client's SYN, then the connection's initial RTT.
inline void TcpAnalyzer::UpdateIrtt(Connection* c, bool syn, bool has_ack, int64_t now) {
  // iRTT: from the client's (last) SYN to the first frame with ACK that is not a SYN-ACK,
  // normally the client's ACK of the SYN-ACK. It applies from the next frame on (the frame
  // that gives it was analyzed with the threshold of before, as in tshark).
  if (syn && !has_ack) {
    c->syn_seen = true;
    c->syn_ns = now;
  } else if (!syn && has_ack && c->syn_seen && c->irtt_ns == 0) {
    c->irtt_ns = now - c->syn_ns;
  }
}

uint32_t TcpAnalyzer::Add(const ParsedPacket& p, uint32_t* flow) {
  if (flow != nullptr) *flow = kUntracked;
  ++totals_.frames;
  if (p.l4_proto != 6) return 0;

  // One entry per connection, keyed by its lower endpoint first; d is this frame's direction.
  const bool lower_first = std::tie(p.src, p.sport) <= std::tie(p.dst, p.dport);
  Connection* const tracked = FindConnection(p, lower_first);
  if (tracked == nullptr) return 0;
  ++totals_.tcp_frames;
  Connection& c = *tracked;
  const int d = lower_first ? 0 : 1;
  if (flow != nullptr) *flow = 2 * c.id + static_cast<uint32_t>(d);

  const uint32_t seq = p.tcp_seq;
  const uint32_t ack = p.tcp_ack;
  const uint32_t len = p.tcp_payload_len;
  const int64_t now = p.ts_ns;
  const bool syn = (p.tcp_flags & kTcpSyn) != 0;
  const bool fin = (p.tcp_flags & kTcpFin) != 0;
  const bool rst = (p.tcp_flags & kTcpRst) != 0;
  const bool has_ack = (p.tcp_flags & kTcpAck) != 0;
  const bool syn_fin_rst = syn || fin || rst;
  uint32_t flags = UpdateBases(&c, d, seq, ack, syn, has_ack);

  Direction& f = c.dir[d];
  Direction& r = c.dir[1 - d];
  // Windows are compared as sent, unscaled (as tshark does: a window-scale factor that applies
  // from the handshake on does not turn an unchanged window into an update).
  const uint16_t window = p.tcp_window;

  // The rules of the User's Guide 7.5, in the order of the class comment.
  bool probe = false;
  if (len == 1 && seq == f.nextseq && r.window == 0) {
    flags |= kZeroWindowProbe;
    probe = true;
  }
  bool keep_alive = false;
  if (!probe) {
    if (window == 0 && !syn_fin_rst) flags |= kZeroWindow;
    if (f.nextseq != 0 && SeqGt(seq, f.nextseq) && !rst) flags |= kPreviousSegmentNotCaptured;
    if (len <= 1 && !syn_fin_rst && seq == f.nextseq - 1) {
      flags |= kKeepAlive;
      keep_alive = true;
    }
    const bool same_place = len == 0 && !syn_fin_rst && seq == f.nextseq && ack == f.lastack;
    if (same_place && window != 0 && window != f.window) flags |= kWindowUpdate;
    if (same_place && window != 0 && window == f.window && (r.last_flags & kKeepAlive)) {
      flags |= kKeepAliveAck;
    } else if (same_place && window == 0 && window == f.window &&
               (r.last_flags & kZeroWindowProbe)) {
      flags |= kZeroWindowProbeAck;
    } else if (same_place && window != 0 && window == f.window) {
      ++f.dupacks;
      flags |= kDuplicateAck;
    }
  }

  const uint32_t nxt = seq + len + (syn || fin ? 1 : 0);
  if (!keep_alive && (len > 0 || syn || fin)) {
    flags |= RetransmissionFlags(c, d, seq, len, nxt, now);
  }

  if (!probe) {  // a probe's byte may be dropped: it does not advance nextseq
    if (f.nextseq == 0 || SeqGt(nxt, f.nextseq)) {
      f.nextseq = nxt;
      f.nextseq_ns = now;
    }
  }
  UpdateIrtt(&c, syn, has_ack, now);
  if (ack != f.lastack) f.dupacks = 0;
  f.lastack = ack;
  f.lastack_ns = now;
  f.window = window;
  f.last_flags = flags;

  Count(flags, p, &c.stats[d]);
  Count(flags, p, &totals_.all);
  return flags;
}

std::map<FlowKey, TcpFlowStats> TcpAnalyzer::flows() const {
  std::map<FlowKey, TcpFlowStats> out;
  for (const auto& [key, c] : connections_) {
    if (c.stats[0].packets > 0) out[key] = c.stats[0];
    if (c.stats[1].packets > 0) out[key.Reversed()] = c.stats[1];
  }
  return out;
}

std::vector<LossEvent> TcpAnalyzer::TakeEvents() {
  std::vector<LossEvent> out(events_.begin(), events_.end());
  events_.clear();
  return out;
}

}  // namespace fabricscope::collectors::pcap
