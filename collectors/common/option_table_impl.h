#pragma once

// The templates of option_table.h. Each binds a table to one Options object and hands the
// type-free work (YAML walking, help layout) to option_table.cc.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "collectors/common/host_port.h"

namespace fabricscope::common {

// One option bound to one Options object: what the type-free code in option_table.cc needs.
struct BoundOption {
  const std::string* flag;
  const std::string* key;
  std::function<absl::Status(absl::string_view)> set;
  std::function<absl::Status(const YAML::Node&)> set_yaml;  // may be empty
};

// One row of --help and of README's table.
struct OptionRow {
  std::string flag, key, form, range, help, default_text;
  bool is_switch = false;
};

absl::Status LoadYamlBound(const std::string& path, const std::vector<BoundOption>& options);
std::string RenderOptionHelp(const std::vector<OptionRow>& rows);
std::string RenderOptionMarkdown(const std::vector<OptionRow>& rows);
std::vector<ManOption> RenderManOptions(const std::vector<OptionRow>& rows);

template <typename Options>
OptionSpec<Options> HostPortOption(std::string key, FieldOf<Options, std::string> field,
                                   bool required, std::string help) {
  OptionSpec<Options> s = TextOption<Options>(std::move(key), field, "HOST:PORT", std::move(help));
  s.set = [field, required](absl::string_view text, Options& o) -> absl::Status {
    if (!text.empty() || required) {
      if (auto hp = SplitHostPort(std::string(text)); !hp.ok()) return hp.status();
    }
    field(o) = std::string(text);
    return absl::OkStatus();
  };
  return s;
}

template <typename Options>
OptionSpec<Options> RealOption(std::string key, FieldOf<Options, double> field, double min,
                               double max, bool min_open, std::string help) {
  return ValueOption<Options, double>(
      std::move(key), field, "X", absl::StrCat(min_open ? "(" : "[", min, ", ", max, "]"),
      std::move(help),
      [min, max, min_open](absl::string_view t) { return ParseRealText(t, min, max, min_open); },
      [](const double& x) { return absl::StrCat(x); });
}

template <typename Options>
OptionSpec<Options> OnOffOption(std::string key, FieldOf<Options, bool> field, std::string help) {
  return ValueOption<Options, bool>(std::move(key), field, "on|off", "", std::move(help),
                                    &ParseOnOffText,
                                    [](const bool& b) { return std::string(b ? "on" : "off"); });
}

template <typename Options>
OptionSpec<Options> BytesOption(std::string key, FieldOf<Options, uint64_t> field, uint64_t min,
                                uint64_t max, std::string help) {
  return ValueOption<Options, uint64_t>(
      std::move(key), field, "BYTES", FormatBytes(min) + ".." + FormatBytes(max), std::move(help),
      [min, max](absl::string_view t) { return ParseBytesText(t, min, max); },
      [](const uint64_t& n) { return FormatBytes(n); });
}

template <typename Options>
OptionSpec<Options> ListOption(std::string key, FieldOf<Options, std::vector<std::string>> field,
                               std::string form, std::string help) {
  OptionSpec<Options> s;
  s.key = std::move(key);
  s.form = std::move(form);
  s.help = std::move(help);
  s.repeatable = true;
  s.set = [field](absl::string_view text, Options& o) {
    field(o) = absl::StrSplit(text, ',', absl::SkipWhitespace());
    return absl::OkStatus();
  };
  s.show = [field](const Options& o) { return absl::StrJoin(field(const_cast<Options&>(o)), ","); };
  return s;
}

template <typename Options>
absl::Status SetFromFlag(const std::vector<OptionSpec<Options>>& table, absl::string_view flag,
                         absl::string_view text, Options* o) {
  for (const OptionSpec<Options>& s : table) {
    if (s.flag != flag) continue;
    if (absl::Status st = s.set(text, *o); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", st.message()));
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": no such option"));
}

template <typename Options>
absl::Status LoadYamlOptions(const std::string& path, const std::vector<OptionSpec<Options>>& table,
                             Options* o) {
  std::vector<BoundOption> bound;
  bound.reserve(table.size());
  for (const OptionSpec<Options>& s : table) {
    if (s.key.empty()) continue;
    BoundOption b{&s.flag, &s.key, [&s, o](absl::string_view t) { return s.set(t, *o); }, {}};
    if (s.set_yaml) b.set_yaml = [&s, o](const YAML::Node& n) { return s.set_yaml(n, *o); };
    bound.push_back(std::move(b));
  }
  return LoadYamlBound(path, bound);
}

template <typename Options>
absl::Status CheckOptionBounds(const std::vector<OptionSpec<Options>>& table, const Options& o) {
  Options scratch = o;  // each value is parsed into the copy, never into `o`
  for (const OptionSpec<Options>& s : table) {
    if (!s.show || s.set_yaml) continue;
    const std::string text = s.show(o);
    if (absl::Status st = s.set(text, scratch); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(s.flag.empty() ? s.key : "--" + s.flag, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

template <typename Options>
std::vector<OptionRow> OptionRows(const std::vector<OptionSpec<Options>>& table,
                                  const Options& defaults) {
  std::vector<OptionRow> rows;
  for (const OptionSpec<Options>& s : table) {
    rows.push_back(OptionRow{s.flag, s.key, s.form, s.range, s.help,
                             s.show ? s.show(defaults) : std::string(), s.is_switch});
  }
  return rows;
}

template <typename Options>
std::string OptionHelp(const std::vector<OptionSpec<Options>>& table, const Options& defaults) {
  return RenderOptionHelp(OptionRows(table, defaults));
}

template <typename Options>
std::string OptionMarkdown(const std::vector<OptionSpec<Options>>& table, const Options& defaults) {
  return RenderOptionMarkdown(OptionRows(table, defaults));
}

template <typename Options>
std::vector<ManOption> OptionManEntries(const std::vector<OptionSpec<Options>>& table,
                                        const Options& defaults) {
  return RenderManOptions(OptionRows(table, defaults));
}

}  // namespace fabricscope::common
