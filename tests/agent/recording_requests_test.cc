// The agent's side of the on-demand flight-recorder fetch (agent/recording_requests.h): the
// inbox's bounds, and the answer's ports, bounds, clock conversion and ids.
#include "agent/recording_requests.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include "agent/pipeline.h"
#include "collectors/clock.h"
#include "collectors/sysfs_ports.h"
#include "tests/common/units.h"

namespace fabricscope::agent {
namespace {

constexpr int64_t kRecOffset = 1'700'000'000 * kSec;  // unix = monotonic + offset

v1::RecordingRequest RecAsk(uint64_t id, int64_t from_mono, int64_t to_mono,
                            std::vector<uint32_t> ports = {}, uint32_t max_samples = 0) {
  v1::RecordingRequest r;
  r.set_id(id);
  r.set_from_unix_ns(from_mono + kRecOffset);
  r.set_to_unix_ns(to_mono + kRecOffset);
  for (uint32_t p : ports) r.add_port_index(p);
  r.set_max_samples(max_samples);
  return r;
}

// Ports 0 and 1 sampled every ms from 1 ms to 100 ms; port 2 never.
FlightRecorder RecRecorder() {
  FlightRecorder rec(3, 1, kMs);
  for (int i = 1; i <= 100; ++i) {
    for (size_t p = 0; p < 2; ++p) {
      FlightSample s;
      s.t_ns = i * kMs;
      s.interval_ns = kMs;
      s.tx_bytes = static_cast<uint64_t>(i * 10 + p);
      s.tx_utilization = static_cast<float>(i) / 100.0f;
      s.rx_utilization = 0;
      rec.Record(p, s);
    }
  }
  return rec;
}

TEST(RecordingInbox, KeepsAtMostItsBoundAndCountsWhatItDrops) {
  RecordingInbox inbox;
  for (uint64_t i = 1; i <= RecordingInbox::kMaxPending + 3; ++i) {
    EXPECT_EQ(inbox.Push(RecAsk(i, 0, kMs)), i <= RecordingInbox::kMaxPending) << i;
  }
  EXPECT_FALSE(inbox.Push(RecAsk(0, 0, kMs)));         // no id
  EXPECT_FALSE(inbox.Push(RecAsk(99, 2 * kMs, kMs)));  // to before from
  EXPECT_EQ(inbox.dropped(), 5u);
  std::vector<v1::RecordingRequest> got = inbox.Take();
  ASSERT_EQ(got.size(), RecordingInbox::kMaxPending);
  EXPECT_EQ(got.front().id(), 1u);  // oldest first
  EXPECT_EQ(got.back().id(), RecordingInbox::kMaxPending);
  EXPECT_TRUE(inbox.Take().empty());
  EXPECT_TRUE(inbox.Push(RecAsk(100, 0, kMs)));  // room again
}

TEST(RecordingInbox, PushesFromManyThreadsKeepTheBound) {
  RecordingInbox inbox;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&inbox, t] {
      for (int i = 1; i <= 50; ++i) inbox.Push(RecAsk(static_cast<uint64_t>(t * 100 + i), 0, kMs));
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(inbox.Take().size(), RecordingInbox::kMaxPending);
  EXPECT_EQ(inbox.dropped(), 200u - RecordingInbox::kMaxPending);
}

TEST(AnswerRecordingRequests, EveryPortConvertedToMonotonicWithItsId) {
  const FlightRecorder rec = RecRecorder();
  v1::Batch b;
  // [10 ms, 19 ms] in Unix time: samples 10..19 of each port.
  EXPECT_EQ(AnswerRecordingRequests(rec, {RecAsk(7, 10 * kMs, 19 * kMs)}, kRecOffset, 65536, &b),
            20u);
  ASSERT_EQ(b.flight_recordings_size(), 3);  // port 2 holds nothing: answered all the same
  for (int p = 0; p < 3; ++p) {
    const v1::FlightRecording& r = b.flight_recordings(p);
    EXPECT_EQ(r.port_index(), static_cast<uint32_t>(p));
    EXPECT_EQ(r.reason(), "requested");
    EXPECT_EQ(r.request_id(), 7u);
    EXPECT_EQ(r.from_ns(), 10 * kMs);
    EXPECT_EQ(r.to_ns(), 19 * kMs);
    EXPECT_FALSE(r.truncated());
  }
  ASSERT_EQ(b.flight_recordings(1).time_ns_size(), 10);
  EXPECT_EQ(b.flight_recordings(1).time_ns(0), 10 * kMs);
  EXPECT_EQ(b.flight_recordings(1).transmit_bytes(9), 191u);
  EXPECT_EQ(b.flight_recordings(2).time_ns_size(), 0);
}

TEST(AnswerRecordingRequests, TheBoundIsSharedByThePortsAndMarksTheCut) {
  const FlightRecorder rec = RecRecorder();
  v1::Batch b;
  // Two ports asked (one twice, one unknown) with 30 samples at most, under the window's bound
  // of 20: 10 each. The second request finds the window's bound spent: answered, empty, cut.
  EXPECT_EQ(AnswerRecordingRequests(rec,
                                    {RecAsk(1, 1 * kMs, 100 * kMs, {1, 0, 1, 9}, 30),
                                     RecAsk(2, 1 * kMs, 100 * kMs, {0}, 1000)},
                                    kRecOffset, 20, &b),
            20u);
  ASSERT_EQ(b.flight_recordings_size(), 3);
  EXPECT_EQ(b.flight_recordings(0).port_index(), 1u);
  EXPECT_EQ(b.flight_recordings(0).time_ns_size(), 10);   // min(30, 20) / 2 ports
  EXPECT_EQ(b.flight_recordings(0).time_ns(0), 1 * kMs);  // the earliest kept
  EXPECT_TRUE(b.flight_recordings(0).truncated());
  EXPECT_EQ(b.flight_recordings(1).port_index(), 0u);
  EXPECT_EQ(b.flight_recordings(2).request_id(), 2u);
  EXPECT_EQ(b.flight_recordings(2).time_ns_size(), 0);
  EXPECT_TRUE(b.flight_recordings(2).truncated());
  // With room left, the second request gets what the first did not use.
  v1::Batch c;
  EXPECT_EQ(AnswerRecordingRequests(
                rec, {RecAsk(3, 1 * kMs, 5 * kMs, {0}), RecAsk(4, 1 * kMs, 100 * kMs, {1})},
                kRecOffset, 20, &c),
            5u + 15u);
}

TEST(AnswerRecordingRequests, HostileRangesSelectNothingAndNeverWrap) {
  const FlightRecorder rec = RecRecorder();
  v1::Batch b;
  v1::RecordingRequest r;
  r.set_id(3);
  r.set_from_unix_ns(std::numeric_limits<int64_t>::min());
  r.set_to_unix_ns(std::numeric_limits<int64_t>::min() + 5);
  v1::RecordingRequest far;
  far.set_id(4);
  far.set_from_unix_ns(std::numeric_limits<int64_t>::max() - 5);
  far.set_to_unix_ns(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(AnswerRecordingRequests(rec, {r, far}, kRecOffset, 65536, &b), 0u);
  EXPECT_EQ(b.flight_recordings_size(), 6);  // answered, empty
  // Within the times the aggregator admits (|t| <= 2^61 ns), or it would refuse the whole batch.
  for (const v1::FlightRecording& fr : b.flight_recordings()) {
    EXPECT_LE(std::abs(fr.from_ns()), int64_t{1} << 61);
    EXPECT_LE(std::abs(fr.to_ns()), int64_t{1} << 61);
  }
  // An offset that would overflow the subtraction saturates too.
  v1::Batch c;
  EXPECT_EQ(AnswerRecordingRequests(rec, {RecAsk(5, 0, 100 * kMs)},
                                    std::numeric_limits<int64_t>::min(), 65536, &c),
            0u);
}

TEST(AnswerRecordingRequests, ARecorderThatIsOffAnswersEmpty) {
  const FlightRecorder off(2, 0, kMs);
  v1::Batch b;
  EXPECT_EQ(AnswerRecordingRequests(off, {RecAsk(8, 0, kSec)}, kRecOffset, 65536, &b), 0u);
  ASSERT_EQ(b.flight_recordings_size(), 2);
  EXPECT_EQ(b.flight_recordings(1).request_id(), 8u);
}

// Through the pipeline on the real sysfs tree's ports: a request pushed from another thread (the
// uplink's reader) is answered in the batch of the window that closes next, in the agent's own
// clock, and counted.
TEST(PipelineRecordingRequests, AnsweredWhenTheWindowCloses) {
  auto discovered =
      collectors::DiscoverRdmaPorts(std::string(FABRICSCOPE_TESTDATA) + "/sysfs-real");
  ASSERT_TRUE(discovered.ok());
  Pipeline p(discovered->ports, {});
  size_t n = 0;
  for (const auto& port : discovered->ports) n += port.counters.size();
  std::vector<uint64_t> values(n, 0);
  std::vector<collectors::ReadStatus> status(n, collectors::ReadStatus::kOk);
  const int64_t offset = collectors::MeasureUnixOffsetNs();
  v1::RecordingRequest r;
  r.set_id(42);
  // Ticks every 10 ms from 100 ms: samples end at 110 .. 990 ms; [199, 501] ms holds 200 .. 500.
  r.set_from_unix_ns(199 * kMs + offset);
  r.set_to_unix_ns(501 * kMs + offset);
  std::thread([&p, &r] { EXPECT_TRUE(p.recording_inbox().Push(r)); }).join();
  for (int64_t t = 100 * kMs; t < kSec; t += 10 * kMs) {
    for (uint64_t& v : values) v += 100;
    p.AddTick(t, values.data(), status.data());
  }
  EXPECT_TRUE(p.TakeReady().empty());             // no window closed yet: nothing answered
  p.AddTick(kSec, values.data(), status.data());  // closes [0.1 s, 1 s)
  std::vector<v1::Batch> ready = p.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  const v1::Batch& b = ready[0];
  ASSERT_EQ(b.flight_recordings_size(), static_cast<int>(discovered->ports.size()));
  int with_samples = 0;
  for (const v1::FlightRecording& fr : b.flight_recordings()) {
    EXPECT_EQ(fr.request_id(), 42u);
    EXPECT_EQ(fr.reason(), "requested");
    if (fr.time_ns_size() == 0) continue;
    ++with_samples;
    ASSERT_EQ(fr.time_ns_size(), 31) << fr.port_index();
    EXPECT_EQ(fr.time_ns(0), 200 * kMs);
    EXPECT_EQ(fr.time_ns(30), 500 * kMs);
    EXPECT_EQ(fr.interval_ns(0), 10 * kMs);
  }
  EXPECT_GT(with_samples, 0);
  EXPECT_EQ(b.flight_recorder().requests_answered_total(), 1u);
  EXPECT_EQ(b.flight_recorder().requests_dropped_total(), 0u);
  // Answered once: the next window carries no second answer.
  p.AddTick(2 * kSec, values.data(), status.data());
  ready = p.TakeReady();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].flight_recordings_size(), 0);
}

}  // namespace
}  // namespace fabricscope::agent
