#pragma once

// Options declared once: each option of a daemon (agent, aggregator) is one OptionSpec that
// gives its command-line name, its config-file key, its form, its bounds and its help. The
// command line, the YAML config file, --help, the bounds check of options built in code and
// README's option tables all read the same spec (issue 16 item 3).
//
// A spec reads and writes its value as text through one parser per kind, so a value written on
// the command line and the same value in the config file mean the same thing.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/common/man_page.h"

namespace YAML {
class Node;
}

namespace fabricscope::common {

template <typename Options>
struct OptionSpec {
  std::string flag;   // command-line name with dashes ("sample-period"); empty: config file only
  std::string key;    // config path, dotted ("spool.max_bytes"); empty: command line only
  std::string form;   // the value's form in --help: DURATION, N, HOST:PORT, on|off, ...
  std::string range;  // the accepted values in words ("10us..1s"); empty when any value goes
  std::string help;   // what it does, in sentences
  bool is_switch = false;   // a command-line flag with no value (--allow-insecure): "on"
  bool repeatable = false;  // a list: the flag may be given more than once (values joined)
  // Parses `text` and stores it. Errors: InvalidArgument saying the accepted form or range
  // (the caller prefixes the flag or key).
  std::function<absl::Status(absl::string_view text, Options& o)> set;
  // The value as text that `set` reads back (the default in --help, the bounds check).
  std::function<std::string(const Options& o)> show;
  // Config file only: a value that is a YAML map or list of maps (microburst.ports); when
  // set, the YAML walker hands the node here instead of its text.
  std::function<absl::Status(const YAML::Node& node, Options& o)> set_yaml;
};

// ---- Parsers shared by the kinds (each: InvalidArgument saying the form) --------------------

// absl::ParseDuration syntax ("100us", "1ms", "1h30m"), min_ns <= value <= max_ns.
absl::StatusOr<int64_t> ParseDurationText(absl::string_view text, int64_t min_ns, int64_t max_ns);
// A decimal integer in [min, max].
absl::StatusOr<int64_t> ParseIntegerText(absl::string_view text, int64_t min, int64_t max);
// A real number in [min, max], or (min, max] with min_open.
absl::StatusOr<double> ParseRealText(absl::string_view text, double min, double max, bool min_open);
// on/off, true/false, yes/no.
absl::StatusOr<bool> ParseOnOffText(absl::string_view text);
// Bytes: a number with an optional unit B, KiB, MiB, GiB, TiB ("256MiB"), in [min, max].
absl::StatusOr<uint64_t> ParseBytesText(absl::string_view text, uint64_t min, uint64_t max);
// "1ms" shown the way ParseDurationText reads it back.
std::string FormatDurationNs(int64_t ns);
// 268435456 -> "256MiB" (the largest unit that divides it).
std::string FormatBytes(uint64_t bytes);

// ---- Kinds: each returns a spec for `key` (empty flag: WithFlag adds it) ---------------------

// `field` maps an Options to the member it sets: [](Options& o) -> T& { return o.member; }.
template <typename Options, typename T>
using FieldOf = T& (*)(Options&);

template <typename Options>
OptionSpec<Options> TextOption(std::string key, FieldOf<Options, std::string> field,
                               std::string form, std::string help, std::string empty_word = "") {
  OptionSpec<Options> s;
  s.key = std::move(key);
  s.form = std::move(form);
  s.help = std::move(help);
  if (!empty_word.empty()) s.range = "\"" + empty_word + "\" = none";
  s.set = [field, empty_word](absl::string_view text, Options& o) {
    field(o) = (!empty_word.empty() && text == empty_word) ? std::string() : std::string(text);
    return absl::OkStatus();
  };
  s.show = [field, empty_word](const Options& o) {
    const std::string& v = field(const_cast<Options&>(o));
    return v.empty() ? empty_word : v;
  };
  return s;
}

// The one builder the typed kinds share: `parse` reads the text into a T (and checks its
// range), `show` writes a T back as text that `parse` reads.
template <typename Options, typename T>
OptionSpec<Options> ValueOption(std::string key, FieldOf<Options, T> field, std::string form,
                                std::string range, std::string help,
                                std::function<absl::StatusOr<T>(absl::string_view)> parse,
                                std::function<std::string(const T&)> show) {
  OptionSpec<Options> s;
  s.key = std::move(key);
  s.form = std::move(form);
  s.range = std::move(range);
  s.help = std::move(help);
  s.set = [field, parse](absl::string_view text, Options& o) -> absl::Status {
    absl::StatusOr<T> v = parse(text);
    if (!v.ok()) return v.status();
    field(o) = *std::move(v);
    return absl::OkStatus();
  };
  s.show = [field, show](const Options& o) { return show(field(const_cast<Options&>(o))); };
  return s;
}

template <typename Options>
OptionSpec<Options> DurationOption(std::string key, FieldOf<Options, int64_t> field, int64_t min_ns,
                                   int64_t max_ns, std::string help) {
  return ValueOption<Options, int64_t>(
      std::move(key), field, "DURATION", FormatDurationNs(min_ns) + ".." + FormatDurationNs(max_ns),
      std::move(help),
      [min_ns, max_ns](absl::string_view t) { return ParseDurationText(t, min_ns, max_ns); },
      [](const int64_t& ns) { return FormatDurationNs(ns); });
}

template <typename Options, typename T>
OptionSpec<Options> IntegerOption(std::string key, FieldOf<Options, T> field, int64_t min,
                                  int64_t max, std::string help) {
  return ValueOption<Options, T>(
      std::move(key), field, "N", std::to_string(min) + ".." + std::to_string(max), std::move(help),
      [min, max](absl::string_view t) -> absl::StatusOr<T> {
        absl::StatusOr<int64_t> n = ParseIntegerText(t, min, max);
        if (!n.ok()) return n.status();
        return static_cast<T>(*n);
      },
      [](const T& v) { return std::to_string(static_cast<int64_t>(v)); });
}

// One of a few words ("auto", "on", "off").
template <typename Options>
OptionSpec<Options> ChoiceOption(std::string key, FieldOf<Options, std::string> field,
                                 std::vector<std::string> choices, std::string help) {
  OptionSpec<Options> s = TextOption<Options>(std::move(key), field, "", std::move(help));
  for (const std::string& c : choices) s.form += (s.form.empty() ? "" : "|") + c;
  s.set = [field, choices, form = s.form](absl::string_view text, Options& o) -> absl::Status {
    for (const std::string& c : choices) {
      if (text == c) {
        field(o) = c;
        return absl::OkStatus();
      }
    }
    return absl::InvalidArgumentError("\"" + std::string(text) + "\" is not one of " + form);
  };
  return s;
}

template <typename Options>
OptionSpec<Options> RealOption(std::string key, FieldOf<Options, double> field, double min,
                               double max, bool min_open, std::string help);
// HOST:PORT (common::SplitHostPort); empty allowed unless `required`.
template <typename Options>
OptionSpec<Options> HostPortOption(std::string key, FieldOf<Options, std::string> field,
                                   bool required, std::string help);
template <typename Options>
OptionSpec<Options> OnOffOption(std::string key, FieldOf<Options, bool> field, std::string help);
template <typename Options>
OptionSpec<Options> BytesOption(std::string key, FieldOf<Options, uint64_t> field, uint64_t min,
                                uint64_t max, std::string help);
// Comma-separated on the command line, or the flag given more than once (repeatable; see
// collectors::NormalizeFlagDashes); a YAML list in the config file.
template <typename Options>
OptionSpec<Options> ListOption(std::string key, FieldOf<Options, std::vector<std::string>> field,
                               std::string form, std::string help);

// The spec with its command-line name: `id` with '_' written as '-' ("sample_period").
template <typename Options>
OptionSpec<Options> WithFlag(absl::string_view id, OptionSpec<Options> spec) {
  spec.flag = std::string(id);
  for (char& c : spec.flag) {
    if (c == '_') c = '-';
  }
  return spec;
}

// The command-line names of the table's list options, with '_' for '-' (what
// collectors::NormalizeFlagDashes takes as `repeatable`).
template <typename Options>
std::vector<std::string> RepeatableFlags(const std::vector<OptionSpec<Options>>& table) {
  std::vector<std::string> out;
  for (const OptionSpec<Options>& s : table) {
    if (!s.repeatable || s.flag.empty()) continue;
    out.push_back(s.flag);
    for (char& c : out.back()) c = c == '-' ? '_' : c;
  }
  return out;
}

// A command-line switch: "--name" alone sets it on (Abseil bool flag); the config file reads
// on/off.
template <typename Options>
OptionSpec<Options> AsSwitch(OptionSpec<Options> spec) {
  spec.is_switch = true;
  return spec;
}

// ---- Readers and writers over a table --------------------------------------------------------

// Sets the option named by its flag (without dashes) from the command line.
// Errors: InvalidArgument "--flag: ...".
template <typename Options>
absl::Status SetFromFlag(const std::vector<OptionSpec<Options>>& table, absl::string_view flag,
                         absl::string_view text, Options* o);

// Reads a YAML config file into *o: every key a spec's dotted key names; maps on the way to one
// are walked; a list of scalars is read as the comma-joined text. Keys not in the file keep
// their value. Errors: NotFound when the file is missing; InvalidArgument for a file that is no
// regular file, YAML syntax, a top level that is no map, an unknown key or a bad value, each
// "PATH: key: ...".
template <typename Options>
absl::Status LoadYamlOptions(const std::string& path, const std::vector<OptionSpec<Options>>& table,
                             Options* o);

// Every option's current value read back through its own parser: values set in code obey the
// same bounds as values given by a user. Errors: InvalidArgument "key: ...".
template <typename Options>
absl::Status CheckOptionBounds(const std::vector<OptionSpec<Options>>& table, const Options& o);

// --help text: the usage, then each option with its form, default (from `defaults`), range,
// config key and help, wrapped at 100 columns.
template <typename Options>
std::string OptionHelp(const std::vector<OptionSpec<Options>>& table, const Options& defaults);

// README's option table (Markdown): | flag | config key | default | range | meaning |.
template <typename Options>
std::string OptionMarkdown(const std::vector<OptionSpec<Options>>& table, const Options& defaults);

// The options as manual-page entries (collectors/common/man_page.h): each one's form, help,
// default, range and config key, in the table's order.
template <typename Options>
std::vector<ManOption> OptionManEntries(const std::vector<OptionSpec<Options>>& table,
                                        const Options& defaults);

}  // namespace fabricscope::common

#include "collectors/common/option_table_impl.h"  // IWYU pragma: export
