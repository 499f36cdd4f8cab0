#include "collectors/common/tls.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace fabricscope::common {
namespace {

absl::Status Readable(const std::string& path, const char* option) {
  if (path.empty() || access(path.c_str(), R_OK) == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(option, ": cannot read ", path, " (", strerror(errno), ")"));
}

absl::Status Pair(const std::string& cert, const std::string& key, const char* what) {
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " cert and key go together"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckClientTls(const ClientTls& t) {
  if (!t.enabled() && (!t.cert.empty() || !t.key.empty())) {
    return absl::InvalidArgumentError("--tls-cert/--tls-key need --tls-ca (the aggregator's CA)");
  }
  for (auto [path, option] :
       {std::pair{&t.ca, "--tls-ca"}, {&t.cert, "--tls-cert"}, {&t.key, "--tls-key"}}) {
    if (absl::Status s = Readable(*path, option); !s.ok()) return s;
  }
  return Pair(t.cert, t.key, "the agent's");
}

absl::Status CheckServerTls(const ServerTls& t) {
  if (!t.enabled() && !t.client_ca.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  for (auto [path, option] : {std::pair{&t.cert, "--tls-cert"},
                              {&t.key, "--tls-key"},
                              {&t.client_ca, "--tls-client-ca"}}) {
    if (absl::Status s = Readable(*path, option); !s.ok()) return s;
  }
  return Pair(t.cert, t.key, "the aggregator's");
}

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const ClientTls& t) {
  if (!t.enabled()) return grpc::InsecureChannelCredentials();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      t.key, t.cert, t.ca, t.refresh_seconds);
  grpc::experimental::TlsChannelCredentialsOptions o;
  o.set_certificate_provider(provider);
  o.watch_root_certs();
  if (!t.cert.empty()) o.watch_identity_key_cert_pairs();
  o.set_verify_server_certs(true);
  return grpc::experimental::TlsCredentials(o);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const ServerTls& t) {
  if (!t.enabled()) return grpc::InsecureServerCredentials();
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      t.key, t.cert, t.client_ca, t.refresh_seconds);
  grpc::experimental::TlsServerCredentialsOptions o(provider);
  o.watch_identity_key_cert_pairs();
  if (!t.client_ca.empty()) {
    o.watch_root_certs();
    o.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    o.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(o);
}

}  // namespace fabricscope::common
