// The parsers of single sysfs attribute values and counter names: a counter file's text
// (collectors::ParseCounterText), an RDMA port's rate and width, a netdev's speed, a user's line
// rate, per-priority stat names and the counter-meaning lookup. No input may crash; a value that
// parses must read back the same when printed and parsed again.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/counter.h"
#include "collectors/counter_meaning.h"
#include "collectors/priority_stat.h"
#include "collectors/sysfs_ports.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {

std::vector<std::string> FuzzSeeds() {
  return {"123\n",
          "18446744073709551615\n",
          "N/A (no PMA)\n",
          "  42  \n",
          "-1\n",
          "100 Gb/sec (4X EDR)\n",
          "2.5 Gb/sec (1X SDR)",
          "25000\n",
          "100gbit",
          "400G",
          "rx_prio3_pause_duration",
          "tx_prio7_bytes",
          "ip4InOctets",
          "np_cnp_sent"};
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabricscope::collectors;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  uint64_t v = 0;
  const ReadStatus st = ParseCounterText(text, &v);
  fabricscope::testing::FuzzCheck(
      st == ReadStatus::kOk || st == ReadStatus::kUnavailable || st == ReadStatus::kError,
      "ParseCounterText status");
  if (st == ReadStatus::kOk) {
    uint64_t again = 0;
    fabricscope::testing::FuzzCheck(
        ParseCounterText(absl::StrCat(v, "\n"), &again) == ReadStatus::kOk && again == v,
        "a parsed counter value reads back");
  }
  if (auto r = ParseIbRate(text); r.ok())
    fabricscope::testing::FuzzCheck(*r < (1ull << 62), "rate");
  ParseIbLanes(text);
  ParseNetdevSpeed(text).IgnoreError();
  if (auto r = ParseBitRate(text); r.ok()) {
    fabricscope::testing::FuzzCheck(*r >= 1 && *r <= 1'000'000'000'000'000ull, "bit rate bounds");
  }
  if (auto p = ParsePriorityStat(text)) {
    fabricscope::testing::FuzzCheck(p->priority <= 7 && !p->kind.empty(), "priority stat");
  }
  for (const char* group : {"counters", "hw_counters", "ethtool", "statistics", "tcp"}) {
    MeaningOf(group, text);
  }
  return 0;
}
