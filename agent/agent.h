#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/capture_runner.h"
#include "agent/collective_analysis.h"
#include "agent/gpu_ingest.h"
#include "agent/gpu_timeline.h"
#include "agent/lldp_neighbors.h"
#include "agent/options.h"
#include "agent/pipeline.h"
#include "agent/qp_ports.h"
#include "agent/sampler.h"
#include "collectors/collector.h"
#include "collectors/spsc_ring.h"
#include "collectors/uplink/batch_sink.h"
#include "collectors/uplink/spool.h"

// The in-process aggregator that serves a standalone agent's /metrics, and the HTTP server of
// streaming mode's /healthz: declared only, so that a file including this one does not include
// the aggregator (exporters/aggregator.h; agent.cc, local_sink.cc and main.cc do).
namespace fabricscope::exporters {
class Aggregator;
class HttpServer;
}  // namespace fabricscope::exporters

namespace fabricscope::agent {

// The node daemon: owns the collectors, the sample ring, the sampler and pipeline threads, the
// batch sink (gRPC uplink, or an in-process aggregator in standalone mode), and stops them in
// reverse order.
//
// Threading: Create/Start/Stop/StatusLine from the control thread.
class Agent {
 public:
  // Discovers ports under options.sysfs_root, applies the interface selection and line-rate
  // overrides, and opens every counter file.
  // Errors: InvalidArgument for an interface name that matches no port (the message lists the
  // ports found), NotFound for a missing sysfs root, FailedPrecondition when nothing can be read.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(AgentOptions options);
  ~Agent();

  // Starts the in-process aggregator (standalone) or the uplink, then the pipeline and sampler.
  // `serving`: in standalone mode, an in-process aggregator that already serves (handed over by
  // the previous Agent's StopAndReleaseAggregator on a SIGHUP reload) is used instead of a new
  // one, so /metrics stays on its port with its state; ignored (stopped) otherwise.
  // Errors: those of Aggregator::Start (e.g. the HTTP port is taken) and CaptureRunner::Start.
  absl::Status Start(std::unique_ptr<exporters::Aggregator> serving);
  absl::Status Start();  // Start(nullptr)
  // Stops sampling, flushes the last partial window, delivers what it can within 2 s, restores
  // the hw_counters lifespans it changed, stops.
  void Stop();
  // Stop() that leaves the standalone aggregator serving and returns it (nullptr when this
  // agent streams to a remote aggregator or never started).
  std::unique_ptr<exporters::Aggregator> StopAndReleaseAggregator();

  // Watchdog check, control thread, called about once a second while running: returns an empty
  // string while every sampler thread ticks, else which one has made no tick for longer than
  // max(3 periods, 2 s) -- a read blocked in a driver or firmware, or a thread that no longer
  // runs; standalone, also while the served state's locks are held past
  // Aggregator::kMaxStallSeconds. The daemon stops its systemd watchdog pings while this is
  // non-empty.
  std::string StalledSampler(int64_t now_ns);

  // Control thread, about once a second: reopens counter files of devices that were unplugged
  // and came back (collectors::Collector::ReopenReplaced). Returns how many were reopened.
  size_t Maintain();

  // One line for an interactive terminal: ports, achieved tick rate, bursts, health.
  std::string StatusLine() const;
  // Things to tell the user once at start-up (ports skipped, unknown line rates, N/A counters).
  const std::vector<std::string>& notes() const { return notes_; }
  const std::vector<collectors::PortDescriptor>& ports() const { return ports_; }
  // The standalone aggregator's bound HTTP port (0 when not standalone).
  int http_port() const;
  // The bound port of --health-listen's /healthz server (0 when off).
  int health_port() const { return health_port_; }

 private:
  // One sampler thread with its collectors and ring. Group 0 is fast (byte and packet counters
  // at --sample-period), group 1 slow (everything else at --slow-sample-period), group 2 the
  // blocking InfiniBand PerfMgt queries (--pma, at --pma-period).
  struct SamplerGroup {
    std::string name;
    int64_t period_ns = 0;
    std::vector<std::unique_ptr<collectors::Collector>> collectors;
    std::vector<Pipeline::CounterRef> refs;  // tick value i -> merged port/counter
    TickLayout layout;
    std::unique_ptr<collectors::SpscSlotRing> ring;
    std::unique_ptr<Sampler> sampler;
  };

