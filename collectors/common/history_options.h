#pragma once

#include <cstdint>
#include <string>

namespace fabricscope::common {

// The event history of the aggregator and the standalone agent (`history:` in the config,
// --history-*; declared once in collectors/common/history_options.inc, kept by
// exporters/history/history_store.h HistoryStore and fed by history_recorder.h).
struct HistoryOptions {
  // The SQLite database; "" = $STATE_DIRECTORY/history.db when systemd gives the service a
  // state directory (StateDirectory=, the shipped units), else no database.
  std::string path;
  int64_t retention_ns = 7LL * 24 * 3600 * 1'000'000'000;  // events older are deleted
  uint64_t max_bytes = uint64_t{1} << 30;                  // used pages; the oldest go first
  std::string jsonl;                                       // JSON lines; "" = none
  uint64_t jsonl_max_bytes = uint64_t{100} << 20;          // then rotated (3 kept)
};

// The database path in effect: `path`, else $STATE_DIRECTORY's first entry + "/history.db" when
// that variable is set (systemd.exec(5) "StateDirectory="), else "". `off` names no database.
std::string HistoryDatabasePath(const HistoryOptions& o);

}  // namespace fabricscope::common
