// The durable event history (exporters/history/history_store.h) on a real SQLite file: filters,
// paging, reopening, the retention and size bounds, a damaged file, a full queue, bad queries,
// and kill -9 while writing.
#include "exporters/history/history_store.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

constexpr int64_t kHistorySec = 1'000'000'000;
constexpr int64_t kHistoryT0 = 1'800'000'000 * kHistorySec;

class HistoryStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fabricscope-history.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  HistoryStore::Options Options() const {
    HistoryStore::Options o;
    o.path = dir_ + "/history.db";
    return o;
  }
  static HistoryEvent Event(int64_t t, const std::string& kind, const std::string& node,
                            uint64_t comm, const std::string& job) {
    HistoryEvent e;
    e.unix_ns = t;
    e.kind = kind;
    e.node = node;
    e.comm = comm;
    e.job = job;
    e.detail_json = absl::StrCat("{\"t\":", t, "}");
    return e;
  }
  // A query with the given filters (empty / 0 = any).
  static HistoryQuery Q(std::string job, std::string node = "", std::string kind = "",
                        uint64_t comm = 0, int64_t from = 0, int64_t to = INT64_MAX) {
    HistoryQuery q;
    q.job = std::move(job);
    q.node = std::move(node);
    q.kind = std::move(kind);
    q.comm = comm;
    q.from_unix_ns = from;
    q.to_unix_ns = to;
    return q;
  }
  static HistoryQuery Limit(size_t limit, std::string cursor = "") {
    HistoryQuery q;
    q.limit = limit;
    q.cursor = std::move(cursor);
    return q;
  }
  static std::vector<int64_t> Times(const HistoryPage& p) {
    std::vector<int64_t> v;
    for (const HistoryEvent& e : p.events) v.push_back(e.unix_ns);
    return v;
  }
  std::string dir_;
};

TEST_F(HistoryStoreTest, EveryFilterSelectsItsEventsInTimeOrder) {
  auto s = HistoryStore::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  // Appended out of time order: a query returns them by time.
  (*s)->Append(Event(kHistoryT0 + 3 * kHistorySec, "microburst", "n1", 0, ""));
  (*s)->Append(Event(kHistoryT0 + 1 * kHistorySec, "collective", "n1", 0xa, "8812"));
  (*s)->Append(Event(kHistoryT0 + 2 * kHistorySec, "collective", "n2", 0xb, "7001"));
  (*s)->Append(Event(kHistoryT0 + 4 * kHistorySec, "diagnosis_began", "", 0xa, "8812"));
  (*s)->Flush();
  const auto q = [&](HistoryQuery f) { return Times(*(*s)->Query(f)); };
  using V = std::vector<int64_t>;
  EXPECT_EQ(q({}), (V{kHistoryT0 + kHistorySec, kHistoryT0 + 2 * kHistorySec,
                      kHistoryT0 + 3 * kHistorySec, kHistoryT0 + 4 * kHistorySec}));
  EXPECT_EQ(q(Q("8812")), (V{kHistoryT0 + kHistorySec, kHistoryT0 + 4 * kHistorySec}));
  EXPECT_EQ(q(Q("", "n1")), (V{kHistoryT0 + kHistorySec, kHistoryT0 + 3 * kHistorySec}));
  EXPECT_EQ(q(Q("", "", "collective")),
            (V{kHistoryT0 + kHistorySec, kHistoryT0 + 2 * kHistorySec}));
  EXPECT_EQ(q(Q("", "", "", 0xb)), (V{kHistoryT0 + 2 * kHistorySec}));
  EXPECT_EQ(q(Q("", "", "", 0, kHistoryT0 + 2 * kHistorySec, kHistoryT0 + 4 * kHistorySec)),
            (V{kHistoryT0 + 2 * kHistorySec, kHistoryT0 + 3 * kHistorySec}));
  EXPECT_TRUE(q(Q("8812", "n2")).empty());
  const HistoryPage all = *(*s)->Query({});
  EXPECT_EQ(all.events[0].detail_json, absl::StrCat("{\"t\":", kHistoryT0 + kHistorySec, "}"));
  EXPECT_EQ(all.events[0].comm, 0xau);
  EXPECT_EQ((*s)->stats().written, 4u);
}

