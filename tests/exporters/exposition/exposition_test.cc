#include "exporters/exposition/exposition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "absl/strings/str_split.h"
#include "exporters/exposition/metric_util.h"
#include "prometheus/text_serializer.h"
#include "tests/exporters/test_family.h"

namespace fabricscope::exporters {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

std::string Text(double v) {
  std::string s;
  AppendSampleValue(v, &s);
  return s;
}

// Every value parses back (strtod, as Go's ParseFloat in Prometheus) to exactly the same double:
// integers around 2^53 and up to 2^64, random bit patterns, fractions, tiny and huge numbers.
TEST(SampleValue, EveryValueRoundTripsExactly) {
  std::mt19937_64 rng(20261202);
  std::vector<double> values = {0,
                                -0.0,
                                1,
                                0.1 + 0.2,
                                4294967295.0 * 4,
                                9007199254740993.0,  // 2^53 + 1 (rounds to 2^53)
                                12345678901234568.0,
                                9223372036854775807.0,  // rounds to 2^63
                                18446744073709551615.0,
                                std::numeric_limits<double>::max(),
                                std::numeric_limits<double>::denorm_min(),
                                -1.5e-300};
  for (int i = 0; i < 20000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof(d));
    if (std::isfinite(d)) values.push_back(d);
    values.push_back(static_cast<double>(rng() >> (rng() % 64)));  // integers of every size
    values.push_back(std::uniform_real_distribution<double>(0, 1)(rng));
  }
  for (double v : values) {
    const std::string s = Text(v);
    char* end = nullptr;
    const double back = std::strtod(s.c_str(), &end);
    ASSERT_EQ(*end, '\0') << s;
    ASSERT_EQ(std::memcmp(&back, &v, sizeof(v)) == 0 || (v == 0 && back == 0), true)
        << s << " is not " << v;
  }
  EXPECT_EQ(Text(12345678901234568.0), "12345678901234568");  // 16 digits said ...570
  EXPECT_EQ(Text(4001), "4001");
  EXPECT_EQ(Text(0.25), "0.25");
  EXPECT_EQ(Text(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(Text(18446744073709551615.0), "1.8446744073709552e+19");  // 2^64
  EXPECT_EQ(Text(1e300), "1e+300");
  EXPECT_EQ(Text(1e16), "10000000000000000");
  EXPECT_EQ(Text(1e17), "1e+17");
  EXPECT_EQ(Text(-2.5), "-2.5");
  // Histogram bounds keep prometheus-cpp's (%g) spelling: le="0.0005", not "5e-04".
  EXPECT_EQ(Text(0.0005), "0.0005");
  EXPECT_EQ(Text(1e-05), "1e-05");
  EXPECT_EQ(Text(2.5e-05), "2.5e-05");
  EXPECT_EQ(Text(-0.00012), "-0.00012");
  EXPECT_EQ(Text(123.456), "123.456");
  EXPECT_EQ(Text(std::nan("")), "NaN");
  EXPECT_EQ(Text(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(Text(std::numeric_limits<double>::infinity()), "+Inf");
}

std::vector<std::string> SortedLines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  std::sort(lines.begin(), lines.end());
  return lines;
}

// Wherever printf's %.16g (what prometheus-cpp writes) prints a value exactly and without a
// noisy 16th digit, the text is the same: random values of 1 to 15 digits at every scale from
// 1e-7 to 1e15.
TEST(SampleValue, SameTextAsSixteenDigitPrintfWhereThatIsExact) {
  std::mt19937_64 rng(3);
  int compared = 0;
  for (int i = 0; i < 20000; ++i) {
    const int digits = 1 + static_cast<int>(rng() % 15);
    const double mantissa =
        static_cast<double>(rng() % static_cast<uint64_t>(std::pow(10, digits)));
    const double v = mantissa * std::pow(10.0, static_cast<int>(rng() % 23) - 7 - digits + 1);
    char want[64], fifteen[64];
    std::snprintf(want, sizeof(want), "%.16g", v);
    std::snprintf(fifteen, sizeof(fifteen), "%.15g", v);
    // Where the 16th digit is noise (7.691188100000001e-06 for 7.6911881e-06) prometheus-cpp
    // prints the noise and we the shortest form; compare where it is not.
    if (std::strcmp(want, fifteen) != 0 || std::strtod(want, nullptr) != v) continue;
    ASSERT_EQ(Text(v), want) << v;
    ++compared;
  }
  EXPECT_GT(compared, 10000);  // most values qualify: the test compares, it does not skip
}

// prometheus-cpp's TextSerializer is the reference for everything but number formatting and
// HELP escaping: on values it prints exactly (at most 15 significant digits, no NaN) and plain
// help texts, the two texts hold the same lines (in another order within a histogram: it writes
// _count and _sum first). It writes a help text's newline raw, which ends the HELP line there;
// the format wants \n (checked below).
TEST(TextExposition, SameLinesAsPrometheusCppWhereItsNumbersAreExact) {
  std::mt19937 rng(7);
  std::vector<MetricFamily> families;
  for (MetricType type : {MetricType::Counter, MetricType::Gauge, MetricType::Histogram,
                          MetricType::Summary, MetricType::Untyped}) {
    MetricFamily f =
        TestFamily("fs_test_" + std::to_string(static_cast<int>(type)), "plain help", type);
    for (int i = 0; i < 20; ++i) {
      prometheus::ClientMetric m =
          WithLabels({{"node", "n" + std::to_string(i)}, {"quote", "a \"b\" \\ c\nd"}});
      const double v = static_cast<double>(rng() % 100000) / 8;  // exact in binary and decimal
      m.counter.value = m.gauge.value = m.untyped.value = v;
      uint64_t cum = 0;
      for (double le : {0.001, 0.01, 1.0, std::numeric_limits<double>::infinity()}) {
        cum += rng() % 10;
        m.histogram.bucket.push_back({cum, le});
      }
      m.histogram.sample_count = cum;
      m.histogram.sample_sum = v;
      m.summary.quantile = {{0.5, v}, {0.99, v * 2}};
      m.summary.sample_count = rng() % 1000;
      m.summary.sample_sum = v * 3;
      if (i == 3) m.timestamp_ms = 1'700'000'000'123;
      f.metric.push_back(std::move(m));
    }
    families.push_back(std::move(f));
  }
  std::ostringstream reference;
  prometheus::TextSerializer().Serialize(reference, families);
  const std::string ours = TextExposition(families);
  EXPECT_EQ(SortedLines(ours), SortedLines(reference.str()));
  families[0].help = "help with \\ backslash\nand a newline";
  EXPECT_NE(
      TextExposition(families).find("# HELP fs_test_0 help with \\\\ backslash\\nand a newline\n"),
      std::string::npos);
  EXPECT_NE(ours.find("quote=\"a \\\"b\\\" \\\\ c\\nd\""), std::string::npos);
  EXPECT_NE(ours.find("le=\"+Inf\""), std::string::npos);
}

}  // namespace
}  // namespace fabricscope::exporters
