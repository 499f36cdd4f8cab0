#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace fabricscope::common {

// The files are watched by gRPC's FileWatcherCertificateProvider (grpcpp/security/
// tls_certificate_provider.h), re-read every kTlsRefreshSeconds: a renewed certificate takes
// effect for new handshakes without restarting the daemon or dropping streams.
inline constexpr unsigned kTlsRefreshSeconds = 60;

// The agent's side of the uplink's TLS. All PEM files. Empty ca = plain text.
struct ClientTls {
  std::string ca = "";  // roots that must have signed the aggregator's certificate
  std::string cert = "",
              key = "";  // the agent's own certificate chain and key, for mTLS (both or none)
  std::string server_name = "";  // name to check the aggregator's certificate against; empty = the
                                 // host of --aggregator
  bool enabled() const { return !ca.empty(); }
  unsigned refresh_seconds = kTlsRefreshSeconds;  // how often the files are re-read
};

// The aggregator's side. Empty cert = plain text.
struct ServerTls {
  std::string cert = "", key = "";  // the aggregator's certificate chain and key
  std::string client_ca = "";  // when set: every agent must present a certificate it signed (mTLS)
  bool enabled() const { return !cert.empty(); }
  unsigned refresh_seconds = kTlsRefreshSeconds;  // how often the files are re-read
};

// Errors: InvalidArgument naming the option when a file is missing or unreadable, or when cert
// and key are not given together.
absl::Status CheckClientTls(const ClientTls& tls);
absl::Status CheckServerTls(const ServerTls& tls);

// Plain-text credentials when !tls.enabled().
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const ClientTls& tls);
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const ServerTls& tls);

}  // namespace fabricscope::common
