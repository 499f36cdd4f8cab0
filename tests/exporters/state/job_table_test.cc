#include "exporters/state/job_table.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exporters/exposition/gpu_render.h"
#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

v1::Job Job(const std::string& id, const std::string& name = "") {
  v1::Job j;
  j.set_id(id);
  j.set_scheduler("slurm");
  j.set_name(name);
  j.set_source("cgroup");
  return j;
}

// One node's window: jobs, and (comm, rank, job) communicators.
v1::GpuWindow Window(std::vector<v1::Job> jobs,
                     std::vector<std::tuple<uint64_t, int32_t, std::string>> comms) {
  v1::GpuWindow w;
  for (v1::Job& j : jobs) *w.add_jobs() = std::move(j);
  for (const auto& [comm, rank, job] : comms) {
    v1::Communicator* c = w.add_communicators();
    c->set_comm_hash(comm);
    c->set_rank(rank);
    c->set_job_id(job);
  }
  return w;
}

TEST(JobTable, GathersNodesCommunicatorsAndRanksOfEachJob) {
  JobTable t;
  t.OnWindow("n1", Window({Job("8812", "llama")}, {{0xa1, 0, "8812"}, {0xa1, 1, "8812"}}), kT0);
  t.OnWindow("n2", Window({Job("8812"), Job("77", "bert")}, {{0xa1, 2, "8812"}, {0xb2, 0, "77"}}),
             kT0 + absl::Seconds(1));
  const std::vector<JobView> jobs = t.Jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].job.id(), "77");
  const JobView& llama = jobs[1];
  EXPECT_EQ(llama.job.name(), "llama");  // n2 knew less and did not erase it
  EXPECT_EQ(llama.nodes, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(llama.comms, (std::vector<uint64_t>{0xa1}));
  EXPECT_EQ(llama.ranks, 3u);
  EXPECT_EQ(llama.first_seen, kT0);
  EXPECT_EQ(llama.last_seen, kT0 + absl::Seconds(1));
  EXPECT_EQ(t.JobOf(0xa1).id(), "8812");
  EXPECT_EQ(t.JobOf(0xb2).id(), "77");
  EXPECT_EQ(t.JobOf(0xc3).id(), "");
  EXPECT_EQ(t.CommsOf("77"), (std::set<uint64_t>{0xb2}));
  EXPECT_TRUE(t.CommsOf("nope").empty());
  // A communicator labelled with a job its window did not list is not taken.
  t.OnWindow("n3", Window({}, {{0xc3, 0, "ghost"}}), kT0);
  EXPECT_EQ(t.JobOf(0xc3).id(), "");
}

// Bounded and expired like nodes: one job past max_jobs evicts the one seen longest ago
// (counted), a job named by no batch for the expiry leaves, and a batch lists at most 64.
TEST(JobTable, IsBoundedExpiredAndCountsWhatItCannotKeep) {
  JobTable t(JobTable::Options{.max_jobs = 3, .expiry = absl::Minutes(10)});
  for (int i = 0; i < 3; ++i) {
    t.OnWindow(
        "n1",
        Window({Job(absl::StrCat("j", i))}, {{static_cast<uint64_t>(i), 0, absl::StrCat("j", i)}}),
        kT0 + absl::Seconds(i));
  }
  t.OnWindow("n1", Window({Job("j3")}, {}), kT0 + absl::Seconds(5));
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.evicted_total(), 1u);
  EXPECT_TRUE(t.CommsOf("j0").empty());  // j0 was seen longest ago
  EXPECT_EQ(t.JobOf(0).id(), "");
  EXPECT_EQ(t.JobOf(1).id(), "j1");
  EXPECT_EQ(t.Expire(kT0 + absl::Seconds(1) + absl::Minutes(10) + absl::Seconds(1)), 1u);
  EXPECT_EQ(t.JobOf(1).id(), "");
  EXPECT_EQ(t.size(), 2u);

  JobTable many;
  std::vector<v1::Job> hundred;
  for (int i = 0; i < 100; ++i) hundred.push_back(Job(absl::StrCat("job", i)));
  many.OnWindow("n1", Window(hundred, {}), kT0);
  EXPECT_EQ(many.size(), JobTable::kMaxJobsPerBatch);
  EXPECT_EQ(many.dropped_total(), 100 - JobTable::kMaxJobsPerBatch);
}

