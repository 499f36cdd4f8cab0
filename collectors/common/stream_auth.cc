#include "collectors/common/stream_auth.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectors/common/yaml_file.h"

namespace fabricscope::common {
namespace {

// The token's own checks; `where` says which file (and node) in the error.
absl::Status CheckToken(absl::string_view token, const std::string& where) {
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": empty token"));
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a token of ", token.size(), " characters; ", kMinTokenBytes, " to ",
                     kMaxTokenBytes, " are taken (make one with `openssl rand -hex 32`)"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the token has a character outside visible ASCII (0x21-0x7E)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  // Every byte of the longer one is read whatever the contents; only the lengths show.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const char* option) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(option, ": ", path, " is not a readable regular file"));
  }
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": cannot read ", path, " (",
                                                   in ? "empty file" : strerror(errno), ")"));
  }
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) {
    line.pop_back();
  }
  if (absl::Status s = CheckToken(line, absl::StrCat(option, ": ", path)); !s.ok()) return s;
  return line;
}

absl::StatusOr<std::shared_ptr<const TokenAuth>> TokenAuth::Load(
    const std::string& token_file, const std::string& node_tokens_file) {
  auto auth = std::make_shared<TokenAuth>();
  if (!token_file.empty()) {
    auto t = ReadTokenFile(token_file, "--auth-token-file");
    if (!t.ok()) return t.status();
    auth->shared_ = *std::move(t);
  }
  if (node_tokens_file.empty()) return auth;
  const std::string where = absl::StrCat("--node-tokens-file: ", node_tokens_file);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(node_tokens_file, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not a readable regular file"));
  }
  try {
    // One document, no node given twice: the last token would win silently (yaml_file.h).
    const absl::StatusOr<YAML::Node> doc = LoadOneYamlDocument(node_tokens_file);
    if (!doc.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", doc.status().message()));
    }
    const YAML::Node& root = *doc;
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": must be a map of node: token"));
    }
    for (const auto& kv : root) {
      const std::string node = kv.first.as<std::string>();
      if (node.empty() || !kv.second.IsScalar()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": node \"", node, "\" needs one token string"));
      }
      const std::string token = kv.second.as<std::string>();
      if (absl::Status s = CheckToken(token, absl::StrCat(where, ": node \"", node, "\""));
          !s.ok()) {
        return s;
      }
      auth->per_node_[node] = token;
    }
  } catch (const std::exception&) {  // YAML::Exception: its text may quote a token; not shown
    return absl::InvalidArgumentError(absl::StrCat(where, ": not valid YAML"));
  }
  return auth;
}

absl::Status TokenAuth::Check(absl::string_view authorization, absl::string_view node) const {
  if (!absl::StartsWith(authorization, kBearerPrefix) ||
      authorization.size() == sizeof(kBearerPrefix) - 1) {
    return absl::UnauthenticatedError(kNoTokenMessage);
  }
  const absl::string_view token = authorization.substr(sizeof(kBearerPrefix) - 1);
  // Both comparisons always run, so the time does not say which token matched.
  bool ok = !shared_.empty() && ConstantTimeEqual(token, shared_);
  auto it = per_node_.find(node);
  if (it != per_node_.end()) ok = ConstantTimeEqual(token, it->second) || ok;
  if (ok) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("the token is not valid for node \"", node, "\""));
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a4{};
  const std::string h(host);
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  return false;
}

}  // namespace fabricscope::common
