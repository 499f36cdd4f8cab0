#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace fabricscope::collectors {

// Rewrites "--flag-name=value" to "--flag_name=value" so that both spellings reach Abseil's
// flag parser (which knows only underscores). Values are left alone. A flag named in
// `repeatable` (underscored names of list options) may be given more than once: its values,
// from "--name=V" or "--name V" (one dash or two), are joined with ',' into its first
// occurrence, so "--remote-write-url=A --remote-write-url=B" means "A,B" (Abseil alone keeps
// the last). Arguments after "--" are left alone. Returns the rewritten arguments; `storage`
// keeps the strings alive for the returned pointers.
inline std::vector<char*> NormalizeFlagDashes(int argc, char** argv,
                                              std::vector<std::string>& storage,
                                              const std::vector<std::string>& repeatable = {}) {
  std::vector<std::string> args(argv, argv + argc);
  bool flags_end = false;
  for (std::string& a : args) {
    flags_end = flags_end || a == "--";
    if (!flags_end && a.rfind("--", 0) == 0) {
      const size_t end = a.find('=') == std::string::npos ? a.size() : a.find('=');
      for (size_t i = 2; i < end; ++i) {
        if (a[i] == '-') a[i] = '_';
      }
    }
  }
  storage.clear();
  std::vector<size_t> first(repeatable.size(), SIZE_MAX);  // index in storage
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const size_t dashes = a.rfind("--", 0) == 0 ? 2 : (a.rfind('-', 0) == 0 ? 1 : 0);
    size_t r = repeatable.size();
    std::string value;
    if (i > 0 && dashes > 0 && a != "--") {
      const size_t eq = a.find('=');
      std::string name = a.substr(dashes, eq == std::string::npos ? a.npos : eq - dashes);
      for (char& c : name) c = c == '-' ? '_' : c;
      for (r = 0; r < repeatable.size() && repeatable[r] != name; ++r) {
      }
      if (r < repeatable.size()) {
        if (eq != std::string::npos) {
          value = a.substr(eq + 1);
        } else if (i + 1 < args.size()) {
          value = args[++i];
        }
      }
    }
    if (r == repeatable.size()) {
      if (a == "--") {  // the rest is not flags
        storage.insert(storage.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
        break;
      }
      storage.push_back(a);
    } else if (first[r] == SIZE_MAX) {
      first[r] = storage.size();
      storage.push_back("--" + repeatable[r] + "=" + value);
    } else if (!value.empty()) {
      storage[first[r]] += (storage[first[r]].back() == '=' ? "" : ",") + value;
    }
  }
  std::vector<char*> out;
  for (std::string& a : storage) out.push_back(a.data());
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
