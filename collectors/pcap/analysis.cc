#include "collectors/pcap/analysis.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace fabricscope::collectors::pcap {
namespace {
constexpr size_t kMaxWindowEntries = 65536;

// The value for `key` in `map`, added while the map holds fewer than kMaxWindowEntries keys;
// nullptr for a new key once it is full.
template <typename Map>
typename Map::mapped_type* RoomFor(Map& map, const typename Map::key_type& key) {
  if (map.size() < kMaxWindowEntries) return &map[key];
  auto it = map.find(key);
  return it == map.end() ? nullptr : &it->second;
}
}  // namespace

CaptureAnalysis::CaptureAnalysis(Options options) : options_(options) {}

void CaptureAnalysis::WindowCounts::Add(uint32_t id, uint32_t wire_len) {
  if (id >= by_id.size()) by_id.resize(static_cast<size_t>(id) + 1);
  Bytes& b = by_id[id];
  if (b.packets == 0) touched.push_back(id);
  ++b.packets;
  b.bytes += wire_len;
}

void CaptureAnalysis::Add(ParseResult r, const ParsedPacket& p) {
  if (r != ParseResult::kOk) return;
  uint32_t flow = kUntracked;
  if (p.roce) {
    roce_.Add(p, &flow);
    if (flow != kUntracked) roce_window_.Add(flow, p.wire_len);
  } else if (p.l4_proto == 6) {
    tcp_.Add(p, &flow);
    if (flow != kUntracked) tcp_window_.Add(flow, p.wire_len);
  } else {
    return;
  }
  window_bytes_ += p.wire_len;
  ++window_packets_;
  if (flow != kUntracked) return;
  // A flow the analyzer had no room for: counted by key, at most 65536 such flows a window, and
  // 65536 pairs of flows beyond those.
  if (Bytes* b = RoomFor(untracked_flows_, FlowKeyOf(p))) {
    ++b->packets;
    b->bytes += p.wire_len;
  } else if (uint64_t* pair = RoomFor(overflow_peers_, {p.src, p.dst})) {
    *pair += p.wire_len;
  }
}

std::vector<std::pair<FlowKey, CaptureAnalysis::Bytes>> CaptureAnalysis::TakeWindowFlows() {
  std::vector<std::pair<FlowKey, Bytes>> flows(untracked_flows_.begin(), untracked_flows_.end());
  untracked_flows_.clear();
  flows.reserve(flows.size() + roce_window_.touched.size() + tcp_window_.touched.size());
  for (uint32_t id : roce_window_.touched) {
    flows.emplace_back(roce_.key_of(id), std::exchange(roce_window_.by_id[id], Bytes()));
  }
  for (uint32_t id : tcp_window_.touched) {
    flows.emplace_back(tcp_.key_of(id), std::exchange(tcp_window_.by_id[id], Bytes()));
  }
  roce_window_.touched.clear();
  tcp_window_.touched.clear();
  return flows;
}

