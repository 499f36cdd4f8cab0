// EstimateProxyOpBytes (collectors/nccl/proxy_bytes.h) against NCCL 2.28.9's own chunking,
// worked by hand here from its sources for each case, with NCCL's default buffer sizes
// (src/init.cc: SIMPLE 4 MiB, LL 512 KiB, LL128 4,915,200 bytes; NCCL_STEPS 8, so a SIMPLE
// step is 512 KiB, an LL step 64 KiB of which 32 KiB data, an LL128 step 614,400 of which
// 576,000 data; src/enqueue.cc calcCollChunking) and the descriptor NCCL fills
// (src/plugin/profiler.cc: nSteps = DIVUP(nsteps, sliceSteps), chunkSize = chunkSize *
// sliceSteps).

#include "collectors/nccl/proxy_bytes.h"

#include <gtest/gtest.h>

#include <climits>

namespace fabricscope::collectors::nccl {
namespace {

ProxyOpParent Coll(const char* func, const char* algo, const char* proto, uint64_t bytes,
                   int nranks, int nchannels) {
  ProxyOpParent p;
  p.func = func;
  p.algo = algo;
  p.proto = proto;
  p.bytes = bytes;
  p.nranks = nranks;
  p.nchannels = nchannels;
  return p;
}

constexpr uint64_t kMiB = 1 << 20;

TEST(ProxyBytesTest, RingSimpleAllReduceIsExact) {
  // 1 GiB on 16 ranks, 32 channels: chunkSize = 512 KiB * 4 chunkSteps = 2 MiB; loopSize =
  // 32 * 16 * 2 MiB = 1 GiB, one loop; nsteps = 2(16-1) * 1 * 4 = 120; the descriptor: 60
  // events of 2 MiB * 2 sliceSteps = 4 MiB. Each channel's send carries 30/16 of 32 MiB.
  const ProxyOpParent p = Coll("AllReduce", "RING", "SIMPLE", 1024 * kMiB, 16, 32);
  EXPECT_EQ(EstimateProxyOpBytes(60, 4 * kMiB, &p), 60 * kMiB);
  // 8 MiB on 4 ranks, 2 channels: one loop of 2*4*2 MiB = 16 MiB; nsteps 2*3*4 = 24, 12 events
  // of 4 MiB; the share is 6/4 of 4 MiB = 6 MiB (less than 12 events' 12 MiB of slices).
  const ProxyOpParent q = Coll("AllReduce", "RING", "SIMPLE", 8 * kMiB, 4, 2);
  EXPECT_EQ(EstimateProxyOpBytes(12, 4 * kMiB, &q), 6 * kMiB);
}

TEST(ProxyBytesTest, LowLatencyProtocolsCountWireBytes) {
  // LL, 8 KiB on 16 ranks, 2 channels: chunkSize = 32 KiB of data, chunkSteps = sliceSteps = 1;
  // nsteps 30; the share 4 KiB * 30/16 = 7,680 data bytes, 15,360 on the wire (16-byte lines
  // carrying 8).
  const ProxyOpParent ll = Coll("AllReduce", "RING", "LL", 8192, 16, 2);
  EXPECT_EQ(EstimateProxyOpBytes(30, 32768, &ll), 15360u);
  // LL128, 1 MiB on 16 ranks, 4 channels: chunkSize 576,000; the share 256 KiB * 30/16 =
  // 491,520 data bytes, 524,288 on the wire (15 data words of 16).
  const ProxyOpParent ll128 = Coll("AllReduce", "RING", "LL128", kMiB, 16, 4);
  EXPECT_EQ(EstimateProxyOpBytes(30, 576000, &ll128), 524288u);
  // LL with its steps full: the bound is in data bytes too (2 steps of 32 KiB = 64 KiB of
  // data, 128 KiB on the wire), not cut to the descriptor's data-sized chunks.
  const ProxyOpParent full = Coll("AllReduce", "RING", "LL", 1024 * kMiB, 2, 1);
  EXPECT_EQ(EstimateProxyOpBytes(2, 32768, &full), 131072u);
}

TEST(ProxyBytesTest, TreeAndPerRankCollectives) {
  // Tree SIMPLE, 64 MiB on 8 channels: chunkSize = stepSize = 512 KiB; nsteps = nLoops =
  // 64 MiB / (8 * 512 KiB) = 16; each tree edge carries the channel's 8 MiB once.
  const ProxyOpParent tree = Coll("AllReduce", "TREE", "SIMPLE", 64 * kMiB, 8, 8);
  EXPECT_EQ(EstimateProxyOpBytes(16, 512 * 1024, &tree), 8 * kMiB);
  // AllGather ring SIMPLE, 1 MiB per rank (NCCL's count is per rank, in bytes) on 8 ranks,
  // 4 channels: nBytes 8 MiB, one loop; nsteps (8-1) * 4 = 28, 14 events of 4 MiB; each
  // channel sends 7 of the ranks' quarter-MiB pieces.
  const ProxyOpParent ag = Coll("AllGather", "RING", "SIMPLE", kMiB, 8, 4);
  EXPECT_EQ(EstimateProxyOpBytes(14, 4 * kMiB, &ag), 7 * kMiB / 4);
  const ProxyOpParent rs = Coll("ReduceScatter", "RING", "SIMPLE", kMiB, 8, 4);
  EXPECT_EQ(EstimateProxyOpBytes(14, 4 * kMiB, &rs), 7 * kMiB / 4);
  // Broadcast, chunkSteps 1: 3 MiB on 2 channels, 3 events of 512 KiB bound it below the
  // 1.5 MiB share.
  const ProxyOpParent bc = Coll("Broadcast", "RING", "SIMPLE", 3 * kMiB, 4, 2);
  EXPECT_EQ(EstimateProxyOpBytes(3, 512 * 1024, &bc), 3 * kMiB / 2);
  EXPECT_EQ(EstimateProxyOpBytes(2, 512 * 1024, &bc), kMiB);
}

TEST(ProxyBytesTest, P2pIsItsPartOrItsBytes) {
  // A 1 MiB Send on one channel: NCCL_P2P_NET_CHUNKSIZE 128 KiB (1 MiB is not below
  // 8 * 128 KiB, so not halved), 8 steps; split over 2 channels each part has 4 steps.
  ProxyOpParent send;
  send.func = "Send";
  send.p2p = true;
  send.bytes = kMiB;
  EXPECT_EQ(EstimateProxyOpBytes(8, 131072, &send), kMiB);
  EXPECT_EQ(EstimateProxyOpBytes(4, 131072, &send), kMiB / 2);
}

TEST(ProxyBytesTest, WithoutParentOrFieldsNothing) {
  // Without its collective the descriptor alone overstates ring SIMPLE 4x: unknown, 0.
  EXPECT_EQ(EstimateProxyOpBytes(5, 1000, nullptr), 0u);
  const ProxyOpParent p = Coll("AllReduce", "RING", "SIMPLE", kMiB, 2, 1);
  EXPECT_EQ(EstimateProxyOpBytes(0, 1000, &p), 0u);
  EXPECT_EQ(EstimateProxyOpBytes(-3, 1000, &p), 0u);
  EXPECT_EQ(EstimateProxyOpBytes(3, -1000, &p), 0u);
  // A lying descriptor cannot overflow: INT_MAX * INT_MAX fits 64 bits, and the share bounds it.
  const ProxyOpParent huge = Coll("AllReduce", "RING", "SIMPLE", uint64_t{1} << 62, INT_MAX, 0);
  EXPECT_GT(EstimateProxyOpBytes(INT_MAX, INT_MAX, &huge), 0u);
  // An unknown datatype (a newer NCCL's): the descriptor's bound, in step bytes.
  ProxyOpParent unknown = Coll("AllReduce", "RING", "SIMPLE", 0, 4, 2);
  unknown.bytes_known = false;
  EXPECT_EQ(EstimateProxyOpBytes(12, 4 * kMiB, &unknown), 12 * kMiB);
  // Unknown names (a newer NCCL's algorithm or protocol): the data share, no wire factor.
  const ProxyOpParent nvls = Coll("AllReduce", "NVLS", "SIMPLE", 4 * kMiB, 8, 4);
  EXPECT_EQ(EstimateProxyOpBytes(100, 512 * 1024, &nvls), kMiB);
  ProxyOpParent no_proto = Coll("AllReduce", "RING", nullptr, 4 * kMiB, 2, 1);
  EXPECT_EQ(EstimateProxyOpBytes(100, 512 * 1024, &no_proto), 4 * kMiB);
}

TEST(ProxyBytesTest, TheSharePackedInTheCollectivesSlotGivesTheSameEstimate) {
  // The plugin computes a collective's share once and keeps it in one word for its other ops.
  const ProxyOpParent cases[] = {Coll("AllReduce", "RING", "SIMPLE", 1024 * kMiB, 16, 32),
                                 Coll("AllReduce", "RING", "LL", 8192, 16, 2),
                                 Coll("AllReduce", "RING", "LL128", kMiB, 16, 4),
                                 Coll("AllGather", "RING", "SIMPLE", kMiB, 8, 4),
                                 Coll("AllReduce", "TREE", "LL128", 3 * kMiB + 7, 5, 3)};
  for (const ProxyOpParent& p : cases) {
    const ProxyOpShare share = UnpackShare(PackShare(ShareOf(p)));
    for (int steps : {1, 2, 7, 30, 60, 1000}) {
      for (int chunk : {32768, 576000, 524288, 4 << 20}) {
        EXPECT_EQ(EstimateWithShare(steps, chunk, &share), EstimateProxyOpBytes(steps, chunk, &p))
            << p.func << " " << p.algo << " " << p.proto << " " << steps << " x " << chunk;
      }
    }
    EXPECT_NE(PackShare(ShareOf(p)), 0u);  // 0 means "not computed yet" in the slot
  }
  // More than 2^60 bytes per op is cut there, not wrapped.
  const ProxyOpParent huge = Coll("AllReduce", "TREE", "SIMPLE", ~uint64_t{0}, 2, 1);
  EXPECT_EQ(UnpackShare(PackShare(ShareOf(huge))).share_wire, (uint64_t{1} << 60) - 1);
}

}  // namespace
}  // namespace fabricscope::collectors::nccl
