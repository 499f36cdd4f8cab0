#include "exporters/analysis/diagnosis.h"

#include <cmath>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "exporters/analysis/cross_rank.h"
#include "exporters/exposition/cross_rank_render.h"
#include "gtest/gtest.h"
#include "tests/common/readme.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {
namespace {

constexpr int64_t kEpoch = 1'700'000'000'000'000'000;  // Unix ns
constexpr uint64_t kDiagnosisComm = 0x00c0ffee00000002ULL;

// The names the tests' instances carry, interned as CrossRankAnalysis does.
Name N(const std::string& s) {
  static NameTable* const names = new NameTable(1024);
  return *names->Intern(s);
}

// The causes are declared once: every value of the proto enum but UNSPECIFIED has one row of
// common::CollectiveCauses(), with a distinct label, and README's table is the one it renders.
TEST(CollectiveCauseTable, EveryCauseOnceAndReadmeRendersIt) {
  std::set<std::string> names;
  for (int c = v1::CollectiveCause_MIN; c <= v1::CollectiveCause_MAX; ++c) {
    if (!v1::CollectiveCause_IsValid(c) || c == v1::COLLECTIVE_CAUSE_UNSPECIFIED) continue;
    const auto cause = static_cast<v1::CollectiveCause>(c);
    size_t rows = 0;
    for (const common::CollectiveCauseInfo& i : common::CollectiveCauses()) {
      rows += i.cause == cause;
    }
    EXPECT_EQ(rows, 1u) << c;
    EXPECT_TRUE(names.insert(common::CollectiveCauseName(cause)).second) << c;
  }
  EXPECT_EQ(names.size(), common::CollectiveCauses().size());
  EXPECT_STREQ(common::CollectiveCauseName(v1::COLLECTIVE_CAUSE_COMPUTE_STRAGGLER),
               "compute_straggler");
  EXPECT_EQ(testing::GuideBlock("exporters/README.md", "causes"), common::CollectiveCauseMarkdown())
      << "exporters/README.md's cause table differs from common::CollectiveCauses(); replace it "
         "with:\n"
      << common::CollectiveCauseMarkdown();
}

TEST(BinomialUpperTailTest, ExactSmallCases) {
  EXPECT_NEAR(BinomialUpperTail(5, 5, 0.25), std::pow(0.25, 5), 1e-15);
  EXPECT_NEAR(BinomialUpperTail(16, 15, 0.5), 17.0 / 65536.0, 1e-15);
  EXPECT_NEAR(BinomialUpperTail(4, 1, 0.25), 1 - std::pow(0.75, 4), 1e-12);
  EXPECT_EQ(BinomialUpperTail(10, 0, 0.3), 1.0);
  EXPECT_EQ(BinomialUpperTail(10, 11, 0.3), 0.0);
}

// `nranks` ranks of one instance: every rank starts within +-jitter_ms of t, rank `late` (if
// >= 0) late_ms after it; all end together at t + duration (the others wait for the last).
std::vector<RankArrival> Instance(std::mt19937& rng, int nranks, int64_t t, double jitter_ms,
                                  int late, double late_ms, double duration_ms) {
  std::uniform_real_distribution<double> j(-jitter_ms, jitter_ms);
  std::vector<RankArrival> v;
  for (int r = 0; r < nranks; ++r) {
    RankArrival a;
    a.node = N(absl::StrCat("n", r));
    a.rank = r;
    a.start_unix_ns = t + static_cast<int64_t>((j(rng) + (r == late ? late_ms : 0)) * 1e6);
    a.end_unix_ns = t + static_cast<int64_t>(duration_ms * 1e6);
    v.push_back(a);
  }
  return v;
}

// Seeded schedules: a rank 6-20% of the step late is named in >= 90% of the instances after
// the first few (the test's minimum), never another rank; clean runs of 200 instances and a
// 2% straggler (below the 5% rule) name nobody.
TEST(DiagnosisTest, PersistentStragglerIsNamedAndCleanRunsAreNot) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    const int nranks = 2 + static_cast<int>(seed % 7);  // 2..8
    const double late_ratio = 0.06 + 0.01 * (seed % 15);
    Diagnosis d;
    int named = 0, wrong = 0;
    const int n = 64;
    for (int i = 0; i < n; ++i) {
      const auto ranks =
          Instance(rng, nranks, kEpoch + i * 300 * kMs, 2.0, 1, late_ratio * 225, 225);
      const StragglerVerdict v = d.ObserveArrivals(kDiagnosisComm, N("AllReduce"), 1 << 26, ranks);
      if (v.index == 1) {
        ++named;
        EXPECT_GE(v.lateness_ratio, 0.05);
        EXPECT_LE(v.p_value, 1e-3);
        EXPECT_NE(v.evidence.find("arrived last in"), std::string::npos) << v.evidence;
      } else if (v.index >= 0) {
        ++wrong;
      }
    }
    EXPECT_EQ(wrong, 0) << "seed " << seed;
    // 2 ranks need 10 of 10 instances to pass the test, 4 ranks 5 of 5.
    EXPECT_GE(named, (n - 10) * 9 / 10) << "seed " << seed << " nranks " << nranks;

