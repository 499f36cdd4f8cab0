#pragma once

// The durable event history (issue 37): what the aggregator saw happen, kept past its memory and
// its restarts, for "which all-reduce at 02:13 was slow, on which link, and why" the morning
// after. One SQLite database (Debian's libsqlite3) in WAL mode (https://sqlite.org/wal.html):
// writers append to a bounded queue and return; one thread writes the queue in one transaction
// per flush period, off the ingest path. Readers use their own connection, which WAL lets run
// beside the writer.
//
// Durability: synchronous=NORMAL in WAL mode loses no committed transaction when the process is
// killed (only a power loss may roll back the last ones, https://sqlite.org/pragma.html
// #pragma_synchronous), and a transaction commits every flush_period: a kill -9 loses at most
// the events queued since the last flush. A file that is not a database, or fails its quick
// check at open, is moved aside (PATH.corrupt-UNIXSECONDS) and a new one started, said in the
// log. A write that fails (a full disk, an I/O error) drops that transaction's events, counts
// them, and says so once per failure streak; ingest never waits on the disk.
//
// Bounds: events older than `retention` and, past `max_bytes` of used pages, the oldest ones are
// deleted (counted by reason); auto_vacuum=INCREMENTAL gives the freed pages back to the file
// system.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;

namespace fabricscope::exporters {

class HistoryJsonl;  // exporters/history/history_jsonl.h

// One thing that happened. `kind` is one of kHistoryKinds; `detail_json` a JSON object with the
// kind's own fields (its schema: exporters/README.md "History"), stored as given.
struct HistoryEvent {
  int64_t id = 0;           // assigned by the store, increasing in write order
  int64_t unix_ns = 0;      // when it began (Unix ns)
  int64_t end_unix_ns = 0;  // when it ended; 0 = an instant
  std::string kind;
  std::string node;   // "" = cluster-wide
  uint64_t comm = 0;  // communicator hash; 0 = none
  std::string job;    // Job.id; "" = unknown
  std::string detail_json = "{}";
};

// The kinds of event, each declared once.
inline constexpr const char* kHistoryKinds[] = {
    "collective",       // an analysed collective that was slow or not normal
    "instance",         // a cross-rank instance with its straggler
    "diagnosis_began",  // a communicator's diagnosis took a cause
    "diagnosis_ended",  // ... and lost it (with its cost)
    "microburst",       // a port's microburst
    "loss",             // a loss episode on a port
    "link_state",       // a port's state or rate changed
    "node_joined",      // a node's first Hello (or a new agent instance)
    "node_expired",     // a node forgotten after --node-expiry of silence
    "utilization",      // a node's ports over kHistoryUtilizationPeriodNs: mean and peak
};
bool IsHistoryKind(absl::string_view kind);
// The period of a node's `utilization` events: what the timeline draws for a range older than
// the per-port history held in memory (exporters/analysis/link_analysis.h, 10 s).
inline constexpr int64_t kHistoryUtilizationPeriodNs = 10'000'000'000;

// Filters of one page of the history: every set field must match. Time order, then id.
// A job matches its own events and the node-level events (job "") of its nodes from
// kHistoryJobLeadNs before the node first ran it to kHistoryJobTailNs after it last did
// (HistoryStore::NoteJobNode, told at most every 10 s by the recorder):
// the microbursts, loss and link changes its ranks lived through, a fault that was there before
// the job began included.
struct HistoryQuery {
  std::string job, node, kind;
  uint64_t comm = 0;               // the whole hash; 0 = any
  int64_t comm_label = -1;         // its top 32 bits (common::CommLabel's); -1 = any
  int64_t from_unix_ns = 0;        // events that began at or after
  int64_t to_unix_ns = INT64_MAX;  // ... and before
  size_t limit = 100;              // at most kMaxHistoryPage
  std::string cursor;              // "" = from the start; else a page's next_cursor
  bool newest_first = false;       // descending time order (its cursors page backwards)
  bool node_level = false;         // only events of no communicator and no job
};
inline constexpr size_t kMaxHistoryPage = 10'000;
inline constexpr int64_t kHistoryJobLeadNs = 600'000'000'000;  // 10 min
inline constexpr int64_t kHistoryJobTailNs = 10'000'000'000;   // 10 s

// A job as the history knows it: the nodes that ran it and when (HistoryStore::NoteJobNode).
struct HistoryJob {
  std::string job;
  int64_t first_unix_ns = 0, last_unix_ns = 0;
  std::vector<std::string> nodes;
};

struct HistoryPage {
  std::vector<HistoryEvent> events;
  std::string next_cursor;  // "" when this page reached the end
};

class HistoryStore {
 public:
  struct Options {
    // The database file; "" = no database (only the JSON-lines file, when jsonl_path is set;
    // Query then fails).
    std::string path;
    // The same events as JSON lines (exporters/history/history_jsonl.h), size-rotated; "" = none.
    std::string jsonl_path;
    int64_t jsonl_max_bytes = int64_t{100} << 20;
    int64_t retention_ns = 7LL * 24 * 3600 * 1'000'000'000;  // 7 days
    int64_t max_bytes = int64_t{1} << 30;                    // 1 GiB of used pages
    int64_t flush_period_ns = 250'000'000;                   // one transaction per period
    size_t max_queued = 100'000;  // events waiting for the writer; past it, dropped and counted
    // The clock that retention compares with (tests move it); Unix ns.
    int64_t (*now_unix_ns)() = nullptr;
  };
  struct Stats {
    uint64_t written = 0;
    uint64_t dropped_queue_full = 0, dropped_write_error = 0;
    uint64_t refused = 0;  // CountRefused's: not offered (a time out of bounds, a full table)
    uint64_t deleted_retention = 0, deleted_size = 0;
    uint64_t queued = 0;
    int64_t used_bytes = 0;  // the database's used pages
    uint64_t corrupt_files_moved = 0;
    uint64_t jsonl_written = 0, jsonl_dropped = 0, jsonl_rotations = 0;
    std::string last_error;
  };

