#include "exporters/ingest/message_checks.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "collectors/common/label_check.h"
#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Whether messages of type `d` can hold a Histogram (visiting: the types on the current path,
// for recursive types).
bool MayHoldHistogram(const Descriptor* d, std::set<const Descriptor*>& visiting) {
  if (d == v1::Histogram::descriptor()) return true;
  if (!visiting.insert(d).second) return false;
  bool holds = false;
  for (int i = 0; i < d->field_count() && !holds; ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || f->is_map()) continue;
    holds = MayHoldHistogram(f->message_type(), visiting);
  }
  visiting.erase(d);
  return holds;
}

// The message fields of type `d` through which a Histogram can be reached, computed once per
// type and kept for the process (message types are few and never go away; std::map values stay
// put). Each thread keeps its own index of the lists it has read, so the walk of a batch takes
// no lock once its thread has seen each type.
const std::vector<const FieldDescriptor*>& HistogramFields(const Descriptor* d) {
  thread_local absl::flat_hash_map<const Descriptor*, const std::vector<const FieldDescriptor*>*>
      seen;
  if (const auto it = seen.find(d); it != seen.end()) return *it->second;
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new std::map<const Descriptor*, std::vector<const FieldDescriptor*>>();
  {
    absl::ReaderMutexLock lock(&mu);
    if (const auto it = cache->find(d); it != cache->end()) {
      seen.emplace(d, &it->second);
      return it->second;
    }
  }
  std::vector<const FieldDescriptor*> fields;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    std::set<const Descriptor*> visiting;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->is_map() &&
        MayHoldHistogram(f->message_type(), visiting)) {
      fields.push_back(f);
    }
  }
  absl::MutexLock lock(&mu);
  const std::vector<const FieldDescriptor*>& kept =
      cache->emplace(d, std::move(fields)).first->second;
  seen.emplace(d, &kept);
  return kept;
}

// Where the walk is: a field (and index, -1 when not repeated) below its parent's place. The
// path string is built only for an error.
struct Place {
  const Place* parent;
  const FieldDescriptor* field;
  int index;
};

std::string PathOf(const Place* p) {
  if (p == nullptr) return "";
  std::string out = PathOf(p->parent);
  if (!out.empty()) out += ".";
  absl::StrAppend(&out, p->field->name());
  if (p->index >= 0) absl::StrAppend(&out, "[", p->index, "]");
  return out;
}

absl::Status CheckOne(const v1::Histogram& h, const Place* at) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(PathOf(at) + ": " + why);
  };
  for (int i = 0; i < h.upper_bounds_size(); ++i) {
    if (!std::isfinite(h.upper_bounds(i)))
      return bad(absl::StrCat("upper bound ", i, " not finite"));
    if (i > 0 && !(h.upper_bounds(i) > h.upper_bounds(i - 1))) {
      return bad(absl::StrCat("upper_bounds not increasing at ", i));
    }
  }
  if (h.bucket_counts_size() > h.upper_bounds_size() + 1 ||
      (h.bucket_counts_size() > 0 && h.bucket_counts_size() < h.upper_bounds_size())) {
    return bad(absl::StrCat(h.bucket_counts_size(), " bucket counts for ", h.upper_bounds_size(),
                            " bounds"));
  }
  uint64_t total = 0;
  for (uint64_t c : h.bucket_counts()) {
    if (c > h.count() || total > h.count() - c) return bad("bucket counts exceed count");
    total += c;
  }
  if (!std::isfinite(h.sum())) return bad("sum not finite");
  return absl::OkStatus();
}

