#include "tests/monitoring/monitoring_sources.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace fabricscope::testing {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_' || c == ':';
}
bool IsIdentChar(char c) { return IsIdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Index just past the string literal starting at s[i] (a quote or backtick).
size_t SkipString(absl::string_view s, size_t i) {
  const char q = s[i++];
  while (i < s.size() && s[i] != q) i += (s[i] == '\\' && q != '`') ? 2 : 1;
  return std::min(i + 1, s.size());
}

// Index just past the bracket group opened at s[i] ('{', '[' or '('), strings skipped.
size_t SkipGroup(absl::string_view s, size_t i) {
  const char open = s[i];
  const char close = open == '{' ? '}' : open == '[' ? ']' : ')';
  int depth = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = SkipString(s, i);
      continue;
    }
    if (c == open) ++depth;
    if (c == close && --depth == 0) return i + 1;
    ++i;
  }
  return s.size();
}

size_t SkipSpace(absl::string_view s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

const std::set<std::string>& GroupingKeywords() {
  static const auto* k =
      new std::set<std::string>{"by", "without", "on", "ignoring", "group_left", "group_right"};
  return *k;
}
const std::set<std::string>& OtherKeywords() {
  static const auto* k = new std::set<std::string>{"and",   "or",  "unless", "bool", "offset",
                                                   "atan2", "inf", "nan",    "Inf",  "NaN"};
  return *k;
}
const std::set<std::string>& Aggregations() {
  static const auto* k =
      new std::set<std::string>{"sum",    "min",   "max",  "avg",     "group",        "stddev",
                                "stdvar", "count", "topk", "bottomk", "count_values", "quantile"};
  return *k;
}

struct Token {
  size_t begin;
  size_t end;
  std::string text;
};

// The metric-name tokens of an expression, with their positions.
std::vector<Token> ScanMetrics(absl::string_view s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = SkipString(s, i);
    } else if (c == '{' || c == '[') {
      i = SkipGroup(s, i);
    } else if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c)) ||
               (c == '.' && i + 1 < s.size() &&
                std::isdigit(static_cast<unsigned char>(s[i + 1])))) {
      // A number or a duration: 0.95, 1e-6, 0x1F, 5m, 1h30m.
      ++i;
      while (i < s.size() &&
             (IsIdentChar(s[i]) || s[i] == '.' ||
              ((s[i] == '-' || s[i] == '+') && (s[i - 1] == 'e' || s[i - 1] == 'E')))) {
        ++i;
      }
    } else if (IsIdentStart(c)) {
      const size_t b = i;
      while (i < s.size() && IsIdentChar(s[i])) ++i;
      const std::string word(s.substr(b, i - b));
      const size_t next = SkipSpace(s, i);
      if (GroupingKeywords().count(word) != 0) {
        if (next < s.size() && s[next] == '(') i = SkipGroup(s, next);
      } else if (OtherKeywords().count(word) != 0 || Aggregations().count(word) != 0) {
        // keyword or aggregation operator: not a metric
      } else if (next < s.size() && s[next] == '(') {
        // a function call
      } else {
        out.push_back({b, i, word});
      }
    } else {
      ++i;
    }
  }
  return out;
}

bool IsCounterName(absl::string_view name) {
  return absl::EndsWith(name, "_total") || absl::EndsWith(name, "_bucket") ||
         absl::EndsWith(name, "_count") || absl::EndsWith(name, "_sum");
}

std::string VariableSelector(const std::string& query) {
  // label_values(SELECTOR, label) -> SELECTOR; label_values(label) -> "" (no metric).
  absl::string_view q = absl::StripAsciiWhitespace(query);
  if (!absl::ConsumePrefix(&q, "label_values(") || !absl::ConsumeSuffix(&q, ")")) {
    return std::string(q);
  }
  const size_t comma = q.rfind(',');
  if (comma == absl::string_view::npos) return "";
  return std::string(absl::StripAsciiWhitespace(q.substr(0, comma)));
}

