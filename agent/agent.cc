#include "agent/agent.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/batch_assembler.h"
#include "agent/job_identity.h"
#include "agent/local_sink.h"
#include "collectors/clock.h"
#include "collectors/common/histogram_math.h"
#include "collectors/common/stream_auth.h"
#include "collectors/common/utf8.h"
#include "collectors/sysfs_ports.h"
#include "collectors/uplink/uplink.h"
#include "exporters/aggregator.h"
#include "exporters/exposition/http_server.h"
#include "glog/logging.h"

namespace fabricscope::agent {

using collectors::PortDescriptor;

namespace {

constexpr char kAgentVersion[] = "0.1.0";

v1::LinkLayer ToProto(collectors::LinkLayer l) {
  switch (l) {
    case collectors::LinkLayer::kInfiniBand:
      return v1::LINK_LAYER_INFINIBAND;
    case collectors::LinkLayer::kEthernet:
      return v1::LINK_LAYER_ETHERNET;
    default:
      return v1::LINK_LAYER_UNSPECIFIED;
  }
}

v1::LineRateSource ToProto(collectors::LineRateSource s) {
  switch (s) {
    case collectors::LineRateSource::kSysfs:
      return v1::LINE_RATE_SOURCE_SYSFS;
    case collectors::LineRateSource::kConfig:
      return v1::LINE_RATE_SOURCE_CONFIG;
    default:
      return v1::LINE_RATE_SOURCE_UNKNOWN;
  }
}

// IPv4/IPv6 addresses (not link-local) of the watched netdevs and of RoCE ports' netdevs.
std::vector<std::string> InterfaceAddresses(const std::vector<PortDescriptor>& ports) {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_name == nullptr) continue;
    const bool watched = std::any_of(ports.begin(), ports.end(), [&](const PortDescriptor& p) {
      return !p.node_level && (p.rdma ? p.netdev : p.device) == a->ifa_name;
    });
    if (!watched) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, buf,
                sizeof(buf));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&v6)) continue;
      inet_ntop(AF_INET6, &v6, buf, sizeof(buf));
    } else {
      continue;
    }
    if (std::find(out.begin(), out.end(), buf) == out.end()) out.emplace_back(buf);
  }
  freeifaddrs(list);
  return out;
}

}  // namespace

void Agent::Attach(SamplerGroup& group, std::unique_ptr<collectors::Collector> c) {
  for (const PortDescriptor& p : c->ports()) {
    size_t pi = 0;
    for (; pi < ports_.size(); ++pi) {
      const PortDescriptor& q = ports_[pi];
      if (q.device == p.device && q.port == p.port && q.rdma == p.rdma &&
          q.node_level == p.node_level) {
        break;
      }
    }
    if (pi == ports_.size()) {
      // First time this port is seen: its metadata (line rate, link layer) comes from the
      // discovery result when it has one.
      PortDescriptor meta = p;
      for (const PortDescriptor& ch : chosen_) {
        if (ch.device == p.device && ch.port == p.port && ch.rdma == p.rdma) {
          meta = ch;
          break;
        }
      }
      meta.counters.clear();
      ports_.push_back(std::move(meta));
    }
    for (const collectors::CounterDescriptor& cd : p.counters) {
      group.refs.push_back(Pipeline::CounterRef{static_cast<uint32_t>(pi),
                                                static_cast<uint32_t>(ports_[pi].counters.size())});
      ports_[pi].counters.push_back(cd);
    }
  }
  group.layout.counters += c->counter_count();
  group.collectors.push_back(std::move(c));
}

Agent::Agent(AgentOptions options) : options_(std::move(options)) {}

Agent::~Agent() { Stop(); }

absl::Status Agent::Start() { return Start(nullptr); }

int Agent::http_port() const { return aggregator_ ? aggregator_->http_port() : 0; }

v1::Hello Agent::MakeHello() const {
  v1::Hello h;
  // Names from flags, the host and sysfs go into protobuf strings, which must be valid UTF-8
  // (an interface name may hold any byte but '/' and NUL).
  h.set_node(common::ValidUtf8(options_.node));
  auto boot = collectors::ReadSmallFile(options_.procfs_root + "/sys/kernel/random/boot_id", 128);
  h.set_boot_id(boot.ok() ? std::string(absl::StripAsciiWhitespace(*boot)) : "");
  h.set_agent_version(kAgentVersion);
  h.set_instance_id(instance_id_);
  h.set_sample_period_seconds(static_cast<double>(options_.sample_period_ns) / 1e9);
  h.set_window_seconds(static_cast<double>(options_.window_ns) / 1e9);
  for (const PortDescriptor& p : ports_) {
    v1::PortInfo* pi = h.add_ports();
    pi->set_device(common::ValidUtf8(p.device));
    pi->set_port(p.port);
    pi->set_link_layer(ToProto(p.link_layer));
    pi->set_line_rate_bytes_per_second(p.line_rate_bytes_per_second);
    pi->set_line_rate_source(ToProto(p.line_rate_source));
    pi->set_rdma(p.rdma);
    pi->set_node_level(p.node_level);
    pi->set_netdev(common::ValidUtf8(p.netdev));
    pi->set_node_guid(p.node_guid);
  }
  for (const std::string& a : InterfaceAddresses(ports_)) h.add_addresses(a);
  return h;
}

