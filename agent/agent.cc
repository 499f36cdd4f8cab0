#include "agent/agent.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/local_sink.h"
#include "agent/uplink.h"
#include "collectors/clock.h"
#include "collectors/sysfs_collector.h"
#include "collectors/sysfs_ports.h"
#include "glog/logging.h"

namespace fabricscope::agent {

using collectors::PortDescriptor;

namespace {

constexpr char kAgentVersion[] = "0.1.0";

bool Matches(const PortDescriptor& p, const std::string& name) {
  return p.device == name || p.Key() == name;
}

v1::LinkLayer ToProto(collectors::LinkLayer l) {
  switch (l) {
    case collectors::LinkLayer::kInfiniBand: return v1::LINK_LAYER_INFINIBAND;
    case collectors::LinkLayer::kEthernet: return v1::LINK_LAYER_ETHERNET;
    default: return v1::LINK_LAYER_UNSPECIFIED;
  }
}

v1::LineRateSource ToProto(collectors::LineRateSource s) {
  switch (s) {
    case collectors::LineRateSource::kSysfs: return v1::LINE_RATE_SOURCE_SYSFS;
    case collectors::LineRateSource::kConfig: return v1::LINE_RATE_SOURCE_CONFIG;
    default: return v1::LINE_RATE_SOURCE_UNKNOWN;
  }
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  if (options.node.empty()) options.node = HostName();
  std::unique_ptr<Agent> agent(new Agent(std::move(options)));
  AgentOptions& o = agent->options_;
  const uint32_t error_divisor = static_cast<uint32_t>(
      std::max<int64_t>(1, o.error_sample_period_ns / o.sample_period_ns));

  auto rdma = collectors::DiscoverRdmaPorts(o.sysfs_root, error_divisor);
  if (!rdma.ok()) return rdma.status();
  auto net = collectors::DiscoverNetdevs(o.sysfs_root, error_divisor);
  if (!net.ok()) return net.status();
  std::vector<std::string>& notes = agent->notes_;
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
        std::vector<std::string> names;
        for (const PortDescriptor& p : all) names.push_back(p.rdma ? p.Key() : p.device);
        return absl::InvalidArgumentError(absl::StrCat(
            "no port matches \"", name, "\" under ", o.sysfs_root, "; found: ",
            names.empty() ? "(none)" : absl::StrJoin(names, ", ")));
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
    if (!used) notes.push_back(absl::StrCat("line rate for \"", name, "\" matches no watched port"));
  }
  for (const PortDescriptor& p : chosen) {
    if (p.line_rate_bytes_per_second == 0) {
      notes.push_back(absl::StrCat(
          p.rdma ? p.Key() : p.device,
          ": line rate unknown (the driver reports no speed); bytes and packets are counted, "
          "utilization and microbursts are not. Set --line-rate=", p.device, "=<rate>"));
    }
  }