void CollectPanels(const Value& panels, const std::string& path, std::vector<PromqlExpression>* out,
                   absl::Status* status) {
  for (const Value& p : panels.list_value().values()) {
    const auto& f = p.struct_value().fields();
    if (auto it = f.find("panels"); it != f.end()) CollectPanels(it->second, path, out, status);
    auto targets = f.find("targets");
    if (targets == f.end()) continue;
    const std::string id =
        f.count("id") ? absl::StrCat(static_cast<int64_t>(f.at("id").number_value())) : "?";
    const std::string title = f.count("title") ? f.at("title").string_value() : "";
    for (const Value& t : targets->second.list_value().values()) {
      const auto& tf = t.struct_value().fields();
      const std::string ref = tf.count("refId") ? tf.at("refId").string_value() : "?";
      auto e = tf.find("expr");
      if (e == tf.end() || e->second.string_value().empty()) {
        *status = absl::InvalidArgumentError(
            absl::StrCat(path, ": panel ", id, " target ", ref, " has no expr"));
        continue;
      }
      out->push_back({PromqlExpression::Kind::kPanel, absl::StrCat(path, "#", id, "/", ref), title,
                      e->second.string_value()});
    }
  }
}

}  // namespace

absl::StatusOr<Struct> LoadJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  Struct s;
  const auto st = google::protobuf::util::JsonStringToMessage(*text, &s);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object: ", st.ToString()));
  }
  return s;
}

absl::StatusOr<std::vector<PromqlExpression>> DashboardExpressions(const std::string& path) {
  absl::StatusOr<Struct> d = LoadJson(path);
  if (!d.ok()) return d.status();
  std::vector<PromqlExpression> out;
  absl::Status status;
  const auto& f = d->fields();
  if (auto it = f.find("panels"); it != f.end()) CollectPanels(it->second, path, &out, &status);
  if (auto it = f.find("templating"); it != f.end()) {
    const auto& tf = it->second.struct_value().fields();
    if (auto l = tf.find("list"); l != tf.end()) {
      for (const Value& v : l->second.list_value().values()) {
        const auto& vf = v.struct_value().fields();
        if (!vf.count("type") || vf.at("type").string_value() != "query") continue;
        std::string query;
        if (auto q = vf.find("query"); q != vf.end()) {
          query = q->second.has_struct_value() && q->second.struct_value().fields().count("query")
                      ? q->second.struct_value().fields().at("query").string_value()
                      : q->second.string_value();
        }
        const std::string selector = VariableSelector(query);
        if (selector.empty()) continue;
        const std::string name = vf.count("name") ? vf.at("name").string_value() : "?";
        out.push_back(
            {PromqlExpression::Kind::kVariable, absl::StrCat(path, "$", name), name, selector});
      }
    }
  }
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<PromqlExpression>> RuleExpressions(const std::string& path) {
  if (!std::filesystem::exists(path)) return absl::NotFoundError(absl::StrCat("no ", path));
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  if (!root["groups"] || !root["groups"].IsSequence()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no groups"));
  }
  const std::string base = std::filesystem::path(path).filename().string();
  std::vector<PromqlExpression> out;
  for (const YAML::Node& g : root["groups"]) {
    for (const YAML::Node& r : g["rules"]) {
      if (!r["expr"]) return absl::InvalidArgumentError(absl::StrCat(path, ": rule without expr"));
      const bool alert = static_cast<bool>(r["alert"]);
      const std::string name = alert ? r["alert"].as<std::string>() : r["record"].as<std::string>();
      out.push_back({alert ? PromqlExpression::Kind::kAlert : PromqlExpression::Kind::kRecord,
                     absl::StrCat(base, ":", name), name, r["expr"].as<std::string>()});
    }
  }
  return out;
}

std::string SubstituteGrafanaVariables(absl::string_view expr, absl::string_view rate_interval,
                                       const std::map<std::string, std::string>& values) {
  std::string out = absl::StrReplaceAll(expr, {{"$__rate_interval", rate_interval},
                                               {"${__rate_interval}", rate_interval},
                                               {"$__interval", rate_interval},
                                               {"${__interval}", rate_interval},
                                               {"$__range", "1h"}});
  // Any remaining $name, ${name} or [[name]].
  static const std::regex kVar(R"(\$\{(\w+)(:\w+)?\}|\$(\w+)|\[\[(\w+)\]\])");
  std::string result;
  auto begin = std::sregex_iterator(out.begin(), out.end(), kVar);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const std::string name = m[1].matched ? m[1].str() : m[3].matched ? m[3].str() : m[4].str();
    result.append(out, last, static_cast<size_t>(m.position(0)) - last);
    auto v = values.find(name);
    result += v != values.end() ? v->second : ".*";
    last = static_cast<size_t>(m.position(0) + m.length(0));
  }
  result.append(out, last, std::string::npos);
  return result;
}

