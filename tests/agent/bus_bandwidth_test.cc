#include "agent/bus_bandwidth.h"

#include "gtest/gtest.h"

namespace fabricscope::agent {
namespace {

TEST(BusBandwidth, ParsesTheFixedSetAndFoldsTheRestIntoOther) {
  EXPECT_EQ(ParseCollectiveFunc("AllReduce"), CollectiveFunc::kAllReduce);
  EXPECT_EQ(ParseCollectiveFunc("ReduceScatter"), CollectiveFunc::kReduceScatter);
  EXPECT_EQ(ParseCollectiveFunc("Recv"), CollectiveFunc::kRecv);
  EXPECT_EQ(ParseCollectiveFunc("allreduce"), CollectiveFunc::kOther);
  EXPECT_EQ(ParseCollectiveFunc(""), CollectiveFunc::kOther);
  EXPECT_EQ(ParseCollectiveFunc("AllReduceX"), CollectiveFunc::kOther);
  for (int i = 0; i < kCollectiveFuncCount; ++i) {
    const auto f = static_cast<CollectiveFunc>(i);
    EXPECT_EQ(ParseCollectiveFunc(CollectiveFuncName(f)),
              f == CollectiveFunc::kOther ? CollectiveFunc::kOther : f)
        << CollectiveFuncName(f);
  }
  EXPECT_STREQ(CollectiveFuncName(CollectiveFunc::kOther), "other");
}

// Values worked by hand from the nccl-tests formulas.
TEST(BusBandwidth, AllReduceEightRanks) {
  // 1 GiB all-reduce over 8 ranks in 10 ms: algBw = 2^30 / 0.01 = 107374182400 B/s;
  // factor 2 x 7 / 8 = 1.75; busBw = 187904819200 B/s.
  const Bandwidth b = ComputeBandwidth(CollectiveFunc::kAllReduce, 1ull << 30, 8, 10'000'000);
  EXPECT_EQ(b.algorithm_bytes, 1ull << 30);
  EXPECT_DOUBLE_EQ(b.algbw_bytes_per_second, 107374182400.0);
  EXPECT_DOUBLE_EQ(b.busbw_bytes_per_second, 187904819200.0);
  EXPECT_DOUBLE_EQ(b.bus_bytes, 1879048192.0);
}

TEST(BusBandwidth, AllGatherAndReduceScatterScaleTheMessageByRanks) {
  // AllGather, 4 ranks, 1 MB per rank, 2 ms: S = 4 MB; algBw = 2e9; factor 3/4: busBw 1.5e9.
  Bandwidth b = ComputeBandwidth(CollectiveFunc::kAllGather, 1'000'000, 4, 2'000'000);
  EXPECT_EQ(b.algorithm_bytes, 4'000'000u);
  EXPECT_DOUBLE_EQ(b.algbw_bytes_per_second, 2e9);
  EXPECT_DOUBLE_EQ(b.busbw_bytes_per_second, 1.5e9);
  // ReduceScatter, 2 ranks, 500 kB received per rank, 1 ms: S = 1 MB; algBw 1e9; busBw 0.5e9.
  b = ComputeBandwidth(CollectiveFunc::kReduceScatter, 500'000, 2, 1'000'000);
  EXPECT_EQ(b.algorithm_bytes, 1'000'000u);
  EXPECT_DOUBLE_EQ(b.busbw_bytes_per_second, 0.5e9);
  // AlltoAll, 16 ranks, 64 kB per peer, 4 ms: S = 1048576; algBw 262144000; x 15/16.
  b = ComputeBandwidth(CollectiveFunc::kAlltoAll, 65536, 16, 4'000'000);
  EXPECT_EQ(b.algorithm_bytes, 1048576u);
  EXPECT_DOUBLE_EQ(b.busbw_bytes_per_second, 245760000.0);
}

TEST(BusBandwidth, RootedAndPointToPointHaveFactorOne) {
  for (CollectiveFunc f : {CollectiveFunc::kBroadcast, CollectiveFunc::kReduce,
                           CollectiveFunc::kSend, CollectiveFunc::kRecv}) {
    const Bandwidth b = ComputeBandwidth(f, 3'000'000, 8, 3'000'000);
    EXPECT_EQ(b.algorithm_bytes, 3'000'000u) << CollectiveFuncName(f);
    EXPECT_DOUBLE_EQ(b.algbw_bytes_per_second, 1e9) << CollectiveFuncName(f);
    EXPECT_DOUBLE_EQ(b.busbw_bytes_per_second, 1e9) << CollectiveFuncName(f);
  }
}

TEST(BusBandwidth, OneRankMovesNothingOverTheBus) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveFunc::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveFunc::kAllGather, 1), 0.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveFunc::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveFunc::kAllGather, 0), 0.0);  // bad n -> 1
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveFunc::kOther, 8), 0.0);
  EXPECT_EQ(AlgorithmBytes(CollectiveFunc::kAllGather, 100, -3), 100u);
}

TEST(BusBandwidth, UnknownDurationGivesBytesButNoRates) {
  const Bandwidth b = ComputeBandwidth(CollectiveFunc::kAllReduce, 1000, 4, 0);
  EXPECT_EQ(b.algorithm_bytes, 1000u);
  EXPECT_DOUBLE_EQ(b.bus_bytes, 1500.0);
  EXPECT_EQ(b.algbw_bytes_per_second, 0.0);
  EXPECT_EQ(b.busbw_bytes_per_second, 0.0);
  EXPECT_EQ(ComputeBandwidth(CollectiveFunc::kAllReduce, 1000, 4, -5).busbw_bytes_per_second, 0);
}

}  // namespace
}  // namespace fabricscope::agent
