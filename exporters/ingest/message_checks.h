#pragma once

#include <string>

#include "absl/status/status.h"
#include "collectors/common/label_check.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// Checks every v1::Histogram inside `message` (any depth: agent stats, port windows, GPU
// totals) before anything is exported from it, as the text format requires of a histogram
// (Prometheus "Exposition formats": the le buckets are cumulative, their bounds increase, the
// +Inf bucket is implicit and equals the count):
//   - upper_bounds finite and strictly increasing (prometheus-cpp adds +Inf itself);
//   - bucket_counts one per bound, plus at most one for +Inf;
//   - the counts summing to at most `count` (the +Inf bucket), and `sum` finite.
// Returns InvalidArgument naming the field path ("ports[3].transmit.microburst_duration_seconds:
// upper_bounds not increasing at 2") of the first bad one. Cost: a walk of the message types
// that can hold a Histogram only (collectives, kernel spans and the like are skipped by type).
absl::Status CheckHistograms(const google::protobuf::Message& message);

// What one Hello may hold (aggregator config `limits:`). Sized for 10,000 nodes: a GPU node has
// 8-16 RDMA ports and a few netdevs, plus the `tcp` pseudo-port.
struct HelloLimits {
  size_t max_ports = 256;      // ports per node
  size_t max_addresses = 256;  // interface addresses per node
  // Label values: a node name is a host name (RFC 1035 §2.3.4: 253 characters at most); a
  // device or netdev name is far shorter (IFNAMSIZ is 16, RDMA devices IB_DEVICE_NAME_MAX 64).
  size_t max_node_bytes = common::kMaxNodeNameBytes;
  size_t max_label_bytes = 64;
};

// Checks a Hello before any of it is stored: the node name present, every string within its
// limit and free of control characters (they would end up in label values and log lines),
// at most max_ports ports and max_addresses addresses, finite non-negative periods.
// Errors: InvalidArgument naming the field ("ports[3].device: 300 bytes, at most 64").
absl::Status CheckHello(const v1::Hello& hello, const HelloLimits& limits);

// Checks a peer aggregator's batch (sharded aggregators, issue 18): nothing set but its seq and
// Batch.forwarded; each record's node present and, as its port label, within `limits`' label
// bounds without control characters; its histograms as CheckHistograms. Errors:
// InvalidArgument naming the field.
absl::Status CheckForwarded(const v1::Batch& batch, const HelloLimits& limits);

// Checks an agent's batch against the node's `ports` (the Hello's port count), in order: no
// Batch.forwarded (only a peer aggregator's stream carries it; *reason "forwarded"); every port
// window, microburst and utilization series on a port index below `ports` ("port_index"); each
// series within the agent's own bounds, --series-bucket 10 us..window and a window of at most
// 1 h (agent/options.cc; "series"); the unix offset within ±2^62 ns and every time and duration
// within ±2^61 ns, so that no sum of them overflows ("time"); then CheckHistograms
// ("histogram"). Errors: InvalidArgument
// naming the batch's seq and what is wrong, with *reason set.
absl::Status CheckAgentBatch(const v1::Batch& batch, size_t ports, const char** reason);

// What one batch's GPU window may name (aggregator config `limits:`). The aggregator keeps, per
// node, what the latest window holds (rank pairs, busBw per communicator), so these bound that
// state. The defaults are the agent's own bounds (agent/gpu_timeline.h GpuTimelineOptions:
// max_communicators, max_rank_pairs): no agent sends more.
struct BatchLimits {
  size_t max_communicators = 1024;  // distinct communicators per node
  size_t max_rank_pairs = 4096;     // (communicator, src rank, dst rank) byte counters per node
};

// Checks a batch's GpuWindow against `limits`: the distinct communicator hashes of its
// collective_totals, communicators and rank_pairs, and the number of rank_pairs.
// Errors: ResourceExhausted naming the count and the limit, with *reason set to
// "communicator_limit" or "rank_pair_limit".
absl::Status CheckGpuWindow(const v1::Batch& batch, const BatchLimits& limits, const char** reason);

}  // namespace fabricscope::exporters
