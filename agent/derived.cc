#include "agent/derived.h"

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace fabricscope::agent {
namespace {

const CounterWindow* Find(const std::vector<CounterWindow>& cs, const char* name) {
  for (const CounterWindow& c : cs) {
    if (*c.name == name) return &c;
  }
  return nullptr;
}

double Ratio(uint64_t num, uint64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

// "rx_prio3_pause_duration" -> direction rx, priority 3.
bool ParsePauseDuration(const std::string& name, v1::Direction* dir, uint32_t* prio) {
  absl::string_view n = name;
  if (!absl::ConsumeSuffix(&n, "_pause_duration")) return false;
  if (absl::ConsumePrefix(&n, "rx_prio")) {
    *dir = v1::DIRECTION_RECEIVE;
  } else if (absl::ConsumePrefix(&n, "tx_prio")) {
    *dir = v1::DIRECTION_TRANSMIT;
  } else {
    return false;
  }
  return absl::SimpleAtoi(n, prio) && *prio <= 7;
}

bool IsDiscard(const std::string& group, const std::string& name) {
  if (group == "hw_counters") return name == "out_of_buffer";
  if (group != "ethtool") return false;
  if (name == "rx_out_of_buffer" || name == "rx_discards_phy" || name == "tx_discards_phy") {
    return true;
  }
  return absl::StartsWith(name, "rx_prio") &&
         (absl::EndsWith(name, "_discards") || absl::EndsWith(name, "_buf_discard") ||
          absl::EndsWith(name, "_cong_discard"));
}

}  // namespace

double XmitWaitTickSeconds(uint32_t lanes, uint64_t line_rate_bytes_per_second) {
  if (lanes == 0 || line_rate_bytes_per_second == 0) return 0;
  return static_cast<double>(lanes) / static_cast<double>(line_rate_bytes_per_second);
}

void ComputeDerived(const std::vector<CounterWindow>& cs, uint64_t rx_packets_delta,
                    double window_seconds, double xmit_wait_tick_seconds, v1::DerivedSignals* out) {
  if (window_seconds <= 0) return;
  if (const CounterWindow* w = Find(cs, "port_xmit_wait"); w && xmit_wait_tick_seconds > 0) {
    out->set_transmit_wait_seconds_total(static_cast<double>(w->total) * xmit_wait_tick_seconds);
    out->set_transmit_wait_ratio(static_cast<double>(w->delta) * xmit_wait_tick_seconds /
                                 window_seconds);
  }
  // RDMA transport counters.
  if (const CounterWindow* oos = Find(cs, "out_of_sequence")) {
    out->set_out_of_sequence_total(oos->total);
    out->set_loss_ratio(Ratio(oos->delta, rx_packets_delta));
  } else {
    const CounterWindow* dropped = Find(cs, "rx_dropped");
    const CounterWindow* missed = Find(cs, "rx_missed_errors");
    if ((dropped && *dropped->group == "statistics") || missed) {
      const uint64_t drops = (dropped ? dropped->delta : 0) + (missed ? missed->delta : 0);
      out->set_loss_ratio(Ratio(drops, rx_packets_delta + drops));
    }
  }
  uint64_t retrans_total = 0, retrans_delta = 0;
  bool any_retrans = false;
  for (const char* n :
       {"packet_seq_err", "local_ack_timeout_err", "duplicate_request", "roce_adp_retrans"}) {
    if (const CounterWindow* c = Find(cs, n)) {
      any_retrans = true;
      retrans_total += c->total;
      retrans_delta += c->delta;
    }
  }
  if (any_retrans) {
    out->set_retransmits_total(retrans_total);
    out->set_retransmits_per_second(static_cast<double>(retrans_delta) / window_seconds);
  }
  if (const CounterWindow* c = Find(cs, "np_cnp_sent")) {
    out->set_cnp_sent_total(c->total);
    out->set_cnp_sent_per_second(static_cast<double>(c->delta) / window_seconds);
  }
  if (const CounterWindow* c = Find(cs, "rp_cnp_handled")) {
    out->set_cnp_handled_total(c->total);
    out->set_cnp_handled_per_second(static_cast<double>(c->delta) / window_seconds);
  }
  if (const CounterWindow* c = Find(cs, "np_ecn_marked_roce_packets")) {
    out->set_ecn_marked_total(c->total);
    out->set_ecn_marked_ratio(Ratio(c->delta, rx_packets_delta));
  }
  // Ethernet PHY and priority counters (ethtool).
  for (const CounterWindow& c : cs) {
    v1::Direction dir;
    uint32_t prio = 0;
    if (*c.group == "ethtool" && ParsePauseDuration(*c.name, &dir, &prio)) {
      v1::PriorityPause* p = out->add_pause();
      p->set_priority(prio);
      p->set_direction(dir);
      p->set_seconds_total(static_cast<double>(c.total) / 1e6);
      p->set_time_ratio(static_cast<double>(c.delta) / 1e6 / window_seconds);
    } else if (IsDiscard(*c.group, *c.name)) {
      v1::Discard* d = out->add_discards();
      d->set_reason(*c.name);
      d->set_total(c.total);
    }
  }
  const CounterWindow* corrected = Find(cs, "rx_corrected_bits_phy");
  const CounterWindow* bits = Find(cs, "rx_bits_phy");
  if (corrected && bits && bits->delta > 0) {
    out->set_bit_error_ratio(Ratio(corrected->delta, bits->delta));
  }
  // TCP (node level).
  const CounterWindow* retrans = Find(cs, "RetransSegs");
  const CounterWindow* sent = Find(cs, "OutSegs");
  if (retrans && sent) {
    out->set_tcp_retransmitted_segments_total(retrans->total);
    out->set_tcp_sent_segments_total(sent->total);
    out->set_tcp_retransmitted_ratio(Ratio(retrans->delta, sent->delta));
  }
}

}  // namespace fabricscope::agent
