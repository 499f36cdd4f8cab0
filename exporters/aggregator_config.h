#pragma once

#include <string>

#include "absl/status/status.h"
#include "exporters/aggregator.h"

namespace fabricscope::exporters {

// Reads the aggregator's YAML config file (deploy/config/aggregator.yaml; installed as
// /etc/fabricscope/aggregator.yaml) into *options; keys not present keep their value. Keys:
//   grpc_listen: HOST:PORT where agents connect (must not be empty)
//   http_listen: HOST:PORT serving /metrics, /healthz and /api/*
//   collectives: {straggler_skew_ratio: 0.25, straggler_min_skew_seconds: 0.001,
//     straggler_history: 16, straggler_min_instances: 4, straggler_max_p_value: 0.001,
//     straggler_min_lateness_ratio: 0.05, diagnosis_window: 16, diagnosis_min_share: 0.5,
//     diagnosis_gap: 8} (exporters/cross_rank.h, exporters/diagnosis.h); out-of-range values
//     are InvalidArgument
// Errors: NotFound when the file is missing, InvalidArgument for YAML syntax errors, a top
// level that is not a map, unknown keys or malformed HOST:PORT values (with the key named).
absl::Status LoadAggregatorConfig(const std::string& path, AggregatorOptions* options);

// Checks that both addresses are HOST:PORT and grpc_listen is not empty.
// Errors: InvalidArgument naming the bad value.
absl::Status ValidateAggregatorOptions(const AggregatorOptions& options);

}  // namespace fabricscope::exporters
