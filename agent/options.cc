#include "agent/options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collectors/common/label_check.h"
#include "collectors/common/stream_auth.h"
#include "collectors/common/web_config.h"
#include "collectors/sysfs_ports.h"

namespace fabricscope::agent {

absl::StatusOr<std::map<std::string, uint64_t>> ParseLineRateList(const std::string& text) {
  std::map<std::string, uint64_t> out;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("line rate \"", entry, "\" is not NAME=RATE (e.g. eth0=10gbit)"));
    }
    auto rate = collectors::ParseBitRate(entry.substr(eq + 1));
    if (!rate.ok()) return rate.status();
    out[std::string(entry.substr(0, eq))] = *rate;
  }
  return out;
}

absl::StatusOr<std::vector<PmaTargetOption>> ParsePmaTargets(const std::string& text) {
  std::vector<PmaTargetOption> out;
  for (absl::string_view entry : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry == "local") {
      out.push_back(PmaTargetOption{});
      continue;
    }
    const size_t colon = entry.find(':');
    uint32_t lid = 0, port = 0;
    if (colon == absl::string_view::npos || !absl::SimpleAtoi(entry.substr(0, colon), &lid) ||
        !absl::SimpleAtoi(entry.substr(colon + 1), &port) || lid == 0 || lid >= 0xC000 ||
        port > 254) {
      return absl::InvalidArgumentError(
          absl::StrCat("PerfMgt target \"", entry,
                       "\" is not \"local\" or LID:PORT (unicast LID 1-49151, port 0-254)"));
    }
    out.push_back(PmaTargetOption{static_cast<uint16_t>(lid), static_cast<uint8_t>(port)});
  }
  return out;
}

absl::StatusOr<int64_t> ParseDurationNs(const std::string& text, const std::string& what,
                                        int64_t min_ns, int64_t max_ns) {
  auto ns = common::ParseDurationText(text, min_ns, max_ns);
  if (!ns.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", ns.status().message()));
  return ns;
}

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text, const std::string& what) {
  auto n = common::ParseBytesText(text, 0, ~uint64_t{0});
  if (!n.ok()) return absl::InvalidArgumentError(absl::StrCat(what, " ", n.status().message()));
  return n;
}

absl::Status LoadYamlConfig(const std::string& path, AgentOptions* o) {
  return common::LoadYamlOptions(path, AgentOptionTable(), o);
}

absl::StatusOr<uint32_t> ParseFileMode(const std::string& text) {
  uint32_t mode = 0;
  if (text.empty() || text.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("file mode \"", text, "\" is not octal 0..0777"));
  }
  for (char ch : text) {
    if (ch < '0' || ch > '7') {
      return absl::InvalidArgumentError(
          absl::StrCat("file mode \"", text, "\" is not octal 0..0777"));
    }
    mode = mode * 8 + static_cast<uint32_t>(ch - '0');
  }
  if (mode > 0777) {
    return absl::InvalidArgumentError(absl::StrCat("file mode \"", text, "\" is above 0777"));
  }
  return mode;
}

absl::StatusOr<std::vector<uint32_t>> ParseUidList(const std::string& text) {
  std::vector<uint32_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    uint32_t uid = 0;
    if (!absl::SimpleAtoi(item, &uid)) {
      return absl::InvalidArgumentError(absl::StrCat("uid \"", item, "\" is not a number"));
    }
    out.push_back(uid);
  }
  return out;
}

