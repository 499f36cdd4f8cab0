#pragma once

#include <string>
#include <vector>

namespace fabricscope::collectors {

// Rewrites "--flag-name=value" to "--flag_name=value" so that both spellings reach Abseil's
// flag parser (which knows only underscores). Values are left alone. Returns the rewritten
// arguments; `storage` keeps the strings alive for the returned pointers.
inline std::vector<char*> NormalizeFlagDashes(int argc, char** argv,
                                              std::vector<std::string>& storage) {
  storage.assign(argv, argv + argc);
  std::vector<char*> out;
  for (std::string& a : storage) {
    if (a.rfind("--", 0) == 0) {
      const size_t end = a.find('=') == std::string::npos ? a.size() : a.find('=');
      for (size_t i = 2; i < end; ++i) {
        if (a[i] == '-') a[i] = '_';
      }
    }
    out.push_back(a.data());
  }
  return out;
}

}  // namespace fabricscope::collectors