    Diagnosis clean;
    for (int i = 0; i < 200; ++i) {
      const auto ranks = Instance(rng, nranks, kEpoch + i * 300 * kMs, 3.0, -1, 0, 225);
      EXPECT_LT(clean.ObserveArrivals(kDiagnosisComm, N("AllReduce"), 1 << 26, ranks).index, 0)
          << "seed " << seed << " instance " << i;
    }
    Diagnosis small;
    for (int i = 0; i < 100; ++i) {
      const auto ranks = Instance(rng, nranks, kEpoch + i * 300 * kMs, 0.5, 0, 0.02 * 225, 225);
      EXPECT_LT(small.ObserveArrivals(kDiagnosisComm, N("AllReduce"), 1 << 26, ranks).index, 0);
    }
  }
}

// A rank that starts late only because its previous collective ended late (a slow link feeds
// it last) computes no longer than the others: measured from its own previous collective it is
// not late, so it is not a compute straggler. One that also computes 20 ms longer is.
TEST(DiagnosisTest, LateBecauseItsLastCollectiveEndedLateIsNotAStraggler) {
  for (const double extra_compute_ms : {0.0, 20.0}) {
    std::mt19937 rng(9);
    Diagnosis d;
    int named = 0;
    int64_t end_of_rank3 = 0;
    for (int i = 0; i < 40; ++i) {
      auto ranks = Instance(rng, 4, kEpoch + i * 300 * kMs, 1.0, -1, 0, 200);
      if (i > 0) {
        // The others compute 100 ms between collectives; rank 3 as long (+ extra) from its
        // own end, 20 ms after theirs.
        ranks[3].start_unix_ns =
            end_of_rank3 + 100 * kMs + static_cast<int64_t>(extra_compute_ms * 1e6);
      }
      ranks[3].end_unix_ns += 20 * kMs;
      end_of_rank3 = ranks[3].end_unix_ns;
      named += d.ObserveArrivals(kDiagnosisComm, N("AllReduce"), 1 << 26, ranks).index == 3;
    }
    if (extra_compute_ms == 0) {
      EXPECT_EQ(named, 0);
    } else {
      EXPECT_GE(named, 30);
    }
  }
}

// The history is kept per size class: a straggler in the 64 MiB all-reduces says nothing
// about the 4 KiB ones.
TEST(DiagnosisTest, HistoryIsPerSizeClass) {
  std::mt19937 rng(3);
  Diagnosis d;
  for (int i = 0; i < 10; ++i) {
    d.ObserveArrivals(kDiagnosisComm, N("AllReduce"), 1 << 26,
                      Instance(rng, 4, kEpoch + i * 300 * kMs, 1, 3, 30, 225));
  }
  const StragglerVerdict big =
      d.ObserveArrivals(kDiagnosisComm, N("AllReduce"), 1 << 26,
                        Instance(rng, 4, kEpoch + 3000 * kMs, 1, 3, 30, 225));
  EXPECT_EQ(big.index, 3);
  const StragglerVerdict small = d.ObserveArrivals(
      kDiagnosisComm, N("AllReduce"), 4096, Instance(rng, 4, kEpoch + 3100 * kMs, 1, 3, 30, 225));
  EXPECT_EQ(small.index, -1);
}

