#pragma once

#include <cstdio>
#include <string>

#include "tests/common/fake_tree.h"

namespace fabricscope::testing {

// What `promtool check metrics` (Debian's prometheus package) said about an exposition.
struct PromtoolResult {
  bool ok = false;     // it ran and exited 0
  std::string output;  // its stdout and stderr
};

// Runs `promtool check metrics` on `exposition` (Prometheus text format 0.0.4): it parses the
// text and lints names, units and `_total` suffixes. Blocks until promtool exits.
inline PromtoolResult PromtoolCheckMetrics(const std::string& exposition) {
  FakeTree tree;
  tree.Write("metrics.txt", exposition);
  const std::string cmd = "promtool check metrics < " + tree.Path("metrics.txt") + " 2>&1";
  PromtoolResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    r.output = "popen failed";
    return r;
  }
  char buf[512];
  while (fgets(buf, sizeof(buf), p)) r.output += buf;
  r.ok = pclose(p) == 0;
  return r;
}

}  // namespace fabricscope::testing