absl::Status Agent::Start(std::unique_ptr<exporters::Aggregator> serving) {
  if (absl::Status s = OpenSink(std::move(serving)); !s.ok()) return s;
  if (absl::Status s = OpenCapture(); !s.ok()) {
    if (aggregator_) aggregator_->Stop();
    return s;
  }
  OpenGpu();
  if (!options_.lldpd_socket.empty()) {
    LldpWatcher::Options lo;
    lo.socket = options_.lldpd_socket;
    lo.period_ns = options_.lldp_refresh_period_ns;
    lldp_ = std::make_unique<LldpWatcher>(lo);
  }
  SetHwLifespan();
  started_ns_ = collectors::MonotonicNowNs();
  for (size_t g = 0; g < kGroups; ++g) {
    progress_ticks_[g] = 0;
    progress_ns_[g] = started_ns_;
  }
  pipeline_thread_ = std::jthread([this](std::stop_token st) { PipelineLoop(st); });
  for (SamplerGroup& g : groups_) {
    if (!g.sampler) continue;
    if (absl::Status s = g.sampler->Start(); !s.ok()) {
      Stop();  // the samplers started so far, the pipeline, capture and the aggregator
      return s;
    }
  }
  return absl::OkStatus();
}

void Agent::FillAgentStats(v1::AgentStats* s) const {
  const SamplerGroup& fast = groups_[0].sampler ? groups_[0] : groups_[1];
  fast.sampler->IntervalHistogram(s->mutable_sample_interval_seconds());
  s->set_ticks_total(fast.sampler->ticks());
  uint64_t drops = 0;
  for (const SamplerGroup& g : groups_) {
    if (!g.sampler) continue;
    (*s->mutable_overruns_by_sampler())[g.name] = g.sampler->overruns();
    drops += g.ring->dropped();
    size_t i = 0;
    for (const auto& c : g.collectors) {
      for (size_t k = 0; k < c->counter_count(); ++k, ++i) {
        const double ns = c->ReadCostNs(k);
        if (ns <= 0) continue;
        const Pipeline::CounterRef ref = g.refs[i];
        v1::CounterReadCost* rc = s->add_read_costs();
        rc->set_port_index(ref.port);
        rc->set_counter(ports_[ref.port].counters[ref.counter].name);
        rc->set_mean_seconds(ns / 1e9);
      }
    }
  }
  s->set_overruns_total(fast.sampler->overruns());
  s->set_ring_drops_total(drops);
  s->set_uplink_dropped_batches_total(sink_->dropped_batches());
  s->set_uplink_refused_batches_total(sink_->refused_batches());
  if (spool_) {
    const uplink::Spool::Stats st = spool_->stats();
    s->set_has_spool(true);
    s->set_spool_bytes(st.bytes);
    s->set_spool_batches(st.batches);
    s->set_spool_replayed_batches_total(st.replayed);
    auto& dropped = *s->mutable_spool_dropped_batches_total();
    dropped["full"] = st.dropped_full;
    dropped["corrupt"] = st.dropped_corrupt;
    dropped["expired"] = st.dropped_expired;
  }
  for (const v1::GroupResolution& r : resolutions_) *s->add_resolutions() = r;
}

