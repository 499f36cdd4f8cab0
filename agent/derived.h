#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectors/counter_meaning.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// One counter of a port over one window, as the pipeline closes it.
struct CounterWindow {
  const std::string* name;      // as the source names it (CounterDescriptor::name)
  collectors::Meaning meaning;  // CounterDescriptor::meaning, set at discovery
  uint64_t total;
  uint64_t delta;
};

// Computes the derived signals of one port over one window from its counters. Fields are set
// only when the counters they need exist. window_seconds > 0; rx_packets_delta is the port's
// received packets in the window (0 when it has no packet counter).
//
// Each counter counts by its meaning in the counter-meaning table (collectors/counter_meaning.cc,
// which cites the driver documentation for every entry: mlx5, irdma, IBTA, netdev, TCP); the
// counters of one meaning are summed.
// - RDMA loss_ratio = Δout_of_sequence / Δport_rcv_packets: each out-of-sequence arrival at the
//   responder means packets before it were lost upstream.
// - netdev loss_ratio = Δ(rx_dropped + rx_missed_errors) / (Δrx_packets + Δthose drops).
// - retransmits = the kRetransmit counters: mlx5 packet_seq_err + local_ack_timeout_err +
//   duplicate_request + roce_adp_retrans + implied_nak_seq_err + rnr_nak_retry_err (each a
//   retransmission or its NAK/timeout trigger), irdma tcpRetransSegs (iWARP); the rate is
//   Δ / window_seconds.
// - cnp_sent = np_cnp_sent (mlx5) or cnpSent (irdma), at the notification point; cnp_handled =
//   rp_cnp_handled or cnpHandled, at the reaction point.
// - ecn_marked_ratio = Δ(np_ecn_marked_roce_packets or RxECNMrkd) / Δreceived packets.
// - pause per priority and direction: {rx,tx}_prio<p>_pause_duration is in µs (mlx5
//   counters.rst): seconds_total = total / 1e6, time_ratio = Δ / 1e6 / window_seconds.
// - discards: the kDiscard and kPriorityDiscard counters by source name (out_of_buffer,
//   rx_out_of_buffer, rx_discards_phy, tx_discards_phy, rx_prio<p>_{discards,buf_discard,
//   cong_discard}, irdma ip4InDiscards / ip6InDiscards).
// - bit_error_ratio = Δrx_corrected_bits_phy / Δrx_bits_phy (the raw, pre-FEC BER).
// - TCP: retransmitted ratio = ΔRetransSegs / ΔOutSegs (RFC 4022 tcpRetransSegs, tcpOutSegs).
// - transmit_wait: PortXmitWait ticks x XmitWaitTickSeconds; its ratio is Δseconds /
//   window_seconds. Absent when the tick length is unknown (0).
// xmit_wait_tick_seconds: XmitWaitTickSeconds of the port.
void ComputeDerived(const std::vector<CounterWindow>& counters, uint64_t rx_packets_delta,
                    double window_seconds, double xmit_wait_tick_seconds, v1::DerivedSignals* out);

// The length of one PortXmitWait tick: one symbol time, the time one byte takes on one lane
// (IBTA vol. 1 16.1.3.5 PortXmitWait, with PortSamplesControl Tick = 0, "1x symbol time"; the
// definition NVIDIA's ibdiagnet guide, "Congestion Assessment on InfiniBand Links", restates),
// from the port's rate: lanes / line_rate_bytes_per_second. For 8b/10b links (SDR, DDR, QDR) the
// kernel's rate is the signalling rate, so this is 0.8 of the symbol time; hardware that counts
// in multiples of it (the guide: Quantum switches every 8 bytes of the port, Switch-IB every 32
// bytes of a lane, shown by perfquery -c as Tick) makes these seconds a lower bound. 0 when the
// lanes or the rate are unknown.
double XmitWaitTickSeconds(uint32_t lanes, uint64_t line_rate_bytes_per_second);

}  // namespace fabricscope::agent
