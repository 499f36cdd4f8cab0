// tshark (Wireshark's dissector, an independent implementation of the same headers) decodes the
// generated captures; our parser must give the same opcode, PSN and AETH syndrome (and the other
// BTH/AETH fields tshark shows) for every frame. tshark decodes UDP port 4791 as RoCEv2
// ("infiniband") by default; the Decode As rule is passed anyway so a changed default cannot
// silently skip the frames. Skipped when tshark is not installed (deploy/install-deps.sh
// installs it).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "collectors/pcap/packet.h"
#include "tests/collectors/pcap/pcap_test_util.h"
#include "tests/collectors/pcap/roce_scenarios.h"

namespace fabricscope::testing {
namespace {

std::string FindTshark() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin", ':')) {
    const std::string candidate = std::string(dir) + "/tshark";
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// The fields tshark prints, in this order.
const char* const kFields[] = {"frame.number",          "infiniband.bth.opcode",
                               "infiniband.bth.psn",    "infiniband.aeth.syndrome",
                               "infiniband.bth.destqp", "infiniband.bth.p_key",
                               "infiniband.bth.padcnt", "infiniband.aeth.msn"};

// Runs tshark on `file`; one map field -> text per frame. False if tshark failed.
bool RunTshark(const std::string& tshark, const std::string& file,
               std::vector<std::map<std::string, std::string>>* rows) {
  std::string cmd = tshark + " -n -r " + file + " -d udp.port==4791,infiniband -T fields";
  for (const char* f : kFields) cmd += std::string(" -e ") + f;
  cmd += " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return false;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  if (pclose(pipe) != 0) return false;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < std::size(kFields) && i < cols.size(); ++i) row[kFields[i]] = cols[i];
    rows->push_back(std::move(row));
  }
  return true;
}

// tshark prints integers in decimal or 0x-hex depending on the field's display base.
bool ToNumber(const std::string& text, uint64_t* v) {
  if (text.rfind("0x", 0) == 0) {
    return absl::SimpleHexAtoi(absl::string_view(text).substr(2), v);
  }
  return absl::SimpleAtoi(text, v);
}

TEST(TsharkOracle, ParserAgreesOnEveryFrameOfEveryScenario) {
  const std::string tshark = FindTshark();
  if (tshark.empty()) GTEST_SKIP() << "tshark not installed (deploy/install-deps.sh installs it)";
  size_t frames = 0, with_aeth = 0;
  for (const NamedScenario& s : AllScenarios()) {
    SCOPED_TRACE(s.name);
    FakeTree dir;
    const std::string path = dir.Path(s.name + ".pcap");
    ASSERT_TRUE(WriteScenario(path, s.frames));
    std::vector<std::map<std::string, std::string>> rows;
    ASSERT_TRUE(RunTshark(tshark, path, &rows));
    int linktype = 0;
    std::vector<PcapRecord> records;
    ASSERT_TRUE(ReadPcap(path, &linktype, &records));
    ASSERT_EQ(rows.size(), records.size());
    for (size_t i = 0; i < records.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "frame " << i + 1);
      std::map<std::string, std::string>& row = rows[i];
      ASSERT_EQ(row["frame.number"], std::to_string(i + 1));
      pcap::ParsedPacket p;
      ASSERT_EQ(pcap::ParseFrame(linktype, records[i].data.data(),
                                 static_cast<uint32_t>(records[i].data.size()), records[i].wire_len,
                                 records[i].ts_ns, &p),
                pcap::ParseResult::kOk);
      ASSERT_TRUE(p.roce);
      uint64_t v = 0;
      ASSERT_TRUE(ToNumber(row["infiniband.bth.opcode"], &v)) << row["infiniband.bth.opcode"];
      EXPECT_EQ(v, p.bth_opcode);
      ASSERT_TRUE(ToNumber(row["infiniband.bth.psn"], &v)) << row["infiniband.bth.psn"];
      EXPECT_EQ(v, p.bth_psn);
      ASSERT_TRUE(ToNumber(row["infiniband.bth.destqp"], &v));
      EXPECT_EQ(v, p.bth_dest_qp);
      ASSERT_TRUE(ToNumber(row["infiniband.bth.p_key"], &v));
      EXPECT_EQ(v, p.bth_pkey);
      ASSERT_TRUE(ToNumber(row["infiniband.bth.padcnt"], &v));
      EXPECT_EQ(v, p.bth_pad);
      // tshark shows an AETH exactly where our parser finds one.
      EXPECT_EQ(!row["infiniband.aeth.syndrome"].empty(), p.has_aeth);
      if (p.has_aeth) {
        ++with_aeth;
        ASSERT_TRUE(ToNumber(row["infiniband.aeth.syndrome"], &v));
        EXPECT_EQ(v, p.aeth_syndrome);
        ASSERT_TRUE(ToNumber(row["infiniband.aeth.msn"], &v));
        EXPECT_EQ(v, p.aeth_msn);
      }
      ++frames;
    }
  }
  EXPECT_GT(frames, 100u);
  EXPECT_GT(with_aeth, 20u);
}

}  // namespace
}  // namespace fabricscope::testing
