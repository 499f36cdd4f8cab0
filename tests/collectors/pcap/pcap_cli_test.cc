// fabricscope-pcap as a user runs it: a capture file in, a table or one JSON object out, exit 3
// for a capture cut short (reported up to the cut), 2 for anything that is not a usable capture,
// 1 for what Abseil's flag parser rejects.
#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tests/collectors/pcap/roce_scenarios.h"
#include "tests/common/fake_tree.h"
#include "tests/common/pcap_writer.h"
#include "tests/common/subprocess.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

struct Result {
  int status;
  std::string output;
};

Result RunPcap(std::vector<std::string> args) {
  args.insert(args.begin(), FABRICSCOPE_PCAP_BIN);
  Subprocess p(std::move(args));
  if (!p.Start()) return {-1, ""};
  p.WaitForLine(std::regex("(?!)"), 20s);  // until EOF
  const int status = p.Wait();
  return {status, p.Output()};
}

double Number(const google::protobuf::Struct& s, const std::string& obj, const std::string& key) {
  return s.fields().at(obj).struct_value().fields().at(key).number_value();
}

TEST(PcapCli, JsonCountsOfAGoBackNCapture) {
  FakeTree t;
  const std::string file = t.Path("gbn.pcap");
  ASSERT_TRUE(WriteScenario(file, GoBackNScenario()));
  Result r = RunPcap({file, "--json"});
  ASSERT_EQ(r.status, 0) << r.output;
  google::protobuf::Struct s;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.output, &s).ok()) << r.output;
  // GoBackNScenario: 7 requests before the NAK path (1000,1001,1003,1004 then 1002..1006 again
  // = 9 data packets), 3 ACK/NAK frames.
  EXPECT_EQ(s.fields().at("packets").number_value(), 12);
  EXPECT_EQ(Number(s, "roce", "data_packets"), 9);
  EXPECT_EQ(Number(s, "roce", "naks_sequence_error"), 1);
  EXPECT_EQ(Number(s, "roce", "retransmitted_packets"), 3);  // 1002 (gap), 1003, 1004 again
  EXPECT_EQ(Number(s, "roce", "psn_gap_packets"), 1);
  EXPECT_EQ(Number(s, "roce", "rnr_naks"), 0);
  EXPECT_EQ(Number(s, "roce", "cnps"), 0);
  EXPECT_EQ(Number(s, "roce", "ecn_ce_packets"), 0);
  for (const char* k :
       {"retransmissions", "fast_retransmissions", "out_of_order", "duplicate_acks"}) {
    EXPECT_EQ(Number(s, "tcp", k), 0) << k;
  }
  const auto& flows = s.fields().at("flows").list_value();
  ASSERT_EQ(flows.values_size(), 2);  // the data flow and its ACK flow
  const auto& data = flows.values(0).struct_value().fields();
  EXPECT_EQ(data.at("proto").string_value(), "rocev2");
  EXPECT_EQ(data.at("retransmitted_packets").number_value(), 3);
}

TEST(PcapCli, TableNamesTheFlowsAndTheirLoss) {
  FakeTree t;
  const std::string file = t.Path("loss.pcap");
  ASSERT_TRUE(WriteScenario(file, LossScenario()));
  Result r = RunPcap({file});
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("7 packets"));
  EXPECT_THAT(r.output, HasSubstr("3 lost upstream (PSN gaps)"));
  EXPECT_THAT(r.output, HasSubstr("rocev2"));
}

TEST(PcapCli, UnusableFilesExitTwoWithOneLine) {
  FakeTree t;
  t.Write("notes.txt", "this is not a capture\n");
  t.Write("empty.pcap", "");
  for (const std::string& f :
       {t.Path("missing.pcap"), t.Path("notes.txt"), t.Path("empty.pcap"), t.root()}) {
    Result r = RunPcap({f});
    EXPECT_EQ(r.status, 2) << f << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("fabricscope-pcap: ")) << f;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  EXPECT_EQ(RunPcap({}).status, 2);
}

// What --help says about exit statuses is what happens: --help exits 0, usage errors our code
// detects exit 2, the flag parser's (unknown flag, bad flag value) exit 1.
TEST(PcapCli, ExitStatusesAreTheOnesHelpStates) {
  Result help = RunPcap({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.output, HasSubstr("Exit status: 0 analyzed; 3 a capture cut short"));
  EXPECT_THAT(help.output, HasSubstr("--top"));
  EXPECT_THAT(help.output, HasSubstr("(default: 30)"));
  EXPECT_EQ(help.output.rfind("fabricscope-pcap: fabricscope-pcap", 0), std::string::npos);
  // A missing file would exit 2: 1 shows the flag parser stopped first.
  EXPECT_EQ(RunPcap({"--no-such-flag", "missing.pcap"}).status, 1);
  EXPECT_EQ(RunPcap({"--top=x", "missing.pcap"}).status, 1);
  EXPECT_EQ(RunPcap({"a.pcap", "b.pcap"}).status, 2);
}

TEST(PcapCli, TruncatedAndGarbageFramesAreCountedNotFatal) {
  FakeTree t;
  const std::string file = t.Path("bad.pcap");
  {
    PcapWriter w(file);
    const Bytes good = RoceEthernetFrame(Req(kQ, kR, kQpR, 5));
    w.Write(good, 1000);
    w.Write(Bytes(good.begin(), good.begin() + 30), 2000);  // cut inside the IP header
    w.Write(Bytes(60, 0xAB), 3000);                         // garbage
  }
  Result r = RunPcap({file, "--json"});
  ASSERT_EQ(r.status, 0) << r.output;
  google::protobuf::Struct s;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.output, &s).ok());
  EXPECT_EQ(s.fields().at("packets").number_value(), 3);
  EXPECT_EQ(s.fields().at("parsed_packets").number_value(), 1);
  EXPECT_EQ(Number(s, "skipped", "truncated"), 1);
  EXPECT_EQ(Number(s, "skipped", "not_ip"), 1);
}

// A capture cut short (tcpdump killed mid-write: the last record's bytes are missing) is
// reported up to the frame before the cut, with a warning that names the frame, and exit 3.
TEST(PcapCli, CaptureCutShortReportsWhatItReadAndExitsThree) {
  FakeTree t;
  const std::string file = t.Path("cut.pcap");
  ASSERT_TRUE(WriteScenario(file, GoBackNScenario()));  // 12 frames
  const uintmax_t size = std::filesystem::file_size(file);
  std::filesystem::resize_file(file, size - 20);  // into frame 12's bytes
  Result r = RunPcap({file, "--json"});
  ASSERT_EQ(r.status, 3) << r.output;
  const std::string json = r.output.substr(0, r.output.find("fabricscope-pcap: warning"));
  google::protobuf::Struct s;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &s).ok()) << r.output;
  EXPECT_EQ(s.fields().at("packets").number_value(), 11);
  EXPECT_EQ(s.fields().at("stopped_at_frame").number_value(), 12);
  EXPECT_THAT(s.fields().at("error").string_value(), HasSubstr("truncated"));
  EXPECT_EQ(Number(s, "roce", "naks_sequence_error"), 1);  // the NAK came before the cut
  EXPECT_THAT(r.output, HasSubstr("warning: the capture stops at frame 12"));
  Result table = RunPcap({file});
  EXPECT_EQ(table.status, 3);
  EXPECT_THAT(table.output, HasSubstr("11 packets"));
  // A whole capture is still 0.
  ASSERT_TRUE(WriteScenario(file, GoBackNScenario()));
  EXPECT_EQ(RunPcap({file}).status, 0);
}

}  // namespace
}  // namespace fabricscope::testing