  std::vector<PortDescriptor> rdma_ports, net_ports;
  for (PortDescriptor& p : chosen) (p.rdma ? rdma_ports : net_ports).push_back(std::move(p));
  for (auto* group : {&rdma_ports, &net_ports}) {
    if (group->empty()) continue;
    auto c = collectors::SysfsCounterCollector::Open(std::move(*group), &notes);
    if (!c.ok()) {
      notes.push_back(std::string(c.status().message()));
      continue;
    }
    agent->collectors_.push_back(std::move(*c));
  }
  if (agent->collectors_.empty()) {
    return absl::FailedPreconditionError("no counter file of the chosen ports could be opened");
  }
  for (const auto& c : agent->collectors_) {
    agent->ports_.insert(agent->ports_.end(), c->ports().begin(), c->ports().end());
    agent->layout_.counters += c->counter_count();
  }
  agent->ring_ = std::make_unique<collectors::SpscSlotRing>(o.ring_slots,
                                                            agent->layout_.slot_bytes());
  PipelineOptions po;
  po.window_ns = o.window_ns;
  po.thresholds = o.thresholds;
  po.port_thresholds = o.port_thresholds;
  agent->pipeline_ = std::make_unique<Pipeline>(agent->ports_, po);
  std::vector<collectors::Collector*> raw;
  for (const auto& c : agent->collectors_) raw.push_back(c.get());
  agent->sampler_ = std::make_unique<Sampler>(raw, *agent->ring_, agent->layout_,
                                              SamplerOptions{o.sample_period_ns});
  agent->instance_id_ = std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
  return agent;
}

Agent::~Agent() { Stop(); }

v1::Hello Agent::MakeHello() const {
  v1::Hello h;
  h.set_node(options_.node);
  auto boot = collectors::ReadSmallFile(options_.procfs_root + "/sys/kernel/random/boot_id", 128);
  h.set_boot_id(boot.ok() ? std::string(absl::StripAsciiWhitespace(*boot)) : "");
  h.set_agent_version(kAgentVersion);
  h.set_instance_id(instance_id_);
  h.set_sample_period_seconds(static_cast<double>(options_.sample_period_ns) / 1e9);
  h.set_window_seconds(static_cast<double>(options_.window_ns) / 1e9);
  for (const PortDescriptor& p : ports_) {
    v1::PortInfo* pi = h.add_ports();
    pi->set_device(p.device);
    pi->set_port(p.port);
    pi->set_link_layer(ToProto(p.link_layer));
    pi->set_line_rate_bytes_per_second(p.line_rate_bytes_per_second);
    pi->set_line_rate_source(ToProto(p.line_rate_source));
    pi->set_rdma(p.rdma);
  }
  return h;
}

absl::Status Agent::Start() {
  if (options_.aggregator.empty()) {
    exporters::AggregatorOptions ao;
    ao.grpc_listen = "";
    ao.http_listen = options_.http_listen;
    aggregator_ = std::make_unique<exporters::Aggregator>(ao);
    if (absl::Status s = aggregator_->Start(); !s.ok()) {
      aggregator_.reset();
      return s;
    }
    sink_ = std::make_unique<LocalSink>(aggregator_->state(), MakeHello());
  } else {
    UplinkOptions uo;
    uo.target = options_.aggregator;
    uo.max_queued_batches = options_.max_queued_batches;
    sink_ = std::make_unique<GrpcUplink>(uo, MakeHello());
  }
  started_ns_ = collectors::MonotonicNowNs();
  pipeline_thread_ = std::jthread([this](std::stop_token st) { PipelineLoop(st); });
  sampler_->Start();
  return absl::OkStatus();
}

void Agent::SubmitReady() {
  std::vector<v1::Batch> ready = pipeline_->TakeReady();
  if (ready.empty()) return;
  const int64_t offset = collectors::MeasureUnixOffsetNs();
  for (v1::Batch& b : ready) {
    b.set_unix_offset_ns(offset);
    v1::AgentStats* s = b.mutable_agent();
    sampler_->IntervalHistogram(s->mutable_sample_interval_seconds());
    s->set_ticks_total(sampler_->ticks());
    s->set_overruns_total(sampler_->overruns());
    s->set_ring_drops_total(ring_->dropped());
    s->set_uplink_dropped_batches_total(sink_->dropped_batches());
    size_t port_index = 0;
    for (const auto& c : collectors_) {
      size_t i = 0;
      for (const PortDescriptor& p : c->ports()) {
        for (const collectors::CounterDescriptor& cd : p.counters) {
          const double ns = c->ReadCostNs(i++);
          if (ns <= 0) continue;
          v1::CounterReadCost* rc = s->add_read_costs();
          rc->set_port_index(static_cast<uint32_t>(port_index));
          rc->set_counter(cd.name);
          rc->set_mean_seconds(ns / 1e9);
        }
        ++port_index;
      }
    }
    sink_->Submit(std::move(b));
  }
  bursts_seen_.store(pipeline_->microbursts_total(), std::memory_order_relaxed);
}

void Agent::PipelineLoop(std::stop_token stop) {
  pthread_setname_np(pthread_self(), "fs-pipeline");
  while (true) {
    bool drained_any = false;
    while (const void* slot = ring_->Peek()) {
      pipeline_->AddTick(TickLayout::header(slot)->t_ns, layout_.values(slot),
                         layout_.status(slot));
      ring_->Pop();
      drained_any = true;
    }
    SubmitReady();
    bursts_seen_.store(pipeline_->microbursts_total(), std::memory_order_relaxed);
    if (stop.stop_requested()) break;
    // The ring holds ring_slots ticks (0.8 s at 100 us with the default 8192), so polling
    // every millisecond keeps it far from full without a wake-up per tick on the sampler side.
    if (!drained_any) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Agent::Stop() {
  if (!sampler_ || !pipeline_thread_.joinable()) return;
  sampler_->Stop();
  pipeline_thread_.request_stop();
  pipeline_thread_.join();  // drains the ring once more before it exits
  pipeline_->Flush(collectors::MonotonicNowNs());
  SubmitReady();
  if (sink_) sink_->Shutdown(2000);
  if (aggregator_) aggregator_->Stop();
}

std::string Agent::StatusLine() const {
  const double secs =
      static_cast<double>(collectors::MonotonicNowNs() - started_ns_) / 1e9;
  const uint64_t ticks = sampler_->ticks();
  v1::Histogram h;
  sampler_->IntervalHistogram(&h);
  // p99 as the upper bound of the bucket holding the 99th percentile.
  std::string p99 = "-";
  if (h.count() > 0) {
    const uint64_t target = (h.count() * 99 + 99) / 100;
    uint64_t cum = 0;
    for (int i = 0; i < h.bucket_counts_size(); ++i) {
      cum += h.bucket_counts(i);
      if (cum >= target) {
        p99 = i < h.upper_bounds_size()
                  ? absl::StrFormat("<=%.3gms", h.upper_bounds(i) * 1e3)
                  : absl::StrFormat(">%.3gms", h.upper_bounds(i - 1) * 1e3);
        break;
      }
    }
  }
  const std::string uplink = options_.aggregator.empty()
                                 ? "standalone"
                                 : (sink_ && sink_->connected() ? "connected" : "disconnected");
  return absl::StrFormat(
      "%d ports | %.1f samples/s (p99 interval %s) | %d microbursts | %d overruns | %d ring "
      "drops | %s, batch %d acked",
      ports_.size(), secs > 0 ? static_cast<double>(ticks) / secs : 0.0, p99,
      bursts_seen_.load(), sampler_->overruns(), ring_->dropped(), uplink,
      sink_ ? sink_->acked_seq() : 0);
}

}  // namespace fabricscope::agent