std::vector<std::string> MetricNames(absl::string_view expr) {
  std::vector<std::string> out;
  for (const Token& t : ScanMetrics(expr)) {
    if (std::find(out.begin(), out.end(), t.text) == out.end()) out.push_back(t.text);
  }
  return out;
}

std::vector<std::string> CounterViolations(absl::string_view s) {
  std::vector<std::string> out;
  for (const Token& t : ScanMetrics(s)) {
    // The function this selector is the direct argument of: "rate(" before it.
    std::string fn;
    size_t j = t.begin;
    while (j > 0 && std::isspace(static_cast<unsigned char>(s[j - 1]))) --j;
    if (j > 0 && s[j - 1] == '(') {
      size_t e = j - 1;
      while (e > 0 && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
      size_t b = e;
      while (b > 0 && IsIdentChar(s[b - 1])) --b;
      fn = std::string(s.substr(b, e - b));
    }
    size_t k = SkipSpace(s, t.end);
    if (k < s.size() && s[k] == '{') k = SkipSpace(s, SkipGroup(s, k));
    const bool rate_interval = s.substr(k).rfind("[$__rate_interval]", 0) == 0;
    const bool rated = fn == "rate" || fn == "increase" || fn == "irate";
    if (IsCounterName(t.text)) {
      if (!(fn == "rate" || fn == "increase") || !rate_interval) {
        out.push_back(absl::StrCat("counter ", t.text,
                                   " is not the argument of rate() or increase() over "
                                   "[$__rate_interval]"));
      }
    } else if (rated) {
      out.push_back(absl::StrCat(fn, "() of ", t.text, ", which is not a counter"));
    }
  }
  // Ranges: only [$__rate_interval] (no fixed [5m], no subquery).
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '"' || s[i] == '\'' || s[i] == '`') {
      i = SkipString(s, i);
    } else if (s[i] == '{') {
      i = SkipGroup(s, i);
    } else if (s[i] == '[') {
      const size_t e = SkipGroup(s, i);
      if (s.substr(i, e - i) != "[$__rate_interval]") {
        out.push_back(absl::StrCat("range ", s.substr(i, e - i), " is not [$__rate_interval]"));
      }
      i = e;
    } else {
      ++i;
    }
  }
  return out;
}

absl::StatusOr<std::set<std::string>> ExportedMetricNames(const std::string& exporters_dir) {
  const std::string catalog = exporters_dir + "/metric_catalog.inc";
  absl::StatusOr<std::string> text = ReadFile(catalog);
  if (!text.ok()) return text.status();
  // FABRICSCOPE_METRIC(id, "name", Type, ...), the name and type on one line or the next.
  static const std::regex kEntry(
      R"re(FABRICSCOPE_METRIC\(\s*\w+,\s*"(fabricscope_[a-z0-9_]+)",\s*(\w+),)re");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text->begin(), text->end(), kEntry);
       it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1].str();
    out.insert(name);
    if ((*it)[2] == "Histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) out.insert(name + suffix);
    }
  }
  if (out.empty()) return absl::NotFoundError(absl::StrCat("no metric in ", catalog));
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> PendingMetrics(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::map<std::string, std::string> out;
  int n = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++n;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (f.size() != 2 || (f[1] != "counter" && f[1] != "gauge" && f[1] != "histogram")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", n, ": expected \"NAME counter|gauge|histogram\", got \"", line, "\""));
    }
    out[f[0]] = f[1];
  }
  return out;
}

std::set<std::string> SeriesNames(const std::map<std::string, std::string>& name_to_type) {
  std::set<std::string> out;
  for (const auto& [name, type] : name_to_type) {
    out.insert(name);
    if (type == "histogram") {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) out.insert(name + suffix);
    }
  }
  return out;
}

std::vector<std::string> FilesEndingWith(const std::string& dir, absl::string_view suffix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string p = e.path().string();
    if (e.is_regular_file() && absl::EndsWith(p, suffix)) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace fabricscope::testing
