#include "exporters/aggregator_config.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "collectors/common/host_port.h"
#include "collectors/common/stream_auth.h"
#include "collectors/common/web_config.h"
#include "exporters/analysis/ib_fabric.h"
#include "exporters/shard/peer_ring.h"
#include "glog/logging.h"

namespace fabricscope::exporters {

using common::CheckServerTls;
using common::IsLoopbackHost;
using common::LoadWebConfig;
using common::TokenAuth;
namespace {

using common::OptionSpec;
using O = AggregatorOptions;
using Spec = OptionSpec<O>;

// node_expiry: an absl duration ("10m"), 0 = never (ParseNodeExpiry).
Spec NodeExpiryOption() {
  return common::ValueOption<O, absl::Duration>(
      "node_expiry", [](O & o) -> auto& { return o.node_expiry; }, "DURATION",
      "0..1 year; 0 = never",
      "Forget a node that sent nothing (no Hello, no batch) for this long: its series leave "
      "/metrics and its state leaves memory, counted in "
      "fabricscope_aggregator_expired_nodes_total, one log line each; a reconnect brings it back "
      "(totals are the hardware counters', so they continue). Follows SIGHUP.",
      [](absl::string_view text) -> absl::StatusOr<absl::Duration> {
        absl::Duration d;
        if (absl::Status st = ParseNodeExpiry(std::string(text), &d); !st.ok()) return st;
        return d;
      },
      [](const absl::Duration& d) { return absl::FormatDuration(d); });
}

// collectives.straggler_min_skew_seconds: seconds in the file, ns in CrossRankOptions.
Spec MinSkewOption() {
  return common::ValueOption<O, int64_t>(
      "collectives.straggler_min_skew_seconds",
      [](O & o) -> auto& { return o.collectives.straggler_min_skew_ns; }, "SECONDS", "[0, 60]",
      "compute_straggler: arrival skew at least this long (and straggler_skew_ratio).",
      [](absl::string_view text) -> absl::StatusOr<int64_t> {
        auto x = common::ParseRealText(text, 0, 60, false);
        if (!x.ok()) return x.status();
        return static_cast<int64_t>(*x * 1e9);
      },
      [](const int64_t& ns) { return absl::StrCat(ns / 1e9); });
}

}  // namespace

const std::vector<OptionSpec<AggregatorOptions>>& AggregatorOptionTable() {
  using common::BytesOption;
  using common::ChoiceOption;
  using common::DurationOption;
  using common::HostPortOption;
  using common::IntegerOption;
  using common::ListOption;
  using common::OnOffOption;
  using common::RealOption;
  using common::TextOption;
  using common::WithFlag;
#define FIELD(member) \
  [](O & o) -> auto& { return o.member; }
#define FABRICSCOPE_OPTION(id, ...) WithFlag<O>(#id, __VA_ARGS__),
#define FABRICSCOPE_SWITCH(id, ...) common::AsSwitch(WithFlag<O>(#id, __VA_ARGS__)),
#define FABRICSCOPE_CONFIG_OPTION(...) __VA_ARGS__,
  static const auto* table = new std::vector<Spec>{
#include "exporters/aggregator_options.inc"
  };
#undef FABRICSCOPE_CONFIG_OPTION
#undef FABRICSCOPE_SWITCH
#undef FABRICSCOPE_OPTION
#undef FIELD
  return *table;
}

absl::Status ParseNodeExpiry(const std::string& text, absl::Duration* out) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration() || d > absl::Hours(24 * 365)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node_expiry \"", text,
                     "\": want a duration such as 10m, 1h or 0 (never), at most 1 year"));
  }
  *out = d;
  return absl::OkStatus();
}