// Pages of random sizes over events with many equal times: together, each event once, in order.
TEST_F(HistoryStoreTest, PagesHaveNoGapsOrDuplicates) {
  auto s = HistoryStore::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    (*s)->Append(Event(kHistoryT0 + static_cast<int64_t>(rng() % 50) * kHistorySec, "microburst",
                       "n1", 0, ""));
  }
  (*s)->Flush();
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::mt19937 pages(seed);
    HistoryQuery q;
    std::vector<int64_t> ids;
    int64_t last_t = 0;
    for (int n = 0; n < 3000; ++n) {
      q.limit = 1 + pages() % 97;
      auto p = (*s)->Query(q);
      ASSERT_TRUE(p.ok()) << p.status();
      for (const HistoryEvent& e : p->events) {
        EXPECT_GE(e.unix_ns, last_t);
        last_t = e.unix_ns;
        ids.push_back(e.id);
      }
      if (p->next_cursor.empty()) break;
      q.cursor = p->next_cursor;
    }
    ASSERT_EQ(ids.size(), 2000u) << "seed " << seed;
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end()) << "seed " << seed;
  }
}

TEST_F(HistoryStoreTest, EventsSurviveAReopen) {
  {
    auto s = HistoryStore::Open(Options());
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; i < 10; ++i) (*s)->Append(Event(kHistoryT0 + i, "loss", "n1", 0, ""));
  }  // closed without a Flush: the destructor writes what is queued
  auto s = HistoryStore::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Query({})->events.size(), 10u);
}

int64_t history_fake_now = 0;
int64_t HistoryFakeNow() { return history_fake_now; }

TEST_F(HistoryStoreTest, RetentionDeletesOlderEventsAndCountsThem) {
  HistoryStore::Options o = Options();
  o.retention_ns = 3600 * kHistorySec;
  o.now_unix_ns = &HistoryFakeNow;
  history_fake_now = kHistoryT0;
  auto s = HistoryStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int i = 0; i < 5; ++i)
    (*s)->Append(Event(kHistoryT0 - (2 - i) * 1800 * kHistorySec, "loss", "n1", 0, ""));
  (*s)->Flush();  // -3600 s .. +3600 s: the one exactly at the bound is kept
  EXPECT_EQ((*s)->Query({})->events.size(), 5u);
  history_fake_now = kHistoryT0 + 2 * 3600 * kHistorySec;
  (*s)->Flush();
  EXPECT_EQ(Times(*(*s)->Query({})), (std::vector<int64_t>{kHistoryT0 + 3600 * kHistorySec}));
  EXPECT_EQ((*s)->stats().deleted_retention, 4u);
}

TEST_F(HistoryStoreTest, TheSizeBoundDeletesTheOldestFirst) {
  HistoryStore::Options o = Options();
  o.max_bytes = 512 << 10;
  auto s = HistoryStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int round = 0; round < 8; ++round) {
    for (int i = 0; i < 1250; ++i) {
      HistoryEvent e =
          Event(kHistoryT0 + (round * 1250 + i) * kHistorySec, "collective", "n1", 0, "8812");
      e.detail_json = absl::StrCat("{\"pad\":\"", std::string(200, 'x'), "\"}");
      (*s)->Append(std::move(e));
    }
    (*s)->Flush();
  }
  const HistoryStore::Stats st = (*s)->stats();
  EXPECT_LE(st.used_bytes, o.max_bytes);
  EXPECT_GT(st.deleted_size, 0u);
  const HistoryPage p = *(*s)->Query(Limit(kMaxHistoryPage));
  ASSERT_FALSE(p.events.empty());
  EXPECT_EQ(p.events.size() + st.deleted_size, 10'000u);
  EXPECT_EQ(p.events.back().unix_ns, kHistoryT0 + 9999 * kHistorySec);  // the newest kept
  EXPECT_LE(std::filesystem::file_size(o.path), static_cast<uintmax_t>(2 * o.max_bytes));
}

TEST_F(HistoryStoreTest, ADamagedFileIsMovedAsideAndANewOneBegun) {
  {
    std::ofstream f(Options().path);
    f << std::string(8192, 'z');  // not a database
  }
  auto s = HistoryStore::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->stats().corrupt_files_moved, 1u);
  int aside = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    aside += e.path().filename().string().starts_with("history.db.corrupt-") ? 1 : 0;
  }
  EXPECT_EQ(aside, 1);
  (*s)->Append(Event(kHistoryT0, "loss", "n1", 0, ""));
  (*s)->Flush();
  EXPECT_EQ((*s)->Query({})->events.size(), 1u);
}

TEST_F(HistoryStoreTest, AFullQueueDropsAndCounts) {
  HistoryStore::Options o = Options();
  o.max_queued = 10;
  o.flush_period_ns = 3600 * kHistorySec;  // the writer sleeps: only the bound acts
  auto s = HistoryStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int i = 0; i < 15; ++i) (*s)->Append(Event(kHistoryT0 + i, "loss", "n1", 0, ""));
  EXPECT_EQ((*s)->stats().dropped_queue_full, 5u);
  (*s)->Flush();
  EXPECT_EQ((*s)->Query({})->events.size(), 10u);
}

