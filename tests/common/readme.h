#pragma once

// The generated blocks of the guides (README.md and the folders' README.md files), for the tests
// that check them against their source of truth.

#include <fstream>
#include <sstream>
#include <string>

namespace fabricscope::testing {

// The text between "<!-- BLOCK: generated ..." and "<!-- end BLOCK -->" (without the marker
// lines) in `guide` (a path from the repository's root, "exporters/README.md"); empty when it
// has no such block.
inline std::string GuideBlock(const std::string& guide, const std::string& block) {
  std::ifstream in(std::string(FABRICSCOPE_SOURCE_DIR) + "/" + guide);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t begin = text.find("<!-- " + block + ": generated");
  const size_t end = text.find("<!-- end " + block + " -->");
  if (begin == std::string::npos || end == std::string::npos || end < begin) return "";
  const size_t first = text.find('\n', begin) + 1;
  return text.substr(first, end - first);
}

// The option table of NAME ("agent": agent/README.md, "aggregator": exporters/README.md): the
// block "NAME options".
inline std::string ReadmeGeneratedBlock(const std::string& name) {
  return GuideBlock(name == "agent" ? "agent/README.md" : "exporters/README.md", name + " options");
}

}  // namespace fabricscope::testing
