// The agent's option table, built from agent/options.inc, and the specs of the options whose
// form is the agent's own (PerfMgt targets, line rates, per-port thresholds, file mode, uids).
#include <yaml-cpp/yaml.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/options.h"
#include "collectors/sysfs_ports.h"

namespace fabricscope::agent {
namespace {

using common::OptionSpec;
using O = AgentOptions;
using Spec = OptionSpec<O>;

// A spec whose value is text that `parse` (one of agent/options.h's parsers) reads into the
// field: common::ValueOption with no range of its own.
template <typename T>
Spec ParsedOption(std::string key, common::FieldOf<O, T> field, std::string form, std::string help,
                  absl::StatusOr<T> (*parse)(const std::string&), std::string (*show)(const T&)) {
  return common::ValueOption<O, T>(
      std::move(key), field, std::move(form), "", std::move(help),
      [parse](absl::string_view text) { return parse(std::string(text)); }, show);
}

// hw_counters/lifespan is whole milliseconds in the kernel (drivers/infiniband/core/sysfs.c,
// set_stats_lifespan: 0..10000 ms): a duration ("5ms") or a plain number of ms.
Spec HwLifespanOption() {
  return common::ValueOption<O, uint32_t>(
      "hw_lifespan", [](O & o) -> auto& { return o.hw_lifespan_ms; }, "DURATION",
      "0..10s, whole ms; 0 = leave it alone",
      "Opt-in: write this hw_counters/lifespan on every RDMA port at start and restore the old "
      "value at exit (e.g. 1ms).",
      [](absl::string_view text) -> absl::StatusOr<uint32_t> {
        int64_t ms = 0;
        if (!absl::SimpleAtoi(text, &ms)) {
          auto ns = common::ParseDurationText(text, 0, 10'000'000'000);
          if (!ns.ok()) return ns.status();
          if (*ns % 1'000'000 != 0) return absl::InvalidArgumentError("must be whole milliseconds");
          ms = *ns / 1'000'000;
        }
        if (ms < 0 || ms > 10'000) return absl::InvalidArgumentError("must be 0..10s");
        return static_cast<uint32_t>(ms);
      },
      [](const uint32_t& ms) { return ms == 0 ? std::string("0") : absl::StrCat(ms, "ms"); });
}

std::string ShowPmaTargets(const std::vector<PmaTargetOption>& targets) {
  std::vector<std::string> out;
  for (const PmaTargetOption& t : targets) {
    out.push_back(t.lid == 0 ? std::string("local") : absl::StrCat(t.lid, ":", t.port));
  }
  return absl::StrJoin(out, ",");
}

Spec PmaTargetsOption() {
  return ParsedOption<std::vector<PmaTargetOption>>(
      "pma", [](O & o) -> auto& { return o.pma_targets; }, "local|LID:PORT,...",
      "InfiniBand PerfMgt targets read with PortCounters/PortCountersExtended MADs through "
      "libibumad, as a second source beside sysfs: \"local\" and/or LID:PORT entries (a switch "
      "port: its LID and port number), on a third sampler thread. Empty = off.",
      &ParsePmaTargets, &ShowPmaTargets);
}

Spec FileModeOption() {
  return ParsedOption<uint32_t>(
      "gpu_socket_mode", [](O & o) -> auto& { return o.gpu_socket_mode; }, "OCTAL",
      "Mode of the GPU socket: its owner and --gpu-socket-group may connect; 0666 lets every "
      "local user in.",
      &ParseFileMode, [](const uint32_t& m) { return absl::StrFormat("%04o", m); });
}

Spec UidListOption() {
  return ParsedOption<std::vector<uint32_t>>(
      "gpu_allowed_uids", [](O & o) -> auto& { return o.gpu_allowed_uids; }, "UID,...",
      "Uids (SO_PEERCRED) allowed to connect to the GPU socket; empty = any.", &ParseUidList,
      [](const std::vector<uint32_t>& u) { return absl::StrJoin(u, ","); });
}

// --line-rate=eth0=10gbit,... adds to the map; line_rates: {eth0: 10gbit} in the config file.
Spec LineRatesOption() {
  Spec s;
  s.key = "line_rates";
  s.form = "NAME=RATE,...";
  s.help =
      "Line-rate overrides, e.g. eth0=10gbit,mlx5_0:1=200gbit (tc units: bit, kbit, mbit, gbit, "
      "tbit). Needed for utilization and microbursts on links that report no speed (virtio, "
      "veth). Empty = the speed sysfs reports. In the config file a map: {eth0: 10gbit}.";
  s.set = [](absl::string_view text, O& o) -> absl::Status {
    auto rates = ParseLineRateList(std::string(text));
    if (!rates.ok()) return rates.status();
    for (const auto& [k, r] : *rates) o.line_rates[k] = r;
    return absl::OkStatus();
  };
  s.show = [](const O& o) {
    std::vector<std::string> out;
    for (const auto& [k, r] : o.line_rates) out.push_back(absl::StrCat(k, "=", r * 8, "bit"));
    return absl::StrJoin(out, ",");
  };
  s.set_yaml = [](const YAML::Node& n, O& o) -> absl::Status {
    if (!n.IsMap()) return absl::InvalidArgumentError("expected a map NAME: RATE");
    for (const auto& r : n) {
      auto rate = collectors::ParseBitRate(r.second.as<std::string>());
      if (!rate.ok()) return rate.status();
      o.line_rates[r.first.as<std::string>()] = *rate;
    }
    return absl::OkStatus();
  };
  return s;
}

// microburst.ports: {mlx5_0:1: {enter: 0.95, exit: 0.8}}; a value not given is the node's
// (microburst.enter / exit, when written above ports).
Spec PortThresholdsOption() {
  Spec s;
  s.key = "microburst.ports";
  s.form = "{PORT: {enter: X, exit: X}}";
  s.help = "Per-port microburst thresholds; a port not named uses microburst.enter and exit.";
  s.set_yaml = [](const YAML::Node& n, O& o) -> absl::Status {
    if (!n.IsMap()) return absl::InvalidArgumentError("expected a map PORT: {enter, exit}");
    for (const auto& p : n) {
      const std::string port = p.first.as<std::string>();
      if (!p.second.IsMap()) return absl::InvalidArgumentError(absl::StrCat(port, ": not a map"));
      MicroburstThresholds t = o.thresholds;
      for (const auto& kv : p.second) {
        const std::string k = kv.first.as<std::string>();
        double* out = k == "enter" ? &t.enter : k == "exit" ? &t.exit : nullptr;
        if (out == nullptr)
          return absl::InvalidArgumentError(absl::StrCat(port, ".", k, ": unknown key"));
        auto x = common::ParseRealText(kv.second.as<std::string>(), 0, 10, true);
        if (!x.ok())
          return absl::InvalidArgumentError(absl::StrCat(port, ".", k, ": ", x.status().message()));
        *out = *x;
      }
      o.port_thresholds[port] = t;
    }
    return absl::OkStatus();
  };
  return s;
}

}  // namespace

const std::vector<OptionSpec<AgentOptions>>& AgentOptionTable() {
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
#define FABRICSCOPE_CONFIG_OPTION(...) __VA_ARGS__,
  static const auto* table = new std::vector<Spec>{
#include "agent/options.inc"
  };
#undef FABRICSCOPE_CONFIG_OPTION
#undef FABRICSCOPE_OPTION
#undef FIELD
  return *table;
}

}  // namespace fabricscope::agent
