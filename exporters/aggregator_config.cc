#include "exporters/aggregator_config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "exporters/http_server.h"

namespace fabricscope::exporters {

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

}  // namespace fabricscope::exporters
