// Agent::Create and its steps (agent/agent.h): which ports, which counters in which sampler
// group, which collectors, and the pipeline behind them.
#include <algorithm>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/agent.h"
#include "agent/local_sink.h"
#include "agent/source_registry.h"
#include "collectors/common/stream_auth.h"
#include "collectors/sysfs_collector.h"
#include "collectors/sysfs_ports.h"
#include "collectors/uplink/uplink.h"
#include "exporters/aggregator.h"
#include "exporters/exposition/http_server.h"
#include "glog/logging.h"

namespace fabricscope::agent {

using collectors::PortDescriptor;

namespace {

bool Matches(const PortDescriptor& p, const std::string& name) {
  return p.device == name || p.Key() == name;
}

// "mlx5_0:1, eth0" (RDMA ports by device:port, interfaces by name; not the node-wide TCP port),
// "(none)" for none: the list an error about an unmatched port name shows.
std::string PortList(const std::vector<PortDescriptor>& ports) {
  std::vector<std::string> names;
  for (const PortDescriptor& p : ports) {
    if (!p.node_level) names.push_back(p.rdma ? p.Key() : p.device);
  }
  return names.empty() ? "(none)" : absl::StrJoin(names, ", ");
}

// An RDMA port without byte counters (iWARP/i40iw: all "N/A (no PMA)") counts the bytes and
// packets of its netdev (statistics/, include/uapi/linux/if_link.h rtnl_link_stats64) instead,
// when one is linked; noted either way.
void BorrowNetdevTraffic(const std::string& sysfs_root, PortDescriptor& p,
                         std::vector<std::string>& notes) {
  const bool has_bytes = std::any_of(p.counters.begin(), p.counters.end(), [](const auto& c) {
    return c.role == collectors::CounterRole::kTransmitBytes ||
           c.role == collectors::CounterRole::kReceiveBytes;
  });
  if (has_bytes) return;
  if (p.netdev.empty()) {
    notes.push_back(absl::StrCat(p.Key(),
                                 ": no traffic counters and no netdev linked: state, "
                                 "rate and link events only"));
    return;
  }
  for (collectors::CounterDescriptor& c : collectors::NetdevCounterSet(
           absl::StrCat(sysfs_root, "/class/net/", p.netdev, "/statistics"), 1)) {
    if (c.role != collectors::CounterRole::kError) p.counters.push_back(std::move(c));
  }
  notes.push_back(absl::StrCat(p.Key(), ": bytes and packets from its netdev ", p.netdev,
                               " (statistics/), its own counters being unavailable"));
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  // Before any thread: a sampler that cannot get its CPU or priority is refused here, clearly.
  if (absl::Status s = CheckThreadSched(SamplerSchedOf(options)); !s.ok()) return s;
  if (options.node.empty()) options.node = HostName();
  std::unique_ptr<Agent> agent(new Agent(std::move(options)));
  auto chosen = ChoosePorts(agent->options_, agent->notes_);
  if (!chosen.ok()) return chosen.status();
  agent->chosen_ = *std::move(chosen);
  agent->OpenSysfsGroups();
  agent->OpenRegisteredSources();
  if (absl::Status s = agent->BuildPipeline(); !s.ok()) return s;
  agent->instance_id_ =
      std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
  return agent;
}

absl::StatusOr<std::vector<PortDescriptor>> Agent::ChoosePorts(const AgentOptions& o,
                                                               std::vector<std::string>& notes) {
  auto rdma = collectors::DiscoverRdmaPorts(o.sysfs_root);
  if (!rdma.ok()) return rdma.status();
  auto net = collectors::DiscoverNetdevs(o.sysfs_root);
  if (!net.ok()) return net.status();

  notes.insert(notes.end(), rdma->notes.begin(), rdma->notes.end());
  notes.insert(notes.end(), net->notes.begin(), net->notes.end());

  std::vector<PortDescriptor> all = rdma->ports;
  all.insert(all.end(), net->ports.begin(), net->ports.end());
  std::vector<PortDescriptor> chosen;
  if (!o.interfaces.empty()) {
    for (const std::string& name : o.interfaces) {
      bool found = false;
      for (const PortDescriptor& p : all) {
        if (Matches(p, name)) {
          found = true;
          const bool dup = std::any_of(chosen.begin(), chosen.end(), [&](const PortDescriptor& c) {
            return c.Key() == p.Key() && c.rdma == p.rdma;
          });
          if (!dup) chosen.push_back(p);
        }
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat("no port matches \"", name, "\" under ",
                                                       o.sysfs_root, "; found: ", PortList(all)));
      }
    }
  } else {
    for (const PortDescriptor& p : all) {
      if (p.rdma || !p.is_virtual) chosen.push_back(p);
    }
    if (chosen.empty()) {
      for (const PortDescriptor& p : all) {
        if (p.device == "lo") chosen.push_back(p);
      }
    }
    if (chosen.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no RDMA port, physical interface or lo with counters under ", o.sysfs_root));
    }
  }
  for (const auto& [name, rate] : o.line_rates) {
    bool used = false;
    for (PortDescriptor& p : chosen) {
      if (Matches(p, name)) {
        p.line_rate_bytes_per_second = rate;
        p.line_rate_source = collectors::LineRateSource::kConfig;
        used = true;
      }
    }
    if (!used)
      notes.push_back(absl::StrCat("line rate for \"", name, "\" matches no watched port"));
  }
  for (const PortDescriptor& p : chosen) {
    if (p.line_rate_bytes_per_second == 0) {
      notes.push_back(absl::StrCat(
          p.rdma ? p.Key() : p.device,
          ": line rate unknown (the driver reports no speed); bytes and packets are counted, "
          "utilization and microbursts are not. Set --line-rate=",
          p.device, "=<rate>"));
    }
  }

