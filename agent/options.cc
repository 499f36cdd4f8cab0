#include "agent/options.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "collectors/sysfs_ports.h"
#include "exporters/stream_auth.h"
#include "exporters/web_config.h"

namespace fabricscope::agent {

absl::StatusOr<std::map<std::string, uint64_t>> ParseLineRateList(const std::string& text) {
  std::map<std::string, uint64_t> out;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("line rate \"", entry, "\" is not NAME=RATE (e.g. eth0=10gbit)"));
    }
    auto rate = collectors::ParseBitRate(entry.substr(eq + 1));
    if (!rate.ok()) return rate.status();
    out[std::string(entry.substr(0, eq))] = *rate;
  }
  return out;
}

absl::StatusOr<std::vector<PmaTargetOption>> ParsePmaTargets(const std::string& text) {
  std::vector<PmaTargetOption> out;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry == "local") {
      out.push_back(PmaTargetOption{});
      continue;
    }
    const size_t colon = entry.find(':');
    uint32_t lid = 0, port = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(entry.substr(0, colon), &lid) ||
        !absl::SimpleAtoi(entry.substr(colon + 1), &port) || lid == 0 || lid >= 0xC000 ||
        port > 254) {
      return absl::InvalidArgumentError(
          absl::StrCat("PerfMgt target \"", entry,
                       "\" is not \"local\" or LID:PORT (unicast LID 1-49151, port 0-254)"));
    }
    out.push_back(PmaTargetOption{static_cast<uint16_t>(lid), static_cast<uint8_t>(port)});
  }
  return out;
}

absl::StatusOr<int64_t> ParseDurationNs(const std::string& text, const std::string& what,
                                        int64_t min_ns, int64_t max_ns) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": \"", text, "\" is not a duration (e.g. 100us, 1ms, 1s)"));
  }
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  if (ns < min_ns || ns > max_ns) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", text, " is outside ", absl::FormatDuration(absl::Nanoseconds(min_ns)), " .. ",
        absl::FormatDuration(absl::Nanoseconds(max_ns))));
  }
  return ns;
}

namespace {

absl::StatusOr<MicroburstThresholds> ParseThresholds(const YAML::Node& n, MicroburstThresholds base,
                                                     const std::string& where) {
  if (!n.IsMap()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected a map"));
  for (const auto& kv : n) {
    const std::string key = kv.first.as<std::string>();
    if (key == "enter") {
      base.enter = kv.second.as<double>();
    } else if (key == "exit") {
      base.exit = kv.second.as<double>();
    } else if (key != "ports") {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key \"", key, "\""));
    }
  }
  return base;
}

}  // namespace

namespace {

// The `collectives:` map of the config file.
absl::Status ParseCollectiveOptions(const YAML::Node& node, const std::string& where,
                                    CollectiveAnalysisOptions* c) {
  if (!node.IsMap()) return absl::InvalidArgumentError(absl::StrCat(where, ": must be a map"));
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string at = absl::StrCat(where, ".", key);
    auto duration = [&](int64_t* out) -> absl::Status {
      auto ns = ParseDurationNs(v.as<std::string>(), at, 0, 60'000'000'000);
      if (!ns.ok()) return ns.status();
      *out = *ns;
      return absl::OkStatus();
    };
    absl::Status st;
    if (key == "rails") {
      c->rails = v.as<std::vector<std::string>>();
    } else if (key == "step_marker") {
      c->step_marker = v.as<std::string>();
    } else if (key == "delay") {
      st = duration(&c->delay_ns);
    } else if (key == "early_send_interval") {
      st = duration(&c->early_send_interval_ns);
    } else if (key == "waiting_min") {
      st = duration(&c->waiting_min_ns);
    } else if (key == "saturation_utilization") {
      c->saturation_utilization = v.as<double>();
    } else if (key == "saturated_min_ratio") {
      c->saturated_min_ratio = v.as<double>();
    } else if (key == "idle_max_utilization") {
      c->idle_max_utilization = v.as<double>();
    } else if (key == "lossy_min_events") {
      c->lossy_min_events = v.as<uint64_t>();
    } else if (key == "lossy_min_ratio") {
      c->lossy_min_ratio = v.as<double>();
    } else if (key == "lossy_min_pause_ratio") {
      c->lossy_min_pause_ratio = v.as<double>();
    } else if (key == "lossy_tail_ratio") {
      c->lossy_tail_ratio = v.as<double>();
    } else if (key == "lossy_min_rate") {
      c->lossy_min_rate = v.as<double>();
    } else if (key == "lossy_rate_window") {
      c->lossy_rate_window = v.as<size_t>();
    } else if (key == "lossy_min_hits") {
      c->lossy_min_hits = v.as<size_t>();
    } else if (key == "lossy_baseline_hit_ratio") {
      c->lossy_baseline_hit_ratio = v.as<double>();
    } else if (key == "lossy_max_p_value") {
      c->lossy_max_p_value = v.as<double>();
    } else if (key == "contention_ratio") {
      c->contention_ratio = v.as<double>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(at, ": unknown key"));
    }
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text, const std::string& what) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < t.size() && absl::ascii_isdigit(static_cast<unsigned char>(t[digits]))) {
    ++digits;
  }
  uint64_t n = 0;
  if (digits == 0 || !absl::SimpleAtoi(t.substr(0, digits), &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", text, "\": want bytes, e.g. 268435456 or 256MiB"));
  }
  const absl::string_view unit = absl::StripAsciiWhitespace(t.substr(digits));
  int shift = -1;
  if (unit.empty() || unit == "B") shift = 0;
  if (unit == "KiB") shift = 10;
  if (unit == "MiB") shift = 20;
  if (unit == "GiB") shift = 30;
  if (unit == "TiB") shift = 40;
  if (shift < 0 || n > (~uint64_t{0} >> shift)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " \"", text, "\": the unit is one of B, KiB, MiB, GiB, TiB (and it must fit)"));
  }
  return n << shift;
}

