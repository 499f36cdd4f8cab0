#include "collectors/common/web_config.h"

#include <crypt.h>
#include <openssl/sha.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectors/common/stream_auth.h"
#include "collectors/common/yaml_file.h"

namespace fabricscope::common {
namespace {

// A path of the file, relative to its directory when not absolute (exporter-toolkit does the
// same), checked readable.
absl::StatusOr<std::string> FileAt(const std::filesystem::path& dir, const std::string& value,
                                   const std::string& key) {
  std::filesystem::path p(value);
  if (p.is_relative()) p = dir / p;
  if (access(p.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": cannot read ", p.string(), " (", strerror(errno), ")"));
  }
  return p.string();
}

absl::Status LoadTls(const YAML::Node& node, const std::filesystem::path& dir, WebConfig* c) {
  if (!node.IsMap()) return absl::InvalidArgumentError("tls_server_config: must be a map");
  std::string auth_type;
  for (const auto& kv : node) {
    const std::string k = kv.first.as<std::string>();
    const std::string key = "tls_server_config." + k;
    std::string* file = k == "cert_file"        ? &c->cert_file
                        : k == "key_file"       ? &c->key_file
                        : k == "client_ca_file" ? &c->client_ca_file
                                                : nullptr;
    if (k == "client_auth_type") {
      auth_type = kv.second.as<std::string>();
    } else if (file != nullptr) {
      auto path = FileAt(dir, kv.second.as<std::string>(), key);
      if (!path.ok()) return path.status();
      *file = *path;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(key, ": not supported by fabricscope"));
    }
  }
  if (c->cert_file.empty() != c->key_file.empty()) {
    return absl::InvalidArgumentError("tls_server_config: cert_file and key_file go together");
  }
  if (auth_type != "" && auth_type != "NoClientCert" && auth_type != "RequireAndVerifyClientCert") {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_server_config.client_auth_type: ", auth_type,
                     " is not supported (NoClientCert or RequireAndVerifyClientCert)"));
  }
  if ((auth_type == "RequireAndVerifyClientCert") != !c->client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_server_config: client_auth_type RequireAndVerifyClientCert and client_ca_file go "
        "together");
  }
  if (!c->client_ca_file.empty() && c->cert_file.empty()) {
    return absl::InvalidArgumentError("tls_server_config: client_ca_file needs cert_file");
  }
  return absl::OkStatus();
}

absl::Status LoadUsers(const YAML::Node& node, WebConfig* c) {
  if (!node.IsMap()) return absl::InvalidArgumentError("basic_auth_users: must be a map");
  for (const auto& kv : node) {
    const std::string user = kv.first.as<std::string>();
    const std::string hash = kv.second.as<std::string>();
    if (user.empty() || user.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("basic_auth_users: \"", user, "\" is not a user name"));
    }
    if (!absl::StartsWith(hash, "$2a$") && !absl::StartsWith(hash, "$2b$") &&
        !absl::StartsWith(hash, "$2y$")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "basic_auth_users.", user, ": not a bcrypt hash (make one with htpasswd -nBC 10)"));
    }
    c->users[user] = hash;
  }
  return absl::OkStatus();
}

std::string Sha256(const std::string& s) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), md);
  return std::string(reinterpret_cast<const char*>(md), sizeof(md));
}

}  // namespace

absl::StatusOr<WebConfig> LoadWebConfig(const std::string& path) {
  const std::string where = absl::StrCat("--web-config ", path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": not a readable regular file"));
  }
  WebConfig c;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  try {
    // One document, no key (a user, a TLS setting) given twice (yaml_file.h).
    const absl::StatusOr<YAML::Node> doc = LoadOneYamlDocument(path);
    if (!doc.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", doc.status().message()));
    }
    const YAML::Node& root = *doc;
    if (root.IsNull()) return c;
    if (!root.IsMap()) return absl::InvalidArgumentError(where + ": top level must be a map");
    for (const auto& kv : root) {
      const std::string k = kv.first.as<std::string>();
      absl::Status s;
      if (k == "tls_server_config") {
        s = LoadTls(kv.second, dir, &c);
      } else if (k == "basic_auth_users") {
        s = LoadUsers(kv.second, &c);
      } else {
        s = absl::InvalidArgumentError(absl::StrCat(k, ": not supported by fabricscope"));
      }
      if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
  } catch (const std::exception&) {  // YAML::Exception: its text may quote a hash; not shown
    return absl::InvalidArgumentError(absl::StrCat(where, ": not valid YAML of the expected form"));
  }
  return c;
}

bool BasicAuth::Allow(const std::string& authorization) const {
  if (!absl::StartsWith(authorization, "Basic ")) return false;
  std::string decoded;
  if (!absl::Base64Unescape(authorization.substr(6), &decoded)) return false;
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return false;
  const std::string user = decoded.substr(0, colon);
  const std::string password = decoded.substr(colon + 1);
  auto it = users_.find(user);
  // An unknown user costs a hash check too, against a fixed bcrypt setting, so that the time
  // does not say which user names exist.
  const std::string& hash =
      it != users_.end()
          ? it->second
          : std::string("$2b$10$abcdefghijklmnopqrstuuOD7U4gJ1DmKuLAQqV8XKBBbS6IW6e4W");
  const std::string digest = Sha256(password);
  {
    absl::MutexLock lock(&mu_);
    auto p = passed_.find(user);
    if (it != users_.end() && p != passed_.end() && ConstantTimeEqual(p->second, digest)) {
      return true;
    }
  }
  auto data = std::make_unique<crypt_data>();
  const char* out = crypt_r(password.c_str(), hash.c_str(), data.get());
  const bool ok =
      it != users_.end() && out != nullptr && out[0] != '*' && ConstantTimeEqual(out, hash);
  if (ok) {
    absl::MutexLock lock(&mu_);
    passed_[user] = digest;
  }
  return ok;
}

}  // namespace fabricscope::common
