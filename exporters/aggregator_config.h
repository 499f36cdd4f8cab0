#pragma once

#include <string>

#include "absl/status/status.h"
#include "collectors/common/option_table.h"
#include "exporters/aggregator.h"

namespace fabricscope::exporters {

// Every option of the aggregator, declared once in exporters/aggregator_options.inc
// (collectors/common/option_table.h). Built on first use; never changes.
const std::vector<common::OptionSpec<AggregatorOptions>>& AggregatorOptionTable();

// Reads the aggregator's YAML config file (deploy/config/aggregator.yaml; installed as
// /etc/fabricscope/aggregator.yaml) into *options, all or nothing; keys not present keep their
// value. The keys are AggregatorOptionTable()'s, dotted keys as nested maps (tls: {cert, key,
// client_ca}, auth: {token_file, node_tokens_file}, limits: {...}, collectives: {...}).
// Errors: NotFound when the file is missing, InvalidArgument for YAML syntax errors, a top
// level that is not a map, unknown keys, out-of-range values or malformed HOST:PORT values
// (with the key named).
absl::Status LoadAggregatorConfig(const std::string& path, AggregatorOptions* options);

// Parses a node expiry: an absl duration ("10m", "1h30m", "0"), 0 to 1 year.
// Errors: InvalidArgument saying the form.
absl::Status ParseNodeExpiry(const std::string& text, absl::Duration* out);

// Checks that grpc_listen is not empty and every option is within its bounds in the table
// (both addresses HOST:PORT). Errors: InvalidArgument naming the option.
absl::Status ValidateAggregatorOptions(const AggregatorOptions& options);

// The peer list (sharded aggregators) against the merged options: parsed, and this
// aggregator's entry (peer_self, else grpc_listen) in it. Errors: InvalidArgument naming the
// bad entry or the missing self.
absl::Status CheckAggregatorPeers(const AggregatorOptions& options);

// Once the config file and the flags are both applied (a flag may name a file only a systemd
// credential makes readable): the TLS, token and web-config files are readable and valid, and,
// secure by default (issue 13 item 4), a grpc_listen other than loopback (IsLoopbackHost) has
// TLS, a token that is asked (a node tokens file naming nobody asks none) or allow_insecure.
// Errors: InvalidArgument naming the file or key (never a token), and for the last saying how
// to make a token or a certificate.
absl::Status CheckAggregatorSecurity(const AggregatorOptions& options);
// Reads options->topology_file and options->ib_fabric_file into options->topology (null when
// both names are empty); the IB fabric's leaves merge into the file's (MergeIbFabric, whose notes
// are logged as warnings). Errors: LoadFabricTopology's and LoadIbFabric's, naming the file and
// the entry or line (exporters/analysis/fabric_topology.h, ib_fabric.h).
absl::Status LoadAggregatorTopology(AggregatorOptions* options);

}  // namespace fabricscope::exporters