void Agent::SubmitReady(bool stopping) {
  std::vector<v1::Batch> ready = pipeline_->TakeReady();
  if (ready.empty()) return;
  const int64_t offset = collectors::MeasureUnixOffsetNs();
  v1::GpuIngestStats gpu_stats;
  std::vector<int32_t> gpu_pids;
  if (gpu_ingest_) {
    gpu_ingest_->Stats(&gpu_stats);
    gpu_pids = gpu_ingest_->ConnectedPids();
  }
  // The capture's window is taken once, before the collectives are analysed, so that its loss
  // events are in for every collective the batches below complete; it rides on the last batch.
  std::optional<v1::CaptureWindow> capture;
  if (capture_) {
    std::vector<v1::PacketLossEvent> fresh;  // those SubmitEarly has not passed on
    capture = capture_->TakeWindow(&fresh);
    if (gpu_ingest_) collective_analyzer_->AddCaptureLoss(capture_->interface(), fresh, offset);
  }
  for (v1::Batch& window : ready) {
    const bool last = &window == &ready.back();
    const int64_t start = window.window_start_ns(), end = window.window_end_ns();
    BatchParts parts;
    parts.unix_offset_ns = offset;
    FillAgentStats(&parts.agent.emplace());
    if (capture && last) parts.capture = std::move(*capture);
    if (gpu_ingest_) {
      std::vector<v1::Collective> completed;
      gpu_timeline_->FillWindow(start, end, &gpu_stats, gpu_pids, &parts.gpu.emplace(), &completed);
      AttachJobs(gpu_ingest_->JobsByPid(), &parts.gpu->gpu);
      if (qp_ports_) {
        std::shared_ptr<const ProcessPorts> qp = qp_ports_->Latest();  // never null
        AttachRdmaPorts(*qp, ports_, &parts.gpu->gpu);
        collective_analyzer_->SetProcessPorts(std::move(qp));
      }
      for (v1::Collective& c : completed) {
        collective_analyzer_->AddCollective(std::move(c), &parts.analysed);
      }
      collective_analyzer_->Process(end, start, end, &parts.analysed);
      // Stopping: the samples of what is still queued will not come; it goes unanalysed.
      if (stopping && last) collective_analyzer_->Release(&parts.analysed);
    }
    // What early batches analysed but could not send rides on the window's batch.
    parts.analysed.Append(std::move(carry_));
    if (lldp_) AttachNeighbors(*lldp_->Latest(), ports_, &window);
    parts.window = std::move(window);
    Submit(AssembleBatch(std::move(parts)));
  }
  bursts_seen_.store(pipeline_->microbursts_total(), std::memory_order_relaxed);
}

bool Agent::DrainOnce() {
  bool any = false;
  // Oldest tick first across the rings, so that window boundaries see ticks in time order (up
  // to what a slower sampler has not pushed yet).
  while (true) {
    size_t pick = kGroups;
    const void* picked = nullptr;
    for (size_t g = 0; g < kGroups; ++g) {
      if (!groups_[g].ring) continue;
      const void* slot = groups_[g].ring->Peek();
      if (slot && (!picked || TickLayout::header(slot)->t_ns < TickLayout::header(picked)->t_ns)) {
        pick = g;
        picked = slot;
      }
    }
    if (!picked) return any;
    const SamplerGroup& g = groups_[pick];
    last_tick_ns_[pick] = TickLayout::header(picked)->t_ns;
    pipeline_->AddTick(pick, last_tick_ns_[pick], g.layout.values(picked), g.layout.status(picked));
    g.ring->Pop();
    any = true;
  }
}

bool Agent::DrainGpu() {
  if (!gpu_ingest_) return false;
  bool any = false;
  while (const GpuEvent* e = gpu_ingest_->Peek()) {
    gpu_timeline_->Add(*e);
    gpu_ingest_->Release();
    any = true;
  }
  return any;
}

