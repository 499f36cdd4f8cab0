#pragma once

#include <string>
#include <vector>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

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

// Makes --help list the flags defined in the daemons' main.cc (Abseil's default looks for a file
// named after the binary) and gives --version a text.
inline void ConfigureFlagUsage(const char* version) {
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "main.cc");
  };
  config.contains_help_flags = config.contains_helpshort_flags;
  config.version_string = [version] { return std::string(version) + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace fabricscope::collectors