Diagnosis::Outcome Outcome(int i, v1::CollectiveCause cause, double duration_ms) {
  Diagnosis::Outcome o;
  o.func = "AllReduce";
  o.end_unix_ns = kEpoch + i * 300 * kMs;
  o.duration_ns = static_cast<int64_t>(duration_ms * 1e6);
  o.cause = cause;
  if (cause != v1::COLLECTIVE_CAUSE_NORMAL) {
    o.node = "n3";
    o.rank = 3;
    o.port = "veth3";
    o.evidence = "veth3: 6 retransmitted";
  }
  return o;
}

TEST(DiagnosisTest, SaysWhatSinceWhenAndWhatItCosts) {
  Diagnosis d;
  for (int i = 0; i < 40; ++i)
    d.Record(kDiagnosisComm, Outcome(i, v1::COLLECTIVE_CAUSE_NORMAL, 200 + i % 3));
  std::string json = DiagnosisJson(d.Snapshot());
  EXPECT_NE(json.find("\"cause\":\"normal\""), std::string::npos) << json;
  EXPECT_NE(json.find("nothing holds it back"), std::string::npos) << json;
  // From instance 40 on: lossy at 222 ms, with one normal instance in between.
  for (int i = 40; i < 60; ++i) {
    d.Record(kDiagnosisComm, i == 50 ? Outcome(i, v1::COLLECTIVE_CAUSE_NORMAL, 201)
                                     : Outcome(i, v1::COLLECTIVE_CAUSE_NETWORK_LOSSY, 222));
  }
  json = DiagnosisJson(d.Snapshot());
  EXPECT_NE(json.find("\"cause\":\"network_lossy\",\"node\":\"n3\",\"rank\":3,\"port\":\"veth3\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"affected\":15,\"instances\":16"), std::string::npos) << json;
  // since = the end of instance 40 (Unix seconds), cost = 222 / 202 - 1 (p90 of 200..202).
  EXPECT_NE(json.find(absl::StrCat(
                "\"since_unix_seconds\":", (kEpoch + 40 * 300 * kMs) / 1'000'000'000, ",")),
            std::string::npos)
      << json;
  EXPECT_NE(
      json.find("n3's port veth3 loses, retransmits or is paused by PFC in 15 of the last 16"),
      std::string::npos)
      << json;
  EXPECT_NE(json.find("10% longer at p90"), std::string::npos) << json;
  std::vector<prometheus::MetricFamily> f;
  AddDiagnosisFamilies(d.Snapshot(), &f);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].name, "fabricscope_diagnosis_info");
  ASSERT_EQ(f[0].metric.size(), 1u);
  EXPECT_EQ(f[0].metric[0].label[1].value, "network_lossy");
  EXPECT_EQ(f[0].metric[0].label[4].value, "veth3");
  EXPECT_NEAR(f[1].metric[0].gauge.value, 222.0 / 202.0 - 1, 1e-9);
  // Recovery: 16 normal instances later nothing holds it back.
  for (int i = 60; i < 76; ++i)
    d.Record(kDiagnosisComm, Outcome(i, v1::COLLECTIVE_CAUSE_NORMAL, 200));
  EXPECT_NE(DiagnosisJson(d.Snapshot()).find("\"cause\":\"normal\""), std::string::npos);
}

// A fault whose collectives are no longer than the clean ones before it (a straggler a few
// percent late hides in the jitter) says so, not "-5% longer".
TEST(DiagnosisTest, ACostWithinTheJitterReadsNoLonger) {
  Diagnosis d;
  for (int i = 0; i < 20; ++i)
    d.Record(kDiagnosisComm, Outcome(i, v1::COLLECTIVE_CAUSE_NORMAL, 200 + i % 3));
  for (int i = 20; i < 40; ++i)
    d.Record(kDiagnosisComm, Outcome(i, v1::COLLECTIVE_CAUSE_COMPUTE_STRAGGLER, 190));
  const std::string json = DiagnosisJson(d.Snapshot());
  EXPECT_NE(json.find("rank 3 on n3 arrives late in 16 of the last 16 instances; its collectives "
                      "take no longer at p90 (0.19 s against 0.202 s)"),
            std::string::npos)
      << json;
}

