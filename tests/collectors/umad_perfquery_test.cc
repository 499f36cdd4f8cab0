#include "collectors/umad_perfquery.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace fabricscope::collectors {
namespace {

// Answers from memory, per LID; records what it was asked.
class FakeQuerier final : public PerfMgtQuerier {
 public:
  struct Node {
    absl::StatusOr<PerfMgtClassPortInfo> cpi = PerfMgtClassPortInfo{};
    absl::StatusOr<PortCountersSample> pc = PortCountersSample{};
    absl::StatusOr<PortCountersExtendedSample> ext = PortCountersExtendedSample{};
  };

  const std::string& ca_name() const override { return ca_; }
  int port() const override { return 1; }
  absl::StatusOr<PerfMgtClassPortInfo> GetClassPortInfo(uint16_t lid) override {
    return nodes[lid].cpi;
  }
  absl::StatusOr<PortCountersSample> GetPortCounters(uint16_t lid, uint8_t sel) override {
    asked.push_back({lid, sel});
    return nodes[lid].pc;
  }
  absl::StatusOr<PortCountersExtendedSample> GetPortCountersExtended(uint16_t lid,
                                                                     uint8_t sel) override {
    asked.push_back({lid, sel});
    return nodes[lid].ext;
  }

  std::map<uint16_t, Node> nodes;
  std::vector<std::pair<uint16_t, uint8_t>> asked;