  for (PortDescriptor& p : chosen) {
    if (!p.rdma) continue;
    if (auto nd = collectors::FindRdmaNetdev(o.sysfs_root, p.device, p.port); nd.ok()) {
      p.netdev = *nd;
    }
    BorrowNetdevTraffic(o.sysfs_root, p, notes);
  }
  return chosen;
}

void Agent::OpenSysfsGroups() {
  const AgentOptions& o = options_;
  const std::vector<PortDescriptor>& chosen = chosen_;
  std::vector<std::string>& notes = notes_;
  // Fast group: byte and packet counters only. Slow group: the rest of the sysfs counters,
  // hw_counters (at their lifespan), link state, TCP.
  const int64_t slow_ns = o.slow_sample_period_ns;
  std::vector<PortDescriptor> fast_ports, slow_ports;
  for (const PortDescriptor& p : chosen) {
    PortDescriptor f = p, sl = p;
    f.counters.clear();
    sl.counters.clear();
    for (const collectors::CounterDescriptor& c : p.counters) {
      const bool fast = collectors::IsTrafficRole(c.role);
      collectors::CounterDescriptor copy = c;
      copy.tick_divisor = 1;
      if (c.group == "hw_counters") {
        // The kernel serves hw_counters from a cache it refreshes on a read that comes more
        // than `lifespan` after the last refresh (drivers/infiniband/core/sysfs.c
        // update_hw_stats, in jiffies). Slow counters are read once a lifespan. The driver's
        // byte counters (irdma) are read every second lifespan, so that each read is a
        // refresh even with the lifespan rounded up to whole jiffies: a cached read would
        // give a zero delta, then a double one, which is a false microburst.
        const int64_t lifespan_ns = HwLifespanNs(p);
        const int64_t period = fast ? o.sample_period_ns : slow_ns;
        const int64_t every = fast ? 2 * lifespan_ns : lifespan_ns;
        copy.tick_divisor =
            static_cast<uint32_t>(std::max<int64_t>(1, (every + period - 1) / period));
      }
      (fast ? f : sl).counters.push_back(std::move(copy));
    }
    if (!f.counters.empty()) fast_ports.push_back(std::move(f));
    if (!sl.counters.empty()) slow_ports.push_back(std::move(sl));
  }
  SamplerGroup& fast = groups_[0];
  SamplerGroup& slow = groups_[1];
  fast.name = "fast";
  fast.period_ns = o.sample_period_ns;
  slow.name = "slow";
  slow.period_ns = slow_ns;
  // RDMA and netdev counters as two sources, each opened once.
  for (bool rdma : {true, false}) {
    std::vector<PortDescriptor> part;
    for (const PortDescriptor& p : fast_ports) {
      if (p.rdma == rdma) part.push_back(p);
    }
    if (part.empty()) continue;
    auto c = collectors::SysfsCounterCollector::Open(std::move(part), &notes);
    if (c.ok()) {
      Attach(fast, std::move(*c));
    } else {
      notes.push_back(std::string(c.status().message()));
    }
  }
  if (!slow_ports.empty()) {
    auto c = collectors::SysfsCounterCollector::Open(slow_ports, &notes);
    if (c.ok()) {
      Attach(slow, std::move(*c));
    } else {
      notes.push_back(std::string(c.status().message()));
    }
  }
}

void Agent::OpenRegisteredSources() {
  SamplerGroup& pma = groups_[static_cast<size_t>(SamplerGroupId::kPma)];
  pma.name = "pma";
  pma.period_ns = options_.pma_period_ns;
  const SourceContext ctx{options_, chosen_, notes_};
  for (const SourceSpec& source : Sources()) {
    std::unique_ptr<collectors::Collector> c = source.open(ctx);
    if (c != nullptr) Attach(groups_[static_cast<size_t>(source.group)], std::move(c));
  }
}

absl::Status Agent::BuildPipeline() {
  const AgentOptions& o = options_;
  SamplerGroup& fast = groups_[0];
  SamplerGroup& slow = groups_[1];
  SamplerGroup& pma = groups_[2];
  if (fast.collectors.empty() && slow.collectors.empty()) {
    return absl::FailedPreconditionError("no counter file of the chosen ports could be opened");
  }
  // A rail that names no port is a typo, not an empty set: say so (as for --interfaces).
  for (const std::string& rail : o.collectives.rails) {
    if (std::none_of(ports_.begin(), ports_.end(),
                     [&](const PortDescriptor& p) { return MatchesRail(p, rail); })) {
      return absl::InvalidArgumentError(absl::StrCat("collective rails: no port matches \"", rail,
                                                     "\"; ports: ", PortList(ports_)));
    }
  }
  PipelineOptions po{o.window_ns, o.sample_period_ns, o.thresholds, o.port_thresholds};
  po.series_bucket_ns = o.series_bucket_ns;
  po.flight_recorder_seconds = o.flight_recorder_seconds;
  pipeline_ = std::make_unique<Pipeline>(ports_, std::move(po));
  pipeline_->SetGroups({fast.refs, slow.refs, pma.refs});
  for (SamplerGroup* g : {&fast, &slow, &pma}) {
    if (g->collectors.empty()) continue;
    g->ring = std::make_unique<collectors::SpscSlotRing>(o.ring_slots, g->layout.slot_bytes());
    std::vector<collectors::Collector*> raw;
    for (const auto& c : g->collectors) raw.push_back(c.get());
    SamplerOptions so{g->period_ns, {}};
    // --sampler-cpu and --sampler-priority are for the fast thread, the one on a 100 us clock.
    if (g == &fast) so.sched = SamplerSchedOf(o);
    g->sampler = std::make_unique<Sampler>(raw, *g->ring, g->layout, so);
  }
  ComputeResolutions();
  return absl::OkStatus();
}

int64_t Agent::HwLifespanNs(const PortDescriptor& p) const {
  const uint32_t ms = options_.hw_lifespan_ms ? options_.hw_lifespan_ms : p.hw_lifespan_ms;
  return static_cast<int64_t>(ms) * 1'000'000;
}

void Agent::ComputeResolutions() {
  // Per counter group: the sampling period, or for cached sources the cache lifetime when that
  // is longer (hw_counters/lifespan). Fixed once the groups are: every batch carries a copy.
  std::map<std::string, std::pair<int64_t, int64_t>> res;  // group -> period, effective
  for (size_t gi = 0; gi < kGroups; ++gi) {
    const SamplerGroup& g = groups_[gi];
    for (const Pipeline::CounterRef& ref : g.refs) {
      const PortDescriptor& p = ports_[ref.port];
      const collectors::CounterDescriptor& cd = p.counters[ref.counter];
      const int64_t period = g.period_ns * cd.tick_divisor;
      int64_t effective = period;
      if (cd.group == "hw_counters") {
        effective = std::max(effective, HwLifespanNs(p));
      }
      const std::string key =
          cd.role == collectors::CounterRole::kError ? cd.group + "_errors" : cd.group;
      auto& e = res[key];
      e.first = std::max(e.first, period);
      e.second = std::max(e.second, effective);
    }
  }
  resolutions_.clear();
  for (const auto& [group, pe] : res) {
    v1::GroupResolution r;
    r.set_group(group);
    r.set_sample_period_seconds(static_cast<double>(pe.first) / 1e9);
    r.set_effective_resolution_seconds(static_cast<double>(pe.second) / 1e9);
    resolutions_.push_back(std::move(r));
  }
}

// Start's steps (agent/agent.cc), in order.

// Standalone: the in-process aggregator's timeline fetches this agent's own flight recorder
// (exporters/state/recording_fetch.h). Agent::Stop and StopAndReleaseAggregator clear it
// before the pipeline can go (a reload keeps the aggregator and hands it to the next agent).
void Agent::AnswerOwnRecordingRequests() {
  const std::string node = common::ValidUtf8(options_.node);
  aggregator_->state().recording_fetch().SetSender(
      [this, node](const std::string& asked, const v1::RecordingRequest& r) {
        using Sent = exporters::RecordingFetch::Sent;
        if (asked != node) return Sent::kNotConnected;
        return pipeline_->recording_inbox().Push(r) ? Sent::kSent : Sent::kBusy;
      });
}

absl::Status Agent::OpenSink(std::unique_ptr<exporters::Aggregator> serving) {
  if (options_.aggregator.empty() && serving) {
    aggregator_ = std::move(serving);
    sink_ = std::make_unique<LocalSink>(aggregator_->admission(), MakeHello());
    AnswerOwnRecordingRequests();
  } else if (options_.aggregator.empty()) {
    serving.reset();
    exporters::AggregatorOptions ao;
    ao.grpc_listen = "";
    ao.http_listen = options_.http_listen;
    ao.web_config = options_.web_config;
    ao.metrics = options_.metrics;
    ao.remote_write = options_.remote_write;
    ao.history = options_.history;
    aggregator_ = std::make_unique<exporters::Aggregator>(ao);
    if (absl::Status s = aggregator_->Start(); !s.ok()) {
      aggregator_.reset();
      return s;
    }
    sink_ = std::make_unique<LocalSink>(aggregator_->admission(), MakeHello());
    AnswerOwnRecordingRequests();
  } else {
    uplink::UplinkOptions uo;
    uo.target = options_.aggregator;
    uo.max_queued_batches = options_.max_queued_batches;
    uo.tls = options_.tls;
    uo.on_recording_request = [this](const v1::RecordingRequest& r) {
      pipeline_->recording_inbox().Push(r);
    };
    if (!options_.auth_token_file.empty()) {
      auto token = common::ReadTokenFile(options_.auth_token_file, "--auth-token-file");
      if (!token.ok()) return token.status();
      uo.auth_token = *std::move(token);
    }
    if (!options_.spool_dir.empty()) {
      auto spool = uplink::Spool::Open(
          uplink::SpoolOptions{.dir = options_.spool_dir, .max_bytes = options_.spool_max_bytes},
          MakeHello());
      if (!spool.ok()) return spool.status();
      spool_ = *std::move(spool);
      const uplink::Spool::Stats st = spool_->stats();
      LOG(INFO) << "spool " << options_.spool_dir << ": " << st.batches
                << " unacked batches of earlier agent processes to send (" << st.bytes
                << " bytes); dropped at start: " << st.dropped_corrupt << " corrupt, "
                << st.dropped_expired << " expired, " << st.dropped_full << " over the limit";
      uo.spool = spool_.get();
    }
    sink_ = std::make_unique<uplink::GrpcUplink>(uo, MakeHello());
    if (!options_.health_listen.empty()) {
      // /healthz alone (no collectables, no cluster state): the process and its HTTP thread
      // answer.
      health_ = std::make_unique<exporters::HttpServer>(
          std::vector<const prometheus::Collectable*>{}, nullptr);
      auto port = health_->Start(options_.health_listen);
      if (!port.ok()) {
        health_.reset();
        sink_->Shutdown(0);
        return port.status();
      }
      health_port_ = *port;
    }
  }
  return absl::OkStatus();
}

absl::Status Agent::OpenCapture() {
  if (!options_.capture_interface.empty()) {
    collectors::pcap::LiveCaptureOptions co;
    co.interface = options_.capture_interface;
    co.filter = options_.capture_filter;
    co.snaplen = options_.capture_snaplen;
    auto c = CaptureRunner::Start(co);
    if (!c.ok()) return c.status();
    capture_ = std::move(*c);
  }
  return absl::OkStatus();
}

void Agent::OpenGpu() {
  if (options_.gpu_socket.empty()) return;
  GpuIngestOptions go;
  go.socket_path = options_.gpu_socket;
  go.socket_mode = options_.gpu_socket_mode;
  go.socket_group = options_.gpu_socket_group;
  go.allowed_uids = options_.gpu_allowed_uids;
  go.max_connections = options_.gpu_max_connections;
  go.queue_slots = options_.gpu_queue_slots;
  go.procfs_root = options_.procfs_root;
  auto ingest = std::make_unique<GpuIngest>(go);
  // The agent's main job is the port counters: without the socket it runs on, loudly.
  if (absl::Status s = ingest->Start(); !s.ok()) {
    LOG(ERROR) << "GPU ingest is off: " << s.message();
  } else {
    gpu_ingest_ = std::move(ingest);
    LOG(INFO) << "GPU ingest listening on " << options_.gpu_socket;
  }
  GpuTimelineOptions to;
  to.max_collectives_per_batch = options_.gpu_max_collectives_per_batch;
  to.max_kernel_spans_per_batch = options_.gpu_max_kernel_spans_per_batch;
  gpu_timeline_ = std::make_unique<GpuTimeline>(to);
  CollectiveAnalysisOptions co = options_.collectives;
  co.sample_period_ns = options_.sample_period_ns;
  // A captured packet reaches the analysis up to one TPACKET_V3 block timeout late
  // (collectors/pcap/capture.h): wait twice that past a collective's end, plus 50 ms.
  if (capture_) {
    const int64_t block_ns = int64_t{collectors::pcap::LiveCaptureOptions{}.timeout_ms} * 1'000'000;
    co.delay_ns = std::max(co.delay_ns, 2 * block_ns + 50'000'000);
  }
  collective_analyzer_ =
      std::make_unique<CollectiveAnalyzer>(pipeline_->ports(), pipeline_->flight_recorder(), co);
  pipeline_->set_counter_observer(collective_analyzer_.get());
  const bool any_rdma = std::any_of(pipeline_->ports().begin(), pipeline_->ports().end(),
                                    [](const collectors::PortDescriptor& p) { return p.rdma; });
  if (gpu_ingest_ && any_rdma && !options_.rdma_tool.empty()) {
    QpPortWatcher::Options qo;
    qo.tool = options_.rdma_tool;
    qo.period_ns = options_.qp_refresh_period_ns;
    qp_ports_ = std::make_unique<QpPortWatcher>(qo, pipeline_->ports());
  }
  if (aggregator_) aggregator_->state().SetRankPairTopK(options_.gpu_rank_pairs_top_k);
}

}  // namespace fabricscope::agent
