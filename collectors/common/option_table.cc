#include "collectors/common/option_table.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "collectors/common/yaml_file.h"

namespace fabricscope::common {

absl::StatusOr<int64_t> ParseDurationText(absl::string_view text, int64_t min_ns, int64_t max_ns) {
  absl::Duration d;
  if (!absl::ParseDuration(absl::StripAsciiWhitespace(text), &d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a duration (e.g. 100us, 1ms, 1s)"));
  }
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  if (ns < min_ns || ns > max_ns) {
    return absl::InvalidArgumentError(absl::StrCat(text, " is outside ", FormatDurationNs(min_ns),
                                                   " .. ", FormatDurationNs(max_ns)));
  }
  return ns;
}

absl::StatusOr<int64_t> ParseIntegerText(absl::string_view text, int64_t min, int64_t max) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a whole number"));
  }
  if (n < min || n > max) {
    return absl::InvalidArgumentError(absl::StrCat(n, " is outside ", min, " .. ", max));
  }
  return n;
}

absl::StatusOr<double> ParseRealText(absl::string_view text, double min, double max,
                                     bool min_open) {
  double x = 0;
  if (!absl::SimpleAtod(text, &x)) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a number"));
  }
  const bool low_ok = min_open ? x > min : x >= min;
  if (!(low_ok && x <= max)) {
    return absl::InvalidArgumentError(
        absl::StrCat(x, " is not in ", min_open ? "(" : "[", min, ", ", max, "]"));
  }
  return x;
}

absl::StatusOr<bool> ParseOnOffText(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "on" || t == "true" || t == "yes") return true;
  if (t == "off" || t == "false" || t == "no") return false;
  return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not on or off"));
}

namespace {

constexpr const char* kByteUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};

}  // namespace

absl::StatusOr<uint64_t> ParseBytesText(absl::string_view text, uint64_t min, uint64_t max) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < t.size() && absl::ascii_isdigit(static_cast<unsigned char>(t[digits]))) {
    ++digits;
  }
  uint64_t n = 0;
  if (digits == 0 || !absl::SimpleAtoi(t.substr(0, digits), &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\": want bytes, e.g. 268435456 or 256MiB"));
  }
  const absl::string_view unit = absl::StripAsciiWhitespace(t.substr(digits));
  int shift = unit.empty() ? 0 : -1;
  for (int i = 0; i < 5; ++i) {
    if (unit == kByteUnits[i]) shift = 10 * i;
  }
  if (shift < 0 || n > (~uint64_t{0} >> shift)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\": the unit is one of B, KiB, MiB, GiB, TiB (and it must fit)"));
  }
  const uint64_t bytes = n << shift;
  if (bytes < min || bytes > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(text, " is outside ", FormatBytes(min), " .. ", FormatBytes(max)));
  }
  return bytes;
}

std::string FormatDurationNs(int64_t ns) { return absl::FormatDuration(absl::Nanoseconds(ns)); }

std::string FormatBytes(uint64_t bytes) {
  int unit = 0;
  while (unit < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrCat(bytes, unit == 0 ? "" : kByteUnits[unit]);
}

namespace {

// A scalar, or a list of scalars joined with commas, as the text its option parses.
absl::StatusOr<std::string> NodeText(const YAML::Node& node) {
  if (node.IsNull()) return std::string();
  if (node.IsScalar()) return node.Scalar();
  if (node.IsSequence()) {
    std::vector<std::string> items;
    for (const YAML::Node& item : node) {
      if (!item.IsScalar()) return absl::InvalidArgumentError("a list of plain values is expected");
      items.push_back(item.Scalar());
    }
    return absl::StrJoin(items, ",");
  }
  return absl::InvalidArgumentError("a value or a list is expected, not a map");
}

// `seen`: the full dotted keys met so far in the file, so that `a.b:` and `a: {b:}` are one key.
absl::Status WalkYaml(const YAML::Node& map, const std::string& prefix,
                      const std::vector<BoundOption>& options, const std::string& path,
                      std::set<std::string>& seen) {
  for (const auto& kv : map) {
    const std::string full = prefix + kv.first.as<std::string>();
    auto fail = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", full, ": ", why));
    };
    // yaml-cpp keeps both of a key written twice; one of them would win silently.
    if (!seen.insert(full).second) return fail("given twice");
    const BoundOption* exact = nullptr;
    bool has_children = false;
    for (const BoundOption& o : options) {
      if (*o.key == full) exact = &o;
      if (absl::StartsWith(*o.key, full + ".")) has_children = true;
    }
    if (exact != nullptr) {
      absl::Status st;
      if (exact->set_yaml) {
        st = exact->set_yaml(kv.second);
      } else {
        absl::StatusOr<std::string> text = NodeText(kv.second);
        st = text.ok() ? exact->set(*text) : text.status();
      }
      if (!st.ok()) return fail(st.message());
    } else if (has_children) {
      if (!kv.second.IsMap()) return fail("must be a map");
      if (absl::Status st = WalkYaml(kv.second, full + ".", options, path, seen); !st.ok()) {
        return st;
      }
    } else {
      return fail("unknown key");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadYamlBound(const std::string& path, const std::vector<BoundOption>& options) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat("config file ", path, " does not exist"));
  }
  if (!std::filesystem::is_regular_file(path, ec)) {  // a directory read by YAML::LoadFile aborts
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is not a regular file"));
  }
  try {
    // One document, no key repeated within a map (yaml_file.h); `seen` below also makes `a.b:`
    // and `a: {b:}` one key.
    absl::StatusOr<YAML::Node> doc = LoadOneYamlDocument(path);
    if (!doc.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", doc.status().message()));
    }
    const YAML::Node& root = *doc;
    if (root.IsNull()) return absl::OkStatus();  // an empty file, or only comments
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": top level must be a map"));
    }
    std::set<std::string> seen;
    return WalkYaml(root, "", options, path, seen);
  } catch (const std::exception& e) {  // YAML::Exception, or an I/O error while reading
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
}

