#include "exporters/aggregator_config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "exporters/http_server.h"

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

}  // namespace

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
  return CheckServerTls(options.tls);
}

}  // namespace fabricscope::exporters
