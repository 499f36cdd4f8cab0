#include "exporters/aggregator_config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "exporters/http_server.h"
#include "exporters/stream_auth.h"
#include "exporters/web_config.h"

namespace fabricscope::exporters {
namespace {

// `collectives:` (exporters/cross_rank.h CrossRankOptions, exporters/diagnosis.h).
absl::Status LoadCollectives(const YAML::Node& node, CrossRankOptions* c) {
  if (!node.IsMap()) return absl::InvalidArgumentError("collectives: must be a map");
  DiagnosisOptions& d = c->diagnosis;
  for (const auto& kv : node) {
    const std::string key = absl::StrCat("collectives.", kv.first.as<std::string>());
    const YAML::Node& v = kv.second;
    auto ratio = [&](double* out, double lo, double hi) -> absl::Status {
      const double x = v.as<double>();
      if (!(x >= lo && x <= hi)) {
        return absl::InvalidArgumentError(
            absl::StrCat(key, ": ", x, " is not in [", lo, ", ", hi, "]"));
      }
      *out = x;
      return absl::OkStatus();
    };
    auto count = [&](size_t* out, size_t lo, size_t hi) -> absl::Status {
      const int64_t x = v.as<int64_t>();
      if (x < static_cast<int64_t>(lo) || x > static_cast<int64_t>(hi)) {
        return absl::InvalidArgumentError(
            absl::StrCat(key, ": ", x, " is not in [", lo, ", ", hi, "]"));
      }
      *out = static_cast<size_t>(x);
      return absl::OkStatus();
    };
    absl::Status st;
    const std::string k = key.substr(12);  // after "collectives."
    if (k == "straggler_skew_ratio") {
      st = ratio(&c->straggler_skew_ratio, 0, 100);
    } else if (k == "straggler_min_skew_seconds") {
      double s = 0;
      st = ratio(&s, 0, 60);
      c->straggler_min_skew_ns = static_cast<int64_t>(s * 1e9);
    } else if (k == "straggler_history") {
      st = count(&d.history, 2, 1024);
    } else if (k == "straggler_min_instances") {
      st = count(&d.min_instances, 1, 1024);
    } else if (k == "straggler_max_p_value") {
      st = ratio(&d.max_p_value, 0, 1);
    } else if (k == "straggler_min_lateness_ratio") {
      st = ratio(&d.min_lateness_ratio, 0, 100);
    } else if (k == "diagnosis_window") {
      st = count(&d.window, 1, 1024);
    } else if (k == "diagnosis_min_share") {
      st = ratio(&d.min_share, 0, 1);
    } else if (k == "diagnosis_gap") {
      st = count(&d.gap, 1, 1024);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(key, ": unknown key"));
    }
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

// `limits: {max_nodes, max_ports_per_node, max_addresses_per_node, max_communicators_per_node,
// max_rank_pairs_per_node, max_batches_per_second, batch_burst}`, each an integer in
// [1, 1000000].
absl::Status LoadLimits(const YAML::Node& node, AggregatorOptions* o) {
  if (!node.IsMap()) return absl::InvalidArgumentError("limits: must be a map");
  for (const auto& kv : node) {
    const std::string k = kv.first.as<std::string>();
    const int64_t v = kv.second.as<int64_t>();
    size_t* count = k == "max_nodes"                    ? &o->max_nodes
                    : k == "max_ports_per_node"         ? &o->hello_limits.max_ports
                    : k == "max_addresses_per_node"     ? &o->hello_limits.max_addresses
                    : k == "max_communicators_per_node" ? &o->batch_limits.max_communicators
                    : k == "max_rank_pairs_per_node"    ? &o->batch_limits.max_rank_pairs
                                                        : nullptr;
    double* rate = k == "max_batches_per_second" ? &o->stream_rate.batches_per_second
                   : k == "batch_burst"          ? &o->stream_rate.burst
                                                 : nullptr;
    if (count == nullptr && rate == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("limits.", k, ": unknown key"));
    if (v < 1 || v > 1'000'000) {
      return absl::InvalidArgumentError(
          absl::StrCat("limits.", k, ": ", v, " is not in [1, 1000000]"));
    }
    if (count != nullptr) *count = static_cast<size_t>(v);
    if (rate != nullptr) *rate = static_cast<double>(v);
  }
  return absl::OkStatus();
}

// `auth: {token_file, node_tokens_file}`.
absl::Status LoadAuth(const YAML::Node& node, AggregatorOptions* o) {
  if (!node.IsMap()) return absl::InvalidArgumentError("auth: must be a map");
  for (const auto& kv : node) {
    const std::string k = kv.first.as<std::string>();
    if (k == "token_file") {
      o->auth_token_file = kv.second.as<std::string>();
    } else if (k == "node_tokens_file") {
      o->node_tokens_file = kv.second.as<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("auth.", k, ": unknown key"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("config file ", path, " does not exist"));
  }
  if (!std::filesystem::is_regular_file(path, ec)) {  // a directory read by YAML::LoadFile aborts
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is not a regular file"));
  }
  AggregatorOptions o = *options;
  try {
    const YAML::Node root = YAML::LoadFile(path);
    if (root.IsNull()) return absl::OkStatus();  // empty file
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": top level must be a map"));
    }
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key == "grpc_listen") {
        o.grpc_listen = kv.second.as<std::string>();
      } else if (key == "http_listen") {
        o.http_listen = kv.second.as<std::string>();
      } else if (key == "tls") {
        if (absl::Status s = ParseServerTls(kv.second, &o.tls); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
        }
      } else if (key == "auth") {
        if (absl::Status s = LoadAuth(kv.second, &o); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
        }
      } else if (key == "limits") {
        if (absl::Status s = LoadLimits(kv.second, &o); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
        }
      } else if (key == "web_config") {
        o.web_config = kv.second.as<std::string>();
      } else if (key == "node_expiry") {
        if (absl::Status s = ParseNodeExpiry(kv.second.as<std::string>(), &o.node_expiry);
            !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
        }
      } else if (key == "allow_insecure") {
        o.allow_insecure = kv.second.as<bool>();
      } else if (key == "collectives") {
        if (absl::Status s = LoadCollectives(kv.second, &o.collectives); !s.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat(path, ": unknown key \"", key, "\""));
      }
    }
  } catch (const std::exception& e) {  // YAML::Exception, or an I/O error while reading
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
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
  for (const std::string& a : {options.grpc_listen, options.http_listen}) {
    if (auto hp = SplitHostPort(a); !hp.ok()) return hp.status();
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
  auto hp = SplitHostPort(options.grpc_listen);
  if (!hp.ok()) return hp.status();
  const std::string& host = hp->first;
  // The tokens loaded, not the file names: a node tokens file that names nobody asks for none.
  const bool token = (*tokens)->enabled();
  if (!IsLoopbackHost(host) && !options.tls.enabled() && !token && !options.allow_insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grpc_listen ", options.grpc_listen,
        " is not a loopback address, and agents would stream in plain text with no token: "
        "anyone who reaches the port could report as any node. Give a token "
        "(openssl rand -hex 32 >/etc/fabricscope/token; chmod 600 it; --auth-token-file= on "
        "the aggregator and every agent), or TLS (--tls-cert/--tls-key; README \"Running "
        "across nodes\" shows how to make a CA and certificates with openssl), or "
        "--allow-insecure on a trusted network"));
  }
  return absl::OkStatus();
}

}  // namespace fabricscope::exporters