// A real full file system (a 1 MiB tmpfs mounted for the test; root only, as CI runs): the
// writes that fail drop their events and count them, Append never waits, the JSON lines count
// theirs too, and once space is freed the history writes again.
TEST_F(HistoryStoreTest, AFullDiskIsACountedDropNeverAStall) {
  const std::string mnt = dir_ + "/small";
  std::filesystem::create_directory(mnt);
  if (geteuid() != 0 ||
      std::system(("mount -t tmpfs -o size=1m tmpfs " + mnt + " 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "mounting a tmpfs needs root";
  }
  {
    HistoryStore::Options o;
    o.path = mnt + "/history.db";
    o.jsonl_path = mnt + "/history.jsonl";
    auto s = HistoryStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    // Fill the rest of the file system with a plain file, leaving ~64 KiB.
    {
      std::ofstream filler(mnt + "/filler", std::ios::binary);
      const std::string block(4096, 'x');
      for (int i = 0; i < 256 - 16 && filler; ++i) filler << block;
    }
    const std::string detail = "{\"pad\":\"" + std::string(900, 'p') + "\"}";
    for (int round = 0; round < 4; ++round) {
      for (int i = 0; i < 200; ++i) {
        HistoryEvent e = Event(kHistoryT0 + round * 1000 + i, "loss", "n1", 0, "");
        e.detail_json = detail;
        (*s)->Append(std::move(e));
      }
      (*s)->Flush();
    }
    HistoryStore::Stats st = (*s)->stats();
    EXPECT_GT(st.dropped_write_error, 0u);
    EXPECT_EQ(st.written + st.dropped_write_error, 800u);
    EXPECT_GT(st.jsonl_dropped, 0u);
    EXPECT_NE(st.last_error.find("full"), std::string::npos) << st.last_error;
    // Space again: the next batch is written.
    std::filesystem::remove(mnt + "/filler");
    (*s)->Append(Event(kHistoryT0 + 9999, "loss", "n9", 0, ""));
    (*s)->Flush();
    EXPECT_EQ((*s)->stats().written, st.written + 1);
    auto page = (*s)->Query(Q("", "n9"));
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->events.size(), 1u);
  }
  EXPECT_EQ(std::system(("umount " + mnt).c_str()), 0);
}

TEST_F(HistoryStoreTest, BadQueriesAndPathsAreErrorsThatSayWhat) {
  auto s = HistoryStore::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  for (const char* c : {"x", "1", "1:2:3", "1:-1", ":", "9999999999999999999999:1"}) {
    auto p = (*s)->Query(Limit(100, c));
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c;
  }
  EXPECT_NE((*s)->Query(Limit(0)).status().message().find("limit"), absl::string_view::npos);
  EXPECT_FALSE((*s)->Query(Limit(kMaxHistoryPage + 1)).ok());
  // Quotes and SQL in a filter are values, not SQL.
  EXPECT_TRUE((*s)->Query(Q("'; DROP TABLE events; --"))->events.empty());
  HistoryStore::Options nowhere;
  nowhere.path = dir_ + "/no/such/dir/history.db";
  auto bad = HistoryStore::Open(nowhere);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(bad.status().message().find(nowhere.path), absl::string_view::npos);
  EXPECT_TRUE(IsHistoryKind("microburst"));
  EXPECT_FALSE(IsHistoryKind("Microburst"));
}

// kill -9 while a child writes, over and over (seeded delays): every reopen finds a sound
// database, and the events it holds only grow.
TEST_F(HistoryStoreTest, KillNineWhileWritingNeverCorruptsTheFile) {
  std::mt19937 rng(9);
  size_t held = 0;
  for (int round = 0; round < 6; ++round) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      HistoryStore::Options o = Options();
      o.flush_period_ns = 20'000'000;
      auto s = HistoryStore::Open(o);
      if (!s.ok()) _exit(3);
      for (int64_t i = 0;; ++i) {
        (*s)->Append(Event(kHistoryT0 + i, "microburst", "n1", 0, ""));
        if (i % 64 == 0) usleep(1000);
      }
    }
    usleep(50'000 + rng() % 150'000);
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself: " << status;
    auto s = HistoryStore::Open(Options());
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ((*s)->stats().corrupt_files_moved, 0u) << "round " << round;
    size_t now = 0;
    HistoryQuery q;
    q.limit = kMaxHistoryPage;
    for (;;) {
      auto p = (*s)->Query(q);
      ASSERT_TRUE(p.ok()) << p.status();
      now += p->events.size();
      if (p->next_cursor.empty()) break;
      q.cursor = p->next_cursor;
    }
    EXPECT_GE(now, held) << "round " << round;
    held = now;
  }
  EXPECT_GT(held, 0u);
}

