#include "exporters/history/history_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "exporters/history/history_jsonl.h"
#include "glog/logging.h"

namespace fabricscope::exporters {

namespace {

constexpr int64_t kHistoryPruneEveryNs = 10'000'000'000;  // retention and size checks, at most
constexpr size_t kHistoryWakeAtQueued = 4096;             // a full transaction's worth: write now

// The schema: one table, indexed for the filters /api/history offers. Times and the hash as
// SQLite INTEGER (64-bit; the hash's bits as a signed value).
constexpr const char* kHistorySchema =
    "CREATE TABLE IF NOT EXISTS events(id INTEGER PRIMARY KEY, unix_ns INTEGER NOT NULL, "
    "end_unix_ns INTEGER NOT NULL, kind TEXT NOT NULL, node TEXT NOT NULL, comm INTEGER NOT NULL, "
    "job TEXT NOT NULL, detail TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS events_time ON events(unix_ns, id);"
    "CREATE INDEX IF NOT EXISTS events_job ON events(job, unix_ns, id);"
    "CREATE INDEX IF NOT EXISTS events_comm ON events(comm, unix_ns, id);"
    "CREATE INDEX IF NOT EXISTS events_node ON events(node, unix_ns, id);"
    "CREATE INDEX IF NOT EXISTS events_kind ON events(kind, unix_ns, id);"
    "CREATE TABLE IF NOT EXISTS job_nodes(job TEXT NOT NULL, node TEXT NOT NULL, "
    "first_ns INTEGER NOT NULL, last_ns INTEGER NOT NULL, PRIMARY KEY(job, node));"
    "CREATE INDEX IF NOT EXISTS job_nodes_last ON job_nodes(last_ns);";

std::string SqliteMessage(sqlite3* db, int rc) {
  return db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
}

// Runs SQL without results; false with *error set when it fails.
bool SqliteExec(sqlite3* db, const char* sql, std::string* error) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) == SQLITE_OK) return true;
  *error = msg != nullptr ? msg : "unknown error";
  sqlite3_free(msg);
  return false;
}

// The first column of the first row of a one-value query, as an integer; -1 when it fails.
int64_t SqliteScalar(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  int64_t v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    v = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  return v;
}

std::string SqliteText(sqlite3_stmt* st, int col) {
  const unsigned char* t = sqlite3_column_text(st, col);
  return t != nullptr ? std::string(reinterpret_cast<const char*>(t),
                                    static_cast<size_t>(sqlite3_column_bytes(st, col)))
                      : std::string();
}

}  // namespace

bool IsHistoryKind(absl::string_view kind) {
  return std::any_of(std::begin(kHistoryKinds), std::end(kHistoryKinds),
                     [&](const char* k) { return kind == k; });
}