void CaptureAnalysis::FillWindow(const std::string& interface, const CaptureCounters& c,
                                 v1::CaptureWindow* out, std::vector<v1::PacketLossEvent>* fresh) {
  out->set_interface(interface);
  out->set_frames_total(c.frames);
  out->set_kernel_dropped_total(c.kernel_dropped);
  out->set_interface_dropped_total(c.interface_dropped);
  out->set_malformed_total(c.truncated + c.malformed);
  out->set_untracked_flows_total(roce_.untracked_packets() + tcp_.totals().untracked_frames);
  const RoceFlowStats& rt = roce_.totals();
  const TcpFlowStats& tt = tcp_.totals().all;
  auto& ev = *out->mutable_events_total();
  ev["psn_gap"] = rt.psn_gap_packets;
  ev["go_back_n"] = rt.retransmitted_packets;
  ev["ack_timeout"] = rt.ack_timeouts;
  ev["nak_sequence_error"] = rt.naks_sequence_error;
  ev["rnr_nak"] = rt.rnr_naks;
  ev["nak_other"] = rt.naks_other;
  // tshark also flags fast and spurious retransmissions as retransmissions: count each frame
  // once, under its most specific kind.
  ev["retransmission"] =
      tt.retransmissions -
      std::min(tt.retransmissions, tt.fast_retransmissions + tt.spurious_retransmissions);
  ev["fast_retransmission"] = tt.fast_retransmissions;
  ev["spurious_retransmission"] = tt.spurious_retransmissions;
  ev["out_of_order"] = tt.out_of_order;
  out->set_cnps_total(rt.cnps);
  out->set_ecn_ce_packets_total(rt.ecn_ce_packets);
  out->set_duplicate_acks_total(tt.duplicate_acks);
  out->set_window_bytes(window_bytes_);
  out->set_window_packets(window_packets_);

  // Top flows of this window by bytes, with their cumulative loss figures.
  std::vector<std::pair<FlowKey, Bytes>> flows = TakeWindowFlows();
  const size_t k = std::min(options_.top_k, flows.size());
  std::partial_sort(flows.begin(), flows.begin() + static_cast<long>(k), flows.end(),
                    [](const auto& a, const auto& b) {
                      // Ties by key: the hash table's order must not choose the top K.
                      return a.second.bytes != b.second.bytes ? a.second.bytes > b.second.bytes
                                                              : a.first < b.first;
                    });
  const std::map<FlowKey, TcpFlowStats> tcp_flows =
      k > 0 ? tcp_.flows() : std::map<FlowKey, TcpFlowStats>();
  for (size_t i = 0; i < k; ++i) {
    const FlowKey& key = flows[i].first;
    v1::FlowWindow* f = out->add_top_flows();
    f->set_src(FormatAddress(key.src));
    f->set_dst(FormatAddress(key.dst));
    f->set_proto(key.proto);
    f->set_sport(key.sport);
    f->set_dport(key.dport);
    f->set_qp(key.qp);
    f->set_packets(flows[i].second.packets);
    f->set_bytes(flows[i].second.bytes);
    if (key.proto == 17) {
      if (auto it = roce_.flows().find(key); it != roce_.flows().end()) {
        f->set_retransmissions(it->second.retransmitted_packets);
        f->set_losses(it->second.psn_gap_packets);
      }
    } else if (auto it = tcp_flows.find(key); it != tcp_flows.end()) {
      f->set_retransmissions(it->second.retransmissions);
      f->set_losses(it->second.out_of_order);
    }
  }
  // Peer pairs: the window's flows summed by (src, dst), plus the frames of flows it had no room
  // for. At most the flows' count plus 65536 pairs.
  absl::flat_hash_map<std::pair<IpAddress, IpAddress>, uint64_t> by_pair =
      std::move(overflow_peers_);
  for (const auto& [key, b] : flows) by_pair[{key.src, key.dst}] += b.bytes;
  std::vector<std::pair<std::pair<IpAddress, IpAddress>, uint64_t>> peers(by_pair.begin(),
                                                                          by_pair.end());
  const size_t kp = std::min(options_.top_k, peers.size());
  std::partial_sort(peers.begin(), peers.begin() + static_cast<long>(kp), peers.end(),
                    [](const auto& a, const auto& b) {
                      return a.second != b.second ? a.second > b.second : a.first < b.first;
                    });
  for (size_t i = 0; i < kp; ++i) {
    v1::PeerBytes* pb = out->add_top_peers();
    pb->set_src(FormatAddress(peers[i].first.first));
    pb->set_dst(FormatAddress(peers[i].first.second));
    pb->set_bytes(peers[i].second);
  }
  StageEvents();
  if (fresh != nullptr) {
    fresh->assign(window_events_.begin() + static_cast<long>(events_returned_),
                  window_events_.end());
  }
  for (v1::PacketLossEvent& e : window_events_) *out->add_loss_events() = std::move(e);
  window_events_.clear();
  events_returned_ = 0;
  out->set_loss_events_dropped_total(events_dropped_ + roce_.dropped_events() +
                                     tcp_.totals().events_dropped);
  overflow_peers_.clear();
  window_bytes_ = 0;
  window_packets_ = 0;
}

std::vector<v1::PacketLossEvent> CaptureAnalysis::TakeNewLossEvents() {
  StageEvents();
  std::vector<v1::PacketLossEvent> out(window_events_.begin() + static_cast<long>(events_returned_),
                                       window_events_.end());
  events_returned_ = window_events_.size();
  return out;
}

void CaptureAnalysis::StageEvents() {
  // RoCE then TCP, bounded per window.
  for (std::vector<LossEvent> events : {roce_.TakeEvents(), tcp_.TakeEvents()}) {
    for (const LossEvent& e : events) {
      if (window_events_.size() >= options_.max_events_per_window) {
        ++events_dropped_;
        continue;
      }
      v1::PacketLossEvent* pe = &window_events_.emplace_back();
      pe->set_src(FormatAddress(e.flow.src));
      pe->set_dst(FormatAddress(e.flow.dst));
      pe->set_proto(e.flow.proto);
      pe->set_sport(e.flow.sport);
      pe->set_dport(e.flow.dport);
      pe->set_qp(e.flow.qp);
      pe->set_kind(LossKindName(e.kind));
      pe->set_time_unix_ns(e.ts_ns);
      pe->set_first(e.first);
      pe->set_last(e.last);
    }
  }
}

}  // namespace fabricscope::collectors::pcap
