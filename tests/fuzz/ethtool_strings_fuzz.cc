// An ETH_SS_STATS string set as a driver fills it (collectors::StringSetNames: 32-byte fields,
// NUL-padded or not), and what the agent does with each name: the default selection, the
// per-priority split and the counter-meaning lookup. No input may crash or read past the set.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectors/counter_meaning.h"
#include "collectors/ethtool.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> out;
  std::string set;
  for (const char* n : {"rx_packets", "rx_discards_phy", "rx_prio3_pause_duration",
                        "tx_prio3_pause", "rx_prio0_bytes", "a_name_of_exactly_32_bytes_long!"}) {
    std::string field(32, '\0');
    std::memcpy(field.data(), n, std::min<size_t>(32, std::strlen(n)));
    set += field;
  }
  out.push_back(set);
  out.push_back(std::string(32, 'x'));
  return out;
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabricscope::collectors;
  const uint32_t count = static_cast<uint32_t>(size / 32);
  // An exact copy of count x 32 bytes, so that ASan sees a read past the set.
  std::vector<unsigned char> set(data, data + size_t{count} * 32);
  const std::vector<std::string> names = StringSetNames(set.data(), count);
  fabricscope::testing::FuzzCheck(names.size() == count, "one name per field");
  for (const std::string& n : names) {
    fabricscope::testing::FuzzCheck(n.size() <= 32, "a name fits its field");
    IsDefaultRoceStat(n);
    ParsePriorityStat(n);
    MeaningOf("ethtool", n);
  }
  return 0;
}