HistoryStore::HistoryStore(Options options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<HistoryStore>> HistoryStore::Open(Options options) {
  std::unique_ptr<HistoryStore> s(new HistoryStore(std::move(options)));
  if (s->options_.path.empty() && s->options_.jsonl_path.empty()) {
    return absl::InvalidArgumentError("history: neither a database nor a JSON-lines file given");
  }
  if (!s->options_.jsonl_path.empty()) {
    if (absl::Status st = HistoryJsonl::Check(s->options_.jsonl_path); !st.ok()) return st;
    s->jsonl_ = std::make_unique<HistoryJsonl>(s->options_.jsonl_path, s->options_.jsonl_max_bytes);
  }
  if (!s->options_.path.empty()) {
    if (absl::Status st = s->OpenDatabase(); !st.ok()) return st;
  }
  s->last_prune_ns_ = s->Now();
  {
    std::lock_guard<std::mutex> l(s->write_mu_);
    s->Prune();
  }
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

absl::Status HistoryStore::OpenDatabase() {
  const std::string& path = options_.path;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string error;
    int rc =
        sqlite3_open_v2(path.c_str(), &writer_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      error = SqliteMessage(writer_, rc);
      sqlite3_close(writer_);
      writer_ = nullptr;
      return absl::UnavailableError(absl::StrCat("history: cannot open ", path, ": ", error));
    }
    sqlite3_busy_timeout(writer_, 5000);
    // auto_vacuum takes effect on a new database only (before its first table).
    const bool ok = SqliteExec(writer_, "PRAGMA auto_vacuum=INCREMENTAL;", &error) &&
                    SqliteExec(writer_, "PRAGMA journal_mode=WAL;", &error) &&
                    SqliteExec(writer_, "PRAGMA synchronous=NORMAL;", &error) &&
                    SqliteExec(writer_, "PRAGMA journal_size_limit=67108864;", &error) &&
                    SqliteExec(writer_, kHistorySchema, &error);
    sqlite3_stmt* check = nullptr;
    std::string verdict = "ok";
    if (ok &&
        sqlite3_prepare_v2(writer_, "PRAGMA quick_check;", -1, &check, nullptr) == SQLITE_OK &&
        sqlite3_step(check) == SQLITE_ROW) {
      verdict = SqliteText(check, 0);
    }
    sqlite3_finalize(check);
    if (ok && verdict == "ok") break;
    const int code = sqlite3_errcode(writer_);
    sqlite3_close(writer_);
    writer_ = nullptr;
    const bool damaged = !ok ? (code == SQLITE_NOTADB || code == SQLITE_CORRUPT) : true;
    if (!damaged || attempt == 1) {
      return absl::UnavailableError(
          absl::StrCat("history: cannot use ", path, ": ", ok ? verdict : error));
    }
    // Not a database, or a damaged one: kept aside for a person to look at, and a new one begun.
    const std::string aside = absl::StrCat(path, ".corrupt-", absl::ToUnixSeconds(absl::Now()));
    LOG(ERROR) << "history: " << path << " is damaged (" << (ok ? verdict : error) << "); moved to "
               << aside << " and a new history begun";
    std::rename(path.c_str(), aside.c_str());
    std::remove((path + "-wal").c_str());
    std::remove((path + "-shm").c_str());
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.corrupt_files_moved;
  }
  const int rc =
      sqlite3_open_v2(path.c_str(), &reader_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string error = SqliteMessage(reader_, rc);
    sqlite3_close(reader_);
    reader_ = nullptr;
    return absl::UnavailableError(absl::StrCat("history: cannot read ", path, ": ", error));
  }
  sqlite3_busy_timeout(reader_, 5000);
  return absl::OkStatus();
}

HistoryStore::~HistoryStore() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  sqlite3_close(reader_);
  sqlite3_close(writer_);
}

int64_t HistoryStore::Now() const {
  return options_.now_unix_ns != nullptr ? options_.now_unix_ns() : absl::ToUnixNanos(absl::Now());
}

void HistoryStore::Append(HistoryEvent event) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (queue_.size() >= options_.max_queued) {
      ++stats_.dropped_queue_full;
      return;
    }
    queue_.push_back(std::move(event));
    wake = queue_.size() >= kHistoryWakeAtQueued;
  }
  if (wake) cv_.notify_one();
}

void HistoryStore::Loop() {
  for (;;) {
    std::vector<HistoryEvent> batch;
    JobSpans spans;
    bool stop;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::nanoseconds(options_.flush_period_ns),
                   [&] { return stop_ || queue_.size() >= kHistoryWakeAtQueued; });
      batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
      queue_.clear();
      spans.swap(spans_);
      stop = stop_;
    }
    {
      std::lock_guard<std::mutex> l(write_mu_);
      WriteBatch(&batch, &spans);
      if (Now() - last_prune_ns_ >= kHistoryPruneEveryNs) Prune();
    }
    if (stop) return;
  }
}

void HistoryStore::Flush() {
  std::vector<HistoryEvent> batch;
  JobSpans spans;
  {
    std::lock_guard<std::mutex> l(mu_);
    batch.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
    queue_.clear();
    spans.swap(spans_);
  }
  std::lock_guard<std::mutex> l(write_mu_);
  WriteBatch(&batch, &spans);
  Prune();
}

void HistoryStore::NoteJobNode(const std::string& job, const std::string& node, int64_t unix_ns) {
  if (job.empty() || node.empty()) return;
  std::lock_guard<std::mutex> l(mu_);
  auto [it, fresh] = spans_.try_emplace({job, node}, JobSpan{unix_ns, unix_ns});
  if (!fresh) {
    it->second.first = std::min(it->second.first, unix_ns);
    it->second.last = std::max(it->second.last, unix_ns);
  }
}