 private:
  std::string ca_ = "mlx5_0";
};

PerfMgtClassPortInfo Caps(uint16_t mask) {
  PerfMgtClassPortInfo c;
  c.base_version = 1;
  c.class_version = 1;
  c.capability_mask = mask;
  return c;
}

PortCountersSample DistinctCounters() {
  PortCountersSample s;
  s.symbol_error = 101;
  s.link_error_recovery = 102;
  s.link_downed = 103;
  s.port_rcv_errors = 104;
  s.port_rcv_remote_physical_errors = 105;
  s.port_rcv_switch_relay_errors = 106;
  s.port_xmit_discards = 107;
  s.port_xmit_constraint_errors = 108;
  s.port_rcv_constraint_errors = 109;
  s.local_link_integrity_errors = 10;
  s.excessive_buffer_overrun_errors = 11;
  s.vl15_dropped = 112;
  s.port_xmit_data = 113;
  s.port_rcv_data = 114;
  s.port_xmit_packets = 115;
  s.port_rcv_packets = 116;
  s.port_xmit_wait = 117;
  return s;
}

PortCountersExtendedSample DistinctExtended() {
  PortCountersExtendedSample s;
  s.port_xmit_data = 1ull << 40;
  s.port_rcv_data = (1ull << 40) + 1;
  s.port_xmit_packets = (1ull << 40) + 2;
  s.port_rcv_packets = (1ull << 40) + 3;
  s.port_unicast_xmit_packets = (1ull << 40) + 4;
  s.port_unicast_rcv_packets = (1ull << 40) + 5;
  s.port_multicast_xmit_packets = (1ull << 40) + 6;
  s.port_multicast_rcv_packets = (1ull << 40) + 7;
  return s;
}

std::map<std::string, uint64_t> SampleByName(UmadPerfQueryCollector& c, size_t port, uint64_t tick,
                                             std::vector<ReadStatus>* st) {
  std::vector<uint64_t> values(c.counter_count(), 0);
  st->assign(c.counter_count(), ReadStatus::kNotRead);
  c.Sample(tick, values.data(), st->data());
  std::map<std::string, uint64_t> out;
  size_t i = 0;
  for (size_t p = 0; p < c.ports().size(); ++p) {
    for (const CounterDescriptor& d : c.ports()[p].counters) {
      if (p == port) out[d.name] = values[i];
      ++i;
    }
  }
  return out;
}

TEST(UmadPerfQueryCollectorTest, ExtendedPmaGives64BitWrappingDataAndSaturatingErrors) {
  auto q = std::make_unique<FakeQuerier>();
  q->nodes[0].cpi = Caps(kPmaCapExtendedWidth);
  auto c = UmadPerfQueryCollector::Create(std::move(q), {}, 100);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ((*c)->ports().size(), 1u);
  const PortDescriptor& p = (*c)->ports()[0];
  EXPECT_EQ(p.device, "mlx5_0");
  EXPECT_EQ(p.port, 1u);
  EXPECT_TRUE(p.rdma);
  EXPECT_EQ(p.link_layer, LinkLayer::kInfiniBand);
  ASSERT_EQ(p.counters.size(), 8u + 13u);
  EXPECT_EQ((*c)->counter_count(), 21u);

  std::map<std::string, const CounterDescriptor*> by_name;
  for (const CounterDescriptor& d : p.counters) {
    by_name[d.name] = &d;
    EXPECT_EQ(d.group, "pma");
    EXPECT_EQ(d.tick_divisor, 100u);
    EXPECT_TRUE(d.path.empty());
  }
  const CounterDescriptor& xd = *by_name.at("port_xmit_data");
  EXPECT_EQ(xd.spec.width_bits, 64);
  EXPECT_EQ(xd.spec.behavior, CounterBehavior::kWrapping);
  EXPECT_EQ(xd.spec.scale, 4u);
  EXPECT_EQ(xd.role, CounterRole::kTransmitBytes);
  EXPECT_EQ(by_name.at("port_rcv_data")->role, CounterRole::kReceiveBytes);
  EXPECT_EQ(by_name.at("port_rcv_data")->spec.scale, 4u);
  EXPECT_EQ(by_name.at("port_xmit_packets")->spec.scale, 1u);
  EXPECT_EQ(by_name.at("multicast_rcv_packets")->spec.width_bits, 64);
  // PortXmitWait read over MADs means what the sysfs file means: credit-wait ticks, which the
  // derived signals and the collective join read (it was left without a meaning before).
  EXPECT_EQ(by_name.at("port_xmit_wait")->meaning, Meaning::kTransmitWait);
  EXPECT_EQ(by_name.at("symbol_error")->meaning, Meaning::kNone);

  const std::map<std::string, uint8_t> error_widths = {
      {"symbol_error", 16},
      {"link_error_recovery", 8},
      {"link_downed", 8},
      {"port_rcv_errors", 16},
      {"port_rcv_remote_physical_errors", 16},
      {"port_rcv_switch_relay_errors", 16},
      {"port_xmit_discards", 16},
      {"port_xmit_constraint_errors", 8},
      {"port_rcv_constraint_errors", 8},
      {"local_link_integrity_errors", 4},
      {"excessive_buffer_overrun_errors", 4},
      {"VL15_dropped", 16},
  };
  for (const auto& [name, width] : error_widths) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name[name]->spec.width_bits, width) << name;
    EXPECT_EQ(by_name[name]->spec.behavior, CounterBehavior::kSaturating) << name;
    EXPECT_EQ(by_name[name]->role, CounterRole::kError) << name;
  }
  EXPECT_EQ(by_name.at("port_xmit_wait")->spec.width_bits, 32);
  EXPECT_EQ(by_name.at("port_xmit_wait")->role, CounterRole::kOther);
}

TEST(UmadPerfQueryCollectorTest, NoIetfPmaHasNoUnicastMulticastCounters) {
  auto q = std::make_unique<FakeQuerier>();
  q->nodes[0].cpi = Caps(kPmaCapExtendedWidthNoIetf);
  auto c = UmadPerfQueryCollector::Create(std::move(q), {}, 1);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->counter_count(), 4u + 13u);
  for (const CounterDescriptor& d : (*c)->ports()[0].counters) {
    EXPECT_EQ(d.name.find("cast_"), std::string::npos) << d.name;
  }
}