namespace {

// `spool: {dir: PATH, max_bytes: 256MiB}`.
absl::Status ParseSpool(const YAML::Node& v, const std::string& where, AgentOptions* o) {
  if (!v.IsMap()) return absl::InvalidArgumentError(absl::StrCat(where, ": spool: must be a map"));
  for (const auto& kv : v) {
    const std::string k = kv.first.as<std::string>();
    if (k == "dir") {
      o->spool_dir = kv.second.as<std::string>();
    } else if (k == "max_bytes") {
      auto n = ParseByteSize(kv.second.as<std::string>(), "spool.max_bytes");
      if (!n.ok())
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", n.status().message()));
      o->spool_max_bytes = *n;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(where, ": spool.", k, ": unknown key"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadYamlConfig(const std::string& path, AgentOptions* o) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("config file ", path, " does not exist"));
  }
  if (!std::filesystem::is_regular_file(path, ec)) {  // a directory read by YAML::LoadFile aborts
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is not a regular file"));
  }
  try {
    const YAML::Node root = YAML::LoadFile(path);
    if (root.IsNull()) return absl::OkStatus();  // empty file
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": top level must be a map"));
    }
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      const YAML::Node& v = kv.second;
      const std::string where = absl::StrCat(path, ": ", key);
      auto duration = [&](int64_t* out, int64_t min_ns, int64_t max_ns) -> absl::Status {
        auto ns = ParseDurationNs(v.as<std::string>(), where, min_ns, max_ns);
        if (!ns.ok()) return ns.status();
        *out = *ns;
        return absl::OkStatus();
      };
      absl::Status st;
      if (key == "node") {
        o->node = v.as<std::string>();
      } else if (key == "sysfs_root") {
        o->sysfs_root = v.as<std::string>();
      } else if (key == "procfs_root") {
        o->procfs_root = v.as<std::string>();
      } else if (key == "sample_period") {
        st = duration(&o->sample_period_ns, 10'000, 1'000'000'000);
      } else if (key == "window") {
        st = duration(&o->window_ns, 10'000'000, 3'600'000'000'000);
      } else if (key == "slow_sample_period") {
        st = duration(&o->slow_sample_period_ns, 10'000, 60'000'000'000);
      } else if (key == "aggregator") {
        o->aggregator = v.as<std::string>();
      } else if (key == "tls") {
        st = exporters::ParseClientTls(v, &o->tls);
      } else if (key == "web_config") {
        o->web_config = v.as<std::string>();
      } else if (key == "auth_token_file") {
        o->auth_token_file = v.as<std::string>();
      } else if (key == "http_listen") {
        o->http_listen = v.as<std::string>();
      } else if (key == "health_listen") {
        o->health_listen = v.as<std::string>();
      } else if (key == "ring_slots") {
        o->ring_slots = v.as<size_t>();
      } else if (key == "max_queued_batches") {
        o->max_queued_batches = v.as<size_t>();
      } else if (key == "spool") {
        st = ParseSpool(v, where, o);
      } else if (key == "flight_recorder_seconds") {
        o->flight_recorder_seconds = v.as<double>();
      } else if (key == "series_bucket") {
        st = duration(&o->series_bucket_ns, 10'000, 1'000'000'000);
      } else if (key == "collectives") {
        st = ParseCollectiveOptions(v, where, &o->collectives);
      } else if (key == "hw_lifespan_ms") {
        o->hw_lifespan_ms = v.as<uint32_t>();
      } else if (key == "tcp") {
        o->tcp = v.as<bool>();
      } else if (key == "ethtool") {
        o->ethtool = v.as<bool>();
      } else if (key == "pma") {
        std::vector<std::string> items = v.as<std::vector<std::string>>();
        auto t = ParsePmaTargets(absl::StrJoin(items, ","));
        if (!t.ok())
          return absl::InvalidArgumentError(absl::StrCat(where, ": ", t.status().message()));
        o->pma_targets = *t;
      } else if (key == "pma_ca") {
        o->pma_ca = v.as<std::string>();
      } else if (key == "pma_port") {
        o->pma_port = v.as<int>();
      } else if (key == "pma_period") {
        st = duration(&o->pma_period_ns, 10'000'000, 3'600'000'000'000);
      } else if (key == "capture") {
        o->capture_interface = v.as<std::string>();
      } else if (key == "capture_filter") {
        o->capture_filter = v.as<std::string>();
      } else if (key == "capture_snaplen") {
        o->capture_snaplen = v.as<int>();
      } else if (key == "gpu_socket") {
        o->gpu_socket = v.as<std::string>();
        if (o->gpu_socket == "off") o->gpu_socket.clear();
      } else if (key == "gpu_socket_mode") {
        auto m = ParseFileMode(v.as<std::string>());
        if (!m.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": ", m.status().message()));
        }
        o->gpu_socket_mode = *m;
      } else if (key == "gpu_socket_group") {
        o->gpu_socket_group = v.as<std::string>();
      } else if (key == "gpu_allowed_uids") {
        o->gpu_allowed_uids = v.as<std::vector<uint32_t>>();
      } else if (key == "gpu_max_connections") {
        o->gpu_max_connections = v.as<size_t>();
      } else if (key == "gpu_queue_slots") {
        o->gpu_queue_slots = v.as<size_t>();
      } else if (key == "gpu_max_collectives_per_batch") {
        o->gpu_max_collectives_per_batch = v.as<size_t>();
      } else if (key == "gpu_max_kernel_spans_per_batch") {
        o->gpu_max_kernel_spans_per_batch = v.as<size_t>();
      } else if (key == "gpu_rank_pairs_top_k") {
        o->gpu_rank_pairs_top_k = v.as<size_t>();
      } else if (key == "interfaces") {
        o->interfaces = v.as<std::vector<std::string>>();
      } else if (key == "line_rates") {
        if (!v.IsMap()) return absl::InvalidArgumentError(absl::StrCat(where, ": expected a map"));
        for (const auto& r : v) {
          auto rate = collectors::ParseBitRate(r.second.as<std::string>());
          if (!rate.ok())
            return absl::InvalidArgumentError(absl::StrCat(where, ": ", rate.status().message()));
          o->line_rates[r.first.as<std::string>()] = *rate;
        }
      } else if (key == "microburst") {
        auto t = ParseThresholds(v, o->thresholds, where);
        if (!t.ok()) return t.status();
        o->thresholds = *t;
        if (v["ports"]) {
          for (const auto& p : v["ports"]) {
            auto pt = ParseThresholds(p.second, o->thresholds,
                                      absl::StrCat(where, ".ports.", p.first.as<std::string>()));
            if (!pt.ok()) return pt.status();
            o->port_thresholds[p.first.as<std::string>()] = *pt;
          }
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat(path, ": unknown key \"", key, "\""));
      }
      if (!st.ok()) return st;
    }
  } catch (const std::exception& e) {  // YAML::Exception, or an I/O error while reading
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ParseFileMode(const std::string& text) {
  uint32_t mode = 0;
  if (text.empty() || text.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("file mode \"", text, "\" is not octal 0..0777"));
  }
  for (char ch : text) {
    if (ch < '0' || ch > '7') {
      return absl::InvalidArgumentError(
          absl::StrCat("file mode \"", text, "\" is not octal 0..0777"));
    }
    mode = mode * 8 + static_cast<uint32_t>(ch - '0');
  }
  if (mode > 0777) {
    return absl::InvalidArgumentError(absl::StrCat("file mode \"", text, "\" is above 0777"));
  }
  return mode;
}

