#pragma once

// README.md's generated blocks, for the tests that check them against their source of truth.

#include <fstream>
#include <sstream>
#include <string>

namespace fabricscope::testing {

// The text between "<!-- BLOCK: generated ..." and "<!-- end BLOCK -->" (without the marker
// lines); empty when README has no such block.
inline std::string ReadmeBlock(const std::string& block) {
  std::ifstream in(std::string(FABRICSCOPE_SOURCE_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t begin = text.find("<!-- " + block + ": generated");
  const size_t end = text.find("<!-- end " + block + " -->");
  if (begin == std::string::npos || end == std::string::npos || end < begin) return "";
  const size_t first = text.find('\n', begin) + 1;
  return text.substr(first, end - first);
}

// README's option table of NAME ("agent", "aggregator"): the block "NAME options".
inline std::string ReadmeGeneratedBlock(const std::string& name) {
  return ReadmeBlock(name + " options");
}

}  // namespace fabricscope::testing
