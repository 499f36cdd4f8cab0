#include "collectors/common/man_page.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace fabricscope::common {

std::string RoffEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  bool line_start = true;
  for (char c : s) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
    line_start = c == '\n';
  }
  return out;
}

namespace {

// Running text: RoffEscape, and an invisible break point (\:) after each '_', '/' and '='
// so that a long metric name, path or URL can wrap instead of overrunning the line ("can't
// break line" under groff -ww).
std::string RoffText(const std::string& s) {
  std::string out;
  for (char c : RoffEscape(s)) {
    out += c;
    if (c == '_' || c == '/' || c == '=') out += "\\:";
  }
  return out;
}

}  // namespace

std::string RenderManPage(const ManPage& page) {
  std::string upper = page.name;
  absl::AsciiStrToUpper(&upper);
  std::string out = absl::StrCat(".TH ", RoffEscape(upper), " ", page.section, " \"\" \"",
                                 RoffEscape(page.version), "\"\n");
  // Ragged right, no hyphenation: option text holds long paths and lists that justified lines
  // could only stretch ("cannot adjust line" under groff -ww).
  out += ".ad l\n.nh\n";
  absl::StrAppend(&out, ".SH NAME\n", RoffEscape(page.name), " \\- ", RoffEscape(page.summary),
                  "\n.SH SYNOPSIS\n.B ", RoffEscape(page.name), "\n", RoffEscape(page.synopsis),
                  "\n.SH DESCRIPTION\n");
  bool literal = false;
  for (absl::string_view para : absl::StrSplit(page.description, "\n\n", absl::SkipEmpty())) {
    for (absl::string_view line : absl::StrSplit(para, '\n', absl::SkipEmpty())) {
      const bool example = absl::StartsWith(line, "  ");
      if (example && !literal) out += ".PP\n.nf\n";
      if (!example && literal) out += ".fi\n";
      if (!example && !literal) out += ".PP\n";
      literal = example;
      const std::string text(example ? absl::StripLeadingAsciiWhitespace(line) : line);
      absl::StrAppend(&out, example ? RoffEscape(text) : RoffText(text), "\n");
    }
    if (literal) out += ".fi\n";
    literal = false;
  }
  out += ".SH OPTIONS\n";
  bool config_only = false;
  for (const ManOption& o : page.options) {
    if (o.flag.empty()) {
      config_only = true;
      continue;
    }
    absl::StrAppend(&out, ".TP\n.B \\-\\-", RoffEscape(o.flag),
                    o.form.empty() ? "" : absl::StrCat("=\\fI", RoffEscape(o.form), "\\fR"), "\n",
                    RoffText(o.text), "\n");
  }
  if (config_only) {
    out += ".SH CONFIGURATION FILE\nYAML; a dotted key is a nested map. Keys with no flag:\n";
    for (const ManOption& o : page.options) {
      if (!o.flag.empty()) continue;
      absl::StrAppend(&out, ".TP\n.B ", RoffEscape(o.key), "\n", RoffText(o.text), "\n");
    }
  }
  if (!page.files.empty()) {
    out += ".SH FILES\n";
    for (absl::string_view line : absl::StrSplit(page.files, '\n', absl::SkipEmpty())) {
      const auto [path, what] =
          std::pair<std::string, std::string>(absl::StrSplit(line, absl::MaxSplits(": ", 1)));
      absl::StrAppend(&out, ".TP\n.I ", RoffEscape(path), "\n", RoffEscape(what), "\n");
    }
  }
  if (!page.see_also.empty())
    absl::StrAppend(&out, ".SH SEE ALSO\n", RoffEscape(page.see_also), "\n");
  return out;
}

}  // namespace fabricscope::common
