// The event history fed by the cluster state (exporters/history/history_recorder.h), and the
// timeline drawn from it (exporters/exposition/timeline_gather.h, timeline_json.h): a 4-rank
// communicator of job 8812 whose rank 2 arrives 100 ms late at every all-reduce, one node's
// port with a microburst, a loss episode and a rate change; every kind checked by its fields,
// and the trace checked event by event.
#include "exporters/history/history_recorder.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/timeline_gather.h"
#include "exporters/exposition/timeline_json.h"
#include "exporters/ingest/admission.h"
#include "exporters/state/cluster_state.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {
namespace {

constexpr uint64_t kRecComm = 0x9f0c1a2b5d6e7f80ull;
constexpr int kRecRanks = 4;
constexpr int kRecLate = 2;
constexpr int64_t kRecPeriod = 500 * kMs;

std::string RecNode(int r) { return absl::StrCat("n", r); }

class HistoryRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fabricscope-recorder.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    HistoryStore::Options o;
    o.path = dir_ + "/history.db";
    o.jsonl_path = dir_ + "/history.jsonl";
    auto s = HistoryStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    recorder_ = std::make_shared<HistoryRecorder>(state_, *store_);
    state_.SetObserver(recorder_);
    // A base two minutes ago: the link analysis's memory (10 s) holds none of it, so the
    // timeline's port track comes from the history's utilization events.
    base_ = absl::ToUnixSeconds(absl::Now()) * kSec - 120 * kSec;  // a whole second
  }
  void TearDown() override {
    state_.SetObserver(nullptr);
    recorder_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Hellos() {
    for (int r = 0; r < kRecRanks; ++r) {
      v1::Hello h;
      h.set_node(RecNode(r));
      h.set_instance_id(100 + static_cast<uint64_t>(r));
      v1::PortInfo* p = h.add_ports();
      p->set_device("mlx5_0");
      p->set_port(1);
      p->set_rdma(true);
      p->set_line_rate_bytes_per_second(50'000'000'000);
      ASSERT_TRUE(state_.OnHello(h).ok());
    }
  }
  // Window `w` (1 s) of node r: seq w's all-reduce (rank 2 late by 100 ms, ending 1 ms after
  // the others), the job, the port at 40% with, on n1, a microburst in window 3, loss in windows
  // 4-5 and a rate change in window 6.
  v1::Batch Window(int r, uint64_t w) {
    v1::Batch b;
    b.set_seq(w + 1);
    b.set_unix_offset_ns(base_);
    b.set_window_start_ns(static_cast<int64_t>(w) * kSec);
    b.set_window_end_ns(static_cast<int64_t>(w + 1) * kSec);
    v1::PortWindow* pw = b.add_ports();
    pw->set_port_index(0);
    pw->set_utilization_valid(true);
    pw->mutable_transmit()->set_mean_utilization(0.4);
    pw->mutable_transmit()->set_peak_utilization(r == 1 && w == 3 ? 0.99 : 0.5);
    pw->mutable_receive()->set_mean_utilization(0.3);
    pw->mutable_receive()->set_peak_utilization(0.35);
    if (r == 1 && w == 3) {
      v1::Microburst* m = b.add_microbursts();
      m->set_direction(v1::DIRECTION_TRANSMIT);
      m->set_start_ns(static_cast<int64_t>(w) * kSec + 200 * kMs);
      m->set_duration_ns(3 * kMs);
      m->set_peak_utilization(0.99);
      m->set_bytes(150'000'000);
    }
    if (r == 1 && w == 3) {
      // The agent's samples around it (agent/flight_recorder.h): 10 at 100 us, twice (two
      // recordings overlapping, as two slow collectives' would).
      for (int copy = 0; copy < 2; ++copy) {
        v1::FlightRecording* fr = b.add_flight_recordings();
        fr->set_reason("burst_with_loss");
        for (int i = 0; i < 10; ++i) {
          fr->add_time_ns(static_cast<int64_t>(w) * kSec + 200 * kMs + i * 100'000);
          fr->add_interval_ns(100'000);
          fr->add_transmit_bytes(600'000);
          fr->add_receive_bytes(0);
          fr->add_transmit_utilization(i == 5 ? 0.99f : 0.5f);
          fr->add_receive_utilization(0);
        }
      }
    }
    if (r == 1 && (w == 4 || w == 5)) {
      v1::ErrorCounter* e = pw->add_errors();
      e->set_kind("port_rcv_errors");
      e->set_delta(w == 4 ? 7 : 5);
    }
    if (r == 1 && w == 6) {
      v1::LinkEvent* e = b.add_link_events();
      e->set_what("rate");
      e->set_time_ns(static_cast<int64_t>(w) * kSec + 10 * kMs);
      e->set_old_value(50'000'000'000);
      e->set_new_value(25'000'000'000);
    }
    v1::GpuWindow* g = b.mutable_gpu();
    v1::Job* job = g->add_jobs();
    job->set_id("8812");
    job->set_scheduler("slurm");
    v1::Communicator* c = g->add_communicators();
    c->set_comm_hash(kRecComm);
    c->set_rank(r);
    c->set_nranks(kRecRanks);
    c->set_job_id("8812");
    const int64_t t = static_cast<int64_t>(w) * kSec + 100 * kMs;
    const bool late = r == kRecLate;
    v1::Collective* col = b.add_collectives();
    col->set_comm_hash(kRecComm);
    col->set_rank(r);
    col->set_nranks(kRecRanks);
    col->set_func("AllReduce");
    col->set_seq(w);
    col->set_bytes(64 << 20);
    col->set_pid(1000 + r);
    col->set_start_ns(late ? t + 100 * kMs : t + r * kMs);
    col->set_end_ns(t + 130 * kMs + (late ? 1 * kMs : 0));
    v1::CollectiveAnalysis* a = col->mutable_analysis();
    a->set_cause(late ? v1::COLLECTIVE_CAUSE_NORMAL : v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS);
    a->set_port_index(0);
    a->set_detail(absl::StrCat("rank ", r));
    a->set_slow(r == 0 && (w == 7 || w == 8));  // above the p99 of its kind, by its agent
    a->add_ports()->set_port_index(0);
    if (channel_spans_ && r == 0 && w == 7) {  // the plugin's per-channel spans of a slow one
      for (uint32_t ch = 0; ch < 3; ++ch) {    // channel 2 after the kernel CUPTI saw
        v1::ChannelSpan* span = col->add_channel_spans();
        span->set_channel(ch);
        span->set_start_ns(col->start_ns() + (ch == 2 ? 128 : 2 + ch) * kMs);
        span->set_end_ns(col->end_ns() - (ch == 2 ? 1 : 3 - ch) * kMs);
      }
      v1::KernelSpan* k = b.add_kernel_spans();  // its NCCL kernel, as CUPTI saw it
      k->set_pid(col->pid());
      k->set_is_nccl(true);
      k->set_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
      k->set_start_ns(col->start_ns() + 2'500'000);
      k->set_end_ns(col->start_ns() + 127'500'000);
    }
    return b;
  }
  void Run(uint64_t windows) {
    Hellos();
    for (uint64_t w = 0; w < windows; ++w) {
      for (int r = 0; r < kRecRanks; ++r)
        ASSERT_TRUE(state_.OnBatch(RecNode(r), 100 + r, Window(r, w)).ok());
      recorder_->Tick(base_ + static_cast<int64_t>(w + 1) * kSec);
    }
  }
  std::vector<HistoryEvent> Events(const std::string& kind, const std::string& job = "") {
    store_->Flush();
    HistoryQuery q;
    q.kind = kind;
    q.job = job;
    q.limit = kMaxHistoryPage;
    auto page = store_->Query(q);
    EXPECT_TRUE(page.ok()) << page.status();
    return page.ok() ? page->events : std::vector<HistoryEvent>{};
  }

  std::string dir_;
  ClusterState state_;
  std::unique_ptr<HistoryStore> store_;
  std::shared_ptr<HistoryRecorder> recorder_;
  int64_t base_ = 0;
  bool channel_spans_ = false;
};

TEST_F(HistoryRecorderTest, EveryKindWithItsNodeCommunicatorAndJob) {
  Run(12);
  EXPECT_EQ(Events("node_joined").size(), 4u);
  // Instances: from seq 1 the skew (98-100 of 131 ms) names rank 2, one instance a second (seq
  // 0 has no arrival history yet, and its skew alone is measured from the ranks' starts: the
  // start-up skew the single-instance rule leaves alone, tests/exporters/analysis/
  // cross_rank_test.cc); the last second's pick is written by Drain (or the next Tick).
  recorder_->Drain();
  const std::vector<HistoryEvent> inst = Events("instance");
  ASSERT_EQ(inst.size(), 11u);
  for (const HistoryEvent& e : inst) {
    EXPECT_EQ(e.comm, kRecComm);
    EXPECT_EQ(e.job, "8812");
    EXPECT_EQ(e.node, "n2");
    EXPECT_NE(e.detail_json.find("\"cause\":\"compute_straggler\""), std::string::npos)
        << e.detail_json;
    EXPECT_NE(e.detail_json.find("\"bottleneck_rank\":2"), std::string::npos) << e.detail_json;
  }
  // A rank's own analysis only when its agent flagged it slow (rank 0, windows 7 and 8): the
  // other waiting ranks are in the instances' rank lists.
  const std::vector<HistoryEvent> cols = Events("collective");
  ASSERT_EQ(cols.size(), 2u);
  for (const HistoryEvent& e : cols) {
    EXPECT_EQ(e.node, "n0");
    EXPECT_EQ(e.job, "8812");
    EXPECT_NE(e.detail_json.find("\"cause\":\"waiting_on_peers\""), std::string::npos);
    EXPECT_NE(e.detail_json.find("\"port\":\"mlx5_0:1\",\"slow\":true"), std::string::npos)
        << e.detail_json;
    EXPECT_NE(e.detail_json.find("\"similar_in_second\":0}"), std::string::npos);
  }
  EXPECT_EQ(cols[0].unix_ns, base_ + 7 * kSec + 100 * kMs);
  // The diagnosis took compute_straggler on n2 rank 2 once, and has not ended.
  const std::vector<HistoryEvent> began = Events("diagnosis_began");
  ASSERT_EQ(began.size(), 1u);
  EXPECT_EQ(began[0].node, "n2");
  EXPECT_EQ(began[0].job, "8812");
  EXPECT_NE(began[0].detail_json.find("\"rank\":2"), std::string::npos) << began[0].detail_json;
  EXPECT_TRUE(Events("diagnosis_ended").empty());
  // n1's microburst, at its Unix time, with its port.
  const std::vector<HistoryEvent> bursts = Events("microburst");
  ASSERT_EQ(bursts.size(), 1u);
  EXPECT_EQ(bursts[0].node, "n1");
  EXPECT_EQ(bursts[0].unix_ns, base_ + 3 * kSec + 200 * kMs);
  EXPECT_EQ(bursts[0].end_unix_ns, base_ + 3 * kSec + 203 * kMs);
  EXPECT_NE(bursts[0].detail_json.find("\"port\":\"mlx5_0:1\""), std::string::npos);
  // One loss episode over windows 4-5 (7 + 5 errors), ended by window 6.
  const std::vector<HistoryEvent> loss = Events("loss");
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_EQ(loss[0].unix_ns, base_ + 4 * kSec);
  EXPECT_EQ(loss[0].end_unix_ns, base_ + 6 * kSec);
  EXPECT_NE(loss[0].detail_json.find("\"loss_events\":12"), std::string::npos)
      << loss[0].detail_json;
  const std::vector<HistoryEvent> link = Events("link_state");
  ASSERT_EQ(link.size(), 1u);
  EXPECT_NE(link[0].detail_json.find("\"old\":50000000000,\"new\":25000000000"), std::string::npos);
  // Utilization: one per node for windows 0-9, 40% / 30% mean, n1's with its microburst's 99%
  // peak; of windows 10-11 (written by Drain) only n1's, whose peak moved back to 50%: the
  // others' figures held, and a counter holds its value until its next entry.
  const std::vector<HistoryEvent> util = Events("utilization");
  ASSERT_EQ(util.size(), 5u);
  EXPECT_EQ(util[4].node, "n1");
  EXPECT_EQ(util[4].unix_ns, base_ + 10 * kSec);
  EXPECT_EQ(util[4].end_unix_ns, base_ + 12 * kSec);
  EXPECT_NE(util[4].detail_json.find("\"mlx5_0:1\":[0.4,0.5,0.3,0.35,0]"), std::string::npos)
      << util[4].detail_json;
  EXPECT_NE(util[1].detail_json.find("\"mlx5_0:1\":[0.4,0.99,0.3,0.35,0]"), std::string::npos)
      << util[1].detail_json;
  // The job's view holds its own events and its nodes' node-level ones (no job on them).
  const std::vector<HistoryEvent> job_bursts = Events("microburst", "8812");
  EXPECT_EQ(job_bursts.size(), 1u);
  EXPECT_TRUE(Events("microburst", "other-job").empty());
  // Expiry is an event too, and the JSON lines hold every event with the same schema.
  EXPECT_EQ(state_.ExpireNodes(absl::Now() + absl::Hours(1), absl::Minutes(10)).size(), 4u);
  recorder_->Drain();
  EXPECT_EQ(Events("node_expired").size(), 4u);
  auto jobs = store_->Jobs(10);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].nodes, (std::vector<std::string>{"n0", "n1", "n2", "n3"}));
  EXPECT_EQ(store_->stats().jsonl_written, store_->stats().written);
}

TEST_F(HistoryRecorderTest, TheTimelineOfAStragglerEventByEvent) {
  Run(12);
  recorder_->Drain();  // the picks of the last seconds, held for late batches
  store_->Flush();
  TimelineScope scope;
  scope.job = "8812";
  scope.from_ns = base_ + 1 * kSec;
  scope.to_ns = base_ + 11 * kSec;
  auto in = GatherTimeline(state_, store_.get(), scope, 500'000);
  ASSERT_TRUE(in.ok()) << in.status();
  const std::string json = RenderTimelineJson(*in);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS) << json.substr(0, 400);
  simdjson::dom::array events;
  ASSERT_EQ(doc["traceEvents"].get_array().get(events), simdjson::SUCCESS);
  std::map<int64_t, std::string> process;                  // pid -> node
  std::map<std::pair<int64_t, int64_t>, int64_t> rank_of;  // (pid, tid) -> rank
  struct Slice {
    int64_t pid, tid;
    double ts, dur;
    uint64_t seq;
  };
  std::vector<Slice> slices;
  size_t flow_starts = 0, flow_ends = 0, counters = 0, instants = 0;
  std::vector<std::pair<double, double>> sampled;  // (ts, transmit) of n1's recorded samples
  double counter_first = 1e300, counter_last = -1;
  for (simdjson::dom::element e : events) {
    std::string_view ph, name;
    ASSERT_EQ(e["ph"].get_string().get(ph), simdjson::SUCCESS);
    int64_t pid = 0, tid = 0;
    ASSERT_EQ(e["pid"].get_int64().get(pid), simdjson::SUCCESS);
    if (e["tid"].get_int64().get(tid) != simdjson::SUCCESS) tid = 0;
    if (e["name"].get_string().get(name) != simdjson::SUCCESS) name = "";
    double ts = 0;
    if (e["ts"].get_double().get(ts) != simdjson::SUCCESS) ts = 0;
    if (ph == "M" && name == "process_name") {
      std::string_view n;
      ASSERT_EQ(e["args"]["name"].get_string().get(n), simdjson::SUCCESS);
      process[pid] = std::string(n);
    } else if (ph == "M" && name == "thread_name") {
      int64_t rank = -1, world = 0;
      ASSERT_EQ(e["args"]["rank"].get_int64().get(rank), simdjson::SUCCESS);
      ASSERT_EQ(e["args"]["world_size"].get_int64().get(world), simdjson::SUCCESS);
      EXPECT_EQ(world, kRecRanks);
      rank_of[{pid, tid}] = rank;
    } else if (ph == "X") {
      double dur = 0;
      uint64_t seq = 0;
      ASSERT_EQ(e["dur"].get_double().get(dur), simdjson::SUCCESS);
      ASSERT_EQ(e["args"]["seq"].get_uint64().get(seq), simdjson::SUCCESS);
      slices.push_back({pid, tid, ts, dur, seq});
    } else if (ph == "s" || ph == "f") {
      std::string_view bp;
      ASSERT_EQ(e["bp"].get_string().get(bp), simdjson::SUCCESS);
      EXPECT_EQ(bp, "e");
      (ph == "s" ? flow_starts : flow_ends) += 1;
      if (ph == "s") {
        EXPECT_EQ(rank_of.at({pid, tid}), kRecLate) << name;
      }
    } else if (ph == "C" && name == "mlx5_0:1 samples (flight recorder)") {
      EXPECT_EQ(process.at(pid), "n1");
      double tx = -1;
      ASSERT_EQ(e["args"]["transmit"].get_double().get(tx), simdjson::SUCCESS);
      sampled.push_back({ts, tx});
    } else if (ph == "C") {
      ++counters;
      counter_first = std::min(counter_first, ts);
      counter_last = std::max(counter_last, ts);
    } else if (ph == "i") {
      ++instants;
    }
  }
  EXPECT_EQ(process.size(), 4u);
  EXPECT_EQ(rank_of.size(), 4u);
  // Seq 1..10 start inside the range: 4 ranks each, all in memory and in the history once.
  std::map<uint64_t, std::vector<const Slice*>> by_seq;
  for (const Slice& s : slices) by_seq[s.seq].push_back(&s);
  ASSERT_GE(by_seq.size(), 10u);
  for (const auto& [seq, ranks] : by_seq) {
    ASSERT_EQ(ranks.size(), 4u) << "seq " << seq;
    const Slice* late = nullptr;
    for (const Slice* s : ranks) {
      if (rank_of.at({s->pid, s->tid}) == kRecLate) late = s;
    }
    ASSERT_NE(late, nullptr);
    // The late rank starts last and its collective ends last.
    for (const Slice* s : ranks) {
      if (s == late) continue;
      EXPECT_LT(s->ts, late->ts) << "seq " << seq;
      EXPECT_LT(s->ts + s->dur, late->ts + late->dur) << "seq " << seq;
    }
  }
  // Three waiting ranks per straggler instance, each a start on the late rank and an end.
  EXPECT_EQ(flow_starts, flow_ends);
  EXPECT_GE(flow_starts, 3u * 10u);
  // The port's counter track covers the range (10 s utilization from the history: one point per
  // node per period that began in it) and the microburst, loss and rate change are instants.
  EXPECT_GE(counters, 4u);
  EXPECT_LE(counter_first, 0.0 + 1e-3);
  EXPECT_EQ(instants, 3u + 1u);  // microburst, loss, link_state, diagnosis_began
  // The flight recorder's 10 samples once (the overlapping copy deduplicated), at their own
  // 100 us spacing, the burst's 99% among them: 2.2 s after the range's start.
  ASSERT_EQ(sampled.size(), 10u);
  EXPECT_NEAR(sampled[0].first, 2.2e6, 1e-3);
  EXPECT_NEAR(sampled[1].first - sampled[0].first, 100.0, 1e-3);
  EXPECT_NEAR(sampled[5].second, 0.99, 1e-6);
  std::string_view backend;
  ASSERT_EQ(doc["distributedInfo"]["backend"].get_string().get(backend), simdjson::SUCCESS);
  EXPECT_EQ(backend, "nccl");
  int64_t world = 0;
  ASSERT_EQ(doc["distributedInfo"]["world_size"].get_int64().get(world), simdjson::SUCCESS);
  EXPECT_EQ(world, kRecRanks);
}

// Ten instances in one second of one communicator and cause: one event, the longest, with the
// nine others counted.
TEST_F(HistoryRecorderTest, OneInstanceASecondPerCommunicatorAndCause) {
  std::vector<CollectiveInstance> v(10);
  for (int i = 0; i < 10; ++i) {
    v[i].key.comm = kRecComm;
    v[i].key.seq = static_cast<uint64_t>(i);
    v[i].nranks = 1;
    v[i].cause = v1::COLLECTIVE_CAUSE_COMPUTE_STRAGGLER;
    v[i].max_duration_ns = (i == 6 ? 90 : 10 + i) * kMs;
    RankEntry r;
    r.rank = 0;
    r.start_unix_ns = base_ + i * 50 * kMs;
    r.end_unix_ns = r.start_unix_ns + v[i].max_duration_ns;
    v[i].ranks.push_back(r);
  }
  // As the matcher does, each under its shard's lock; out of order within the second.
  for (int i : {3, 9, 0, 6, 1, 2, 8, 4, 5, 7}) recorder_->OnInstance(v[static_cast<size_t>(i)]);
  // An instance of the next second, before the first second's pick is written: its own pick.
  CollectiveInstance next = v[0];
  next.key.seq = 10;
  next.ranks[0].start_unix_ns = base_ + kSec + 10 * kMs;
  recorder_->OnInstance(next);
  recorder_->Tick(base_ + 10 * kSec);
  EXPECT_TRUE(Events("instance").empty());  // within the grace period of late batches
  recorder_->Tick(base_ + 11 * kSec);
  const std::vector<HistoryEvent> inst = Events("instance");
  ASSERT_EQ(inst.size(), 1u);
  EXPECT_NE(inst[0].detail_json.find("\"seq\":6,"), std::string::npos) << inst[0].detail_json;
  EXPECT_NE(inst[0].detail_json.find("\"similar_in_second\":9}"), std::string::npos);
  recorder_->Tick(base_ + 12 * kSec);
  const std::vector<HistoryEvent> both = Events("instance");
  ASSERT_EQ(both.size(), 2u);
  EXPECT_NE(both[1].detail_json.find("\"seq\":10,"), std::string::npos);
  EXPECT_NE(both[1].detail_json.find("\"similar_in_second\":0}"), std::string::npos);
}

// An agent whose clock or offset is wild: times that overflow, times hours away, NaN
// utilization. Nothing kept from them but counts, never an overflow (UBSan in CI) or bad JSON.
TEST_F(HistoryRecorderTest, HostileTimesAndFiguresAreRefusedAndCounted) {
  Hellos();
  // Through admission, as every agent's batch comes: every time would overflow, so the batch is
  // refused whole before the state or the recorder see it.
  Admission admission(state_, AdmissionLimits{});
  v1::Batch b = Window(1, 3);
  b.set_unix_offset_ns(INT64_MAX - 5);
  ASSERT_TRUE(admission.OnBatch(RecNode(1), 101, b).ok());  // acked: resending cannot fix it
  v1::Batch late_collective = Window(1, 3);
  late_collective.set_seq(5);
  late_collective.mutable_collectives(0)->set_end_ns(INT64_MAX);
  ASSERT_TRUE(admission.OnBatch(RecNode(1), 101, late_collective).ok());
  v1::Batch later = Window(1, 4);
  later.set_unix_offset_ns(base_ + 7200 * kSec);  // two hours ahead
  later.mutable_collectives(0)->mutable_analysis()->set_slow(true);
  ASSERT_TRUE(state_.OnBatch(RecNode(1), 101, later).ok());
  v1::Batch nan = Window(2, 5);
  nan.mutable_ports(0)->mutable_transmit()->set_mean_utilization(NAN);
  nan.mutable_ports(0)->mutable_transmit()->set_peak_utilization(INFINITY);
  ASSERT_TRUE(state_.OnBatch(RecNode(2), 102, nan).ok());
  recorder_->Drain();
  EXPECT_TRUE(Events("microburst").empty());
  EXPECT_TRUE(Events("collective").empty());
  EXPECT_GE(store_->stats().refused, 2u);  // the collective and the microburst 2 h ahead
  std::vector<prometheus::MetricFamily> f = ClusterMetrics(state_).Collect();
  double time_refused = 0;
  for (const auto& fam : f) {
    if (fam.name != "fabricscope_aggregator_rejected_batches_total") continue;
    for (const auto& m : fam.metric) {
      if (m.label.at(0).value == "time") time_refused = m.counter.value;
    }
  }
  EXPECT_EQ(time_refused, 2);
  const std::vector<HistoryEvent> util = Events("utilization");
  ASSERT_EQ(util.size(), 1u);
  EXPECT_EQ(util[0].node, "n2");
  EXPECT_NE(util[0].detail_json.find("\"mlx5_0:1\":[0,0,0.3,0.35,0]"), std::string::npos)
      << util[0].detail_json;
}

// A communicator's timeline holds its ranks' nodes' port tracks and instants too, though those
// events name no communicator (they are read for the nodes its slices are on).
TEST_F(HistoryRecorderTest, ACommunicatorsTimelineHoldsItsNodesPortTracks) {
  Run(12);
  recorder_->Drain();
  store_->Flush();
  TimelineScope scope;
  scope.comm_label = static_cast<int64_t>(kRecComm >> 32);
  scope.from_ns = base_ + 3 * kSec;
  scope.to_ns = base_ + 5 * kSec;
  auto in = GatherTimeline(state_, store_.get(), scope, 500'000);
  ASSERT_TRUE(in.ok()) << in.status();
  std::set<std::string> nodes;
  for (const TimelineCounter& c : in->counters) {
    if (c.track != "utilization") continue;
    ASSERT_FALSE(c.points.empty());
    EXPECT_EQ(c.points[0].ns, scope.from_ns);  // the entry of 0-10 s, its value at the start
    nodes.insert(c.node);
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"n0", "n1", "n2", "n3"}));
  bool burst = false;
  for (const TimelineInstant& i : in->instants) burst = burst || i.name.find("microburst") == 0;
  EXPECT_TRUE(burst);
}

// A slow collective's channel spans are kept with it in the history, and the timeline nests them
// in its slice from memory and, the morning after, from the history alone.
TEST_F(HistoryRecorderTest, ChannelSpansStayWithTheSlowCollective) {
  channel_spans_ = true;
  Run(9);
  recorder_->Drain();
  store_->Flush();
  const int64_t start = base_ + 7 * kSec + 100 * kMs;  // rank 0's seq 7
  const std::string want = absl::StrCat(
      "\"channels\":[[0,", start + 2 * kMs, ",", start + 127 * kMs, "],[1,", start + 3 * kMs, ",",
      start + 128 * kMs, "],[2,", start + 128 * kMs, ",", start + 129 * kMs, "]]");
  bool stored = false;
  for (const HistoryEvent& e : Events("collective")) {
    stored = stored || e.detail_json.find(want) != std::string::npos;
  }
  EXPECT_TRUE(stored) << want;
  TimelineScope scope;
  scope.node = "n0";
  scope.from_ns = base_ + 7 * kSec;
  scope.to_ns = base_ + 8 * kSec;
  ClusterState morning_after;  // knows nothing: the history alone
  for (const ClusterState* state : {&state_, &morning_after}) {
    auto in = GatherTimeline(*state, store_.get(), scope, 500'000);
    ASSERT_TRUE(in.ok()) << in.status();
    const TimelineSlice* slow = nullptr;
    for (const TimelineSlice& sl : in->slices) slow = sl.seq == 7 && sl.rank == 0 ? &sl : slow;
    ASSERT_NE(slow, nullptr);
    if (state == &state_) {
      // Memory holds the CUPTI kernel: the spans are cut to it, and channel 2 (after it) goes.
      ASSERT_EQ(slow->channels.size(), 2u);
      EXPECT_EQ(slow->channels[0].start_ns, start + 2'500'000);
      EXPECT_EQ(slow->channels[1].end_ns, start + 127'500'000);
    } else {
      // The history keeps no kernels: the spans are cut to the collective only.
      ASSERT_EQ(slow->channels.size(), 3u);
      EXPECT_EQ(slow->channels[1].start_ns, start + 3 * kMs);
      EXPECT_EQ(slow->channels[1].end_ns, start + 128 * kMs);
    }
    EXPECT_EQ(slow->channels[1].channel, 1u);
    // Each channel on a thread of its own under the rank's (parallel channels must not share
    // one: complete events on a thread nest).
    const std::string json = RenderTimelineJson(*in);
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    ASSERT_EQ(parser.parse(json).get(doc), simdjson::SUCCESS);
    std::map<int64_t, std::string> thread;  // tid -> name
    std::map<std::string, int64_t> channel_tid;
    for (simdjson::dom::element e : doc["traceEvents"].get_array()) {
      std::string_view ph, name, cat;
      int64_t tid = 0;
      if (e["ph"].get(ph) || e["tid"].get(tid)) continue;
      if (ph == "M" && !e["name"].get(name) && name == "thread_name") {
        thread[tid] = std::string(e["args"]["name"].get_string().value());
      } else if (ph == "X" && !e["cat"].get(cat) && cat == "kernel_channel") {
        channel_tid[std::string(e["name"].get_string().value())] = tid;
      }
    }
    EXPECT_EQ(thread[channel_tid["channel 0"]], "rank 0 channel 0");
    EXPECT_EQ(thread[channel_tid["channel 1"]], "rank 0 channel 1");
    EXPECT_NE(channel_tid["channel 0"], channel_tid["channel 1"]);
  }
}

TEST_F(HistoryRecorderTest, TheTimelineRefusesAnUnknownJobAndTooManyEvents) {
  Run(3);
  store_->Flush();
  TimelineScope scope;
  scope.from_ns = base_;
  scope.to_ns = base_ + 3 * kSec;
  scope.job = "nope";
  EXPECT_EQ(GatherTimeline(state_, store_.get(), scope, 500'000).status().code(),
            absl::StatusCode::kNotFound);
  scope.job = "";
  const auto small = GatherTimeline(state_, store_.get(), scope, 10);
  ASSERT_EQ(small.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(small.status().message().find("over the limit of 10"), std::string::npos);
}

}  // namespace
}  // namespace fabricscope::exporters
