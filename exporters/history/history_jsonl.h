#pragma once

// The event history as JSON lines (issue 37 item 1), for the log shippers a cluster already runs
// (Fluent Bit's tail input, Vector's file source) into Loki, Elasticsearch or ClickHouse: one
// event per line, appended by the history's writer thread after each batch, never on the
// ingest path. The schema (exporters/README.md "History" has an example):
//   {"id":17,"time":"2026-12-06T02:13:04.120331Z","unix_ns":...,"end_unix_ns":...,
//    "kind":"collective","node":"n3","comm":"9f0c1a2b","comm_hash":"9f0c1a2b5d6e7f80",
//    "job":"8812","detail":{...}}
// id is the database's (0 without one); comm is the communicator's label as every metric and
// page shows it (common::CommLabel, 8 hex digits), comm_hash its whole hash; both "" for none.
//
// Rotation by size, as logrotate's `rotate 3` + `size` would do it: when the file would pass
// max_bytes it becomes PATH.1 (PATH.1 becomes PATH.2, PATH.2 PATH.3, PATH.3 is deleted) and a new
// PATH is begun. Shippers follow the rename by inode. A write that fails (a full disk) drops
// the line and counts it; the next batch tries again.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "exporters/history/history_store.h"

namespace fabricscope::exporters {

// One event as its JSON line (without the newline). Pure.
std::string HistoryEventJson(const HistoryEvent& e);

// Not thread-safe: the history's writer thread owns it.
class HistoryJsonl {
 public:
  static constexpr int kRotations = 3;  // PATH.1 .. PATH.3 kept
  // Opens PATH for appending (created 0640). Errors: Unavailable naming the path and errno.
  static absl::Status Check(const std::string& path);
  HistoryJsonl(std::string path, int64_t max_bytes);
  ~HistoryJsonl();
  HistoryJsonl(const HistoryJsonl&) = delete;
  HistoryJsonl& operator=(const HistoryJsonl&) = delete;

  // Appends the events, rotating first when a line would pass max_bytes. Returns how many lines
  // were written; the others are dropped (*error says why).
  size_t Write(const std::vector<HistoryEvent>& events, std::string* error);
  uint64_t rotations() const { return rotations_; }

 private:
  bool Reopen(std::string* error);
  void Rotate();

  const std::string path_;
  const int64_t max_bytes_;
  int fd_ = -1;
  int64_t size_ = 0;
  uint64_t rotations_ = 0;
};

}  // namespace fabricscope::exporters
