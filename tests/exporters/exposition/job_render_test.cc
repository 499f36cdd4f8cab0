// The jobs in what the aggregator renders (issue 36): the job_id label of the per-communicator
// families (exporters/exposition/gpu_render.h LabelCommunicatorJobs), and the other jobs that
// shared a slow collective's node in /api/collectives/slow and /api/diagnosis
// (exporters/exposition/cross_rank_render.h AppendSharedWith, through SlowJson and
// DiagnosisJson).
#include <gmock/gmock.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "exporters/analysis/names.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/exposition/gpu_render.h"
#include "exporters/exposition/metric_catalog.h"
#include "exporters/exposition/metric_util.h"

namespace fabricscope::exporters {
namespace {

using ::testing::HasSubstr;

std::string LabelOf(const prometheus::ClientMetric& m, const std::string& name) {
  for (const auto& l : m.label) {
    if (l.name == name) return l.value;
  }
  return "<none>";
}

// A communicator of a known job gets its job_id, once, last; one of no known job and a family
// without a comm label get none.
TEST(JobRender, PerCommunicatorSeriesCarryTheirJobId) {
  JobView llama;
  llama.job.set_id("8812");
  llama.comms = {0x9f3c1e0a77d2b415ULL};
  std::vector<prometheus::MetricFamily> f;
  f.push_back(MakeFamily(Metric::kCollectiveBusBytesTotal));
  AddValue(f.back(), {{"func", "AllReduce"}, {"comm", "9f3c1e0a"}}, 1);
  AddValue(f.back(), {{"func", "AllReduce"}, {"comm", "0badcafe"}}, 2);
  f.push_back(MakeFamily(Metric::kCollectivesTotal));
  AddValue(f.back(), {{"func", "AllReduce"}}, 3);
  LabelCommunicatorJobs({llama}, &f);
  ASSERT_EQ(f[0].metric.size(), 2u);
  EXPECT_EQ(LabelOf(f[0].metric[0], "job_id"), "8812");
  EXPECT_EQ(f[0].metric[0].label.back().name, "job_id");
  EXPECT_EQ(f[0].metric[0].label.size(), 3u);
  EXPECT_EQ(LabelOf(f[0].metric[1], "job_id"), "<none>");
  EXPECT_EQ(LabelOf(f[1].metric[0], "job_id"), "<none>");
  EXPECT_TRUE(UndeclaredLabels(f).empty());
}

class SharedWithTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMine = 0x1111111100000000ULL, kOther = 0x2222222200000000ULL,
                            kSibling = 0x3333333300000000ULL, kStranger = 0x4444444400000000ULL;
  SharedWithTest() {
    jobs_[kMine].set_id("9001");
    jobs_[kMine].set_name("bert");
    jobs_[kSibling] = jobs_[kMine];
    jobs_[kOther].set_id("8812");
    jobs_[kOther].set_name("llama-70b");
  }
  JobOfComm JobOf() const {
    return [this](uint64_t comm) {
      auto it = jobs_.find(comm);
      return it == jobs_.end() ? v1::Job{} : it->second;
    };
  }
  // A slow all-reduce of kMine whose bottleneck n3 veth3 moved own_bytes of its own while the
  // sharers moved theirs on n3.
  CollectiveInstance Slow(uint64_t own_bytes, std::array<Sharer, 2> sharers) {
    CollectiveInstance d;
    d.key.comm = kMine;
    d.key.func = *names_.Intern("AllReduce");
    d.key.seq = 7;
    d.nranks = 2;
    d.cause = v1::COLLECTIVE_CAUSE_NETWORK_SATURATED;
    RankEntry r;
    r.node = *names_.Intern("n3");
    r.port = *names_.Intern("veth3");
    r.rank = 1;
    r.own_bytes = own_bytes;
    r.sharers.top = sharers;
    d.ranks.push_back(r);
    d.bottleneck = 0;
    return d;
  }
  static google::protobuf::Struct Parse(const std::string& json) {
    google::protobuf::Struct s;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &s).ok()) << json;
    return s;
  }
  static const google::protobuf::Struct& Bottleneck(const google::protobuf::Struct& s) {
    return s.fields()
        .at("collectives")
        .list_value()
        .values(0)
        .struct_value()
        .fields()
        .at("bottleneck")
        .struct_value();
  }
  NameTable names_{64};
  std::map<uint64_t, v1::Job> jobs_;
};

// 39 MB of its own and 61 MB of another job's on n3: the other job is named, with its share of
// the node's network bytes; a smaller second sharer of the same job is listed, not named.
TEST_F(SharedWithTest, TheOtherJobOnTheNodeIsNamedWithItsShare) {
  const auto s =
      Parse(SlowJson({Slow(39'000'000, {{{kOther, 56'000'000}, {kSibling, 5'000'000}}})}, JobOf()));
  const auto& b = Bottleneck(s);
  EXPECT_EQ(b.fields().at("shared").string_value(),
            "n3 also carried job 8812 (llama-70b): 56% of its network bytes during it");
  const auto& list = b.fields().at("shared_with").list_value();
  ASSERT_EQ(list.values_size(), 2);
  const auto& first = list.values(0).struct_value().fields();
  EXPECT_EQ(first.at("comm").string_value(), "22222222");
  EXPECT_EQ(first.at("job").string_value(), "8812");
  EXPECT_EQ(first.at("job_name").string_value(), "llama-70b");
  EXPECT_DOUBLE_EQ(first.at("bytes").number_value(), 56'000'000);
  EXPECT_DOUBLE_EQ(first.at("share").number_value(), 0.56);
  EXPECT_EQ(list.values(1).struct_value().fields().at("job").string_value(), "9001");
  EXPECT_DOUBLE_EQ(list.values(1).struct_value().fields().at("share").number_value(), 0.05);
}