namespace {

// Appends `text` wrapped at 100 columns, each line indented by `indent` spaces.
void AppendWrapped(std::string* out, absl::string_view text, size_t indent) {
  size_t column = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column > indent && column + 1 + word.size() > 100) {
      out->push_back('\n');
      column = 0;
    }
    if (column == 0) {
      out->append(indent, ' ');
      column = indent;
    } else {
      out->push_back(' ');
      ++column;
    }
    absl::StrAppend(out, word);
    column += word.size();
  }
  out->push_back('\n');
}

std::string DefaultText(const OptionRow& r) {
  if (r.is_switch) return r.default_text == "on" ? "on" : "off";
  return r.default_text.empty() ? "none" : r.default_text;
}

}  // namespace

std::string RenderOptionHelp(const std::vector<OptionRow>& rows) {
  std::string out;
  for (const OptionRow& r : rows) {
    if (r.flag.empty()) continue;
    absl::StrAppend(&out, "  --", r.flag, r.is_switch ? "" : absl::StrCat("=", r.form), "\n");
    std::string facts = absl::StrCat("Default: ", DefaultText(r), ".");
    if (!r.range.empty()) absl::StrAppend(&facts, " Accepts: ", r.range, ".");
    if (!r.key.empty()) absl::StrAppend(&facts, " Config file: ", r.key, ".");
    AppendWrapped(&out, absl::StrCat(r.help, " ", facts), 6);
  }
  out += "\nConfig file only (YAML; dotted keys are nested maps):\n";
  for (const OptionRow& r : rows) {
    if (!r.flag.empty() || r.key.empty()) continue;
    absl::StrAppend(&out, "  ", r.key, ": ", r.form, "\n");
    std::string facts = absl::StrCat("Default: ", DefaultText(r), ".");
    if (!r.range.empty()) absl::StrAppend(&facts, " Accepts: ", r.range, ".");
    AppendWrapped(&out, absl::StrCat(r.help, " ", facts), 6);
  }
  return out;
}

std::string RenderOptionMarkdown(const std::vector<OptionRow>& rows) {
  auto cell = [](absl::string_view s) { return absl::StrReplaceAll(s, {{"|", "\\|"}}); };
  std::string out =
      "| Flag | Config key | Default | Accepts | Meaning |\n"
      "|------|------------|---------|---------|---------|\n";
  for (const OptionRow& r : rows) {
    absl::StrAppend(&out, "| ", r.flag.empty() ? "" : absl::StrCat("`--", r.flag, "`"), " | ",
                    r.key.empty() ? "" : absl::StrCat("`", r.key, "`"), " | `",
                    cell(DefaultText(r)), "` | ", cell(r.range.empty() ? r.form : r.range), " | ",
                    cell(r.help), " |\n");
  }
  return out;
}

std::vector<ManOption> RenderManOptions(const std::vector<OptionRow>& rows) {
  std::vector<ManOption> out;
  for (const OptionRow& r : rows) {
    if (r.flag.empty() && r.key.empty()) continue;
    std::string text = absl::StrCat(r.help, " Default: ", DefaultText(r), ".");
    if (!r.range.empty()) absl::StrAppend(&text, " Accepts: ", r.range, ".");
    if (!r.flag.empty() && !r.key.empty()) absl::StrAppend(&text, " Config file: ", r.key, ".");
    out.push_back({r.flag, r.key, r.is_switch ? "" : r.form, std::move(text)});
  }
  return out;
}

}  // namespace fabricscope::common
