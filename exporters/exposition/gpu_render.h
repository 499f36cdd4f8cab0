#pragma once

// The GPU timelines as Prometheus families and JSON: renders what exporters/state/gpu_views.h
// holds; computes nothing.

#include <string>
#include <vector>

#include "exporters/state/gpu_views.h"
#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

// fabricscope_collective_duration_seconds, _bus_bandwidth_bytes_per_second (the mean of each
// node's last busBw weighted by its seconds), _bus_bytes_total {func, comm};
// fabricscope_collectives_total and _timing_source_total {func[, timing_source]};
// fabricscope_rank_pair_bytes_total {comm, src_rank, dst_rank}; the traffic imbalance's
// scope="ranks" series; the per-node ingest and kernel families. Families without a sample are
// left out.
void AddGpuFamilies(const GpuSnapshot& s, std::vector<prometheus::MetricFamily>* out);

// The job_id label of the per-communicator families (fabricscope_collective_*{comm},
// fabricscope_rank_pair_bytes_total, fabricscope_diagnosis_*, fabricscope_traffic_imbalance_ratio
// {scope="ranks"}): every sample of *families with a comm label whose communicator belongs to one
// of `jobs` (exporters/state/job_table.h) gets label job_id, that job's id, last; samples of an
// unknown job's communicators get none. Adds no series (a communicator has one job); queries
// join fabricscope_job_info on job_id for the job's name, user and pod. Named job_id, not job:
// Prometheus attaches its own `job` (the scrape job) to every series, and a scraped `job` label
// becomes exported_job unless the scrape sets honor_labels (Prometheus configuration docs,
// scrape_config, honor_labels).
void LabelCommunicatorJobs(const std::vector<JobView>& jobs,
                           std::vector<prometheus::MetricFamily>* families);

// {"collectives":[{node, comm (16 hex digits), rank, nranks, func, seq, bytes, count, datatype,
// algo, proto, channels, root, peer, timing_source, enqueue_unix_seconds, start_unix_seconds,
// end_unix_seconds, duration_seconds, algbw_bytes_per_second, busbw_bytes_per_second, pid, gpu,
// p2p, graph_captured, proxy_bytes, proxy_peers:[{peer, bytes_sent, bytes_received}]}, ...]} in
// the records' order.
std::string CollectivesJson(const std::vector<CollectiveRecord>& records);

// {"kernels":[{node, device, stream, name, is_nccl, memcpy, bytes, start_unix_seconds,
// end_unix_seconds, duration_seconds, pid, graph_id, correlation_id}, ...]} in the records' order.
std::string KernelsJson(const std::vector<KernelRecord>& records);

// /api/jobs: {"jobs":[{id, scheduler, name, user, step, namespace, pod, pod_uid, source,
// claimed_id, nodes:
// [names], comms: [8-hex-digit labels], ranks, first_seen_unix_seconds, last_seen_unix_seconds}]},
// by id (exporters/state/job_table.h JobView).
std::string JobsJson(const std::vector<JobView>& jobs);

}  // namespace fabricscope::exporters
