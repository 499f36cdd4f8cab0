// fabricscope_bench_agent: the agent's own view, its /metrics scraped over HTTP and read back.

#include <httplib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "tests/bench/bench_agent.h"

namespace fabricscope::bench {

// ---- /metrics ------------------------------------------------------------------------------

namespace {

std::string LabelValue(const std::string& line, const std::string& label) {
  const std::string key = label + "=\"";
  const size_t p = line.find(key);
  if (p == std::string::npos) return "";
  const size_t s = p + key.size();
  return line.substr(s, line.find('"', s) - s);
}

double LineValue(const std::string& line) {
  const size_t sp = line.rfind(' ');
  return sp == std::string::npos ? 0 : std::strtod(line.c_str() + sp + 1, nullptr);
}

}  // namespace

Scrape ScrapeMetrics(int port) {
  Scrape s;
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(5, 0);
  auto r = http.Get("/metrics");
  if (!r || r->status != 200) {
    s.error = r ? "HTTP " + std::to_string(r->status) : "no response";
    return s;
  }
  std::istringstream in(r->body);
  std::string line;
  const std::string node = "node=\"bench\"";
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find(node) == std::string::npos) continue;
    if (line.rfind("fabricscope_agent_sample_interval_seconds_bucket{", 0) == 0) {
      const std::string le = LabelValue(line, "le");
      const double bound = le == "+Inf" ? 1e300 : std::strtod(le.c_str(), nullptr);
      s.buckets.emplace_back(bound, static_cast<uint64_t>(LineValue(line)));
    } else if (line.rfind("fabricscope_agent_sample_interval_seconds_count{", 0) == 0) {
      s.count = static_cast<uint64_t>(LineValue(line));
    } else if (line.rfind("fabricscope_agent_sample_interval_seconds_sum{", 0) == 0) {
      s.sum = LineValue(line);
    } else if (line.rfind("fabricscope_agent_sampler_overruns_total{", 0) == 0) {
      s.overruns = LineValue(line);
    } else if (line.rfind("fabricscope_agent_ring_dropped_samples_total{", 0) == 0) {
      s.ring_drops = LineValue(line);
    } else if (line.rfind("fabricscope_agent_group_resolution_seconds{", 0) == 0) {
      s.resolution[LabelValue(line, "group")] = LineValue(line);
    } else if (line.rfind("fabricscope_agent_read_cost_seconds{", 0) == 0) {
      s.read_cost[LabelValue(line, "device")] = LineValue(line);
    }
  }
  std::sort(s.buckets.begin(), s.buckets.end());
  s.ok = s.count > 0;
  if (!s.ok) s.error = "no fabricscope_agent_sample_interval_seconds for node bench yet";
  return s;
}

// The bucket holding quantile q, as the agent's status line computes it: "<=B us".
std::string BucketQuantile(const Scrape& s, double q) {
  if (s.count == 0) return "-";
  const double target = q * static_cast<double>(s.count);
  for (size_t i = 0; i < s.buckets.size(); ++i) {
    if (static_cast<double>(s.buckets[i].second) >= target) {
      if (s.buckets[i].first >= 1e300) {
        return i > 0 ? ">" + Us(s.buckets[i - 1].first * 1e9) + " us" : "+Inf";
      }
      return "<=" + Us(s.buckets[i].first * 1e9) + " us";
    }
  }
  return "-";
}

uint64_t CountAbove(const Scrape& s, double bound) {
  uint64_t at_or_below = 0;
  for (const auto& [le, cum] : s.buckets) {
    if (le <= bound + 1e-12) at_or_below = cum;
  }
  return s.count - at_or_below;
}

}  // namespace fabricscope::bench
