#include "exporters/exposition/exposition.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace fabricscope::exporters {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricType;

void AppendEscaped(const std::string& s, bool quote, std::string* out) {
  for (const char c : s) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else if (quote && c == '"') {
      *out += "\\\"";
    } else {
      *out += c;
    }
  }
}

const char* TypeName(MetricType t) {
  switch (t) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Summary:
      return "summary";
    case MetricType::Histogram:
      return "histogram";
    case MetricType::Untyped:
      break;
  }
  return "untyped";
}

// name{labels[,extra="value"]} value[ timestamp]\n
void AppendSample(const std::string& name, const char* suffix, const ClientMetric& m,
                  const char* extra_name, const std::string* extra_value, double value,
                  std::string* out) {
  *out += name;
  *out += suffix;
  if (!m.label.empty() || extra_name != nullptr) {
    *out += '{';
    bool first = true;
    for (const ClientMetric::Label& l : m.label) {
      if (!first) *out += ',';
      first = false;
      *out += l.name;
      *out += "=\"";
      AppendEscaped(l.value, true, out);
      *out += '"';
    }
    if (extra_name != nullptr) {
      if (!first) *out += ',';
      *out += extra_name;
      *out += "=\"";
      *out += *extra_value;
      *out += '"';
    }
    *out += '}';
  }
  *out += ' ';
  AppendSampleValue(value, out);
  if (m.timestamp_ms != 0) {
    *out += ' ';
    *out += std::to_string(m.timestamp_ms);
  }
  *out += '\n';
}

std::string ValueText(double v) {
  std::string s;
  AppendSampleValue(v, &s);
  return s;
}

void AppendMetric(const prometheus::MetricFamily& f, const ClientMetric& m, std::string* out) {
  switch (f.type) {
    case MetricType::Counter:
      AppendSample(f.name, "", m, nullptr, nullptr, m.counter.value, out);
      return;
    case MetricType::Gauge:
      AppendSample(f.name, "", m, nullptr, nullptr, m.gauge.value, out);
      return;
    case MetricType::Untyped:
      AppendSample(f.name, "", m, nullptr, nullptr, m.untyped.value, out);
      return;
    case MetricType::Summary:
      for (const ClientMetric::Quantile& q : m.summary.quantile) {
        const std::string qs = ValueText(q.quantile);
        AppendSample(f.name, "", m, "quantile", &qs, q.value, out);
      }
      AppendSample(f.name, "_sum", m, nullptr, nullptr, m.summary.sample_sum, out);
      AppendSample(f.name, "_count", m, nullptr, nullptr,
                   static_cast<double>(m.summary.sample_count), out);
      return;
    case MetricType::Histogram:
      for (const ClientMetric::Bucket& b : m.histogram.bucket) {
        const std::string le = ValueText(b.upper_bound);
        AppendSample(f.name, "_bucket", m, "le", &le, static_cast<double>(b.cumulative_count), out);
      }
      AppendSample(f.name, "_sum", m, nullptr, nullptr, m.histogram.sample_sum, out);
      AppendSample(f.name, "_count", m, nullptr, nullptr,
                   static_cast<double>(m.histogram.sample_count), out);
      return;
  }
}

}  // namespace

void AppendSampleValue(double v, std::string* out) {
  if (std::isnan(v)) {
    *out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  // The shortest digits that round-trip, as "d.ddde+XX", then laid out as printf's %g would with
  // 17 digits of precision: fixed notation for exponents -4..16, else scientific.
  char sci[40];
  const std::to_chars_result r =
      std::to_chars(sci, sci + sizeof(sci), v, std::chars_format::scientific);
  const std::string_view text(sci, static_cast<size_t>(r.ptr - sci));
  const size_t e = text.find('e');
  int exp = 0;
  std::from_chars(text.data() + e + (text[e + 1] == '+' ? 2 : 1), text.data() + text.size(), exp);
  if (exp < -4 || exp >= 17) {
    out->append(text);
    return;
  }
  std::string_view mantissa = text.substr(0, e);
  if (mantissa.front() == '-') {
    *out += '-';
    mantissa.remove_prefix(1);
  }
  std::string digits;  // without the point
  for (const char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exp < 0) {
    *out += "0.";
    out->append(static_cast<size_t>(-exp - 1), '0');
    *out += digits;
  } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
    *out += digits;
    out->append(static_cast<size_t>(exp) + 1 - digits.size(), '0');
  } else {
    out->append(digits, 0, static_cast<size_t>(exp) + 1);
    *out += '.';
    out->append(digits, static_cast<size_t>(exp) + 1);
  }
}

std::string TextExposition(const std::vector<prometheus::MetricFamily>& families) {
  std::string out;
  size_t samples = 0;
  for (const prometheus::MetricFamily& f : families) samples += f.metric.size();
  out.reserve(samples * 96 + families.size() * 128);
  for (const prometheus::MetricFamily& f : families) {
    if (!f.help.empty()) {
      out += "# HELP ";
      out += f.name;
      out += ' ';
      AppendEscaped(f.help, false, &out);
      out += '\n';
    }
    out += "# TYPE ";
    out += f.name;
    out += ' ';
    out += TypeName(f.type);
    out += '\n';
    for (const ClientMetric& m : f.metric) AppendMetric(f, m, &out);
  }
  return out;
}

}  // namespace fabricscope::exporters