TEST(UmadPerfQueryCollectorTest, PmaWithoutExtendedCountersFallsBackTo32BitSaturating) {
  auto q = std::make_unique<FakeQuerier>();
  q->nodes[0].cpi = Caps(0);
  std::vector<std::string> notes;
  auto c = UmadPerfQueryCollector::Create(std::move(q), {}, 1, &notes);
  ASSERT_TRUE(c.ok());
  const CounterDescriptor& xd = (*c)->ports()[0].counters[0];
  EXPECT_EQ(xd.name, "port_xmit_data");
  EXPECT_EQ(xd.spec.width_bits, 32);
  EXPECT_EQ(xd.spec.behavior, CounterBehavior::kSaturating);
  EXPECT_EQ(xd.spec.scale, 4u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("no PortCountersExtended"), std::string::npos);

  std::vector<ReadStatus> st;
  const auto v = SampleByName(**c, 0, 0, &st);
  for (ReadStatus s : st) EXPECT_EQ(s, ReadStatus::kOk);
  EXPECT_EQ(v.at("port_xmit_data"), 0u);
}

TEST(UmadPerfQueryCollectorTest, SampleMapsEveryFieldToItsCounter) {
  auto q = std::make_unique<FakeQuerier>();
  q->nodes[0].cpi = Caps(kPmaCapExtendedWidth);
  q->nodes[0].pc = DistinctCounters();
  q->nodes[0].ext = DistinctExtended();
  auto c = UmadPerfQueryCollector::Create(std::move(q), {}, 1);
  ASSERT_TRUE(c.ok());
  std::vector<ReadStatus> st;
  const auto v = SampleByName(**c, 0, 7, &st);
  for (ReadStatus s : st) EXPECT_EQ(s, ReadStatus::kOk);
  const uint64_t b = 1ull << 40;
  EXPECT_EQ(v.at("port_xmit_data"), b);
  EXPECT_EQ(v.at("port_rcv_data"), b + 1);
  EXPECT_EQ(v.at("port_xmit_packets"), b + 2);
  EXPECT_EQ(v.at("port_rcv_packets"), b + 3);
  EXPECT_EQ(v.at("unicast_xmit_packets"), b + 4);
  EXPECT_EQ(v.at("unicast_rcv_packets"), b + 5);
  EXPECT_EQ(v.at("multicast_xmit_packets"), b + 6);
  EXPECT_EQ(v.at("multicast_rcv_packets"), b + 7);
  EXPECT_EQ(v.at("symbol_error"), 101u);
  EXPECT_EQ(v.at("link_error_recovery"), 102u);
  EXPECT_EQ(v.at("link_downed"), 103u);
  EXPECT_EQ(v.at("port_rcv_errors"), 104u);
  EXPECT_EQ(v.at("port_rcv_remote_physical_errors"), 105u);
  EXPECT_EQ(v.at("port_rcv_switch_relay_errors"), 106u);
  EXPECT_EQ(v.at("port_xmit_discards"), 107u);
  EXPECT_EQ(v.at("port_xmit_constraint_errors"), 108u);
  EXPECT_EQ(v.at("port_rcv_constraint_errors"), 109u);
  EXPECT_EQ(v.at("local_link_integrity_errors"), 10u);
  EXPECT_EQ(v.at("excessive_buffer_overrun_errors"), 11u);
  EXPECT_EQ(v.at("VL15_dropped"), 112u);
  EXPECT_EQ(v.at("port_xmit_wait"), 117u);
}

TEST(UmadPerfQueryCollectorTest, OnlyDueTicksQueryThePma) {
  auto q = std::make_unique<FakeQuerier>();
  FakeQuerier* fq = q.get();
  q->nodes[0].cpi = Caps(kPmaCapExtendedWidth);
  auto c = UmadPerfQueryCollector::Create(std::move(q), {}, 10);
  ASSERT_TRUE(c.ok());
  std::vector<ReadStatus> st;
  SampleByName(**c, 0, 3, &st);
  for (ReadStatus s : st) EXPECT_EQ(s, ReadStatus::kNotRead);
  EXPECT_TRUE(fq->asked.empty());
  SampleByName(**c, 0, 20, &st);
  EXPECT_EQ(fq->asked.size(), 2u);  // PortCountersExtended + PortCounters
  EXPECT_GT((*c)->ReadCostNs(0), 0.0);
}