absl::StatusOr<std::vector<uint32_t>> ParseUidList(const std::string& text) {
  std::vector<uint32_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    uint32_t uid = 0;
    if (!absl::SimpleAtoi(item, &uid)) {
      return absl::InvalidArgumentError(absl::StrCat("uid \"", item, "\" is not a number"));
    }
    out.push_back(uid);
  }
  return out;
}

absl::Status ValidateOptions(const AgentOptions& o) {
  auto check = [](const MicroburstThresholds& t, const std::string& where) -> absl::Status {
    if (!(t.enter > 0 && t.enter <= 10 && t.exit > 0 && t.exit <= t.enter)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": microburst thresholds need 0 < exit <= enter <= 10 (got enter ",
                       t.enter, ", exit ", t.exit, ")"));
    }
    return absl::OkStatus();
  };
  if (auto s = check(o.thresholds, "microburst"); !s.ok()) return s;
  for (const auto& [name, t] : o.port_thresholds) {
    if (auto s = check(t, "microburst.ports." + name); !s.ok()) return s;
  }
  if (o.sample_period_ns < 10'000) {
    return absl::InvalidArgumentError("sample period must be at least 10us");
  }
  if (o.window_ns < 10 * o.sample_period_ns) {
    return absl::InvalidArgumentError("window must be at least 10 sample periods");
  }
  if (o.slow_sample_period_ns < o.sample_period_ns) {
    return absl::InvalidArgumentError(
        "slow sample period must not be shorter than the sample period");
  }
  if (o.hw_lifespan_ms > 10000) {
    return absl::InvalidArgumentError("hw_lifespan_ms must be 0..10000 (kernel limit)");
  }
  if (o.capture_snaplen < 64 || o.capture_snaplen > 65535) {
    return absl::InvalidArgumentError("capture snaplen must be 64..65535 bytes");
  }
  if (o.ring_slots < 16) return absl::InvalidArgumentError("ring_slots must be at least 16");
  if (o.gpu_queue_slots < 16) return absl::InvalidArgumentError("gpu_queue_slots must be >= 16");
  if (o.gpu_max_connections < 1) {
    return absl::InvalidArgumentError("gpu_max_connections must be at least 1");
  }
  for (double r : {o.collectives.saturation_utilization, o.collectives.saturated_min_ratio,
                   o.collectives.idle_max_utilization, o.collectives.lossy_min_pause_ratio}) {
    if (!(r > 0 && r <= 10)) {
      return absl::InvalidArgumentError(
          "collective analysis thresholds (collectives: in the config) must be in (0, 10]");
    }
  }
  if (!(o.flight_recorder_seconds >= 0 && o.flight_recorder_seconds <= 600)) {
    return absl::InvalidArgumentError("flight recorder seconds must be 0..600");
  }
  if (o.series_bucket_ns < 10'000 || o.series_bucket_ns > o.window_ns) {
    return absl::InvalidArgumentError("series bucket must be 10us..window");
  }
  if (o.max_queued_batches < 1) {
    return absl::InvalidArgumentError("max_queued_batches must be at least 1");
  }
  if (o.spool_max_bytes < (uint64_t{1} << 20) || o.spool_max_bytes > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError("spool max bytes must be 1MiB..1TiB");
  }
  if (!o.auth_token_file.empty()) {
    if (o.aggregator.empty()) {
      return absl::InvalidArgumentError(
          "--auth-token-file needs --aggregator (standalone mode "
          "streams to no one)");
    }
    auto token = exporters::ReadTokenFile(o.auth_token_file, "--auth-token-file");
    if (!token.ok()) return token.status();
  }
  if (!o.web_config.empty()) {
    if (auto web = exporters::LoadWebConfig(o.web_config); !web.ok()) return web.status();
  }
  return exporters::CheckClientTls(o.tls);
}

}  // namespace fabricscope::agent