TEST_F(HistoryStoreTest, AJobHoldsItsNodesNodeLevelEventsWhileItRanThere) {
  auto s = HistoryStore::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  HistoryStore& h = **s;
  // Job 8812 ran on n1 from T0 + 20 min to T0 + 30 min.
  h.NoteJobNode("8812", "n1", kHistoryT0 + 1200 * kHistorySec);
  h.NoteJobNode("8812", "n1", kHistoryT0 + 1800 * kHistorySec);
  const int64_t times[] = {0, 601, 900, 1500, 1810, 1811};  // seconds after T0
  for (int64_t t : times) h.Append(Event(kHistoryT0 + t * kHistorySec, "loss", "n1", 0, ""));
  h.Append(Event(kHistoryT0 + 1500 * kHistorySec, "loss", "n2", 0, ""));          // not its node
  h.Append(Event(kHistoryT0 + 1500 * kHistorySec, "instance", "n2", 7, "8812"));  // its own
  h.Flush();
  auto page = h.Query(Q("8812"));
  ASSERT_TRUE(page.ok()) << page.status();
  // From 10 min before it began (the fault already there), to 10 s after its last report.
  std::vector<int64_t> want;
  for (int64_t t : {601, 900, 1500, 1500, 1810}) want.push_back(kHistoryT0 + t * kHistorySec);
  EXPECT_EQ(Times(*page), want);
  auto jobs = h.Jobs(10);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].first_unix_ns, kHistoryT0 + 1200 * kHistorySec);
  EXPECT_EQ((*jobs)[0].last_unix_ns, kHistoryT0 + 1800 * kHistorySec);
}

TEST_F(HistoryStoreTest, ACommunicatorIsFoundByItsLabel) {
  auto s = HistoryStore::Open(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  (*s)->Append(Event(kHistoryT0, "instance", "n1", 0x9f0c1a2b00000001ull, ""));
  (*s)->Append(Event(kHistoryT0 + 1, "instance", "n1", 0x1111111100000001ull, ""));
  // A hash with its top bit set is stored as a negative INTEGER; its label still matches.
  (*s)->Append(Event(kHistoryT0 + 2, "instance", "n1", 0xf00dcafe12345678ull, ""));
  (*s)->Flush();
  for (const auto& [label, want] :
       {std::pair<int64_t, int64_t>{0x9f0c1a2b, kHistoryT0}, {0xf00dcafe, kHistoryT0 + 2}}) {
    HistoryQuery q;
    q.comm_label = label;
    auto page = (*s)->Query(q);
    ASSERT_TRUE(page.ok());
    EXPECT_EQ(Times(*page), std::vector<int64_t>{want});
  }
}

TEST_F(HistoryStoreTest, JsonLinesAreWrittenAndRotatedBySize) {
  HistoryStore::Options o = Options();
  o.path = "";  // JSON lines alone
  o.jsonl_path = dir_ + "/events.jsonl";
  o.jsonl_max_bytes = 4096;
  auto s = HistoryStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE((*s)->has_database());
  EXPECT_EQ((*s)->Query(HistoryQuery()).status().code(), absl::StatusCode::kUnavailable);
  for (int i = 0; i < 100; ++i) {
    HistoryEvent e = Event(kHistoryT0 + i, "microburst", "n\"1", 0x9f0c1a2b5d6e7f80ull, "j");
    (*s)->Append(std::move(e));
  }
  (*s)->Flush();
  const HistoryStore::Stats st = (*s)->stats();
  EXPECT_EQ(st.jsonl_written, 100u);
  EXPECT_GE(st.jsonl_rotations, 1u);
  size_t lines = 0;
  std::string first;
  for (const char* suffix : {".3", ".2", ".1", ""}) {
    const std::string f = o.jsonl_path + suffix;
    if (!std::filesystem::exists(f)) continue;
    EXPECT_LE(std::filesystem::file_size(f), 4096u) << f;
    std::ifstream in(f);
    for (std::string line; std::getline(in, line);) {
      if (first.empty()) first = line;
      ++lines;
    }
  }
  // At most 3 rotated files are kept: the oldest lines are gone, never a partial one.
  EXPECT_LE(lines, 100u);
  EXPECT_GT(lines, 0u);
  EXPECT_NE(first.find("\"kind\":\"microburst\",\"node\":\"n\\\"1\",\"comm\":\"9f0c1a2b\","
                       "\"comm_hash\":\"9f0c1a2b5d6e7f80\",\"job\":\"j\",\"detail\":{\"t\":"),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("\"time\":\"2027-01-15T08:00:00.0000"), std::string::npos) << first;
}

}  // namespace
}  // namespace fabricscope::exporters