TEST(UmadPerfQueryCollectorTest, AFailedQueryMarksOnlyItsCountersAsErrors) {
  auto q = std::make_unique<FakeQuerier>();
  q->nodes[0].cpi = Caps(kPmaCapExtendedWidth);
  q->nodes[0].ext = absl::DeadlineExceededError("no answer");
  q->nodes[0].pc = DistinctCounters();
  auto c = UmadPerfQueryCollector::Create(std::move(q), {}, 1);
  ASSERT_TRUE(c.ok());
  std::vector<ReadStatus> st;
  SampleByName(**c, 0, 0, &st);
  size_t i = 0;
  for (const CounterDescriptor& d : (*c)->ports()[0].counters) {
    const bool from_extended = i < 8;
    EXPECT_EQ(st[i], from_extended ? ReadStatus::kError : ReadStatus::kOk) << d.name;
    ++i;
  }
  EXPECT_EQ((*c)->failed_queries(), 1u);
}

TEST(UmadPerfQueryCollectorTest, RemoteSwitchPortIsAddressedByLidAndPortSelect) {
  auto q = std::make_unique<FakeQuerier>();
  FakeQuerier* fq = q.get();
  q->nodes[0].cpi = Caps(kPmaCapExtendedWidth);
  q->nodes[12].cpi = Caps(kPmaCapExtendedWidth | kPmaCapAllPortSelect);
  q->nodes[12].pc = DistinctCounters();
  auto c = UmadPerfQueryCollector::Create(
      std::move(q), {PmaTarget{}, PmaTarget{12, 5, ""}, PmaTarget{12, 6, "leaf01"}}, 1);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ((*c)->ports().size(), 3u);
  EXPECT_EQ((*c)->ports()[0].Key(), "mlx5_0:1");
  EXPECT_EQ((*c)->ports()[1].Key(), "lid12:5");
  EXPECT_EQ((*c)->ports()[2].Key(), "leaf01:6");
  std::vector<ReadStatus> st;
  const auto v = SampleByName(**c, 1, 0, &st);
  EXPECT_EQ(v.at("symbol_error"), 101u);
  const std::vector<std::pair<uint16_t, uint8_t>> want = {{0, 0},  {0, 0},  {12, 5},
                                                          {12, 5}, {12, 6}, {12, 6}};
  EXPECT_EQ(fq->asked, want);
}

TEST(UmadPerfQueryCollectorTest, UnreachableTargetsAreDroppedWithANote) {
  auto q = std::make_unique<FakeQuerier>();
  q->nodes[0].cpi = Caps(kPmaCapExtendedWidth);
  q->nodes[40].cpi = absl::DeadlineExceededError("no PerfMgt answer from LID 40");
  std::vector<std::string> notes;
  auto c =
      UmadPerfQueryCollector::Create(std::move(q), {PmaTarget{}, PmaTarget{40, 1, ""}}, 1, &notes);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->ports().size(), 1u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("lid40:1"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("no PerfMgt answer"), std::string::npos) << notes[0];
}

TEST(UmadPerfQueryCollectorTest, NoReachableTargetIsAnErrorWithTheCause) {
  auto q = std::make_unique<FakeQuerier>();
  q->nodes[0].cpi = absl::DeadlineExceededError("no PerfMgt answer");
  auto c = UmadPerfQueryCollector::Create(std::move(q), {}, 1);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(c.status().message().find("mlx5_0:1"), absl::string_view::npos) << c.status();
  EXPECT_EQ(UmadPerfQueryCollector::Create(nullptr, {}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fabricscope::collectors
