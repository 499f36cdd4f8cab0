// The aggregator's side of the on-demand flight-recorder fetch (exporters/state/recording_fetch.h):
// answers, deadlines, late and misdirected answers, unreachable nodes, the bound on concurrent
// fetches, and the answers' way in through ClusterState's ingest.
#include "exporters/state/recording_fetch.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "exporters/state/cluster_state.h"
#include "tests/common/units.h"
#include "tests/common/wait.h"

namespace fabricscope::exporters {
namespace {

using testing::WaitFor;

// Stands in for the stream registry: keeps what was sent, refuses the nodes in `offline` (no
// stream) and in `full` (requests already queued).
struct FetchStreams {
  absl::Mutex mu;
  std::vector<std::pair<std::string, v1::RecordingRequest>> sent;
  std::vector<std::string> offline, full;
  RecordingFetch::Sender Sender() {
    return [this](const std::string& node, const v1::RecordingRequest& r) {
      absl::MutexLock lock(&mu);
      auto in = [&node](const std::vector<std::string>& v) {
        return std::find(v.begin(), v.end(), node) != v.end();
      };
      if (in(offline)) return RecordingFetch::Sent::kNotConnected;
      if (in(full)) return RecordingFetch::Sent::kBusy;
      sent.emplace_back(node, r);
      return RecordingFetch::Sent::kSent;
    };
  }
  size_t count() {
    absl::MutexLock lock(&mu);
    return sent.size();
  }
  std::pair<std::string, v1::RecordingRequest> at(size_t i) {
    absl::MutexLock lock(&mu);
    return sent.at(i);
  }
};

LinkRecording FetchAnswer(const v1::RecordingRequest& r, const std::string& node, int samples) {
  LinkRecording rec;
  rec.r.set_request_id(r.id());
  rec.r.set_reason("requested");
  for (int i = 0; i < samples; ++i) rec.r.add_time_ns(i * kMs);
  rec.node = node;
  rec.device = "mlx5_0";
  rec.port = 1;
  return rec;
}

TEST(RecordingFetch, WaitsForEveryNodesAnswerAndHandsTheRecordingsOver) {
  FetchStreams streams;
  RecordingFetch fetch;
  fetch.SetSender(streams.Sender());
  RecordingFetch::Result got;
  std::thread waiter([&] {
    got = fetch.Fetch({"n1", "n2"}, 5 * kSec, 6 * kSec, 500, absl::Seconds(30));
  });
  ASSERT_TRUE(WaitFor([&] { return streams.count() == 2; }));
  const auto [n1, r1] = streams.at(0);
  const auto [n2, r2] = streams.at(1);
  EXPECT_EQ(n1, "n1");
  EXPECT_NE(r1.id(), r2.id());
  EXPECT_EQ(r1.from_unix_ns(), 5 * kSec);
  EXPECT_EQ(r1.to_unix_ns(), 6 * kSec);
  EXPECT_EQ(r1.max_samples(), 500u);
  fetch.Answer("n2", {FetchAnswer(r2, "n2", 3)});
  fetch.Answer("n1", {FetchAnswer(r1, "n1", 2), FetchAnswer(r1, "n1", 4)});  // two ports
  waiter.join();  // returns well before its 30 s: all answered
  EXPECT_EQ(got.answered, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_TRUE(got.timed_out.empty());
  ASSERT_EQ(got.recordings.size(), 3u);
  EXPECT_EQ(got.recordings[0].r.time_ns_size() + got.recordings[1].r.time_ns_size(), 6);
  EXPECT_EQ(got.recordings[2].node, "n2");
  EXPECT_EQ(fetch.stats().answered_total, 2u);
}

TEST(RecordingFetch, ANodeThatNeverAnswersEndsAtTheDeadlineAndItsLateAnswerIsCounted) {
  FetchStreams streams;
  RecordingFetch fetch;
  fetch.SetSender(streams.Sender());
  const RecordingFetch::Result got = fetch.Fetch({"n1"}, 0, kSec, 0, absl::Milliseconds(50));
  EXPECT_EQ(got.timed_out, std::vector<std::string>{"n1"});
  EXPECT_TRUE(got.recordings.empty());
  fetch.Answer("n1", {FetchAnswer(streams.at(0).second, "n1", 1)});
  EXPECT_EQ(fetch.stats().timed_out_total, 1u);
  EXPECT_EQ(fetch.stats().late_total, 1u);
}

TEST(RecordingFetch, AnAnswerFromAnotherNodeOrWithAnUnknownIdIsDropped) {
  FetchStreams streams;
  RecordingFetch fetch;
  fetch.SetSender(streams.Sender());
  RecordingFetch::Result got;
  std::thread waiter([&] { got = fetch.Fetch({"n1"}, 0, kSec, 0, absl::Milliseconds(300)); });
  ASSERT_TRUE(WaitFor([&] { return streams.count() == 1; }));
  const v1::RecordingRequest r = streams.at(0).second;
  fetch.Answer("n9", {FetchAnswer(r, "n9", 5)});  // n9 cannot answer n1's request
  v1::RecordingRequest unknown = r;
  unknown.set_id(r.id() + 1000);
  fetch.Answer("n1", {FetchAnswer(unknown, "n1", 5)});
  waiter.join();
  EXPECT_EQ(got.timed_out, std::vector<std::string>{"n1"});
  EXPECT_TRUE(got.recordings.empty());
  EXPECT_EQ(fetch.stats().late_total, 2u);
}

TEST(RecordingFetch, NodesWithoutAStreamOrWithAFullQueueEndAtOnce) {
  FetchStreams streams;
  streams.offline = {"n2"};
  streams.full = {"n3"};
  RecordingFetch fetch;
  RecordingFetch::Result got = fetch.Fetch({"n1"}, 0, kSec, 0, absl::Seconds(30));
  EXPECT_EQ(got.unreachable, std::vector<std::string>{"n1"});  // no sender yet
  fetch.SetSender(streams.Sender());
  got = fetch.Fetch({"n2", "n3"}, 0, kSec, 0, absl::Seconds(30));  // nothing to wait for
  EXPECT_EQ(got.unreachable, std::vector<std::string>{"n2"});
  EXPECT_EQ(got.busy, std::vector<std::string>{"n3"});  // its stream's queue is full
  EXPECT_EQ(fetch.stats().unreachable_total, 2u);
  EXPECT_EQ(fetch.stats().busy_total, 1u);
}

// Four fetches at most; a fifth asks no one. Clearing the sender (the aggregator stopping) ends
// the waits at once, their nodes unreachable, well before their 30 s deadline; answers after
// that are late.
TEST(RecordingFetch, AtMostFourFetchesRunAndClearingTheSenderEndsThem) {
  FetchStreams streams;
  RecordingFetch fetch;
  fetch.SetSender(streams.Sender());
  std::vector<std::thread> waiters;
  std::vector<RecordingFetch::Result> got(RecordingFetch::kMaxConcurrent);
  for (size_t i = 0; i < RecordingFetch::kMaxConcurrent; ++i) {
    waiters.emplace_back([&, i] { got[i] = fetch.Fetch({"n1"}, 0, kSec, 0, absl::Seconds(30)); });
  }
  ASSERT_TRUE(WaitFor([&] { return streams.count() == RecordingFetch::kMaxConcurrent; }));
  const RecordingFetch::Result busy = fetch.Fetch({"n1", "n2"}, 0, kSec, 0, absl::Seconds(30));
  EXPECT_EQ(busy.busy, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(fetch.stats().busy_total, 2u);
  const absl::Time before = absl::Now();
  fetch.SetSender(nullptr);
  for (std::thread& t : waiters) t.join();
  EXPECT_LT(absl::Now() - before, absl::Seconds(10));
  for (const RecordingFetch::Result& r : got) {
    EXPECT_TRUE(r.answered.empty());
    EXPECT_EQ(r.unreachable, std::vector<std::string>{"n1"});
  }
  for (size_t i = 0; i < RecordingFetch::kMaxConcurrent; ++i) {
    fetch.Answer("n1", {FetchAnswer(streams.at(i).second, "n1", 1)});
  }
  EXPECT_EQ(fetch.stats().late_total, RecordingFetch::kMaxConcurrent);
  EXPECT_EQ(fetch.Fetch({"n1"}, 0, kSec, 0, absl::Seconds(30)).unreachable.size(), 1u);
}

// The answer's way in: a node's regular batch carries it; ClusterState hands it to the fetch with
// its port resolved, and keeps it out of the recent recordings (/api/flight_recordings).
TEST(RecordingFetch, AnswersArriveThroughTheStatesIngest) {
  ClusterState state;
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(1);
  h.set_window_seconds(1);
  v1::PortInfo* p = h.add_ports();
  p->set_device("mlx5_3");
  p->set_port(1);
  ASSERT_TRUE(state.OnHello(h).ok());
  FetchStreams streams;
  state.recording_fetch().SetSender(streams.Sender());
  RecordingFetch::Result got;
  std::thread waiter(
      [&] { got = state.recording_fetch().Fetch({"n1"}, 0, kSec, 0, absl::Seconds(30)); });
  ASSERT_TRUE(WaitFor([&] { return streams.count() == 1; }));
  v1::Batch b;
  b.set_seq(1);
  b.set_unix_offset_ns(77 * kSec);
  b.set_window_start_ns(kSec);
  b.set_window_end_ns(2 * kSec);
  b.add_ports()->set_port_index(0);
  b.mutable_flight_recorder()->set_seconds(10);
  v1::FlightRecording* fr = b.add_flight_recordings();
  fr->set_request_id(streams.at(0).second.id());
  fr->set_reason("requested");
  fr->add_time_ns(kSec + kMs);
  b.add_flight_recordings()->set_reason("burst_with_loss");  // an attached one, kept as before
  ASSERT_TRUE(state.OnBatch("n1", 1, b).ok());
  waiter.join();
  ASSERT_EQ(got.recordings.size(), 1u);
  EXPECT_EQ(got.recordings[0].device, "mlx5_3");
  EXPECT_EQ(got.recordings[0].offset_ns, 77 * kSec);
  const std::vector<LinkRecording> recent = state.links().FlightRecordings("n1");
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0].r.reason(), "burst_with_loss");
  EXPECT_EQ(state.links().FlightRecorderOf("n1").seconds, 10);
  EXPECT_EQ(state.links().FlightRecorderOf("n1").window_seconds, 1);
}

}  // namespace
}  // namespace fabricscope::exporters
