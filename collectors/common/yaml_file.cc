#include "collectors/common/yaml_file.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace fabricscope::common {
namespace {

// The first key repeated in a map under `node` (depth first), as a key path; `visits` counts
// down kMaxYamlNodes, `depth` the maps and lists around `node` (aliases can make the graph
// cyclic, so yaml-cpp's own depth guard, which bounds the parse, does not bound this walk).
absl::Status FindRepeatedKey(const YAML::Node& node, const std::string& at, int depth,
                             size_t& visits) {
  if (visits == 0) {
    return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxYamlNodes, " YAML nodes"));
  }
  --visits;
  if ((node.IsSequence() || node.IsMap()) && depth >= kMaxYamlDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(at.empty() ? "top level" : at, ": nested deeper than ", kMaxYamlDepth,
                     " levels, or an alias inside the node it names"));
  }
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      absl::Status s = FindRepeatedKey(node[i], absl::StrCat(at, "[", i, "]"), depth + 1, visits);
      if (!s.ok()) return s;
    }
  } else if (node.IsMap()) {
    std::set<std::string> keys;
    for (const auto& kv : node) {
      // A key that is itself a map or list (YAML's complex keys) is named by its position.
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "<complex key>";
      const std::string path = at.empty() ? key : absl::StrCat(at, ".", key);
      if (kv.first.IsScalar() && !keys.insert(key).second) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": given twice"));
      }
      absl::Status s = FindRepeatedKey(kv.second, path, depth + 1, visits);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// Counts the documents of a stream and keeps nothing else (yaml-cpp's YAML::EventHandler).
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Whether the stream at `path` ends within kMaxYamlDocuments documents. yaml-cpp 0.7 (Debian
// 12) never ends some malformed streams: YAML::Parser::HandleNextDocument returns true forever
// without reading on, on "[1, 2]\n,} {a: b{}]\n" (found by fuzz.config), so YAML::LoadAll
// fills memory until it dies. Counted here first, the stream goes to LoadAll only once it is
// known to end. Throws what the parser throws.
bool EndsWithinTheDocumentBound(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw YAML::BadFile(path);
  YAML::Parser parser(in);
  DocumentCounter counter;
  for (size_t docs = 0; docs <= kMaxYamlDocuments; ++docs) {
    if (!parser.HandleNextDocument(counter)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<YAML::Node> LoadOneYamlDocument(const std::string& path) {
  if (!EndsWithinTheDocumentBound(path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "more than ", kMaxYamlDocuments,
        " YAML documents (---), or text after the first one that does not parse; one is "
        "expected"));
  }
  std::vector<YAML::Node> docs = YAML::LoadAllFromFile(path);
  docs.erase(
      std::remove_if(docs.begin(), docs.end(), [](const YAML::Node& d) { return d.IsNull(); }),
      docs.end());
  if (docs.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(docs.size(), " YAML documents (---); one is expected"));
  }
  if (docs.empty()) return YAML::Node(YAML::NodeType::Null);
  size_t visits = kMaxYamlNodes;
  if (absl::Status s = FindRepeatedKey(docs[0], "", 0, visits); !s.ok()) return s;
  return docs[0];
}

}  // namespace fabricscope::common