absl::Status Walk(const Message& m, const Place* at) {
  if (m.GetDescriptor() == v1::Histogram::descriptor()) {
    return CheckOne(static_cast<const v1::Histogram&>(m), at);
  }
  const Reflection* r = m.GetReflection();
  for (const FieldDescriptor* f : HistogramFields(m.GetDescriptor())) {
    if (f->is_repeated()) {
      for (int k = 0; k < r->FieldSize(m, f); ++k) {
        const Place here{at, f, k};
        absl::Status s = Walk(r->GetRepeatedMessage(m, f, k), &here);
        if (!s.ok()) return s;
      }
    } else if (r->HasField(m, f)) {
      const Place here{at, f, -1};
      absl::Status s = Walk(r->GetMessage(m, f), &here);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// The agent's bounds for its utilization series (agent/options.cc: series_bucket 10us..window,
// window at most 1 h).
constexpr int64_t kMinSeriesBucketNs = 10'000;
constexpr int64_t kMaxSeriesWindowNs = 3'600'000'000'000;

// The port indexes and utilization series of an agent's batch against the node's ports.
// Errors: InvalidArgument with *reason set (port_index, series).
absl::Status CheckBatchPorts(const v1::Batch& batch, size_t ports, const char** reason) {
  absl::Status invalid;
  for (const v1::PortWindow& pw : batch.ports()) {
    if (pw.port_index() >= ports) {
      *reason = "port_index";
      invalid = absl::InvalidArgumentError(absl::StrCat("batch ", batch.seq(), " names port index ",
                                                        pw.port_index(), " of ", ports));
    }
  }
  for (const v1::Microburst& m : batch.microbursts()) {
    if (m.port_index() >= ports) {
      *reason = "port_index";
      invalid = absl::InvalidArgumentError(absl::StrCat("batch ", batch.seq(),
                                                        " has a microburst on port index ",
                                                        m.port_index(), " of ", ports));
    }
  }
  // Utilization series within the agent's own bounds (one byte per bucket within a window of
  // at most kMaxSeriesWindowNs): the heat-map ingest loops over the series' span, so a span
  // someone sent must not set its length.
  for (const v1::UtilizationSeries& u : batch.utilization_series()) {
    const size_t buckets = std::max(u.transmit().size(), u.receive().size());
    if (u.bucket_ns() < kMinSeriesBucketNs || u.bucket_ns() > kMaxSeriesWindowNs ||
        static_cast<double>(u.bucket_ns()) * static_cast<double>(buckets) >
            static_cast<double>(kMaxSeriesWindowNs) ||
        u.port_index() >= ports) {
      *reason = "series";
      invalid = absl::InvalidArgumentError(
          absl::StrCat("batch ", batch.seq(), " has a utilization series of ", buckets,
                       " buckets of ", u.bucket_ns(), " ns on port index ", u.port_index()));
    }
  }
  return invalid;
}

// Bounds of a batch's times (CheckBatchTimes): an offset within ±2^62 ns (±146 years) and every
// monotonic time or duration within ±2^61 ns (73 years of uptime), so that any sum of an
// offset and a time, or difference of two times, fits an int64.
constexpr int64_t kMaxOffsetNs = int64_t{1} << 62;
constexpr int64_t kMaxMonotonicNs = int64_t{1} << 61;

bool TimeOk(int64_t t) { return t >= -kMaxMonotonicNs && t <= kMaxMonotonicNs; }

// The first time field of the batch out of its bound, as "collectives[3].end_ns"; "" if none.
std::string BadBatchTime(const v1::Batch& b) {
  if (b.unix_offset_ns() < -kMaxOffsetNs || b.unix_offset_ns() > kMaxOffsetNs) {
    return "unix_offset_ns";
  }
  if (!TimeOk(b.window_start_ns())) return "window_start_ns";
  if (!TimeOk(b.window_end_ns())) return "window_end_ns";
  for (int i = 0; i < b.microbursts_size(); ++i) {
    const v1::Microburst& m = b.microbursts(i);
    if (!TimeOk(m.start_ns()) || !TimeOk(m.duration_ns()))
      return absl::StrCat("microbursts[", i, "]");
  }
  for (int i = 0; i < b.link_events_size(); ++i) {
    if (!TimeOk(b.link_events(i).time_ns())) return absl::StrCat("link_events[", i, "].time_ns");
  }
  for (int i = 0; i < b.collectives_size(); ++i) {
    const v1::Collective& c = b.collectives(i);
    for (int64_t t : {c.enqueue_start_ns(), c.enqueue_end_ns(), c.start_ns(), c.end_ns()}) {
      if (!TimeOk(t)) return absl::StrCat("collectives[", i, "]");
    }
    for (const v1::ChannelSpan& ch : c.channel_spans()) {
      if (!TimeOk(ch.start_ns()) || !TimeOk(ch.end_ns())) {
        return absl::StrCat("collectives[", i, "].channel_spans");
      }
    }
  }
  for (int i = 0; i < b.kernel_spans_size(); ++i) {
    const v1::KernelSpan& k = b.kernel_spans(i);
    if (!TimeOk(k.start_ns()) || !TimeOk(k.end_ns())) return absl::StrCat("kernel_spans[", i, "]");
  }
  for (int i = 0; i < b.flight_recordings_size(); ++i) {
    const v1::FlightRecording& r = b.flight_recordings(i);
    bool ok = TimeOk(r.from_ns()) && TimeOk(r.to_ns());
    for (int64_t t : r.time_ns()) ok = ok && TimeOk(t);
    for (int64_t t : r.interval_ns()) ok = ok && TimeOk(t);
    if (!ok) return absl::StrCat("flight_recordings[", i, "]");
  }
  return "";
}

}  // namespace

absl::Status CheckAgentBatch(const v1::Batch& batch, size_t ports, const char** reason) {
  if (batch.forwarded_size() > 0) {
    *reason = "forwarded";
    return absl::InvalidArgumentError(absl::StrCat(
        "batch ", batch.seq(), ": forwarded records come from peer aggregators, not agents"));
  }
  if (absl::Status s = CheckBatchPorts(batch, ports, reason); !s.ok()) return s;
  if (const std::string bad = BadBatchTime(batch); !bad.empty()) {
    *reason = "time";
    return absl::InvalidArgumentError(absl::StrCat(
        "batch ", batch.seq(), ": ", bad,
        " out of bounds (an offset within 2^62 ns, times and durations within 2^61 ns)"));
  }
  // Histograms as the text format needs them: increasing finite bounds, cumulative counts.
  if (absl::Status h = CheckHistograms(batch); !h.ok()) {
    *reason = "histogram";
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch.seq(), ": ", h.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckHistograms(const Message& message) { return Walk(message, nullptr); }

absl::Status CheckHello(const v1::Hello& h, const HelloLimits& limits) {
  if (h.node().empty()) return absl::InvalidArgumentError("node: empty");
  absl::Status s = common::CheckLabelValue(h.node(), limits.max_node_bytes, "node");
  if (s.ok()) s = common::CheckLabelValue(h.boot_id(), limits.max_label_bytes, "boot_id");
  if (s.ok())
    s = common::CheckLabelValue(h.agent_version(), limits.max_label_bytes, "agent_version");
  if (!s.ok()) return s;
  if (static_cast<size_t>(h.ports_size()) > limits.max_ports) {
    return absl::InvalidArgumentError(
        absl::StrCat("ports: ", h.ports_size(), " ports, at most ", limits.max_ports));
  }
  if (static_cast<size_t>(h.addresses_size()) > limits.max_addresses) {
    return absl::InvalidArgumentError(absl::StrCat("addresses: ", h.addresses_size(),
                                                   " addresses, at most ", limits.max_addresses));
  }
  for (int i = 0; i < h.ports_size(); ++i) {
    const std::string at = absl::StrCat("ports[", i, "].");
    s = common::CheckLabelValue(h.ports(i).device(), limits.max_label_bytes, at + "device");
    if (s.ok())
      s = common::CheckLabelValue(h.ports(i).netdev(), limits.max_label_bytes, at + "netdev");
    if (!s.ok()) return s;
  }
  for (int i = 0; i < h.addresses_size(); ++i) {
    s = common::CheckLabelValue(h.addresses(i), limits.max_label_bytes,
                                absl::StrCat("addresses[", i, "]"));
    if (!s.ok()) return s;
  }
  for (auto [v, name] : {std::pair{h.sample_period_seconds(), "sample_period_seconds"},
                         {h.window_seconds(), "window_seconds"}}) {
    if (!std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", v, " is not a duration"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGpuWindow(const v1::Batch& batch, const BatchLimits& limits,
                            const char** reason) {
  if (!batch.has_gpu()) return absl::OkStatus();
  const v1::GpuWindow& w = batch.gpu();
  if (static_cast<size_t>(w.rank_pairs_size()) > limits.max_rank_pairs) {
    *reason = "rank_pair_limit";
    return absl::ResourceExhaustedError(absl::StrCat("gpu.rank_pairs: ", w.rank_pairs_size(),
                                                     ", at most ", limits.max_rank_pairs,
                                                     " (limits: max_rank_pairs_per_node)"));
  }
  std::set<uint64_t> comms;
  auto add = [&](uint64_t comm) {
    return comms.insert(comm), comms.size() <= limits.max_communicators;
  };
  bool ok = true;
  for (const v1::CollectiveTotals& t : w.collective_totals()) ok = ok && add(t.comm_hash());
  for (const v1::Communicator& c : w.communicators()) ok = ok && add(c.comm_hash());
  for (const v1::RankPairBytes& p : w.rank_pairs()) ok = ok && add(p.comm_hash());
  if (!ok) {
    *reason = "communicator_limit";
    return absl::ResourceExhaustedError(
        absl::StrCat("gpu: more than ", limits.max_communicators,
                     " communicators (limits: max_communicators_per_node)"));
  }
  return absl::OkStatus();
}

absl::Status CheckForwarded(const v1::Batch& batch, const HelloLimits& limits) {
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  batch.GetReflection()->ListFields(batch, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    if (f->number() != v1::Batch::kSeqFieldNumber &&
        f->number() != v1::Batch::kForwardedFieldNumber) {
      return absl::InvalidArgumentError(
          absl::StrCat("a peer's batch carries ", f->name(), "; only forwarded records"));
    }
  }
  for (int i = 0; i < batch.forwarded_size(); ++i) {
    const v1::ForwardedAnalysis& r = batch.forwarded(i);
    const std::string at = absl::StrCat("forwarded[", i, "].");
    if (r.node().empty()) return absl::InvalidArgumentError(at + "node: empty");
    if (r.unix_offset_ns() < -kMaxOffsetNs || r.unix_offset_ns() > kMaxOffsetNs ||
        !TimeOk(r.collective().start_ns()) || !TimeOk(r.collective().end_ns()) ||
        !TimeOk(r.collective().enqueue_start_ns()) || !TimeOk(r.collective().enqueue_end_ns())) {
      return absl::InvalidArgumentError(at + "times out of bounds");
    }
    absl::Status s = common::CheckLabelValue(r.node(), limits.max_node_bytes, at + "node");
    // A port label is "device:port": a device label, a colon and up to 10 digits.
    if (s.ok()) s = common::CheckLabelValue(r.port(), limits.max_label_bytes + 11, at + "port");
    if (!s.ok()) return s;
    // Its jobs: only GpuWindow.jobs and .communicators, and few (ClusterState::AttachJobs).
    std::vector<const google::protobuf::FieldDescriptor*> jf;
    r.jobs().GetReflection()->ListFields(r.jobs(), &jf);
    for (const google::protobuf::FieldDescriptor* f : jf) {
      if (f->number() != v1::GpuWindow::kJobsFieldNumber &&
          f->number() != v1::GpuWindow::kCommunicatorsFieldNumber) {
        return absl::InvalidArgumentError(absl::StrCat(at, "jobs carries ", f->name()));
      }
    }
    constexpr int kMax = static_cast<int>(ClusterState::kMaxForwardedJobs);
    if (r.jobs().jobs_size() > kMax || r.jobs().communicators_size() > kMax) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "jobs: more than ", kMax, " jobs or communicators"));
    }
  }
  return CheckHistograms(batch);
}

}  // namespace fabricscope::exporters
