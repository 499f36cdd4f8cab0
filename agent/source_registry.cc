#include "agent/source_registry.h"

#include <algorithm>
#include <tuple>

namespace fabricscope::agent {
namespace {

// Function-local: registrations run from other files' static initializers, in any order.
std::vector<SourceSpec>& Registry() {
  static auto* sources = new std::vector<SourceSpec>();
  return *sources;
}

}  // namespace

bool RegisterSource(SourceSpec spec) {
  std::vector<SourceSpec>& r = Registry();
  r.push_back(std::move(spec));
  std::stable_sort(r.begin(), r.end(), [](const SourceSpec& a, const SourceSpec& b) {
    return std::tie(a.group, a.order, a.name) < std::tie(b.group, b.order, b.name);
  });
  return true;
}

const std::vector<SourceSpec>& Sources() { return Registry(); }

}  // namespace fabricscope::agent