  explicit Agent(AgentOptions options);
  // Start's steps (agent/agent_setup.cc), in order. Where batches go: the in-process
  // aggregator (`serving`, or a new one on --http-listen) standalone, else the uplink to
  // --aggregator with its spool and /healthz. Errors: the aggregator's, the token file's, the
  // spool's, the health server's.
  absl::Status OpenSink(std::unique_ptr<exporters::Aggregator> serving);
  // Standalone: the in-process aggregator's recording fetch asks this agent's pipeline.
  void AnswerOwnRecordingRequests();
  // The live packet capture on --capture-interface, if set. Errors: CaptureRunner::Start's.
  absl::Status OpenCapture();
  // The GPU socket, timeline and collective analysis, if --gpu-socket is set (a socket that
  // cannot be opened is logged and left off: the port counters are the agent's main job).
  void OpenGpu();
  // Create's steps (agent/agent_setup.cc), in order.
  // The ports to watch: discovery under sysfs_root, --interfaces (or every RDMA port and
  // physical interface, else lo), --line-rate overrides, each RDMA port's netdev (and its bytes
  // where the port has none). Adds what to tell the user to *notes. Errors: InvalidArgument for
  // a name that matches no port, FailedPrecondition when none is left, discovery's errors.
  static absl::StatusOr<std::vector<collectors::PortDescriptor>> ChoosePorts(
      const AgentOptions& o, std::vector<std::string>& notes);
  // chosen_'s counter files in the fast group (bytes and packets) and the slow one (the rest;
  // hw_counters at their lifespan), opened.
  void OpenSysfsGroups();
  // The sources of agent/source_registry.h (link state, ethtool statistics, TCP counters,
  // InfiniBand PerfMgt), each into its sampler group, as the options leave them on.
  void OpenRegisteredSources();
  // The collective rails checked against ports_, the pipeline, and a ring and a sampler per
  // group with collectors. Errors: FailedPrecondition when no counter could be opened,
  // InvalidArgument for a rail that names no port.
  absl::Status BuildPipeline();
  // How long the kernel caches the port's hw_counters: --hw-lifespan when given, else the
  // port's own hw_counters/lifespan, in ns.
  int64_t HwLifespanNs(const collectors::PortDescriptor& p) const;
  // resolutions_ from the groups (called by BuildPipeline).
  void ComputeResolutions();
  void PipelineLoop(std::stop_token stop);
  bool DrainOnce();
  // Pipeline thread: moves queued GPU records into gpu_timeline_. Returns whether any came.
  bool DrainGpu();
  // The agent's own figures for a window's batch: sampler intervals and overruns, ring drops,
  // read costs, uplink and spool counts, group resolutions (computed once at start).
  void FillAgentStats(v1::AgentStats* s) const;
  // Pipeline thread: completes and sends the pipeline's closed windows: agent stats, the
  // capture's window, GPU stats and the collectives analysed up to each window's end.
  // stopping: the last one also takes the collectives still waiting for their samples.
  void SubmitReady(bool stopping = false);
  // Pipeline thread, agent/early_batch.cc: sends the analysed collectives that are ready ahead
  // of their window (CollectiveAnalysisOptions::early_send_interval_ns).
  void SubmitEarly();
  // Numbers an assembled batch (agent/batch_assembler.h) and hands it to sink_.
  void Submit(v1::Batch batch);
  v1::Hello MakeHello() const;
  // Adds the collector's ports and counters to ports_ (merging by port identity) and records
  // where each of its values goes.
  void Attach(SamplerGroup& group, std::unique_ptr<collectors::Collector> c);
  void SetHwLifespan();
  void RestoreHwLifespan();

  AgentOptions options_;
  std::vector<std::string> notes_;
  std::vector<collectors::PortDescriptor> chosen_;  // discovery result, with line rates
  std::vector<collectors::PortDescriptor> ports_;   // merged over all collectors
  // Each counter group's sampling period and effective resolution (AgentStats.resolutions),
  // fixed once the groups are built.
  std::vector<v1::GroupResolution> resolutions_;
  static constexpr size_t kGroups = 3;
  SamplerGroup groups_[kGroups];
  std::unique_ptr<Pipeline> pipeline_;
  std::vector<std::pair<std::string, std::string>> saved_lifespans_;  // path, old value
  std::unique_ptr<exporters::Aggregator> aggregator_;
  std::unique_ptr<exporters::HttpServer> health_;  // streaming mode's /healthz, when asked for
  int health_port_ = 0;
  std::unique_ptr<uplink::Spool> spool_;  // streaming mode with --spool-dir; outlives sink_
  std::unique_ptr<uplink::BatchSink> sink_;
  std::unique_ptr<CaptureRunner> capture_;
  // GPU timelines: the ingest endpoint (null when --gpu-socket is off or could not be bound)
  // and the pipeline thread's view of its records.
  std::unique_ptr<GpuIngest> gpu_ingest_;
  std::unique_ptr<GpuTimeline> gpu_timeline_;
  // Each collective joined with the port samples of its interval (pipeline thread); borrows
  // the pipeline's flight recorder and observes its counter deltas.
  std::unique_ptr<CollectiveAnalyzer> collective_analyzer_;
  // Which RDMA ports each producer has queue pairs on (--rdma-tool); null when off, without
  // GPU ingest or without RDMA ports.
  std::unique_ptr<QpPortWatcher> qp_ports_;
  // Each watched interface's LLDP neighbour (--lldpd-socket); null when off.
  std::unique_ptr<LldpWatcher> lldp_;
  std::jthread pipeline_thread_;
  // StalledSampler's view: per group, the tick count last seen and when it last moved.
  uint64_t progress_ticks_[kGroups] = {};
  int64_t progress_ns_[kGroups] = {};
  uint64_t instance_id_ = 0;
  int64_t started_ns_ = 0;
  std::atomic<uint64_t> bursts_seen_{0};
  // Early batches (pipeline thread): the newest tick time per group, the sample times of the
  // last look and the last early batch, what was analysed but not sent yet, and the batches
  // handed to sink_ (against its acked_seq()).
  int64_t last_tick_ns_[kGroups] = {};
  int64_t early_checked_ns_ = 0;
  int64_t early_sent_ns_ = 0;
  AnalyzerOutput carry_;
  uint64_t submitted_ = 0;
};

}  // namespace fabricscope::agent
