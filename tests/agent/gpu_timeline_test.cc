#include "agent/gpu_timeline.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "collectors/gpu/wire.h"
#include "gtest/gtest.h"
#include "tests/agent/gpu_events.h"

namespace fabricscope::agent {
namespace {

TEST(GpuTimeline, ConvertsACollectiveWithDurationAndBandwidths) {
  // 4 MB all-reduce over 4 ranks in 2 ms: algBw 2e9 B/s, busBw 2e9 x 2 x 3/4 = 3e9 B/s.
  const v1::Collective c =
      GpuTimeline::ToProto(Collective(0xabc, 17, "AllReduce", 4'000'000, 10'000'000, 12'000'000));
  EXPECT_EQ(c.comm_hash(), 0xabcu);
  EXPECT_EQ(c.func(), "AllReduce");
  EXPECT_EQ(c.func_raw(), "");
  EXPECT_EQ(c.seq(), 17u);
  EXPECT_EQ(c.bytes(), 4'000'000u);
  EXPECT_EQ(c.count(), 1'000'000u);
  EXPECT_EQ(c.datatype(), "ncclFloat32");
  EXPECT_EQ(c.algo(), "RING");
  EXPECT_EQ(c.proto(), "SIMPLE");
  EXPECT_EQ(c.channels(), 2u);
  EXPECT_EQ(c.rank(), 1);
  EXPECT_EQ(c.nranks(), 4);
  EXPECT_EQ(c.enqueue_start_ns(), 10'000'000 - 500);
  EXPECT_EQ(c.timing_source(), v1::TIMING_SOURCE_KERNEL_CHANNEL);
  EXPECT_DOUBLE_EQ(c.duration_seconds(), 0.002);
  EXPECT_DOUBLE_EQ(c.algbw_bytes_per_second(), 2e9);
  EXPECT_DOUBLE_EQ(c.busbw_bytes_per_second(), 3e9);
  EXPECT_EQ(c.pid(), 4242);
  EXPECT_EQ(c.uid(), 1000u);
  EXPECT_EQ(c.gpu(), 3);
  EXPECT_FALSE(c.p2p());
}

TEST(GpuTimeline, UnknownFunctionsAndMissingTimesGiveNoRates) {
  v1::Collective c = GpuTimeline::ToProto(Collective(1, 1, "AllToAllv2", 100, 5, 9));
  EXPECT_EQ(c.func(), "other");
  EXPECT_EQ(c.func_raw(), "AllToAllv2");
  EXPECT_EQ(c.busbw_bytes_per_second(), 0.0);  // no convention for unknown functions
  c = GpuTimeline::ToProto(Collective(1, 1, "AllReduce", 100, 0, 9));  // start unknown
  EXPECT_EQ(c.duration_seconds(), 0.0);
  EXPECT_EQ(c.algbw_bytes_per_second(), 0.0);
  c = GpuTimeline::ToProto(Collective(1, 1, "AllReduce", 100, 9, 9));  // end <= start
  EXPECT_EQ(c.duration_seconds(), 0.0);
  EXPECT_EQ(c.busbw_bytes_per_second(), 0.0);
}

// Without a completion signal the interval is host enqueue work (ABI §6.4): no duration, no
// algBw/busBw, nothing in the histogram or the busBw gauge; counted per timing source.
TEST(GpuTimeline, IntervalsWithoutCompletionCarryNoBandwidth) {
  GpuTimeline t(GpuTimelineOptions{});
  GpuEvent timed = Collective(7, 1, "AllReduce", 1'000'000, 1'000, 2'001'000);
  GpuEvent enqueued = Collective(7, 2, "AllReduce", 1'000'000, 3'000'000, 3'000'080);
  enqueued.collective.timing_source = static_cast<uint8_t>(gpu::TimingSource::kEnqueueOnly);
  GpuEvent ce = Collective(7, 3, "AllReduce", 1'000'000, 4'000'000, 4'002'000);
  ce.collective.timing_source = static_cast<uint8_t>(gpu::TimingSource::kCopyEngine);
  for (const GpuEvent* e : {&enqueued, &ce}) {
    const v1::Collective c = GpuTimeline::ToProto(*e);
    EXPECT_EQ(c.duration_seconds(), 0.0);
    EXPECT_EQ(c.algbw_bytes_per_second(), 0.0);
    EXPECT_EQ(c.busbw_bytes_per_second(), 0.0);
    EXPECT_EQ(c.start_ns(), e->collective.start_ns);  // the interval itself is kept
  }
  EXPECT_EQ(GpuTimeline::ToProto(ce).timing_source(), v1::TIMING_SOURCE_COPY_ENGINE);
  t.Add(timed);
  t.Add(enqueued);
  t.Add(ce);
  v1::Batch b;
  FillWindow(t, 0, 10'000'000, {}, &b);
  ASSERT_EQ(b.gpu().collective_totals_size(), 1);
  const v1::CollectiveTotals& ct = b.gpu().collective_totals(0);
  EXPECT_EQ(ct.count(), 3u);
  EXPECT_EQ(ct.duration_seconds().count(), 1u);  // only the kernel-timed one
  // busBw from the timed one alone: 1.5 MB of bus bytes over 2 ms.
  EXPECT_NEAR(ct.window_busbw_bytes_per_second(), 7.5e8, 1e-3);
  ASSERT_EQ(ct.count_by_timing_source_size(), 5);
  EXPECT_EQ(ct.count_by_timing_source(v1::TIMING_SOURCE_KERNEL_CHANNEL), 1u);
  EXPECT_EQ(ct.count_by_timing_source(v1::TIMING_SOURCE_ENQUEUE_ONLY), 1u);
  EXPECT_EQ(ct.count_by_timing_source(v1::TIMING_SOURCE_COPY_ENGINE), 1u);
  EXPECT_EQ(ct.count_by_timing_source(v1::TIMING_SOURCE_PROXY_OP), 0u);
}

TEST(GpuTimeline, AttachesCollectivesToTheWindowTheyCompleteIn) {
  GpuTimeline t;
  t.Add(Collective(1, 1, "AllReduce", 1000, 100, 900, 950));
  t.Add(Collective(1, 2, "AllReduce", 1000, 1100, 1500, 1600));  // ends in the next window
  v1::Batch b1;
  FillWindow(t, 0, 1000, {}, &b1);
  ASSERT_EQ(b1.collectives_size(), 1);
  EXPECT_EQ(b1.collectives(0).seq(), 1u);
  v1::Batch b2;
  FillWindow(t, 1000, 2000, {}, &b2);
  ASSERT_EQ(b2.collectives_size(), 1);
  EXPECT_EQ(b2.collectives(0).seq(), 2u);
  // A record with a time far in the future still goes out once it has waited a full window.
  t.Add(Collective(1, 3, "AllReduce", 1000, 1'000'000, 2'000'000, 2100));
  v1::Batch b3;
  FillWindow(t, 2000, 3000, {}, &b3);
  EXPECT_EQ(b3.collectives_size(), 0);
  v1::Batch b4;
  FillWindow(t, 3000, 4000, {}, &b4);
  EXPECT_EQ(b4.collectives_size(), 1);
  EXPECT_EQ(b4.collectives(0).seq(), 3u);
}

TEST(GpuTimeline, JoinsProxyOpsAndCountsRankPairs) {
  GpuTimeline t;
  t.Add(ProxyOp(5, 8, 2, true, 1000));
  t.Add(ProxyOp(5, 8, 2, true, 500));
  t.Add(ProxyOp(5, 8, 0, false, 700));
  t.Add(ProxyOp(5, 9, 2, true, 300));  // another collective's
  t.Add(Collective(5, 8, "AllReduce", 4096, 100, 200));
  v1::Batch b;
  FillWindow(t, 0, 1000, {}, &b);
  ASSERT_EQ(b.collectives_size(), 1);
  const v1::Collective& c = b.collectives(0);
  ASSERT_EQ(c.proxy_peers_size(), 2);
  EXPECT_EQ(c.proxy_peers(0).peer(), 2);  // biggest first
  EXPECT_EQ(c.proxy_peers(0).bytes_sent(), 1500u);
  EXPECT_EQ(c.proxy_peers(0).bytes_received(), 0u);
  EXPECT_EQ(c.proxy_peers(0).ops(), 2u);
  EXPECT_EQ(c.proxy_peers(1).peer(), 0);
  EXPECT_EQ(c.proxy_peers(1).bytes_received(), 700u);
  // Rank pairs: sends only (the receiver's node reports nothing for the same bytes).
  ASSERT_EQ(b.gpu().rank_pairs_size(), 1);
  EXPECT_EQ(b.gpu().rank_pairs(0).src_rank(), 1);
  EXPECT_EQ(b.gpu().rank_pairs(0).dst_rank(), 2);
  EXPECT_EQ(b.gpu().rank_pairs(0).bytes_total(), 1800u);
}

// Channel spans (two records of one collective, out of channel order, one of another collective)
// join their collective by (comm, rank, func, seq), sorted by channel.
TEST(GpuTimeline, JoinsChannelSpansInChannelOrder) {
  GpuTimeline t;
  t.Add(Channels(5, 8, {{3, 150, 190}, {0, 100, 200}, {2, 120, 180}, {1, 110, 170}}));
  t.Add(Channels(5, 8, {{4, 101, 199}}));
  t.Add(Channels(5, 9, {{0, 300, 400}}));  // another collective's
  t.Add(Collective(5, 8, "AllReduce", 4096, 100, 200));
  t.Add(Collective(5, 9, "AllReduce", 4096, 300, 400));
  t.Add(Collective(5, 10, "AllReduce", 4096, 500, 600));  // none sent for it
  v1::Batch b;
  FillWindow(t, 0, 1000, {}, &b);
  ASSERT_EQ(b.collectives_size(), 3);
  const v1::Collective& c = b.collectives(0);
  ASSERT_EQ(c.seq(), 8u);
  ASSERT_EQ(c.channel_spans_size(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(c.channel_spans(i).channel(), static_cast<uint32_t>(i));
  EXPECT_EQ(c.channel_spans(0).start_ns(), 100);
  EXPECT_EQ(c.channel_spans(3).end_ns(), 190);
  EXPECT_EQ(c.channel_spans(4).start_ns(), 101);
  ASSERT_EQ(b.collectives(1).channel_spans_size(), 1);
  EXPECT_EQ(b.collectives(1).channel_spans(0).start_ns(), 300);
  EXPECT_EQ(b.collectives(2).channel_spans_size(), 0);
}

TEST(GpuTimeline, CapsTheBatchButCountsEverythingInTheTotals) {
  GpuTimelineOptions o;
  o.max_collectives_per_batch = 2;
  GpuTimeline t(o);
  // Durations 1, 2, 3, 4, 5 ms (start 1: 0 means unknown), 1 MB each over 4 ranks: bus bytes
  // 1.5 MB each.
  for (int i = 1; i <= 5; ++i) {
    t.Add(Collective(7, static_cast<uint64_t>(i), "AllReduce", 1'000'000, 1, 1 + i * 1'000'000));
  }
  v1::Batch b;
  FillWindow(t, 0, 10'000'000, {}, &b);
  EXPECT_EQ(b.collectives_size(), 2);
  EXPECT_EQ(b.gpu().collectives_not_sent(), 3u);
  ASSERT_EQ(b.gpu().collective_totals_size(), 1);
  const v1::CollectiveTotals& ct = b.gpu().collective_totals(0);
  EXPECT_EQ(ct.func(), "AllReduce");
  EXPECT_EQ(ct.count(), 5u);
  EXPECT_EQ(ct.duration_seconds().count(), 5u);
  EXPECT_NEAR(ct.duration_seconds().sum(), 0.015, 1e-12);
  EXPECT_EQ(ct.bytes_total(), 5'000'000u);
  EXPECT_EQ(ct.bus_bytes_total(), 7'500'000u);
  EXPECT_EQ(ct.window_count(), 5u);
  // Time-weighted: 7.5 MB of bus bytes over 15 ms = 5e8 B/s.
  EXPECT_NEAR(ct.window_busbw_bytes_per_second(), 5e8, 1e-3);
  EXPECT_NEAR(ct.window_seconds(), 0.015, 1e-12);
  // The 1 ms one lands in the (500us, 1ms] bucket.
  const auto bounds = CollectiveDurationBounds();
  const size_t ms =
      static_cast<size_t>(std::find(bounds.begin(), bounds.end(), 1e-3) - bounds.begin());
  EXPECT_EQ(ct.duration_seconds().bucket_counts(static_cast<int>(ms)), 1u);

  v1::Batch next;  // nothing new: totals stay, the window part resets
  FillWindow(t, 10'000'000, 20'000'000, {}, &next);
  EXPECT_EQ(next.gpu().collective_totals(0).count(), 5u);
  EXPECT_EQ(next.gpu().collective_totals(0).window_count(), 0u);
  EXPECT_EQ(next.gpu().collective_totals(0).window_busbw_bytes_per_second(), 0.0);
}

TEST(GpuTimeline, KernelSpansNcclFirstThenSummarized) {
  GpuTimelineOptions o;
  o.max_kernel_spans_per_batch = 2;
  GpuTimeline t(o);
  t.Add(Kernel(0, "gemm", false, 100, 200));
  t.Add(Kernel(0, "gemm", false, 300, 600));
  t.Add(Kernel(1, "ncclDevKernel_AllReduce", true, 100, 400));
  t.Add(Kernel(0, "softmax", false, 700, 710));
  v1::Batch b;
  FillWindow(t, 0, 1000, {}, &b);
  ASSERT_EQ(b.kernel_spans_size(), 2);
  EXPECT_EQ(b.kernel_spans(0).name(), "ncclDevKernel_AllReduce");
  EXPECT_TRUE(b.kernel_spans(0).is_nccl());
  EXPECT_EQ(b.kernel_spans(0).device(), 1u);
  EXPECT_EQ(b.kernel_spans(1).name(), "gemm");
  EXPECT_EQ(b.kernel_spans(1).start_ns(), 100);
  EXPECT_EQ(b.kernel_spans(1).pid(), 4242);
  EXPECT_EQ(b.gpu().kernel_spans_summarized(), 2u);
  ASSERT_EQ(b.gpu().kernel_summaries_size(), 2);
  EXPECT_EQ(b.gpu().kernel_summaries(0).name(), "gemm");
  EXPECT_EQ(b.gpu().kernel_summaries(0).count(), 1u);
  EXPECT_DOUBLE_EQ(b.gpu().kernel_summaries(0).seconds(), 300e-9);
  EXPECT_EQ(b.gpu().kernel_summaries(1).name(), "softmax");
  ASSERT_EQ(b.gpu().kernel_totals_size(), 2);
  EXPECT_EQ(b.gpu().kernel_totals(0).device(), 0u);
  EXPECT_EQ(b.gpu().kernel_totals(0).kernels_total(), 3u);
  EXPECT_DOUBLE_EQ(b.gpu().kernel_totals(0).kernel_seconds_total(), 410e-9);
  EXPECT_EQ(b.gpu().kernel_totals(1).nccl_kernels_total(), 1u);
}

// Those of connected processes, and for one window those of a process that has left
// (GpuTimelineComms.ACommunicatorIsListedOnceMoreAfterItsProcessLeaves).
TEST(GpuTimeline, ListsCommunicatorsOfConnectedProcessesOnly) {
  GpuTimeline t;
  GpuEvent c = Event(gpu::RecordType::kComm, 100, 2, 0);
  c.comm.comm_hash = 0x77;
  c.comm.rank = 3;
  c.comm.nranks = 16;
  c.comm.nnodes = 2;
  c.comm.cuda_device = 2;
  gpu::CopyFixed(c.comm.name, "dp");
  t.Add(c);
  c.pid = 101;
  c.comm.rank = 4;
  t.Add(c);
  v1::Batch first;
  FillWindow(t, 0, 1000, {101}, &first);  // pid 100 left in this window: listed once more
  ASSERT_EQ(first.gpu().communicators_size(), 2);
  v1::Batch b;
  FillWindow(t, 1000, 2000, {101}, &b);
  ASSERT_EQ(b.gpu().communicators_size(), 1);
  EXPECT_EQ(b.gpu().communicators(0).rank(), 4);
  EXPECT_EQ(b.gpu().communicators(0).nranks(), 16);
  EXPECT_EQ(b.gpu().communicators(0).name(), "dp");
  EXPECT_EQ(b.gpu().communicators(0).gpu(), 2);
}

}  // namespace
}  // namespace fabricscope::agent

namespace fabricscope::agent {
namespace {

// A producer's kernel or function name that is not UTF-8 (any local process may write to the
// GPU socket) no longer makes the batch unserializable, which stalled the uplink behind it.
TEST(GpuTimeline, NamesThatAreNotUtf8StillMakeASerializableBatch) {
  GpuTimeline t(GpuTimelineOptions{});
  t.Add(Kernel(0, "gemm\xFF\xC3", false, 100, 200));
  t.Add(Collective(0xabc, 1, "AllReduce\x80", 1 << 20, 300, 400, 500));
  v1::Batch b;
  FillWindow(t, 0, 1000, {}, &b);
  ASSERT_EQ(b.kernel_spans_size(), 1);
  EXPECT_EQ(b.kernel_spans(0).name(), "gemm\xEF\xBF\xBD\xEF\xBF\xBD");
  ASSERT_EQ(b.collectives_size(), 1);
  EXPECT_EQ(b.collectives(0).func_raw(), "AllReduce\xEF\xBF\xBD");
  std::string wire;
  EXPECT_TRUE(b.SerializeToString(&wire));
  v1::Batch back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.kernel_spans(0).name(), b.kernel_spans(0).name());
}

// An early batch takes the collectives that ended by its sample time, with their proxy peers;
// the window's batch then carries the rest only, and its totals count every collective once.
TEST(GpuTimeline, EarlyBatchTakesWhatEndedAndTheWindowTheRest) {
  GpuTimeline t;
  t.Add(ProxyOp(7, 1, 2, true, 1000));
  t.Add(Collective(7, 1, "AllReduce", 4096, 100, 200));
  t.Add(Collective(7, 2, "AllReduce", 4096, 300, 400));
  t.Add(Collective(7, 3, "AllReduce", 4096, 500, 600));
  v1::Batch early;
  EXPECT_EQ(FillEarly(t, 400, &early), 2u);
  ASSERT_EQ(early.collectives_size(), 2);
  EXPECT_EQ(early.collectives(0).seq(), 1u);
  EXPECT_EQ(early.collectives(1).seq(), 2u);
  ASSERT_EQ(early.collectives(0).proxy_peers_size(), 1);
  EXPECT_EQ(early.collectives(0).proxy_peers(0).bytes_sent(), 1000u);
  EXPECT_FALSE(early.has_gpu());
  EXPECT_EQ(FillEarly(t, 400, &early), 0u);  // taken once

  v1::Batch window;
  window.set_window_start_ns(0);
  window.set_window_end_ns(1000);
  FillWindow(t, 0, 1000, {}, &window);
  ASSERT_EQ(window.collectives_size(), 1);
  EXPECT_EQ(window.collectives(0).seq(), 3u);
  ASSERT_EQ(window.gpu().collective_totals_size(), 1);
  EXPECT_EQ(window.gpu().collective_totals(0).count(), 3u);
  EXPECT_EQ(window.gpu().collective_totals(0).window_count(), 3u);
  EXPECT_EQ(window.gpu().collectives_not_sent(), 0u);
}

// Past max_collectives_per_batch, an early batch counts the rest as not sent (in the window).
TEST(GpuTimeline, EarlyBatchIsBoundedAndCountsTheRest) {
  GpuTimelineOptions o;
  o.max_collectives_per_batch = 2;
  GpuTimeline t(o);
  for (uint64_t s = 0; s < 5; ++s) {
    const int64_t start = 100 * static_cast<int64_t>(s);
    t.Add(Collective(7, s, "AllReduce", 4096, start, start + 50));
  }
  v1::Batch early;
  EXPECT_EQ(FillEarly(t, 10'000, &early), 5u);
  EXPECT_EQ(early.collectives_size(), 2);
  v1::Batch window;
  FillWindow(t, 0, 10'000, {}, &window);
  EXPECT_EQ(window.collectives_size(), 0);
  EXPECT_EQ(window.gpu().collectives_not_sent(), 3u);
  EXPECT_EQ(window.gpu().collective_totals(0).count(), 5u);
}

}  // namespace
}  // namespace fabricscope::agent