namespace {

// Utilization buckets per port and direction in one batch (window / series_bucket): 1,000,000
// is 1,000 s windows at the default 1 ms, or 10 s at 10 us; the series holds 32 MB per port
// (utilization_series.cc: a double and an int64 per bucket and direction), and a batch carries
// 2 MB per port (one byte per bucket and direction).
constexpr int64_t kMaxSeriesBuckets = 1'000'000;
// Flight-recorder samples per port (seconds / sample_period): 600 s at 100 us; 300 MB per port
// (agent/flight_recorder.h: 40 bytes a sample, 1.25 x the samples).
constexpr uint64_t kMaxFlightSamples = 6'000'000;

// Options whose product sizes memory: allowed one by one, too big together.
absl::Status CheckSizes(const AgentOptions& o) {
  // Every batch carries window / series_bucket values per port and direction, rounded up.
  const int64_t buckets = (o.window_ns + o.series_bucket_ns - 1) / o.series_bucket_ns;
  if (buckets > kMaxSeriesBuckets) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--window / --series-bucket gives ", buckets,
        " utilization buckets per port and direction in every batch; at most ", kMaxSeriesBuckets,
        " (e.g. --series-bucket=",
        ((o.window_ns + kMaxSeriesBuckets - 1) / kMaxSeriesBuckets + 999) / 1000, "us or more)"));
  }
  const double recorded = o.flight_recorder_seconds * 1e9 / static_cast<double>(o.sample_period_ns);
  if (recorded > static_cast<double>(kMaxFlightSamples)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--flight-recorder-seconds=", o.flight_recorder_seconds, " at --sample-period=",
        o.sample_period_ns / 1000, "us keeps ", static_cast<uint64_t>(recorded),
        " samples per port; at most ", kMaxFlightSamples, " (about 300 MB per port)"));
  }
  return absl::OkStatus();
}

}  // namespace

ThreadSched SamplerSchedOf(const AgentOptions& o) {
  return ThreadSched{o.sampler_cpu, ParseSamplerPriority(o.sampler_priority).value_or(0)};
}

absl::Status ValidateOptions(const AgentOptions& o) {
  auto check = [](const MicroburstThresholds& t, const std::string& where) -> absl::Status {
    if (!(t.enter > 0 && t.enter <= 10 && t.exit > 0 && t.exit <= t.enter)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": microburst thresholds need 0 < exit <= enter <= 10 (got enter ",
                       t.enter, ", exit ", t.exit, ")"));
    }
    return absl::OkStatus();
  };
  if (auto s = check(o.thresholds, "microburst"); !s.ok()) return s;
  for (const auto& [name, t] : o.port_thresholds) {
    if (auto s = check(t, "microburst.ports." + name); !s.ok()) return s;
  }
  if (absl::Status s = common::CheckOptionBounds(AgentOptionTable(), o); !s.ok()) return s;
  if (o.window_ns < 10 * o.sample_period_ns) {
    return absl::InvalidArgumentError("window must be at least 10 sample periods");
  }
  if (o.slow_sample_period_ns < o.sample_period_ns) {
    return absl::InvalidArgumentError(
        "slow sample period must not be shorter than the sample period");
  }
  if (o.series_bucket_ns > o.window_ns) {
    return absl::InvalidArgumentError("series bucket must be 10us..window");
  }
  if (absl::Status s = CheckSizes(o); !s.ok()) return s;
  if (auto fifo = ParseSamplerPriority(o.sampler_priority); !fifo.ok()) return fifo.status();
  if (!o.node.empty()) {
    if (absl::Status s = common::CheckLabelValue(o.node, common::kMaxNodeNameBytes, "--node");
        !s.ok()) {
      return s;
    }
  }
  if (!o.auth_token_file.empty()) {
    if (o.aggregator.empty()) {
      return absl::InvalidArgumentError(
          "--auth-token-file needs --aggregator (standalone mode "
          "streams to no one)");
    }
    auto token = common::ReadTokenFile(o.auth_token_file, "--auth-token-file");
    if (!token.ok()) return token.status();
  }
  if (!o.web_config.empty()) {
    if (auto web = common::LoadWebConfig(o.web_config); !web.ok()) return web.status();
  }
  if (!o.remote_write.urls.empty() && !o.aggregator.empty()) {
    return absl::InvalidArgumentError(
        "--remote-write-url needs standalone mode: with --aggregator the aggregator writes");
  }
  return common::CheckClientTls(o.tls);
}

}  // namespace fabricscope::agent
