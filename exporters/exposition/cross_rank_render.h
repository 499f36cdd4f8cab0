#pragma once

// The cross-rank analysis and its diagnosis as Prometheus families and JSON: renders the plain
// snapshots of exporters/analysis/cross_rank.h and diagnosis.h; computes nothing.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "exporters/analysis/cross_rank_types.h"
#include "exporters/analysis/diagnosis.h"
#include "fabricscope/v1/gpu.pb.h"
#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

// fabricscope_collective_arrival_skew_seconds, fabricscope_collectives_by_cause_total (one series
// per cause the aggregator sets, common::CollectiveCauses()), fabricscope_straggler_score{node,
// rank}, fabricscope_collective_network_share_ratio{node},
// fabricscope_port_microburst_overlap_ratio{node,device,port}, the evicted, dropped and pending
// counts, and the diagnosis families (AddDiagnosisFamilies) of s.diagnoses; families without a
// sample are left out.
void AddCrossRankFamilies(const CrossRankSnapshot& s, std::vector<prometheus::MetricFamily>* out);

// fabricscope_diagnosis_info{comm,cause,node,rank,port} 1 and
// fabricscope_diagnosis_cost_ratio{comm} (p90 over the baseline's, minus 1; only with a
// baseline) per communicator: at most DiagnosisOptions.max_comms series each.
void AddDiagnosisFamilies(const std::vector<CommDiagnosis>& v,
                          std::vector<prometheus::MetricFamily>* out);

// /api/collectives/slow: {"collectives":[{comm, job, func, seq, nranks, cause, rule, evidence,
//   path:{busbw_bytes_per_second, line_rate_share, best_share} (null unknown), skew_seconds,
//   duration_seconds (longest), bottleneck:{node, rank, port, detail, shared_with, shared} or
//   null, ranks:[{node,
//   rank, cause, port, detail, start_unix_seconds, duration_seconds, slow, loss_events (on its
//   deciding port), port_bytes, own_bytes, line_rate_bytes_per_second,
//   transmit_busy_utilization, window_loss_events, window_loss_rate, fabric_loss_median,
//   recording:{port_index, reason, from_unix_seconds, to_unix_seconds, truncated,
//   samples:[{time_unix_seconds, interval_seconds, transmit_bytes, receive_bytes,
//   transmit_utilization, receive_utilization}]}}]}]}, in the order given
//   (CrossRankAnalysis::Slowest: slowest first).
// `job_of` (may be null) names each instance's job from its communicator hash ("job": "" when
// unknown; exporters/state/job_table.h JobTable::JobOf). The bottleneck also lists
// shared_with:[{comm, job, job_name, bytes, share}], the communicators whose ranks moved network
// bytes on its node while it ran (CollectiveAnalysis.sharers; share: of the node's proxy bytes
// then, its own communicator's included), and "shared", the sentence naming the largest ("n3
// also carried job 8812 (llama-70b): 61% of its network bytes during it"; "" under a tenth).
using JobOfComm = std::function<v1::Job(uint64_t comm_hash)>;

// /api/diagnosis: {"communicators":[{comm, job ("" unknown: job_of null or no job), cause, node,
// rank, port, func, since_unix_seconds (null when nothing is affected), affected, instances,
// p90_seconds, baseline_p90_seconds (null without a baseline), cost_ratio (null likewise),
// best_share (null unknown), rule (what named the cause: common EvidenceRuleName, "" for normal),
// evidence, shared_with (as SlowJson's bottleneck's, of the latest affected instance), sentence
// (with the shared sentence appended when there is one)}]}, most affected first, then by comm
// hash.
std::string DiagnosisJson(std::vector<CommDiagnosis> v, const JobOfComm& job_of = nullptr);
std::string SlowJson(const std::vector<CollectiveInstance>& instances,
                     const JobOfComm& job_of = nullptr);

}  // namespace fabricscope::exporters
