// /api/history, /api/history/jobs and /api/timeline over real HTTP from an aggregator with its
// history on a real SQLite file: the events survive the aggregator's restart, every parameter is
// checked (a bad one is a 400 naming it), the history off is a 503 that says how to turn it on,
// and the timeline's bounds.
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exporters/aggregator.h"
#include "gtest/gtest.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {
namespace {

class HistoryHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fabricscope-history-http.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    base_ = absl::ToUnixNanos(absl::Now()) - 60 * kSec;
  }
  void TearDown() override {
    agg_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Start(const std::string& path) {
    AggregatorOptions o;
    o.grpc_listen = "";
    o.http_listen = "127.0.0.1:0";
    o.history.path = path;
    agg_ = std::make_unique<Aggregator>(o);
    ASSERT_TRUE(agg_->Start().ok());
  }
  // n7's Hello and one window with a microburst at base + 1.2 s, and its job.
  void Feed() {
    v1::Hello h;
    h.set_node("n7");
    h.set_instance_id(7);
    v1::PortInfo* p = h.add_ports();
    p->set_device("mlx5_1");
    p->set_port(1);
    p->set_rdma(true);
    ASSERT_TRUE(agg_->state().OnHello(h).ok());
    v1::Batch b;
    b.set_seq(1);
    b.set_unix_offset_ns(base_);
    b.set_window_start_ns(1 * kSec);
    b.set_window_end_ns(2 * kSec);
    b.add_ports()->set_port_index(0);
    v1::Microburst* m = b.add_microbursts();
    m->set_start_ns(1 * kSec + 200 * kMs);
    m->set_duration_ns(2 * kMs);
    m->set_peak_utilization(0.97);
    b.mutable_gpu()->add_jobs()->set_id("job-7");
    ASSERT_TRUE(agg_->state().OnBatch("n7", 7, b).ok());
    agg_->history()->Flush();
  }
  httplib::Result Get(const std::string& path) {
    httplib::Client c("127.0.0.1", agg_->http_port());
    return c.Get(path);
  }

  std::string dir_;
  int64_t base_ = 0;
  std::unique_ptr<Aggregator> agg_;
};