bool HistoryStore::WriteDatabase(std::vector<HistoryEvent>* batch, const JobSpans& spans,
                                 std::string* error) {
  sqlite3_stmt* st = nullptr;
  bool ok = SqliteExec(writer_, "BEGIN;", error);
  if (ok && sqlite3_prepare_v2(writer_,
                               "INSERT INTO events(unix_ns, end_unix_ns, kind, node, comm, job, "
                               "detail) VALUES(?, ?, ?, ?, ?, ?, ?);",
                               -1, &st, nullptr) != SQLITE_OK) {
    ok = false;
    *error = sqlite3_errmsg(writer_);
  }
  for (size_t i = 0; ok && i < batch->size(); ++i) {
    HistoryEvent& e = (*batch)[i];
    sqlite3_bind_int64(st, 1, e.unix_ns);
    sqlite3_bind_int64(st, 2, e.end_unix_ns);
    sqlite3_bind_text(st, 3, e.kind.data(), static_cast<int>(e.kind.size()), SQLITE_STATIC);
    sqlite3_bind_text(st, 4, e.node.data(), static_cast<int>(e.node.size()), SQLITE_STATIC);
    sqlite3_bind_int64(st, 5, static_cast<int64_t>(e.comm));
    sqlite3_bind_text(st, 6, e.job.data(), static_cast<int>(e.job.size()), SQLITE_STATIC);
    sqlite3_bind_text(st, 7, e.detail_json.data(), static_cast<int>(e.detail_json.size()),
                      SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_DONE) {
      e.id = sqlite3_last_insert_rowid(writer_);
    } else {
      ok = false;
      *error = sqlite3_errmsg(writer_);
    }
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  st = nullptr;
  if (ok && !spans.empty() &&
      sqlite3_prepare_v2(writer_,
                         "INSERT INTO job_nodes(job, node, first_ns, last_ns) VALUES(?, ?, ?, ?) "
                         "ON CONFLICT(job, node) DO UPDATE SET "
                         "first_ns = min(first_ns, excluded.first_ns), "
                         "last_ns = max(last_ns, excluded.last_ns);",
                         -1, &st, nullptr) != SQLITE_OK) {
    ok = false;
    *error = sqlite3_errmsg(writer_);
  }
  for (auto it = spans.begin(); ok && it != spans.end(); ++it) {
    const auto& [key, span] = *it;
    sqlite3_bind_text(st, 1, key.first.data(), static_cast<int>(key.first.size()), SQLITE_STATIC);
    sqlite3_bind_text(st, 2, key.second.data(), static_cast<int>(key.second.size()), SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, span.first);
    sqlite3_bind_int64(st, 4, span.last);
    if (sqlite3_step(st) != SQLITE_DONE) {
      ok = false;
      *error = sqlite3_errmsg(writer_);
    }
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  if (ok) ok = SqliteExec(writer_, "COMMIT;", error);
  if (!ok) {
    std::string ignored;
    SqliteExec(writer_, "ROLLBACK;", &ignored);
    for (HistoryEvent& e : *batch) e.id = 0;  // rolled back: those ids will be used again
  }
  return ok;
}

void HistoryStore::WriteBatch(std::vector<HistoryEvent>* batch, JobSpans* spans) {
  if (batch->empty() && spans->empty()) return;
  std::string error, jsonl_error;
  const bool ok = writer_ == nullptr || WriteDatabase(batch, *spans, &error);
  // The JSON lines follow the database (with its ids) and do not wait for it: a full database
  // does not stop the shippers' file, nor the reverse.
  const size_t lines = jsonl_ ? jsonl_->Write(*batch, &jsonl_error) : 0;
  std::lock_guard<std::mutex> l(mu_);
  if (jsonl_) {
    stats_.jsonl_written += lines;
    stats_.jsonl_dropped += batch->size() - lines;
    stats_.jsonl_rotations = jsonl_->rotations();
    if (lines < batch->size() && !jsonl_failing_) {
      LOG(ERROR) << "history: " << batch->size() - lines << " JSON lines dropped: " << jsonl_error
                 << " (counted until a write succeeds)";
    }
    jsonl_failing_ = lines < batch->size();
  }
  if (writer_ == nullptr) {
    batch->clear();
    spans->clear();
    return;
  }
  if (ok) {
    stats_.written += batch->size();
    if (failing_) LOG(INFO) << "history: writing again to " << options_.path;
    failing_ = false;
  } else {
    stats_.dropped_write_error += batch->size();
    stats_.last_error = error;
    if (!failing_) {
      LOG(ERROR) << "history: " << batch->size() << " events dropped, writing " << options_.path
                 << " failed: " << error << " (counted until a write succeeds)";
    }
    failing_ = true;
    // The job spans are kept for the next try: they are few, and the morning-after query needs
    // them.
    for (const auto& [key, span] : *spans) {
      auto [it, fresh] = spans_.try_emplace(key, span);
      if (!fresh) {
        it->second.first = std::min(it->second.first, span.first);
        it->second.last = std::max(it->second.last, span.last);
      }
    }
  }
  batch->clear();
  spans->clear();
}

void HistoryStore::Prune() {
  last_prune_ns_ = Now();
  if (writer_ == nullptr) return;
  uint64_t by_age = 0, by_size = 0;
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(writer_, "DELETE FROM events WHERE unix_ns < ?;", -1, &st, nullptr) ==
      SQLITE_OK) {
    sqlite3_bind_int64(st, 1, last_prune_ns_ - options_.retention_ns);
    if (sqlite3_step(st) == SQLITE_DONE) by_age = static_cast<uint64_t>(sqlite3_changes(writer_));
  }
  sqlite3_finalize(st);
  st = nullptr;
  if (sqlite3_prepare_v2(writer_, "DELETE FROM job_nodes WHERE last_ns < ?;", -1, &st, nullptr) ==
      SQLITE_OK) {
    sqlite3_bind_int64(st, 1, last_prune_ns_ - options_.retention_ns);
    sqlite3_step(st);
  }
  sqlite3_finalize(st);
  const auto used = [&] {
    return (SqliteScalar(writer_, "PRAGMA page_count;") -
            SqliteScalar(writer_, "PRAGMA freelist_count;")) *
           SqliteScalar(writer_, "PRAGMA page_size;");
  };
  // Past the size bound, the oldest tenth at a time (pages free as whole pages empty).
  for (int round = 0; round < 64 && used() > options_.max_bytes; ++round) {
    const int64_t rows = SqliteScalar(writer_, "SELECT count(*) FROM events;");
    if (rows <= 0) break;
    st = nullptr;
    if (sqlite3_prepare_v2(writer_,
                           "DELETE FROM events WHERE id IN (SELECT id FROM events ORDER BY "
                           "unix_ns, id LIMIT ?);",
                           -1, &st, nullptr) != SQLITE_OK) {
      break;
    }
    sqlite3_bind_int64(st, 1, std::max<int64_t>(1, rows / 10));
    const bool done = sqlite3_step(st) == SQLITE_DONE;
    if (done) by_size += static_cast<uint64_t>(sqlite3_changes(writer_));
    sqlite3_finalize(st);
    if (!done) break;
  }
  std::string ignored;
  if (by_age + by_size > 0) {
    // The freed pages go back to the file system: moved to the file's end and cut off, which
    // in WAL mode happens at a checkpoint
    // (https://sqlite.org/pragma.html#pragma_incremental_vacuum).
    SqliteExec(writer_, "PRAGMA incremental_vacuum;", &ignored);
    SqliteExec(writer_, "PRAGMA wal_checkpoint(TRUNCATE);", &ignored);
  }
  const int64_t bytes = used();
  std::lock_guard<std::mutex> l(mu_);
  stats_.deleted_retention += by_age;
  stats_.deleted_size += by_size;
  stats_.used_bytes = bytes;
}

absl::StatusOr<std::vector<HistoryJob>> HistoryStore::Jobs(size_t limit,
                                                           const std::string& job) const {
  if (reader_ == nullptr) {
    return absl::UnavailableError("history: no database (--history-path is empty)");
  }
  std::lock_guard<std::mutex> l(read_mu_);
  sqlite3_stmt* st = nullptr;
  const char* sql =
      "SELECT job, min(first_ns), max(last_ns), group_concat(node, char(10)) FROM job_nodes "
      "WHERE ?1 = '' OR job = ?1 GROUP BY job ORDER BY max(last_ns) DESC LIMIT ?2;";
  if (sqlite3_prepare_v2(reader_, sql, -1, &st, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat("history: ", sqlite3_errmsg(reader_)));
  }
  sqlite3_bind_text(st, 1, job.data(), static_cast<int>(job.size()), SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, static_cast<int64_t>(limit));
  std::vector<HistoryJob> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    HistoryJob j;
    j.job = SqliteText(st, 0);
    j.first_unix_ns = sqlite3_column_int64(st, 1);
    j.last_unix_ns = sqlite3_column_int64(st, 2);
    j.nodes = absl::StrSplit(SqliteText(st, 3), '\n', absl::SkipEmpty());
    std::sort(j.nodes.begin(), j.nodes.end());
    out.push_back(std::move(j));
  }
  const std::string error = rc == SQLITE_DONE ? "" : sqlite3_errmsg(reader_);
  sqlite3_finalize(st);
  if (!error.empty()) return absl::UnavailableError(absl::StrCat("history: ", error));
  return out;
}