TEST(DiagnosisTest, CommunicatorsAreBounded) {
  Diagnosis d;
  for (uint64_t c = 0; c < 70; ++c) d.Record(c + 1, Outcome(0, v1::COLLECTIVE_CAUSE_NORMAL, 100));
  EXPECT_EQ(d.comms(), 64u);
  std::vector<prometheus::MetricFamily> f;
  AddDiagnosisFamilies(d.Snapshot(), &f);
  EXPECT_EQ(f[0].metric.size(), 64u);
}

// Through the cross-rank matching: 4 nodes, rank 2 10% late on every step (22 ms of 225 ms,
// below the instant rule's 25%), the others waiting with idle links. From the fifth instance on
// it is a compute straggler with the history's evidence, and the diagnosis names it.
TEST(DiagnosisTest, CrossRankNamesATenPercentStraggler) {
  CrossRankAnalysis x;
  for (int r = 0; r < 4; ++r) {
    v1::Hello h;
    h.set_node(absl::StrCat("node", r));
    h.add_ports()->set_device(absl::StrCat("veth", r));
    x.OnHello(h);
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> jitter(0, 1000);  // us
  for (uint64_t seq = 0; seq < 20; ++seq) {
    const int64_t t = 1000 * kMs + static_cast<int64_t>(seq) * 300 * kMs;
    for (int r = 0; r < 4; ++r) {
      v1::Collective c;
      c.set_comm_hash(kDiagnosisComm);
      c.set_rank(r);
      c.set_nranks(4);
      c.set_func("AllReduce");
      c.set_seq(seq);
      c.set_bytes(1 << 26);
      c.set_start_ns(t + jitter(rng) * 1000 + (r == 2 ? 22 * kMs : 0));
      c.set_end_ns(t + 225 * kMs);
      v1::CollectiveAnalysis& a = *c.mutable_analysis();
      a.set_cause(r == 2 ? v1::COLLECTIVE_CAUSE_NORMAL : v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS);
      // Rank 0 carries a spurious retransmission while it waits: lossy by the slow tail alone
      // at seq 15 (the straggler explains the slowness), by its loss rate at seq 17 (it wins).
      if (r == 0 && (seq == 15 || seq == 17)) {
        a.set_cause(v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
        a.set_lossy_by_tail(seq == 15);
        a.set_detail("veth0: 0 lost, 1 retransmitted");
      }
      a.set_port_index(-1);
      v1::Batch b;
      b.set_unix_offset_ns(kEpoch);
      *b.add_collectives() = std::move(c);
      x.OnBatch(absl::StrCat("node", r), b);
    }
  }
  EXPECT_EQ(x.instances_total(), 20u);
  const std::string slow = SlowJson(x.Slowest(100));
  size_t named = 0;
  for (size_t at = slow.find("\"cause\":\"compute_straggler\""); at != std::string::npos;
       at = slow.find("\"cause\":\"compute_straggler\"", at + 1)) {
    ++named;
  }
  EXPECT_GE(named, 15u) << slow;
  EXPECT_NE(slow.find("\"seq\":17,\"nranks\":4,\"cause\":\"network_lossy\""), std::string::npos)
      << slow;
  EXPECT_NE(slow.find("\"seq\":15,\"nranks\":4,\"cause\":\"compute_straggler\""), std::string::npos)
      << slow;
  EXPECT_NE(slow.find("rank 2 (node2) arrived last in"), std::string::npos) << slow;
  const std::string diag = DiagnosisJson(x.Diagnoses());
  EXPECT_NE(diag.find("\"cause\":\"compute_straggler\",\"node\":\"node2\",\"rank\":2"),
            std::string::npos)
      << diag;
  EXPECT_NE(diag.find("rank 2 on node2 arrives late"), std::string::npos) << diag;
}

}  // namespace
}  // namespace fabricscope::exporters