// The largest sharer as the sentence calls it: another communicator of the same job, one of
// no known job; under a tenth of the node's bytes, none; without the collective's own bytes
// (no proxy data), no shares at all.
// The rank's agent knew its one port from its queue pairs (NodeSharers.port): the sentence
// names the port, and the share is of that port's bytes.
TEST_F(SharedWithTest, APortKnownFromTheQueuePairsIsNamed) {
  CollectiveInstance d = Slow(39'000'000, {{{kOther, 61'000'000}, {}}});
  d.ranks[0].sharers.port = *names_.Intern("mlx5_2:1");
  const auto s = Parse(SlowJson({d}, JobOf()));
  EXPECT_EQ(Bottleneck(s).fields().at("shared").string_value(),
            "n3 mlx5_2:1 also carried job 8812 (llama-70b): 61% of its network bytes during it");
}

TEST_F(SharedWithTest, SameJobUnknownJobAndSmallSharesAreSaidAsSuch) {
  auto shared = [&](uint64_t own, std::array<Sharer, 2> sharers) {
    return Bottleneck(Parse(SlowJson({Slow(own, sharers)}, JobOf()))).fields();
  };
  EXPECT_EQ(shared(50, {{{kSibling, 50}, {}}}).at("shared").string_value(),
            "n3 also carried communicator 33333333 of the same job: 50% of its network bytes "
            "during it");
  EXPECT_EQ(shared(75, {{{kStranger, 25}, {}}}).at("shared").string_value(),
            "n3 also carried communicator 44444444 (job unknown): 25% of its network bytes "
            "during it");
  const auto small = shared(91, {{{kOther, 9}, {}}});
  EXPECT_EQ(small.at("shared").string_value(), "");
  EXPECT_EQ(small.at("shared_with").list_value().values_size(), 1);
  const auto unknown = shared(0, {{{kOther, 9}, {}}});
  EXPECT_EQ(unknown.at("shared").string_value(), "");
  EXPECT_EQ(unknown.at("shared_with").list_value().values_size(), 0);
  // Without a job lookup (a server with no job table) the communicator is still named.
  EXPECT_THAT(SlowJson({Slow(50, {{{kOther, 50}, {}}})}),
              HasSubstr("n3 also carried communicator 22222222 (job unknown): 50%"));
}

// A share is of the node's bytes, the communicators past the two the aggregator keeps included
// (CollectiveAnalysis.sharers_bytes_total): 100 of its own and four others of 100 each is 20%
// for the largest, not a third.
TEST_F(SharedWithTest, SharesCountTheSharersNotListed) {
  CollectiveInstance d = Slow(100, {{{kOther, 100}, {kSibling, 100}}});
  d.ranks[0].sharers.total = 400;
  const auto s = Parse(SlowJson({d}, JobOf()));
  const auto& b = Bottleneck(s);
  EXPECT_DOUBLE_EQ(b.fields()
                       .at("shared_with")
                       .list_value()
                       .values(0)
                       .struct_value()
                       .fields()
                       .at("share")
                       .number_value(),
                   0.2);
  EXPECT_EQ(b.fields().at("shared").string_value(),
            "n3 also carried job 8812 (llama-70b): 20% of its network bytes during it");
}

// The diagnosis of kMine names its job and appends the sharing job to its sentence.
TEST_F(SharedWithTest, TheDiagnosisNamesItsJobAndTheOneThatSharedItsNode) {
  CommDiagnosis d;
  d.comm = kMine;
  d.cause = v1::COLLECTIVE_CAUSE_NETWORK_SATURATED;
  d.node = "n3";
  d.port = "veth3";
  d.affected = 8;
  d.instances = 10;
  d.sentence = "Communicator 11111111 is held back by network_saturated.";
  d.own_bytes = 40;
  d.sharers.top = {{{kOther, 60}, {}}};
  const auto s = Parse(DiagnosisJson({d}, JobOf()));
  const auto& c = s.fields().at("communicators").list_value().values(0).struct_value().fields();
  EXPECT_EQ(c.at("job").string_value(), "9001");
  EXPECT_EQ(c.at("sentence").string_value(),
            "Communicator 11111111 is held back by network_saturated. In its latest affected "
            "instance n3 also carried job 8812 (llama-70b): 60% of its network bytes during it.");
  EXPECT_EQ(c.at("shared_with").list_value().values_size(), 1);
  // A sentence that ends without a full stop gets one before the next.
  d.sentence = "n3's port veth3 is saturated in 8 of the last 10 instances, since 09:48:34 UTC";
  EXPECT_THAT(DiagnosisJson({d}, JobOf()), HasSubstr("since 09:48:34 UTC. In its latest"));
}

}  // namespace
}  // namespace fabricscope::exporters
