#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// One counter of a port over one window, as the pipeline closes it.
struct CounterWindow {
  const std::string* group;  // "counters", "statistics", "hw_counters", "ethtool", "tcp"
  const std::string* name;
  uint64_t total;
  uint64_t delta;
};

// Computes the derived signals of one port over one window from its counters. Fields are set
// only when the counters they need exist. window_seconds > 0; rx_packets_delta is the port's
// received packets in the window (0 when it has no packet counter).
//
// Formulas and sources (NVIDIA "Understanding mlx5 Linux counters" and the kernel's
// Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst for the RDMA and
// ethtool counters; kernel Documentation/networking/snmp_counter.rst for TCP):
// - RDMA loss_ratio = Δout_of_sequence / Δport_rcv_packets: each out-of-sequence arrival at the
//   responder means packets before it were lost upstream.
// - netdev loss_ratio = Δ(rx_dropped + rx_missed_errors) / (Δrx_packets + Δthose drops).
// - retransmits = packet_seq_err + local_ack_timeout_err + duplicate_request + roce_adp_retrans
//   (NAK-triggered, timeout-triggered, received duplicates, adaptive retransmissions); the rate
//   is Δ / window_seconds.
// - cnp_sent = np_cnp_sent (notification point), cnp_handled = rp_cnp_handled (reaction point).
// - ecn_marked_ratio = Δnp_ecn_marked_roce_packets / Δport_rcv_packets.
// - pause per priority and direction: {rx,tx}_prio<p>_pause_duration is in µs (mlx5
//   counters.rst): seconds_total = total / 1e6, time_ratio = Δ / 1e6 / window_seconds.
// - discards: out_of_buffer, rx_out_of_buffer, rx_discards_phy, tx_discards_phy and the
//   per-priority {rx}_prio<p>_{discards,buf_discard,cong_discard}, by source name.
// - bit_error_ratio = Δrx_corrected_bits_phy / Δrx_bits_phy (the raw, pre-FEC BER).
// - TCP: retransmitted ratio = ΔRetransSegs / ΔOutSegs (RFC 4022 tcpRetransSegs, tcpOutSegs).
void ComputeDerived(const std::vector<CounterWindow>& counters, uint64_t rx_packets_delta,
                    double window_seconds, v1::DerivedSignals* out);

}  // namespace fabricscope::agent