TEST_F(HistoryHttpTest, EventsSurviveARestartAndPageByJob) {
  const std::string path = dir_ + "/history.db";
  Start(path);
  Feed();
  agg_.reset();  // the aggregator stops; its history is on disk
  Start(path);
  auto r = Get("/api/history?job=job-7&kind=microburst");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("\"kind\":\"microburst\",\"node\":\"n7\""), std::string::npos) << r->body;
  EXPECT_NE(r->body.find(absl::StrCat("\"unix_ns\":", base_ + 1200 * kMs)), std::string::npos);
  // node_joined of the first run is there too (the restarted one has no node yet).
  r = Get("/api/history?node=n7&kind=node_joined&limit=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"next_cursor\":\"\""), std::string::npos) << r->body;
  r = Get("/api/history/jobs");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("{\"job\":\"job-7\""), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("\"nodes\":[\"n7\"]"), std::string::npos) << r->body;
  // The morning after: the timeline of job-7 from the history alone (the live job table of the
  // new aggregator has never heard of it).
  r = Get(absl::StrCat("/api/timeline?job=job-7&from=", base_ / 1'000'000'000,
                       "&to=", base_ / 1'000'000'000 + 10));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("\"name\":\"microburst mlx5_1:1 transmit\""), std::string::npos)
      << r->body;
  EXPECT_NE(r->get_header_value("Content-Disposition").find("fabricscope-timeline-"),
            std::string::npos);
}

TEST_F(HistoryHttpTest, EveryBadParameterIsA400NamingIt) {
  Start(dir_ + "/history.db");
  Feed();
  const std::pair<const char*, const char*> cases[] = {
      {"/api/history?bogus=1", "unknown parameter bogus"},
      {"/api/history?kind=nope", "kind must be one of collective, instance"},
      {"/api/history?limit=0", "limit must be a count in 1..10000"},
      {"/api/history?limit=10001", "limit must be a count in 1..10000"},
      {"/api/history?limit=1e3", "limit must be a count"},
      {"/api/history?comm=xyz", "comm must be a communicator's 8-hex-digit label"},
      {"/api/history?comm=0000000000000000", "comm must be"},
      {"/api/history?from=yesterday", "from must be Unix seconds"},
      {"/api/history?to=-5", "to must be Unix seconds"},
      {"/api/history?from=200&to=100", "to must be after from"},
      {"/api/history?cursor=abc", "cursor must be the next_cursor"},
      {"/api/history?cursor=5:-1", "cursor must be the next_cursor"},
      {"/api/history/jobs?limit=x", "limit must be a count"},
      {"/api/timeline?from=1000&to=1601", "over the limit of 10 minutes"},
      {"/api/timeline?kind=microburst", "unknown parameter kind"},
      {"/api/timeline?from=2026-13-01T00:00:00Z", "from must be"},
      // Found by a helper that tried to break them: repeated, hex, signed and blank values, a
      // negative cursor, a name that is no identifier, a long job on /api/history/jobs.
      {"/api/history?limit=5&limit=abc", "parameter limit given twice"},
      {"/api/history?kind=loss&kind=bogus", "parameter kind given twice"},
      {"/api/history?to=0x6B000000", "to must be Unix seconds"},
      {"/api/timeline?from=0x6B000000&to=0x6B000100", "from must be Unix seconds"},
      {"/api/history?limit=%2B5", "limit must be a count"},
      {"/api/history?limit=%205", "limit must be a count"},
      {"/api/history?from=5%20", "from must be Unix seconds"},
      {"/api/history?cursor=-1:0", "cursor must be the next_cursor"},
      {"/api/history?cursor=%201:%2B1", "cursor must be the next_cursor"},
      {"/api/history?order=sideways", "order must be asc"},
      {"/api/history?%3Cscript%3E=1", "unknown parameter ?script?"},
      {"/api/history/"
       "jobs?job="
       "jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj"
       "jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj",
       "job: at most 128 bytes"},
      {"/api/timeline?from=4000000000", "to (by default now) must be after from"},
  };
  for (const auto& [path, says] : cases) {
    auto r = Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 400) << path << ": " << r->body;
    EXPECT_NE(r->body.find(says), std::string::npos) << path << ": " << r->body;
  }
  auto r = Get("/api/timeline?job=no-such-job");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  // A name that is not UTF-8 comes back repaired (U+FFFD): the trace is valid JSON.
  r = Get("/api/timeline?node=%FF%FE");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"scope\":\"node=\xEF\xBF\xBD\xEF\xBF\xBD\""), std::string::npos)
      << r->body.substr(0, 300);
  // comm=00000000 is no communicator's label: events without one do not match it.
  r = Get("/api/history?comm=00000000");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("\"events\":[]"), std::string::npos) << r->body;
  // Newest first, paging back.
  r = Get("/api/history?order=desc&limit=1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("\"next_cursor\":\"\""), std::string::npos) << r->body;
  // RFC 3339 times are taken as well as Unix seconds.
  r = Get("/api/history?from=2020-01-01T00:00:00Z&to=2090-01-01T00:00:00.5Z&comm=9f0c1a2b");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(HistoryHttpTest, HistoryOffIsA503ThatSaysHowToTurnItOn) {
  unsetenv("STATE_DIRECTORY");
  Start("off");
  EXPECT_EQ(agg_->history(), nullptr);
  auto r = Get("/api/history");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("--history-path"), std::string::npos) << r->body;
  // The timeline still draws what memory holds.
  r = Get("/api/timeline");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->body.find("memory only"), std::string::npos) << r->body;
}

TEST_F(HistoryHttpTest, AGivenPathThatCannotBeUsedStopsTheStart) {
  AggregatorOptions o;
  o.grpc_listen = "";
  o.http_listen = "127.0.0.1:0";
  o.history.path = dir_ + "/no/such/dir/history.db";
  Aggregator a(o);
  const absl::Status s = a.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("no/such/dir/history.db"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--history-path=off"), std::string::npos) << s;
}

}  // namespace
}  // namespace fabricscope::exporters
