#include "agent/derived.h"

#include "collectors/counter_meaning.h"
#include "collectors/priority_stat.h"

namespace fabricscope::agent {
namespace {

using collectors::Meaning;

double Ratio(uint64_t num, uint64_t den) {
  return den == 0 ? 0.0 : static_cast<double>(num) / static_cast<double>(den);
}

// Sum of the totals and deltas of the counters of one meaning.
struct Sum {
  bool any = false;
  uint64_t total = 0, delta = 0;
  void Add(const CounterWindow& c) {
    any = true;
    total += c.total;
    delta += c.delta;
  }
};

}  // namespace

double XmitWaitTickSeconds(uint32_t lanes, uint64_t line_rate_bytes_per_second) {
  if (lanes == 0 || line_rate_bytes_per_second == 0) return 0;
  return static_cast<double>(lanes) / static_cast<double>(line_rate_bytes_per_second);
}

void ComputeDerived(const std::vector<CounterWindow>& cs, uint64_t rx_packets_delta,
                    double window_seconds, double xmit_wait_tick_seconds, v1::DerivedSignals* out) {
  if (window_seconds <= 0) return;
  Sum by[collectors::kMeaningCount];
  for (const CounterWindow& c : cs) {
    const Meaning m = c.meaning;
    by[static_cast<size_t>(m)].Add(c);
    if (m == Meaning::kPauseMicroseconds) {
      const std::optional<collectors::EthtoolStatName> p = collectors::ParsePriorityStat(*c.name);
      v1::PriorityPause* pause = out->add_pause();
      pause->set_priority(p->priority);
      pause->set_direction(p->direction == collectors::StatDirection::kRx ? v1::DIRECTION_RECEIVE
                                                                          : v1::DIRECTION_TRANSMIT);
      pause->set_seconds_total(static_cast<double>(c.total) / 1e6);
      pause->set_time_ratio(static_cast<double>(c.delta) / 1e6 / window_seconds);
    } else if (m == Meaning::kDiscard || m == Meaning::kPriorityDiscard) {
      v1::Discard* d = out->add_discards();
      d->set_reason(*c.name);
      d->set_total(c.total);
    }
  }
  auto get = [&](Meaning m) -> const Sum& { return by[static_cast<size_t>(m)]; };
  const double w = window_seconds;
  if (const Sum& s = get(Meaning::kTransmitWait); s.any && xmit_wait_tick_seconds > 0) {
    out->set_transmit_wait_seconds_total(static_cast<double>(s.total) * xmit_wait_tick_seconds);
    out->set_transmit_wait_ratio(static_cast<double>(s.delta) * xmit_wait_tick_seconds / w);
  }
  if (const Sum& oos = get(Meaning::kOutOfSequence); oos.any) {
    out->set_out_of_sequence_total(oos.total);
    out->set_loss_ratio(Ratio(oos.delta, rx_packets_delta));
  } else if (const Sum& drops = get(Meaning::kNetdevDrop); drops.any) {
    out->set_loss_ratio(Ratio(drops.delta, rx_packets_delta + drops.delta));
  }
  if (const Sum& s = get(Meaning::kRetransmit); s.any) {
    out->set_retransmits_total(s.total);
    out->set_retransmits_per_second(static_cast<double>(s.delta) / w);
  }
  if (const Sum& s = get(Meaning::kCnpSent); s.any) {
    out->set_cnp_sent_total(s.total);
    out->set_cnp_sent_per_second(static_cast<double>(s.delta) / w);
  }
  if (const Sum& s = get(Meaning::kCnpHandled); s.any) {
    out->set_cnp_handled_total(s.total);
    out->set_cnp_handled_per_second(static_cast<double>(s.delta) / w);
  }
  if (const Sum& s = get(Meaning::kEcnMarked); s.any) {
    out->set_ecn_marked_total(s.total);
    out->set_ecn_marked_ratio(Ratio(s.delta, rx_packets_delta));
  }
  const Sum& corrected = get(Meaning::kCorrectedBits);
  const Sum& bits = get(Meaning::kPhyBits);
  if (corrected.any && bits.delta > 0) out->set_bit_error_ratio(Ratio(corrected.delta, bits.delta));
  const Sum& retrans = get(Meaning::kTcpRetransmit);
  const Sum& sent = get(Meaning::kTcpSent);
  if (retrans.any && sent.any) {
    out->set_tcp_retransmitted_segments_total(retrans.total);
    out->set_tcp_sent_segments_total(sent.total);
    out->set_tcp_retransmitted_ratio(Ratio(retrans.delta, sent.delta));
  }
}

}  // namespace fabricscope::agent