// What one agent says cannot undo what another verified: a claim without a cgroup (source
// "environment") does not overwrite a job its cgroup named, and a window's communicators join
// only the jobs that window listed (not any job in the table).
TEST(JobTable, LessTrustedReportsAndUnlistedJobsChangeNothing) {
  JobTable t;
  v1::Job verified = Job("8813", "llama");
  verified.set_source("cgroup+environment");
  t.OnWindow("n1", Window({verified}, {{0xa1, 0, "8813"}}), kT0);
  v1::Job forged = Job("8813", "forged");
  forged.set_source("environment");
  forged.set_user("mallory");
  t.OnWindow("n9", Window({forged}, {{0xee, 0, "8813"}}), kT0 + absl::Seconds(1));
  std::vector<JobView> jobs = t.Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job.name(), "llama");
  EXPECT_EQ(jobs[0].job.user(), "");
  EXPECT_EQ(jobs[0].job.source(), "cgroup+environment");
  // n9 named the job, so it is among its nodes and its communicator joined (it listed 8813);
  // a window that lists no job cannot attach a communicator to it.
  EXPECT_EQ(jobs[0].nodes, (std::vector<std::string>{"n1", "n9"}));
  t.OnWindow("n7", Window({}, {{0xbb, 0, "8813"}}), kT0 + absl::Seconds(2));
  EXPECT_EQ(t.JobOf(0xbb).id(), "");
  EXPECT_EQ(t.CommsOf("8813"), (std::set<uint64_t>{0xa1, 0xee}));
  // A communicator has one job: another as trusted cannot take it (a producer can send any
  // hash); a more trusted one can, and the first job's lists lose it. It keeps its new job when
  // the old one is evicted.
  JobTable small(JobTable::Options{.max_jobs = 2, .expiry = absl::Minutes(10)});
  small.OnWindow("n1", Window({Job("old")}, {{0xcc, 0, "old"}}), kT0);
  small.OnWindow("n2", Window({Job("thief")}, {{0xcc, 5, "thief"}}), kT0 + absl::Seconds(1));
  EXPECT_EQ(small.JobOf(0xcc).id(), "old");
  EXPECT_TRUE(small.CommsOf("thief").empty());
  EXPECT_EQ(small.comm_conflicts_total(), 1u);
  v1::Job moved = Job("new");
  moved.set_source("cgroup+environment");
  small.OnWindow("n1", Window({moved}, {{0xcc, 0, "new"}}), kT0 + absl::Seconds(2));
  EXPECT_EQ(small.JobOf(0xcc).id(), "new");
  EXPECT_TRUE(small.CommsOf("old").empty());
  for (const JobView& v : small.Jobs()) {
    if (v.job.id() == "old") {
      EXPECT_EQ(v.ranks, 0u);
    }
  }
  small.OnWindow("n1", Window({Job("third")}, {}), kT0 + absl::Seconds(3));  // evicts one
  EXPECT_EQ(small.JobOf(0xcc).id(), "new");
}

// A lying agent's 1 MB name and id are cut to kMaxFieldBytes at a character boundary, counted.
TEST(JobTable, CapsLongFieldsAtACharacterBoundary) {
  JobTable t;
  const std::string huge(1 << 20, 'x');
  const std::string cut_inside = std::string(127, 'n') + "\xc3\xa9";  // é across byte 128
  t.OnWindow("n1", Window({Job(huge, cut_inside)}, {{0xa1, 0, huge}}), kT0);
  const std::vector<JobView> jobs = t.Jobs();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].job.id(), std::string(JobTable::kMaxFieldBytes, 'x'));
  EXPECT_EQ(jobs[0].job.name(), std::string(127, 'n'));
  EXPECT_EQ(t.truncated_fields_total(), 2u);
  EXPECT_EQ(t.JobOf(0xa1).id(), jobs[0].job.id());  // the communicator's label is cut the same way
}

// 100,000 distinct job ids from one node, 64 a batch: the table and fabricscope_job_info stay
// within max_jobs, the rest is counted, and the node's other data is still stored.
TEST(JobTable, HundredThousandJobsStayBoundedThroughTheClusterState) {
  ClusterState state;
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(1);
  ASSERT_TRUE(state.OnHello(h).ok());
  uint64_t seq = 0;
  for (int first = 0; first < 100'000; first += 64) {
    v1::Batch b;
    b.set_seq(++seq);
    b.set_window_start_ns(static_cast<int64_t>(seq) * 1'000'000'000);
    b.set_window_end_ns(b.window_start_ns() + 1'000'000'000);
    for (int i = first; i < first + 64 && i < 100'000; ++i) {
      *b.mutable_gpu()->add_jobs() = Job(absl::StrCat("job-", i));
    }
    ASSERT_TRUE(state.OnBatch("n1", 1, b).ok());
  }
  const ClusterSnapshot s = state.Snapshot();
  EXPECT_EQ(s.gpu.jobs.size(), 1024u);
  EXPECT_EQ(s.gpu.jobs_evicted_total, 100'000u - 1024u);
  EXPECT_EQ(s.counters.batches, seq);
  std::vector<prometheus::MetricFamily> families;
  AddGpuFamilies(s.gpu, &families);
  size_t info = 0;
  for (const auto& f : families) {
    if (f.name == "fabricscope_job_info") info = f.metric.size();
  }
  EXPECT_EQ(info, 1024u);
}

}  // namespace
}  // namespace fabricscope::exporters
