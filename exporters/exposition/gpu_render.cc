#include "exporters/exposition/gpu_render.h"

#include <google/protobuf/struct.pb.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/common/collective_vocabulary.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/exposition/struct_json.h"
#include "exporters/heatmap/heatmap_svg.h"

namespace fabricscope::exporters {
namespace {

// The timing_source label and JSON value (proto/fabricscope/v1/gpu.proto TimingSource).
const char* TimingSourceName(v1::TimingSource s) {
  switch (s) {
    case v1::TIMING_SOURCE_ENQUEUE_ONLY:
      return "enqueue_only";
    case v1::TIMING_SOURCE_KERNEL_CHANNEL:
      return "kernel_channel";
    case v1::TIMING_SOURCE_PROXY_OP:
      return "proxy_op";
    case v1::TIMING_SOURCE_COPY_ENGINE:
      return "copy_engine";
    default:
      return "unknown";
  }
}

// The per-node GPU families: the ingest's counters and CUPTI's kernel totals.
void AddNodeStats(const GpuSnapshot::Node& n, FamilySet& f) {
  const v1::GpuIngestStats& in = n.ingest;
  const std::string& node = n.node;
  for (const auto& [source, v] : in.dropped_records_total()) {
    AddValue(f[Metric::kPluginDroppedEventsTotal], {{"node", node}, {"source", source}},
             static_cast<double>(v));
  }
  AddValue(f[Metric::kGpuIngestConnections], {{"node", node}}, in.connections());
  AddValue(f[Metric::kGpuIngestDatagramsTotal], {{"node", node}},
           static_cast<double>(in.datagrams_total()));
  for (const auto& [reason, v] : in.dropped_datagrams_total()) {
    AddValue(f[Metric::kGpuIngestDroppedDatagramsTotal], {{"node", node}, {"reason", reason}},
             static_cast<double>(v));
  }
  AddValue(f[Metric::kGpuIngestRepairedStringBytesTotal], {{"node", node}},
           static_cast<double>(in.repaired_string_bytes_total()));
  AddValue(f[Metric::kGpuCommunicatorsEvictedTotal], {{"node", node}},
           static_cast<double>(n.communicators_evicted_total));
  AddValue(f[Metric::kGpuJobClaimsContradictedTotal], {{"node", node}},
           static_cast<double>(in.job_claims_contradicted_total()));
  for (const auto& [reason, v] : in.rejected_connections_total()) {
    AddValue(f[Metric::kGpuIngestRejectedConnectionsTotal], {{"node", node}, {"reason", reason}},
             static_cast<double>(v));
  }
  for (const v1::KernelTotals& k : n.kernels) {
    const std::string device = absl::StrCat(k.device());
    AddValue(f[Metric::kGpuKernelsTotal], {{"node", node}, {"device", device}},
             static_cast<double>(k.kernels_total()));
    AddValue(f[Metric::kGpuKernelSecondsTotal], {{"node", node}, {"device", device}},
             k.kernel_seconds_total());
  }
}

}  // namespace

void AddGpuFamilies(const GpuSnapshot& s, std::vector<prometheus::MetricFamily>* out) {
  // Every GPU family, whatever the --metrics profile (as before: the profile selects port and
  // agent families, exporters/exposition/metric_catalog.inc).
  FamilySet f(common::MetricProfile::kFull);
  for (const GpuSnapshot::Series& x : s.series) {
    const std::vector<prometheus::ClientMetric::Label> labels = {{"func", x.func},
                                                                 {"comm", x.comm}};
    if (x.durations.bucket_counts_size() > 0) {
      AddHistogram(f[Metric::kCollectiveDurationSeconds], labels, x.durations);
    }
    AddValue(f[Metric::kCollectiveBusBytesTotal], labels, x.bus_bytes);
    if (x.seconds > 0) {
      AddValue(f[Metric::kCollectiveBusBandwidthBytesPerSecond], labels,
               x.weighted_busbw / x.seconds);
    }
  }
  for (const auto& [func, v] : s.collectives_by_func) {
    AddValue(f[Metric::kCollectivesTotal], {{"func", func}}, v);
  }
  for (const GpuSnapshot::BySource& b : s.by_timing_source) {
    AddValue(f[Metric::kCollectiveTimingSourceTotal],
             {{"func", b.func}, {"timing_source", TimingSourceName(b.source)}}, b.count);
  }
  for (const GpuSnapshot::Node& n : s.nodes) AddNodeStats(n, f);
  for (const GpuSnapshot::RankPair& p : s.top_rank_pairs) {
    AddValue(f[Metric::kRankPairBytesTotal],
             {{"comm", common::CommLabel(p.comm_hash)},
              {"src_rank", absl::StrCat(p.src_rank)},
              {"dst_rank", absl::StrCat(p.dst_rank)}},
             p.bytes);
  }
  // fabricscope_traffic_imbalance_ratio has two scopes: "ranks" here, "rails" from the links
  // (exporters/exposition/link_render.h); the cluster's render merges them (MergeFamiliesByName).
  for (const GpuSnapshot::RankImbalance& r : s.rank_imbalance) {
    AddValue(f[Metric::kTrafficImbalanceRatio],
             {{"scope", "ranks"}, {"comm", r.comm}, {"direction", r.direction}}, r.ratio);
  }
  for (const JobView& j : s.jobs) {
    AddValue(f[Metric::kJobInfo],
             {{"job_id", j.job.id()},
              {"scheduler", j.job.scheduler()},
              {"job_name", j.job.name()},
              {"user", j.job.user()},
              {"pod_namespace", j.job.pod_namespace()},
              {"pod_name", j.job.pod()}},
             1);
  }
  AddValue(f[Metric::kAggregatorJobs], {}, static_cast<double>(s.jobs.size()));
  AddValue(f[Metric::kAggregatorJobsEvictedTotal], {},
           static_cast<double>(s.jobs_evicted_total + s.jobs_dropped_total));
  AddValue(f[Metric::kAggregatorJobCommunicatorConflictsTotal], {},
           static_cast<double>(s.job_comm_conflicts_total));
  f.DrainInto(out);
}

void LabelCommunicatorJobs(const std::vector<JobView>& jobs,
                           std::vector<prometheus::MetricFamily>* families) {
  std::map<std::string, std::string> job_of_comm;  // 8-hex-digit comm label -> job id
  for (const JobView& j : jobs) {
    for (uint64_t comm : j.comms) job_of_comm.emplace(common::CommLabel(comm), j.job.id());
  }
  if (job_of_comm.empty()) return;
  for (prometheus::MetricFamily& f : *families) {
    for (prometheus::ClientMetric& m : f.metric) {
      auto comm =
          std::find_if(m.label.begin(), m.label.end(),
                       [](const prometheus::ClientMetric::Label& l) { return l.name == "comm"; });
      if (comm == m.label.end()) continue;
      auto job = job_of_comm.find(comm->value);
      if (job != job_of_comm.end()) m.label.push_back({"job_id", job->second});
    }
  }
}

std::string CollectivesJson(const std::vector<CollectiveRecord>& records) {
  google::protobuf::Struct root;
  google::protobuf::ListValue* list = (*root.mutable_fields())["collectives"].mutable_list_value();
  for (const CollectiveRecord& c : records) {
    auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
    f["node"].set_string_value(c.node);
    f["comm"].set_string_value(absl::StrFormat("%016x", c.comm_hash));
    f["rank"].set_number_value(c.rank);
    f["nranks"].set_number_value(c.nranks);
    f["func"].set_string_value(c.func);
    f["seq"].set_number_value(static_cast<double>(c.seq));
    f["bytes"].set_number_value(static_cast<double>(c.bytes));
    f["count"].set_number_value(static_cast<double>(c.count));
    f["datatype"].set_string_value(c.datatype);
    f["algo"].set_string_value(c.algo);
    f["proto"].set_string_value(c.proto);
    f["channels"].set_number_value(c.channels);
    f["root"].set_number_value(c.root);
    f["peer"].set_number_value(c.peer);
    f["timing_source"].set_string_value(TimingSourceName(c.timing_source));
    f["enqueue_unix_seconds"].set_number_value(static_cast<double>(c.enqueue_start_unix_ns) / 1e9);
    f["start_unix_seconds"].set_number_value(static_cast<double>(c.start_unix_ns) / 1e9);
    f["end_unix_seconds"].set_number_value(static_cast<double>(c.end_unix_ns) / 1e9);
    f["duration_seconds"].set_number_value(c.duration_seconds);
    f["algbw_bytes_per_second"].set_number_value(c.algbw_bytes_per_second);
    f["busbw_bytes_per_second"].set_number_value(c.busbw_bytes_per_second);
    f["pid"].set_number_value(c.pid);
    f["gpu"].set_number_value(c.gpu);
    f["p2p"].set_bool_value(c.p2p);
    f["graph_captured"].set_bool_value(c.graph_captured);
    f["proxy_bytes"].set_number_value(static_cast<double>(c.proxy_bytes));
    google::protobuf::ListValue* peers = f["proxy_peers"].mutable_list_value();
    for (const CollectiveRecord::ProxyPeer& pp : c.proxy_peers) {
      auto& pf = *peers->add_values()->mutable_struct_value()->mutable_fields();
      pf["peer"].set_number_value(pp.peer);
      pf["bytes_sent"].set_number_value(static_cast<double>(pp.bytes_sent));
      pf["bytes_received"].set_number_value(static_cast<double>(pp.bytes_received));
    }
  }
  return StructToJson(root);
}

std::string KernelsJson(const std::vector<KernelRecord>& records) {
  google::protobuf::Struct root;
  google::protobuf::ListValue* list = (*root.mutable_fields())["kernels"].mutable_list_value();
  for (const KernelRecord& k : records) {
    auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
    f["node"].set_string_value(k.node);
    f["device"].set_number_value(k.device);
    f["stream"].set_number_value(k.stream);
    f["name"].set_string_value(k.name);
    f["is_nccl"].set_bool_value(k.is_nccl);
    f["memcpy"].set_bool_value(k.memcpy);
    f["bytes"].set_number_value(static_cast<double>(k.bytes));
    f["start_unix_seconds"].set_number_value(static_cast<double>(k.start_unix_ns) / 1e9);
    f["end_unix_seconds"].set_number_value(static_cast<double>(k.end_unix_ns) / 1e9);
    f["duration_seconds"].set_number_value(k.duration_seconds);
    f["pid"].set_number_value(k.pid);
    f["graph_id"].set_number_value(static_cast<double>(k.graph_id));
    f["correlation_id"].set_number_value(static_cast<double>(k.correlation_id));
  }
  return StructToJson(root);
}

std::string JobsJson(const std::vector<JobView>& jobs) {
  std::string out = "{\"jobs\":[";
  for (size_t i = 0; i < jobs.size(); ++i) {
    const JobView& j = jobs[i];
    if (i > 0) out += ",";
    out += "{";
    AppendJsonField(&out, "id", j.job.id());
    for (const auto& [key, value] :
         {std::pair<const char*, const std::string*>{"scheduler", &j.job.scheduler()},
          {"name", &j.job.name()},
          {"user", &j.job.user()},
          {"step", &j.job.step()},
          {"namespace", &j.job.pod_namespace()},
          {"pod", &j.job.pod()},
          {"pod_uid", &j.job.pod_uid()},
          {"source", &j.job.source()},
          {"claimed_id", &j.job.claimed_id()}}) {
      out += ",";
      AppendJsonField(&out, key, *value);
    }
    out += ",\"nodes\":[";
    for (size_t k = 0; k < j.nodes.size(); ++k) {
      if (k > 0) out += ",";
      AppendJsonString(&out, j.nodes[k]);
    }
    out += "],\"comms\":[";
    for (size_t k = 0; k < j.comms.size(); ++k) {
      absl::StrAppend(&out, k > 0 ? "," : "", "\"", common::CommLabel(j.comms[k]), "\"");
    }
    out += "],";
    AppendJsonField(&out, "ranks", static_cast<double>(j.ranks));
    out += ",";
    AppendJsonField(&out, "first_seen_unix_seconds",
                    absl::ToDoubleSeconds(j.first_seen - absl::UnixEpoch()));
    out += ",";
    AppendJsonField(&out, "last_seen_unix_seconds",
                    absl::ToDoubleSeconds(j.last_seen - absl::UnixEpoch()));
    out += "}";
  }
  out += "]}";
  return out;
}

}  // namespace fabricscope::exporters