  // Opens (or creates) the database and starts the writer. Errors: Unavailable when the file
  // cannot be opened or created (the directory missing or not writable), with SQLite's message.
  static absl::StatusOr<std::unique_ptr<HistoryStore>> Open(Options options);
  ~HistoryStore();  // writes what is queued, then closes
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  // Queues an event; never blocks on the disk. Thread-safe.
  void Append(HistoryEvent event);
  // Events its feeder did not offer (a time out of bounds, a bound of its own), counted with
  // the store's drops (fabricscope_history_dropped_events_total{reason="refused"}).
  void CountRefused(uint64_t n) {
    std::lock_guard<std::mutex> l(mu_);
    stats_.refused += n;
  }
  // Node `node` ran job `job` at unix_ns (kept as the first and last time per (job, node) and
  // written with the next batch; bounded by retention like the events). Thread-safe.
  void NoteJobNode(const std::string& job, const std::string& node, int64_t unix_ns);
  // Writes what is queued now and applies the bounds, on the caller's thread (tests, shutdown).
  void Flush();
  // One page of events. Errors: InvalidArgument for a malformed cursor or limit, naming it;
  // Unavailable when the database cannot be read.
  absl::StatusOr<HistoryPage> Query(const HistoryQuery& q) const;
  // The jobs the history holds, the most recently seen first, at most `limit`; job non-empty:
  // that one only. Errors: Unavailable as Query's.
  absl::StatusOr<std::vector<HistoryJob>> Jobs(size_t limit, const std::string& job = "") const;
  Stats stats() const;
  bool has_database() const { return writer_ != nullptr; }

 private:
  explicit HistoryStore(Options options);
  absl::Status OpenDatabase();
  void Loop();
  struct JobSpan {
    int64_t first = 0, last = 0;
  };
  using JobSpans = std::map<std::pair<std::string, std::string>, JobSpan>;
  void WriteBatch(std::vector<HistoryEvent>* batch, JobSpans* spans);
  // One transaction: the events (their ids set) and the job spans. False with *error when it
  // failed and was rolled back.
  bool WriteDatabase(std::vector<HistoryEvent>* batch, const JobSpans& spans, std::string* error);
  void Prune();
  int64_t Now() const;

  const Options options_;
  sqlite3* writer_ = nullptr;  // the writer thread's (and Flush's, under write_mu_)
  sqlite3* reader_ = nullptr;  // Query's, under read_mu_
  std::mutex write_mu_;
  mutable std::mutex read_mu_;
  mutable std::mutex mu_;  // queue_, stats_, stop_
  std::condition_variable cv_;
  std::deque<HistoryEvent> queue_;
  JobSpans spans_;  // NoteJobNode's, until the next write
  std::unique_ptr<HistoryJsonl> jsonl_;
  Stats stats_;
  bool stop_ = false;
  bool failing_ = false;        // in a streak of failed writes (logged once)
  bool jsonl_failing_ = false;  // ... of the JSON lines
  int64_t last_prune_ns_ = 0;
  std::thread thread_;
};

}  // namespace fabricscope::exporters
