#pragma once

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace fabricscope::common {

// TLS and basic authentication of the HTTP endpoints (/metrics, /api/*, /heatmap/*), read from
// the web configuration file Prometheus exporters share (prometheus/exporter-toolkit,
// docs/web-configuration.md), `--web-config=FILE`:
//
//   tls_server_config:
//     cert_file: server.pem         # relative paths are relative to the file's directory
//     key_file: server.key
//     client_auth_type: RequireAndVerifyClientCert   # only with client_ca_file
//     client_ca_file: ca.pem
//   basic_auth_users:
//     alice: $2y$10$...             # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//
// Of the toolkit's keys, fabricscope takes these; any other is refused by name rather than
// ignored (a setting that silently does nothing is worse than an error). /healthz needs no
// password, for probes; with RequireAndVerifyClientCert the TLS handshake still wants a client
// certificate before any path.
struct WebConfig {
  std::string cert_file = "", key_file = "";      // both or neither; TLS when set
  std::string client_ca_file = "";                // mTLS: clients need a certificate it signed
  std::map<std::string, std::string> users = {};  // name -> bcrypt hash
  bool tls() const { return !cert_file.empty(); }
};

// Errors: InvalidArgument naming the key for a file that is not YAML or not the format above, an
// unknown key, cert_file without key_file, a client_auth_type other than NoClientCert or
// RequireAndVerifyClientCert (or one that does not match client_ca_file), a hash that is not
// bcrypt ($2a$, $2b$, $2y$), and a file named in it that cannot be read.
absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path);

// Checks `Authorization: Basic ...` headers against the users' bcrypt hashes with libxcrypt's
// crypt_r. bcrypt is slow on purpose (~50 ms at cost 10); a (user, SHA-256 of the password) pair
// that passed is remembered, as exporter-toolkit does, so that a scrape every 15 s costs one
// hash check per process. Thread-safe.
class BasicAuth {
 public:
  explicit BasicAuth(std::map<std::string, std::string> users) : users_(std::move(users)) {}
  bool enabled() const { return !users_.empty(); }
  // `authorization` is the header's value; true when it names a user whose password matches.
  bool Allow(const std::string& authorization) const;

 private:
  const std::map<std::string, std::string> users_;
  mutable absl::Mutex mu_;
  mutable std::map<std::string, std::string> passed_ ABSL_GUARDED_BY(mu_);  // user -> SHA-256
};

}  // namespace fabricscope::common
