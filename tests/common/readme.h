#pragma once

// README.md's generated blocks, for the tests that check them against their source of truth.

#include <fstream>
#include <sstream>
#include <string>

namespace fabricscope::testing {

// The text between "<!-- NAME options: generated ..." and "<!-- end NAME options -->" (without
// the marker lines); empty when README has no such block.
inline std::string ReadmeGeneratedBlock(const std::string& name) {
  std::ifstream in(std::string(FABRICSCOPE_SOURCE_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t begin = text.find("<!-- " + name + " options: generated");
  const size_t end = text.find("<!-- end " + name + " options -->");
  if (begin == std::string::npos || end == std::string::npos || end < begin) return "";
  const size_t first = text.find('\n', begin) + 1;
  return text.substr(first, end - first);
}

}  // namespace fabricscope::testing
