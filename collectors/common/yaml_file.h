#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "absl/status/statusor.h"

namespace fabricscope::common {

// Most YAML nodes one file may hold, counted as the check below visits them (each alias visited
// again): a config file holds hundreds, a node-tokens file two per node; the bound stops a file
// of nested aliases ("billion laughs") from making the check run for hours.
inline constexpr size_t kMaxYamlNodes = 1'000'000;
// Deepest nesting of maps and lists the check follows: ours need 3; an alias inside the node
// it names ("a: &x [*x]") makes an endless one.
inline constexpr int kMaxYamlDepth = 64;
// Most documents a file may hold, empty ones included (a template tool may leave a trailing
// ---); also what stops yaml-cpp 0.7 on streams whose parse never ends (yaml_file.cc).
inline constexpr size_t kMaxYamlDocuments = 100;

// Reads the YAML file at `path` and returns its one document: a Null node for an empty file or
// one of comments only; empty documents (a trailing ---) are ignored. yaml-cpp keeps both of a
// key written twice in one map, and YAML::LoadFile reads only a file's first document, so one
// setting would win silently; both are refused here.
// Errors (InvalidArgument, the message without the path, which the caller prefixes):
//   "N YAML documents (---); one is expected";
//   "more than 100 YAML documents (---), or text after the first one that does not parse; one
//   is expected" (kMaxYamlDocuments);
//   "<key path>: given twice" for a key repeated in any map at any depth (the path joins map
//   keys with '.' and sequence indexes as [i], e.g. "remote_write[1].url"); keys are named,
//   values never (they may be secrets);
//   "more than 1000000 YAML nodes" (kMaxYamlNodes);
//   "<key path>: nested deeper than 64 levels, or an alias inside the node it names"
//   (kMaxYamlDepth).
// Throws what YAML::LoadAllFromFile throws (YAML::Exception for malformed text or an unreadable
// file), so each caller decides whether yaml-cpp's text, which quotes the input, may be shown.
absl::StatusOr<YAML::Node> LoadOneYamlDocument(const std::string& path);

}  // namespace fabricscope::common
