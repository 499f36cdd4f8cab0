// Writes packet_fuzz's seed corpus into the directory given as argv[1]: every generated RoCE
// scenario (tests/pcap/roce_scenarios.h) as one input, its frames under each link type.

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/common/pcap_writer.h"
#include "tests/fuzz/packet_fuzz_input.h"
#include "tests/pcap/roce_scenarios.h"

int main(int argc, char** argv) {
  using namespace fabricscope::testing;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  int files = 0;
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
      const std::string path = std::string(argv[1]) + "/" + s.name + "-" + std::to_string(link);
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(input.data()),
                 static_cast<std::streamsize>(input.size()));
      ++files;
    }
  }
  std::printf("%d seeds\n", files);
  return 0;
}
