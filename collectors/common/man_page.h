#pragma once

// Manual pages in man(7) roff, generated from the same option declarations as --help
// (collectors/common/option_table.h), so that `man fabricscope-agent` cannot drift from the
// binary: fabricscope-agent(8), fabricscope-aggregator(8), fabricscope-pcap(1).

#include <string>
#include <vector>

namespace fabricscope::common {

// One option as the page lists it.
struct ManOption {
  std::string flag;  // without dashes ("sample-period"); empty: config file only
  std::string key;   // config key, dotted; empty: command line only
  std::string form;  // the value's form: DURATION, N, on|off, ... (empty for a switch)
  std::string text;  // what it does, then "Default: ... Accepts: ..." in sentences
};

struct ManPage {
  std::string name;      // "fabricscope-agent"
  std::string section;   // "8"
  std::string version;   // "fabricscope 0.1.0"
  std::string summary;   // NAME line: "per-node telemetry agent ..."
  std::string synopsis;  // after the name: "[OPTION]..."
  // DESCRIPTION: paragraphs separated by blank lines; a line that starts with "  " stays a
  // literal example line.
  std::string description;
  std::vector<ManOption> options;
  std::string files;     // FILES: one "PATH: what" per line; empty = no section
  std::string see_also;  // SEE ALSO, as written
};

// `s` as roff text: backslashes as \e, hyphens as \-, and a line that would start with '.' or
// '\'' guarded by \&. Pure.
std::string RoffEscape(const std::string& s);

// The page in man(7) macros (TH, SH, TP, PP, B, I); no date in TH (reproducible builds). Pure.
std::string RenderManPage(const ManPage& page);

}  // namespace fabricscope::common