HistoryStore::Stats HistoryStore::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  Stats s = stats_;
  s.queued = queue_.size();
  return s;
}

absl::StatusOr<HistoryPage> HistoryStore::Query(const HistoryQuery& q) const {
  if (reader_ == nullptr) {
    return absl::UnavailableError("history: no database (--history-path is empty)");
  }
  if (q.limit == 0 || q.limit > kMaxHistoryPage) {
    return absl::InvalidArgumentError(absl::StrCat("limit must be 1..", kMaxHistoryPage));
  }
  int64_t after_ns = 0, after_id = -1;
  if (!q.cursor.empty()) {
    std::vector<absl::string_view> parts = absl::StrSplit(q.cursor, ':');
    auto digits = [](absl::string_view t) {
      return !t.empty() && t.size() <= 19 &&
             std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (parts.size() != 2 || !digits(parts[0]) || !digits(parts[1]) ||
        !absl::SimpleAtoi(parts[0], &after_ns) || !absl::SimpleAtoi(parts[1], &after_id)) {
      return absl::InvalidArgumentError(
          "cursor must be the next_cursor of a previous page (UNIX_NS:ID)");
    }
  }
  std::string sql =
      "SELECT id, unix_ns, end_unix_ns, kind, node, comm, job, detail FROM events "
      "WHERE unix_ns >= ?1 AND unix_ns < ?2";
  // A job's own events, and its nodes' node-level ones while it ran there (HistoryQuery).
  if (!q.job.empty()) {
    sql +=
        " AND (job = ?3 OR (job = '' AND node != '' AND EXISTS (SELECT 1 FROM job_nodes j "
        "WHERE j.job = ?3 AND j.node = events.node AND events.unix_ns >= j.first_ns - ?10 "
        "AND events.unix_ns <= j.last_ns + ?12)))";
  }
  if (!q.node.empty()) sql += " AND node = ?4";
  if (!q.kind.empty()) sql += " AND kind = ?5";
  if (q.comm != 0) sql += " AND comm = ?6";
  if (q.node_level) sql += " AND comm = 0 AND job = ''";
  if (q.comm_label >= 0) sql += " AND comm != 0 AND ((comm >> 32) & 4294967295) = ?11";
  if (!q.cursor.empty()) {
    sql += q.newest_first ? " AND (unix_ns, id) < (?7, ?8)" : " AND (unix_ns, id) > (?7, ?8)";
  }
  sql += q.newest_first ? " ORDER BY unix_ns DESC, id DESC LIMIT ?9;"
                        : " ORDER BY unix_ns, id LIMIT ?9;";
  std::lock_guard<std::mutex> l(read_mu_);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(reader_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat("history: ", sqlite3_errmsg(reader_)));
  }
  sqlite3_bind_int64(st, 1, q.from_unix_ns);
  sqlite3_bind_int64(st, 2, q.to_unix_ns);
  sqlite3_bind_text(st, 3, q.job.data(), static_cast<int>(q.job.size()), SQLITE_STATIC);
  sqlite3_bind_text(st, 4, q.node.data(), static_cast<int>(q.node.size()), SQLITE_STATIC);
  sqlite3_bind_text(st, 5, q.kind.data(), static_cast<int>(q.kind.size()), SQLITE_STATIC);
  sqlite3_bind_int64(st, 6, static_cast<int64_t>(q.comm));
  sqlite3_bind_int64(st, 7, after_ns);
  sqlite3_bind_int64(st, 8, after_id);
  sqlite3_bind_int64(st, 9, static_cast<int64_t>(q.limit) + 1);
  sqlite3_bind_int64(st, 10, kHistoryJobLeadNs);
  sqlite3_bind_int64(st, 11, q.comm_label);
  sqlite3_bind_int64(st, 12, kHistoryJobTailNs);
  HistoryPage page;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    HistoryEvent e;
    e.id = sqlite3_column_int64(st, 0);
    e.unix_ns = sqlite3_column_int64(st, 1);
    e.end_unix_ns = sqlite3_column_int64(st, 2);
    e.kind = SqliteText(st, 3);
    e.node = SqliteText(st, 4);
    e.comm = static_cast<uint64_t>(sqlite3_column_int64(st, 5));
    e.job = SqliteText(st, 6);
    e.detail_json = SqliteText(st, 7);
    page.events.push_back(std::move(e));
  }
  const std::string error = rc == SQLITE_DONE ? "" : sqlite3_errmsg(reader_);
  sqlite3_finalize(st);
  if (!error.empty()) return absl::UnavailableError(absl::StrCat("history: ", error));
  if (page.events.size() > q.limit) {
    page.events.resize(q.limit);
    page.next_cursor = absl::StrCat(page.events.back().unix_ns, ":", page.events.back().id);
  }
  return page;
}

}  // namespace fabricscope::exporters
