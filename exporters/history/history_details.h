#pragma once

// The events the history recorder (exporters/history/history_recorder.h) writes, and each kind's
// `detail` object as JSON text (exporters/README.md "History" lists the fields). Strings from
// agents are escaped (RFC 8259 §7) and cut at kMaxDetailStringBytes; a number that is not finite
// is written as null.

#include <cstdint>
#include <string>
#include <vector>

#include "exporters/analysis/cross_rank_types.h"
#include "exporters/analysis/diagnosis.h"
#include "exporters/history/history_store.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

inline constexpr size_t kMaxDetailStringBytes = 512;
inline constexpr size_t kMaxInstanceRanks = 64;  // ranks listed in an instance's detail

HistoryEvent MakeHistoryEvent(int64_t unix_ns, int64_t end_unix_ns, std::string kind,
                              std::string node, uint64_t comm, std::string job,
                              std::string detail_json);
// a + b, false when it overflows int64 (a hostile agent's offset or time).
inline bool HistoryAdd(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

// A rank's analysed collective; labels: its node's port labels by index. Its channel spans, when
// the plugin sent them, as "channels": [[channel, start_unix_ns, end_unix_ns], ...] (monotonic +
// unix_offset_ns; a span whose sum overflows is left out).
std::string HistoryCollectiveDetail(const v1::Collective& c, const std::vector<std::string>& labels,
                                    int64_t unix_offset_ns);
// A cross-rank instance with at most kMaxInstanceRanks ranks.
std::string HistoryInstanceDetail(const CollectiveInstance& inst);
// A communicator's diagnosis; `ended`: it lost its cause.
std::string HistoryDiagnosisDetail(const CommDiagnosis& g, bool ended);
std::string HistoryMicroburstDetail(const std::string& port, const char* direction,
                                    double peak_utilization, uint64_t bytes);
std::string HistoryLinkDetail(const std::string& port, const std::string& what, uint64_t old_value,
                              uint64_t new_value);
std::string HistoryLossDetail(const std::string& port, uint64_t events, uint64_t captured);
std::string HistoryJoinedDetail(const v1::Hello& hello);
// detail with "similar_in_second": n appended.
std::string WithSimilar(std::string detail, uint32_t n);

}  // namespace fabricscope::exporters
