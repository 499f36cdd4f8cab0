#include "agent/batch_assembler.h"

#include <gtest/gtest.h>

#include <utility>

namespace fabricscope::agent {
namespace {

v1::Collective CollectiveWithSeq(uint64_t seq) {
  v1::Collective c;
  c.set_func("AllReduce");
  c.set_seq(seq);
  return c;
}

v1::FlightRecording RecordingFor(uint32_t port, const char* reason) {
  v1::FlightRecording r;
  r.set_port_index(port);
  r.set_reason(reason);
  return r;
}

// A window batch: every part lands once, the window's collectives and recordings before the
// analysed ones, and the window's own fields are kept.
TEST(BatchAssembler, EveryPartLandsOnceInOrder) {
  BatchParts parts;
  parts.window.set_window_start_ns(1'000);
  parts.window.set_window_end_ns(2'000);
  parts.window.add_ports()->set_port_index(3);
  *parts.window.add_flight_recordings() = RecordingFor(3, "burst_with_loss");
  parts.unix_offset_ns = 1'700'000'000'000'000'000;
  parts.agent.emplace().set_ticks_total(42);
  parts.capture.emplace().set_interface("eth0");
  GpuWindowParts& gpu = parts.gpu.emplace();
  gpu.gpu.set_kernel_spans_summarized(7);
  gpu.kernel_spans.emplace_back().set_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  gpu.kernel_spans.emplace_back().set_name("sgemm");
  parts.analysed.collectives.push_back(CollectiveWithSeq(5));
  parts.analysed.collectives.push_back(CollectiveWithSeq(6));
  parts.analysed.recordings.push_back(RecordingFor(3, "slow_collective"));
  parts.analysed.stats.emplace().set_analyzed_total(2);

  const v1::Batch b = AssembleBatch(std::move(parts));

  EXPECT_EQ(b.window_start_ns(), 1'000);
  EXPECT_EQ(b.window_end_ns(), 2'000);
  EXPECT_EQ(b.unix_offset_ns(), 1'700'000'000'000'000'000);
  EXPECT_FALSE(b.early());
  ASSERT_EQ(b.ports_size(), 1);
  EXPECT_EQ(b.agent().ticks_total(), 42u);
  EXPECT_EQ(b.capture().interface(), "eth0");
  EXPECT_EQ(b.gpu().kernel_spans_summarized(), 7u);
  ASSERT_EQ(b.kernel_spans_size(), 2);
  EXPECT_EQ(b.kernel_spans(1).name(), "sgemm");
  ASSERT_EQ(b.collectives_size(), 2);
  EXPECT_EQ(b.collectives(0).seq(), 5u);
  EXPECT_EQ(b.collectives(1).seq(), 6u);
  ASSERT_EQ(b.flight_recordings_size(), 2);
  EXPECT_EQ(b.flight_recordings(0).reason(), "burst_with_loss");
  EXPECT_EQ(b.flight_recordings(1).reason(), "slow_collective");
  EXPECT_TRUE(b.has_collective_analysis());
  EXPECT_EQ(b.collective_analysis().analyzed_total(), 2u);
}

// An early batch carries analysed collectives only: no agent, capture or GPU part appears
// (the aggregator reads an absent CaptureWindow as "no capture runs", telemetry.proto), and no
// stats (an early Process writes none, as
// CollectiveAnalysisTest.EarlyProcessSharesTheWindowsRecordingBudget checks).
TEST(BatchAssembler, AnEarlyBatchHoldsOnlyWhatItWasGiven) {
  BatchParts parts;
  parts.window.set_window_start_ns(5'000);
  parts.window.set_window_end_ns(5'000);
  parts.early = true;
  parts.analysed.collectives.push_back(CollectiveWithSeq(9));

  const v1::Batch b = AssembleBatch(std::move(parts));

  EXPECT_TRUE(b.early());
  EXPECT_FALSE(b.has_agent());
  EXPECT_FALSE(b.has_capture());
  EXPECT_FALSE(b.has_gpu());
  EXPECT_FALSE(b.has_collective_analysis());
  EXPECT_EQ(b.kernel_spans_size(), 0);
  ASSERT_EQ(b.collectives_size(), 1);
  EXPECT_EQ(b.collectives(0).seq(), 9u);
}

// The agent's order (agent.cc SubmitReady): the window's own analyses, then what early batches
// analysed but could not send. The window's stats stay, even against a carry that held some.
TEST(BatchAssembler, TheCarryFollowsTheWindowsAnalysesAndTheWindowsStatsStay) {
  AnalyzerOutput window;
  window.collectives.push_back(CollectiveWithSeq(7));
  window.recordings.push_back(RecordingFor(1, "slow_collective"));
  window.stats.emplace().set_analyzed_total(9);
  AnalyzerOutput carry;
  carry.collectives.push_back(CollectiveWithSeq(4));
  carry.collectives.push_back(CollectiveWithSeq(5));
  carry.recordings.push_back(RecordingFor(2, "slow_collective"));
  carry.stats.emplace().set_analyzed_total(5);
  window.Append(std::move(carry));
  EXPECT_TRUE(carry.empty());

  BatchParts parts;
  *parts.window.add_flight_recordings() = RecordingFor(0, "burst_with_loss");
  parts.analysed = std::move(window);
  const v1::Batch b = AssembleBatch(std::move(parts));
  ASSERT_EQ(b.collectives_size(), 3);
  EXPECT_EQ(b.collectives(0).seq(), 7u);
  EXPECT_EQ(b.collectives(1).seq(), 4u);
  EXPECT_EQ(b.collectives(2).seq(), 5u);
  ASSERT_EQ(b.flight_recordings_size(), 3);
  EXPECT_EQ(b.flight_recordings(0).port_index(), 0u);
  EXPECT_EQ(b.flight_recordings(1).port_index(), 1u);
  EXPECT_EQ(b.flight_recordings(2).port_index(), 2u);
  EXPECT_EQ(b.collective_analysis().analyzed_total(), 9u);
}

// Stats: the receiving output's when it has them, else the other's; two empty outputs stay
// empty.
TEST(BatchAssembler, StatsComeFromWhicheverOutputHasThem) {
  AnalyzerOutput none;
  AnalyzerOutput with;
  with.stats.emplace().set_analyzed_total(3);
  none.Append(std::move(with));
  ASSERT_TRUE(none.stats.has_value());
  EXPECT_EQ(none.stats->analyzed_total(), 3u);
  AnalyzerOutput empty;
  AnalyzerOutput also_empty;
  empty.Append(std::move(also_empty));
  EXPECT_TRUE(empty.empty());
}

}  // namespace
}  // namespace fabricscope::agent