absl::Status LoadAggregatorConfig(const std::string& path, AggregatorOptions* options) {
  AggregatorOptions o = *options;  // all or nothing
  if (absl::Status s = common::LoadYamlOptions(path, AggregatorOptionTable(), &o); !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateAggregatorOptions(o); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  *options = std::move(o);
  return absl::OkStatus();
}

absl::Status ValidateAggregatorOptions(const AggregatorOptions& options) {
  if (options.grpc_listen.empty()) {
    return absl::InvalidArgumentError("grpc_listen must not be empty");
  }
  return common::CheckOptionBounds(AggregatorOptionTable(), options);
}

absl::Status CheckAggregatorPeers(const AggregatorOptions& options) {
  if (options.peers.empty()) return absl::OkStatus();
  const std::string& self = options.peer_self.empty() ? options.grpc_listen : options.peer_self;
  if (auto ring = MakePeerRing(options.peers, self); !ring.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("peers: ", ring.status().message()));
  }
  return absl::OkStatus();
}

absl::Status CheckAggregatorSecurity(const AggregatorOptions& options) {
  if (absl::Status s = CheckServerTls(options.tls); !s.ok()) return s;
  auto tokens = TokenAuth::Load(options.auth_token_file, options.node_tokens_file);
  if (!tokens.ok()) return tokens.status();
  if (!options.web_config.empty()) {
    if (auto web = LoadWebConfig(options.web_config); !web.ok()) return web.status();
  }
  auto hp = common::SplitHostPort(options.grpc_listen);
  if (!hp.ok()) return hp.status();
  const std::string& host = hp->first;
  // The tokens loaded, not the file names: a node tokens file that names nobody asks for none.
  const bool token = (*tokens)->enabled();
  if (!IsLoopbackHost(host) && !options.tls.enabled() && !token && !options.allow_insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grpc_listen ", options.grpc_listen,
        " is not a loopback address, and agents would stream in plain text with no token: "
        "anyone who reaches the port could report as any node. Give a token "
        "(install -d -m 700 /etc/fabricscope; openssl rand -hex 32 >/etc/fabricscope/token; "
        "chmod 600 /etc/fabricscope/token; --auth-token-file= on the aggregator and every "
        "agent), or TLS (--tls-cert/--tls-key; exporters/README.md \"Running across nodes\" "
        "shows how to make a CA and certificates with openssl), or "
        "--allow-insecure on a trusted network"));
  }
  return absl::OkStatus();
}

absl::Status LoadAggregatorTopology(AggregatorOptions* options) {
  options->topology = nullptr;
  if (options->topology_file.empty() && options->ib_fabric_file.empty()) {
    return absl::OkStatus();
  }
  FabricTopology t;
  if (!options->topology_file.empty()) {
    absl::StatusOr<FabricTopology> file = LoadFabricTopology(options->topology_file);
    if (!file.ok()) return file.status();
    t = *std::move(file);
    size_t with_capacity = 0;
    std::set<std::string> rails;
    for (const FabricLeaf& l : t.leaves) {
      with_capacity += l.uplink_bytes_per_second > 0;
      if (!l.rail.empty()) rails.insert(l.rail);
    }
    LOG(INFO) << options->topology_file << ": " << t.leaves.size() << " leaves (" << with_capacity
              << " with an uplink capacity), " << t.leaf_of_node.size() << " nodes, "
              << rails.size() << " rails, " << t.spines.size() << " spines";
  }
  if (!options->ib_fabric_file.empty()) {
    absl::StatusOr<IbFabric> ib = LoadIbFabric(options->ib_fabric_file);
    if (!ib.ok()) return ib.status();
    std::vector<std::string> notes;
    if (absl::Status s = MergeIbFabric(*ib, &t, &notes); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(options->ib_fabric_file, ": ", s.message()));
    }
    const IbFabricSummary sum = SummarizeIbFabric(*ib);
    LOG(INFO) << options->ib_fabric_file << ": " << sum.switches << " switches (" << sum.leaves
              << " leaves, " << sum.spines << " spines), " << sum.host_ports << " host ports, "
              << sum.switch_links << " switch-to-switch links";
    for (const std::string& n : notes) LOG(WARNING) << options->ib_fabric_file << ": " << n;
  }
  options->topology = std::make_shared<const FabricTopology>(std::move(t));
  return absl::OkStatus();
}

}  // namespace fabricscope::exporters
