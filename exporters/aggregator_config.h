#pragma once

#include <string>

#include "absl/status/status.h"
#include "exporters/aggregator.h"

namespace fabricscope::exporters {

// Reads the aggregator's YAML config file (deploy/config/aggregator.yaml; installed as
// /etc/fabricscope/aggregator.yaml) into *options; keys not present keep their value. Keys:
//   grpc_listen: HOST:PORT where agents connect (must not be empty)
//   http_listen: HOST:PORT serving /metrics, /healthz and /api/*
//   tls: {cert, key, client_ca} (exporters/tls.h)
//   auth: {token_file, node_tokens_file} (exporters/stream_auth.h)
//   allow_insecure: false (true: plain text without a token on a non-loopback grpc_listen)
//   web_config: FILE (TLS and basic auth of the HTTP endpoints, exporters/web_config.h)
//   node_expiry: 10m (forget a node silent this long; 0 = never; ParseNodeExpiry)
//   limits: {max_nodes: 16384, max_ports_per_node: 256, max_addresses_per_node: 256,
//     max_communicators_per_node: 1024, max_rank_pairs_per_node: 4096,
//     max_batches_per_second: 100, batch_burst: 1000}, each 1..1000000
//     (exporters/message_checks.h HelloLimits and BatchLimits, ClusterState::Options,
//     exporters/telemetry_service.h StreamRate); read at start only (the state keeps them),
//     like collectives:
//   collectives: {straggler_skew_ratio: 0.25, straggler_min_skew_seconds: 0.001,
//     straggler_history: 16, straggler_min_instances: 4, straggler_max_p_value: 0.001,
//     straggler_min_lateness_ratio: 0.05, diagnosis_window: 16, diagnosis_min_share: 0.5,
//     diagnosis_gap: 8} (exporters/cross_rank.h, exporters/diagnosis.h); out-of-range values
//     are InvalidArgument
// Errors: NotFound when the file is missing, InvalidArgument for YAML syntax errors, a top
// level that is not a map, unknown keys or malformed HOST:PORT values (with the key named).
absl::Status LoadAggregatorConfig(const std::string& path, AggregatorOptions* options);

// Parses a node expiry: an absl duration ("10m", "1h30m", "0"), 0 to 1 year.
// Errors: InvalidArgument saying the form.
absl::Status ParseNodeExpiry(const std::string& text, absl::Duration* out);

// Checks that both addresses are HOST:PORT and grpc_listen is not empty: the file's own form,
// before flags apply. Errors: InvalidArgument naming the bad value.
absl::Status ValidateAggregatorOptions(const AggregatorOptions& options);

// Once the config file and the flags are both applied (a flag may name a file only a systemd
// credential makes readable): the TLS, token and web-config files are readable and valid, and,
// secure by default (issue 13 item 4), a grpc_listen other than loopback (IsLoopbackHost) has
// TLS, a token that is asked (a node tokens file naming nobody asks none) or allow_insecure.
// Errors: InvalidArgument naming the file or key (never a token), and for the last saying how
// to make a token or a certificate.
absl::Status CheckAggregatorSecurity(const AggregatorOptions& options);

}  // namespace fabricscope::exporters
