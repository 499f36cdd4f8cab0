#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fabricscope::agent {

// Thresholds of the per-collective cause rule (documented in exporters/README.md "Why was that
// all-reduce slow").
struct CollectiveAnalysisOptions {
  // Ports a collective could have used, by "dev", "dev:port" or interface name. Empty = every
  // RDMA port of the node, or every watched network interface when there is no RDMA port.
  std::vector<std::string> rails;
  // A collective is analysed once the samples reach delay_ns past its end (the slow sampler's
  // loss counters arrive every --slow-sample-period), or after max_wait_ns whatever came.
  int64_t delay_ns = 25'000'000;
  int64_t max_wait_ns = 3'000'000'000;
  size_t max_pending = 16384;
  // The fast sampler's nominal period: a sample shorter than half of it (the tick after a late
  // one) is merged into the next before its utilization is judged, as the pipeline does for
  // microbursts. 0 = no merging. The agent sets it from --sample-period.
  int64_t sample_period_ns = 0;
  // A sample at or above saturation_utilization of line rate counts as saturated time.
  double saturation_utilization = 0.9;
  // network_lossy: on some port, loss + retransmit events >= lossy_min_events and >=
  // lossy_min_ratio of the packets it moved (estimated as bytes / 1500: a lone TCP tail-loss
  // probe while a rank waits is not a lossy link), or PFC pause time >= lossy_min_pause_ratio
  // of the collective's duration.
  uint64_t lossy_min_events = 1;
  double lossy_min_ratio = 0.02;
  double lossy_min_pause_ratio = 0.01;
  // network_lossy from the slow tail, whatever the loss's share of the packets: on some port,
  // loss + retransmit events >= lossy_min_events, and the collective took >= lossy_tail_ratio x
  // the median of its kind's clean instances (those with no such event; min_history of them
  // seen). A lost packet costs a retransmission timeout or a go-back-N replay of the whole
  // window, so a 0.01-1% loss rate slows a collective without moving 2% of its packets
  // (Mathis et al., "The macroscopic behavior of the TCP congestion avoidance algorithm",
  // CCR 1997: throughput ~ MSS / (RTT sqrt(p))). 0 = off.
  double lossy_tail_ratio = 1.05;
  // network_lossy from a persistently lossy port: the collective had loss + retransmit events
  // >= max(1, lossy_min_events) on a port whose events over its recent collectives (all kinds;
  // the suffix of the recurrence test below) are >= lossy_min_rate of the packets it moved
  // (bytes / 1500). 2e-4 is twice the mission's 0.01% alarm level, above the ~5e-5 of spurious
  // TCP retransmissions measured on a clean veth ring (exporters/README.md "Fault matrix"). 0 =
  // off.
  double lossy_min_rate = 2e-4;
  size_t lossy_rate_window = 16;
  // Both history rules want the loss to recur on the port: over some suffix of its last
  // lossy_rate_window collectives (the last m, a scan for the change point where the loss
  // began), the count k of collectives with a loss event is at least lossy_min_hits and a
  // one-sided binomial test rejects "a healthy port, whose collectives carry an event with
  // probability lossy_baseline_hit_ratio", at p <= lossy_max_p_value (P(X >= k), X ~ B(m, p0);
  // Conover, Practical Nonparametric Statistics, 3.1). The rate rule's rate is taken over that
  // suffix. With the defaults: 4 of the last 4 or 5, 5 of the last 7 to 9, 6 of the last 10
  // to 12, ... (3 of 3 is 1e-3 exactly: lossy_min_hits keeps it out). A host stall's burst of
  // spurious retransmission timeouts (measured on the 2-vCPU CI machine: up to 16 in one collective
  // of a clean run) lands in one or two collectives; 0.1% random loss hits ~60% of them. 0.1 is
  // twice the share measured on the clean veth ring (1.5-5% per node, exporters/README.md "Fault
  // matrix").
  size_t lossy_min_hits = 4;
  double lossy_baseline_hit_ratio = 0.1;
  double lossy_max_p_value = 1e-3;
  // network_saturated by a competing flow: the candidate ports moved >= contention_ratio x the
  // collective's own proxy bytes (Collective.proxy_bytes, sent + received) while it ran, and
  // it took >= lossy_tail_ratio x its kind's clean median. A link shared with another job is
  // full at line rate even when this job's share of it is not (a utilization threshold alone
  // cannot tell); 1.25 leaves room for the headers (~5% for TCP/IPv4 over Ethernet at 1,500
  // bytes, ~4% for RoCEv2 at 4,096) and a control flow. 0 = off.
  double contention_ratio = 1.25;
  // network_saturated: on some port, saturated time or microburst overlap >=
  // saturated_min_ratio of the covered time.
  double saturated_min_ratio = 0.3;
  // waiting_on_peers: every port's mean utilization < idle_max_utilization while the
  // collective ran for at least waiting_min_ns (short ones are latency-bound, not waiting).
  double idle_max_utilization = 0.2;
  int64_t waiting_min_ns = 2'000'000;
  // Slow collectives: slower than the p99 estimate of their (communicator, func,
  // log2(bytes)) kind once min_history of that kind were seen; the recorder's samples from
  // margin before to margin after are attached, at most recordings_per_window per batch and
  // samples_per_window samples. Kinds tracked: at most max_kinds.
  size_t min_history = 20;
  int64_t recording_margin_ns = 10'000'000;
  size_t recordings_per_window = 4;
  size_t samples_per_window = 2048;
  size_t max_kinds = 1024;
  // Network share of step time: collectives of this func ("AllReduce", ...) mark iteration
  // starts (each instance of the first communicator seen with it); empty = the share of wall
  // time over the previous window.
  std::string step_marker;
  // Counter deltas and microbursts remembered for the correlation.
  size_t history_events = 65536;
  // Early batches (Batch.early): the agent looks every early_send_interval / 4 of sample time
  // for analyses that are ready, and sends them with their collective records ahead of the
  // window: at once when one is slow or has a cause other than normal, else once
  // early_send_interval has passed since the last. The aggregator matches an instance when
  // every rank's analysis is in, so a 1 s window would delay each diagnosis by 0.5-1 s. Early
  // batches wait (the window's batch carries them) while the uplink is down or more than two
  // batches behind its acks, so that an outage does not fill the queue with them. 0 = off.
  int64_t early_send_interval_ns = 200'000'000;
};

}  // namespace fabricscope::agent