void Agent::PipelineLoop(std::stop_token stop) {
  pthread_setname_np(pthread_self(), "fs-pipeline");
  while (true) {
    const bool drained_ticks = DrainOnce();
    const bool drained_gpu = DrainGpu();
    const bool drained_any = drained_ticks || drained_gpu;
    SubmitReady();
    SubmitEarly();
    bursts_seen_.store(pipeline_->microbursts_total(), std::memory_order_relaxed);
    if (stop.stop_requested()) break;
    // The ring holds ring_slots ticks (0.8 s at 100 us with the default 8192), so polling
    // every millisecond keeps it far from full without a wake-up per tick on the sampler side.
    if (!drained_any) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Agent::SetHwLifespan() {
  if (options_.hw_lifespan_ms == 0) return;
  for (const PortDescriptor& p : chosen_) {
    if (!p.rdma || p.hw_lifespan_ms == 0) continue;
    const std::string path = absl::StrCat(options_.sysfs_root, "/class/infiniband/", p.device,
                                          "/ports/", p.port, "/hw_counters/lifespan");
    auto old = collectors::ReadSmallFile(path, 64);
    if (!old.ok()) continue;
    std::ofstream out(path);
    out << options_.hw_lifespan_ms << "\n";
    out.flush();
    if (!out) {
      notes_.push_back(absl::StrCat(path,
                                    ": cannot write lifespan (not permitted here); "
                                    "hw_counters stay at ",
                                    absl::StripAsciiWhitespace(*old), " ms"));
      continue;
    }
    saved_lifespans_.emplace_back(path, std::string(absl::StripAsciiWhitespace(*old)));
    LOG(INFO) << path << ": lifespan " << absl::StripAsciiWhitespace(*old) << " -> "
              << options_.hw_lifespan_ms << " ms (restored at exit)";
  }
}

void Agent::RestoreHwLifespan() {
  for (const auto& [path, old] : saved_lifespans_) {
    std::ofstream out(path);
    out << old << "\n";
    if (!out) LOG(WARNING) << path << ": could not restore lifespan " << old;
  }
  saved_lifespans_.clear();
}

void Agent::Stop() {
  if (!pipeline_thread_.joinable()) return;
  // The timeline's fetch must not reach this agent's pipeline once it goes (a reload hands the
  // aggregator to the next agent, which sets its own).
  if (aggregator_) aggregator_->state().recording_fetch().SetSender(nullptr);
  if (gpu_ingest_) gpu_ingest_->Stop();  // what it queued is drained below
  for (SamplerGroup& g : groups_) {
    if (g.sampler) g.sampler->Stop();
  }
  if (capture_) capture_->Stop();
  pipeline_thread_.request_stop();
  pipeline_thread_.join();  // drains the rings once more before it exits
  DrainOnce();
  DrainGpu();
  pipeline_->Flush(collectors::MonotonicNowNs());
  SubmitReady(/*stopping=*/true);
  lldp_.reset();  // after the pipeline thread's last use; waits for a running lldpcli (<= 5 s)
  RestoreHwLifespan();
  if (sink_) sink_->Shutdown(2000);
  if (aggregator_) aggregator_->Stop();
  if (health_) health_->Stop();
}

std::unique_ptr<exporters::Aggregator> Agent::StopAndReleaseAggregator() {
  if (!pipeline_thread_.joinable()) return nullptr;
  std::unique_ptr<exporters::Aggregator> serving = std::move(aggregator_);
  if (serving)
    serving->state().recording_fetch().SetSender(nullptr);  // the next agent sets its own
  Stop();  // the last window goes into serving's state through the LocalSink
  return serving;
}

std::string Agent::StalledSampler(int64_t now_ns) {
  for (size_t g = 0; g < kGroups; ++g) {
    const SamplerGroup& group = groups_[g];
    if (!group.sampler) continue;
    const uint64_t ticks = group.sampler->ticks();
    if (ticks != progress_ticks_[g]) {
      progress_ticks_[g] = ticks;
      progress_ns_[g] = now_ns;
      continue;
    }
    const int64_t limit_ns = std::max<int64_t>(3 * group.period_ns, 2'000'000'000);
    if (now_ns - progress_ns_[g] > limit_ns) {
      return absl::StrFormat("sampler \"%s\" made no tick for %.1f s (period %.3g ms)", group.name,
                             static_cast<double>(now_ns - progress_ns_[g]) / 1e9,
                             static_cast<double>(group.period_ns) / 1e6);
    }
  }
  // Standalone: the served state's locks must change hands too (its /healthz says the same).
  if (aggregator_) return aggregator_->StallReason();
  return "";
}

size_t Agent::Maintain() {
  size_t n = 0;
  for (SamplerGroup& g : groups_) {
    for (auto& c : g.collectors) n += c->ReopenReplaced();
  }
  if (n > 0) LOG(INFO) << "reopened " << n << " counter files of a re-plugged device";
  return n;
}

std::string Agent::StatusLine() const {
  const double secs = static_cast<double>(collectors::MonotonicNowNs() - started_ns_) / 1e9;
  const Sampler& sampler = groups_[0].sampler ? *groups_[0].sampler : *groups_[1].sampler;
  const uint64_t ticks = sampler.ticks();
  v1::Histogram h;
  sampler.IntervalHistogram(&h);
  uint64_t overruns = 0, drops = 0;
  for (const SamplerGroup& g : groups_) {
    if (!g.sampler) continue;
    overruns += g.sampler->overruns();
    drops += g.ring->dropped();
  }
  // p99 as the upper bound of the bucket holding the 99th percentile.
  std::string p99 = "-";
  double bound = 0;
  bool above = false;
  if (common::HistogramQuantileBound(h, 0.99, &bound, &above)) {
    p99 = absl::StrFormat("%s%.3gms", above ? ">" : "<=", bound * 1e3);
  }
  const std::string uplink = options_.aggregator.empty()
                                 ? "standalone"
                                 : (sink_ && sink_->connected() ? "connected" : "disconnected");
  return absl::StrFormat(
      "%d ports | %.1f samples/s (p99 interval %s) | %d microbursts | %d overruns | %d ring "
      "drops | flight recorder %.1f MiB | %s, batch %d acked",
      ports_.size(), secs > 0 ? static_cast<double>(ticks) / secs : 0.0, p99, bursts_seen_.load(),
      overruns, drops,
      static_cast<double>(pipeline_->flight_recorder().bytes()) / (1024.0 * 1024.0), uplink,
      sink_ ? sink_->acked_seq() : 0);
}

}  // namespace fabricscope::agent
