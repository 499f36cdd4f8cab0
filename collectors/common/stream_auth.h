#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricscope::common {

// Shared-secret authentication of agent streams, for sites without a PKI (issue 13 item 3).
// The agent sends its token in the stream's `authorization` metadata as "Bearer <token>" (the
// form of RFC 6750 §2.1; gRPC metadata keys are lower case). Over plain text the token can be
// read off the wire: pair it with TLS (--tls-ca on the agent) where the network is not trusted.

inline constexpr char kAuthMetadataKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";
// What a stream without a token is told (UNAUTHENTICATED).
inline constexpr char kNoTokenMessage[] =
    "no token: this aggregator wants one (the agent's --auth-token-file)";
// A token is 16 to 4096 visible ASCII characters (0x21-0x7E: a valid HTTP/2 header value,
// RFC 9113 §8.2.1): `openssl rand -hex 32` makes one. Shorter ones are refused as guessable.
inline constexpr size_t kMinTokenBytes = 16;
inline constexpr size_t kMaxTokenBytes = 4096;

// Compares in time that depends on the lengths only, never on where the bytes first differ
// (the token check must not tell an attacker how much of a guess was right).
bool ConstantTimeEqual(absl::string_view a, absl::string_view b);

// Reads a token file: its first line, without trailing whitespace. `option` names the flag or
// key in errors. The token itself never appears in an error or a log line.
// Errors: InvalidArgument when the file cannot be read, is empty, or the token is shorter than
// kMinTokenBytes, longer than kMaxTokenBytes or has a character outside 0x21-0x7E.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const char* option);

// The aggregator's token set: one token every node may use (--auth-token-file) and/or one token
// per node (--node-tokens-file, YAML `node: token`). Immutable once loaded; shared between the
// gRPC threads by shared_ptr. A node in the per-node file may use only its own token or the
// shared one.
class TokenAuth {
 public:
  // Either path may be empty; both empty gives a disabled TokenAuth.
  // Errors: those of ReadTokenFile; InvalidArgument for a per-node file that is not a YAML map
  // of non-empty node names to valid tokens (the node is named, never the token).
  static absl::StatusOr<std::shared_ptr<const TokenAuth>> Load(const std::string& token_file,
                                                               const std::string& node_tokens_file);

  bool enabled() const { return !shared_.empty() || !per_node_.empty(); }
  size_t node_tokens() const { return per_node_.size(); }

  // `authorization` is the metadata value as sent ("Bearer <token>"), `node` the Hello's node.
  // Errors: Unauthenticated when no token came; PermissionDenied when it is neither the shared
  // token nor `node`'s own.
  absl::Status Check(absl::string_view authorization, absl::string_view node) const;

 private:
  std::string shared_;
  std::map<std::string, std::string, std::less<>> per_node_;
};

// Whether HOST (of HOST:PORT, brackets removed) is a loopback address: 127.0.0.0/8, ::1 or
// "localhost". The aggregator refuses to serve agents in plain text without a token on any
// other address unless --allow-insecure (exporters/aggregator_config.h).
bool IsLoopbackHost(absl::string_view host);

}  // namespace fabricscope::common
