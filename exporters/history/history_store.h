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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;

namespace fabricscope::exporters {

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
};
bool IsHistoryKind(absl::string_view kind);

// Filters of one page of the history: every set field must match. Time order, then id.
struct HistoryQuery {
  std::string job, node, kind;
  uint64_t comm = 0;               // 0 = any
  int64_t from_unix_ns = 0;        // events that began at or after
  int64_t to_unix_ns = INT64_MAX;  // ... and before
  size_t limit = 100;              // at most kMaxHistoryPage
  std::string cursor;              // "" = from the start; else a page's next_cursor
};
inline constexpr size_t kMaxHistoryPage = 10'000;

struct HistoryPage {
  std::vector<HistoryEvent> events;
  std::string next_cursor;  // "" when this page reached the end
};

class HistoryStore {
 public:
  struct Options {
    std::string path;                                        // the database file
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
    uint64_t deleted_retention = 0, deleted_size = 0;
    uint64_t queued = 0;
    int64_t used_bytes = 0;  // the database's used pages
    uint64_t corrupt_files_moved = 0;
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
  // Writes what is queued now and applies the bounds, on the caller's thread (tests, shutdown).
  void Flush();
  // One page of events. Errors: InvalidArgument for a malformed cursor or limit, naming it;
  // Unavailable when the database cannot be read.
  absl::StatusOr<HistoryPage> Query(const HistoryQuery& q) const;
  Stats stats() const;

 private:
  explicit HistoryStore(Options options);
  absl::Status OpenDatabase();
  void Loop();
  void WriteBatch(std::vector<HistoryEvent>* batch);
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
  Stats stats_;
  bool stop_ = false;
  bool failing_ = false;  // in a streak of failed writes (logged once)
  int64_t last_prune_ns_ = 0;
  std::thread thread_;
};

}  // namespace fabricscope::exporters
