// packet_fuzz's seeds: every generated RoCE scenario (tests/collectors/pcap/roce_scenarios.h) as one
// input, its frames under each link type (tests/fuzz/packet_fuzz_input.h).

#include <string>
#include <vector>

#include "tests/common/pcap_writer.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/packet_fuzz_input.h"
#include "tests/collectors/pcap/roce_scenarios.h"

namespace fabricscope::testing {

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> out;
  for (const NamedScenario& s : AllScenarios()) {
    for (size_t link = 0; link < kFuzzLinkTypeCount; ++link) {
      Bytes input;
      for (const RoceFrame& f : s.frames) {
        const Bytes ip = RoceIpPacket(f);
        Bytes frame;
        switch (kFuzzLinkTypes[link]) {
          case 1:
            frame = EthernetFrame(ip, EtherTypeOf(ip),
                                  f.vlan >= 0 ? std::vector<int>{f.vlan} : std::vector<int>{});
            break;
          case 113:
            frame = SllFrame(ip, EtherTypeOf(ip));
            break;
          case 276:
            frame = Sll2Frame(ip, EtherTypeOf(ip));
            break;
          default:
            frame = ip;
        }
        input.push_back(static_cast<uint8_t>(link));
        PutBe16(&input, static_cast<uint16_t>(frame.size()));
        input.insert(input.end(), frame.begin(), frame.end());
      }
      out.emplace_back(input.begin(), input.end());
    }
  }
  return out;
}

}  // namespace fabricscope::testing
