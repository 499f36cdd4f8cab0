#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "agent/collective_options.h"
#include "agent/microburst.h"
#include "agent/thread_sched.h"
#include "collectors/common/history_options.h"
#include "collectors/common/option_table.h"
#include "collectors/common/remote_write_options.h"
#include "collectors/common/tls.h"

namespace fabricscope::agent {

// A PerfMgt target: lid 0 = the local port that sends the MADs; otherwise any port of the
// subnet (e.g. a switch port: its LID and port number).
struct PmaTargetOption {
  uint16_t lid = 0;
  uint8_t port = 0;
};

// Parses "local" or "LID:PORT" entries, comma-separated ("local,12:3,12:4").
// Errors: InvalidArgument naming the entry.
absl::StatusOr<std::vector<PmaTargetOption>> ParsePmaTargets(const std::string& text);

// Everything the agent can be told. Defaults work on a plain Linux box.
// Parsed in one place (agent/main.cc from flags, LoadYamlConfig from the file) and passed to
// the Agent's constructor; libraries never read flags.
struct AgentOptions {
  // Command line only (agent/main.cc): the config file ("" = /etc/fabricscope/agent.yaml when
  // it exists) and the status line on stderr (auto: when stderr is a terminal).
  std::string config_file;
  std::string status_line = "auto";
  std::string node;  // default: the host name
  std::string sysfs_root = "/sys";
  std::string procfs_root = "/proc";
  int64_t sample_period_ns = 1'000'000;  // 1 ms; 100 us supported
  // The fast sampler thread's CPU (-1 = unpinned) and priority ("normal" or "fifo:N",
  // agent/thread_sched.h ParseSamplerPriority; checked by ValidateOptions).
  int sampler_cpu = -1;
  std::string sampler_priority = "normal";
  int64_t window_ns = 1'000'000'000;  // summary window
  // Second sampler thread for everything but byte/packet counters: error counters,
  // hw_counters (cached by the driver for hw_counters/lifespan, 10 ms by default), ethtool
  // statistics, TCP counters and link state. Slow or firmware-backed reads there never delay
  // the fast tick.
  int64_t slow_sample_period_ns = 10'000'000;
  // Opt-in: write this hw_counters/lifespan (ms) on every RDMA port at start, restoring the old
  // value at exit. 0 = leave it alone.
  uint32_t hw_lifespan_ms = 0;
  bool tcp = true;      // TCP counters from <procfs>/net/{snmp,netstat}
  bool ethtool = true;  // SIOCETHTOOL statistics of the watched interfaces
  // InfiniBand PerfMgt (PortCounters/PortCountersExtended MADs through libibumad) as a second
  // source; empty = off. Sent from port pma_port of CA pma_ca (empty = the first IB CA) on a
  // third sampler thread every pma_period, because each query is a blocking round trip.
  std::vector<PmaTargetOption> pma_targets;
  std::string pma_ca;
  int pma_port = 1;
  int64_t pma_period_ns = 1'000'000'000;
  // Packet capture (libpcap) on this interface, analyzed for RoCEv2 and TCP loss and
  // retransmissions; empty = off. Needs CAP_NET_RAW.
  std::string capture_interface;
  std::string capture_filter = "udp dst port 4791 or tcp";
  int capture_snaplen = 160;
  // GPU timelines (agent/gpu_ingest.h): the unix socket where the NCCL profiler plugin and the
  // CUPTI library connect; empty = off. Mode 0660 and group gpu_socket_group by default: the
  // users whose training jobs report are made members of that group (agent/README.md "GPU timelines
  // in the agent"); gpu_allowed_uids (SO_PEERCRED) restricts further.
  std::string gpu_socket = "/run/fabricscope/gpu.sock";
  uint32_t gpu_socket_mode = 0660;
  std::string gpu_socket_group = "fabricscope";  // empty = the agent's own group
  std::vector<uint32_t> gpu_allowed_uids;
  size_t gpu_max_connections = 256;
  size_t gpu_queue_slots = 16384;                // records between ingest and pipeline threads
  size_t gpu_max_collectives_per_batch = 4096;   // the rest count in totals only
  size_t gpu_max_kernel_spans_per_batch = 1024;  // the rest summarized per (device, name)
  size_t gpu_rank_pairs_top_k = 20;  // standalone: fabricscope_rank_pair_bytes_total series
  // Ports to watch: "mlx5_0" (every port of the device), "mlx5_0:1", "eth0". Empty = every
  // RDMA port and every non-virtual interface, plus lo only when nothing else exists.
  std::vector<std::string> interfaces;
  // Line-rate overrides in bytes/s by "dev", "dev:port" (virtual links report no speed).
  std::map<std::string, uint64_t> line_rates;
  MicroburstThresholds thresholds;
  std::map<std::string, MicroburstThresholds> port_thresholds;
  std::string aggregator;  // HOST:PORT; empty = standalone (in-process aggregator)
  // TLS to the aggregator (`tls:`, --tls-*): plain text unless a CA is given; with a
  // certificate and key, mTLS (the aggregator may then require the node name in it).
  common::ClientTls tls;
  // File whose first line is the token the aggregator asks for (`auth_token_file:`,
  // --auth-token-file; collectors/common/stream_auth.h); empty = none sent. Read at start and
  // reload.
  std::string auth_token_file;
  // Standalone mode only. Loopback by default: /metrics and /api/* carry no authentication;
  // open it to a scraper on another host with --http-listen=0.0.0.0:9470.
  std::string http_listen = "127.0.0.1:9470";
  // Standalone mode: TLS and basic auth of the HTTP endpoints (collectors/common/web_config.h,
  // `web_config:`, --web-config); empty = plain HTTP, no auth.
  std::string web_config;
  // Standalone mode: the --metrics profile, "basic" or "full" (common::MetricProfile).
  std::string metrics = "basic";
  // Standalone mode: Prometheus remote-write of /metrics (`remote_write:`, --remote-write-*).
  common::RemoteWriteOptions remote_write;
  // Standalone mode: the event history (`history:`, --history-*; exporters/README.md "History").
  common::HistoryOptions history;
  // Streaming mode: HOST:PORT serving /healthz alone, for Kubernetes probes; empty = off.
  std::string health_listen;
  size_t ring_slots = 8192;
  size_t max_queued_batches = 900;
  // Streaming mode: the crash-safe spool of unacked batches (collectors/uplink/spool.h;
  // --spool-dir, `spool: {dir, max_bytes}`); empty = memory only. The systemd unit sets
  // /var/lib/fabricscope/spool. 1 MiB..1 TiB.
  std::string spool_dir;
  uint64_t spool_max_bytes = uint64_t{256} << 20;
  // Raw sub-ms samples kept per port in memory for drill-down (agent/flight_recorder.h);
  // 0 = off. 0..600 s.
  double flight_recorder_seconds = 10;
  // Bucket width of the per-port utilization series in each batch (the link x time heat map).
  int64_t series_bucket_ns = 1'000'000;
  // Per-collective correlation with the port samples (agent/collective_analysis.h); runs
  // whenever the GPU ingest does.
  CollectiveAnalysisOptions collectives;
  // Which RDMA ports each producer process has queue pairs on (agent/qp_ports.h): iproute2's
  // rdma program, run as `rdma_tool -j res show qp` every qp_refresh_period_ns while the GPU
  // ingest runs on a node with RDMA ports; "" = off (collectives judged on every candidate
  // port, sharers node-wide). 100 ms..1 h.
  std::string rdma_tool = "rdma";
  int64_t qp_refresh_period_ns = 5'000'000'000;
  // Each watched interface's LLDP neighbour (agent/lldp_neighbors.h): lldpd's control socket,
  // read with `lldpcli -u lldpd_socket` every lldp_refresh_period_ns; "" = off. 1 s..1 h.
  std::string lldpd_socket = "/run/lldpd.socket";
  int64_t lldp_refresh_period_ns = 30'000'000'000;
};

// Parses a list like "eth0=10gbit,mlx5_0:1=100G" into line-rate overrides (bytes/s).
// Errors: InvalidArgument naming the bad entry.
absl::StatusOr<std::map<std::string, uint64_t>> ParseLineRateList(const std::string& text);

// Parses a duration like "100us", "1ms", "1s" (absl::ParseDuration syntax) into ns, requiring
// min_ns <= value <= max_ns. Errors: InvalidArgument naming `what`.
absl::StatusOr<int64_t> ParseDurationNs(const std::string& text, const std::string& what,
                                        int64_t min_ns, int64_t max_ns);

// Parses a size in bytes: a number with an optional unit B, KiB, MiB, GiB or TiB ("256MiB").
// Errors: InvalidArgument naming `what`.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text, const std::string& what);

// Every option of the agent, declared once in agent/options.inc: its flag, config key, form,
// bounds and help (collectors/common/option_table.h). Built on first use; never changes.
const std::vector<common::OptionSpec<AgentOptions>>& AgentOptionTable();

// Reads a YAML config file into *options (keys not present keep their value): the keys of
// AgentOptionTable(), dotted keys as nested maps (spool: {dir:, max_bytes:}); lists for
// interfaces, pma, gpu_allowed_uids and collectives.rails; a map for line_rates and
// microburst.ports. Errors: NotFound when the file is missing, InvalidArgument for YAML syntax
// errors, unknown keys or bad values (with the key named).
absl::Status LoadYamlConfig(const std::string& path, AgentOptions* options);

// Parses a file mode in octal ("0660", "666"); at most 0777. Errors: InvalidArgument.
absl::StatusOr<uint32_t> ParseFileMode(const std::string& text);
// Parses comma-separated numeric uids ("0,1000"). Errors: InvalidArgument naming the entry.
absl::StatusOr<std::vector<uint32_t>> ParseUidList(const std::string& text);

// The fast sampler thread's scheduling from --sampler-cpu and --sampler-priority (a priority
// ValidateOptions refused reads as normal).
ThreadSched SamplerSchedOf(const AgentOptions& options);

// Checks every option against its bounds in AgentOptionTable() (options built in code too),
// then the cross-field rules (exit <= enter, window >= 10 x period, slow period >= period,
// series bucket <= window, a token file needs an aggregator, readable TLS and web config files).
absl::Status ValidateOptions(const AgentOptions& options);

}  // namespace fabricscope::agent
