#include "exporters/analysis/cross_rank_heatmaps.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace fabricscope::exporters {

bool PickCollective(const std::map<std::pair<uint64_t, std::string>, size_t>& counts,
                    const std::string& comm, const std::string& func,
                    std::pair<uint64_t, std::string>* pick, const std::set<uint64_t>* comms) {
  size_t best = 0;
  for (const auto& [k, c] : counts) {
    if (!comm.empty() && common::CommLabel(k.first) != comm) continue;
    if (comms != nullptr && !comms->count(k.first)) continue;
    if (!func.empty() && k.second != func) continue;
    const size_t score = c + (func.empty() && k.second == "AllReduce" ? 1'000'000 : 0);
    if (score > best) {
      best = score;
      *pick = k;
    }
  }
  return best > 0;
}

HeatmapModel CollectivesHeatmapOf(const std::pair<uint64_t, std::string>* pick,
                                  const std::vector<CollectiveInstance>& instances) {
  HeatmapModel m;
  m.row_axis = "rank (node)";
  m.col_axis = "collective sequence number";
  m.value_label = "duration (s)";
  m.title = pick == nullptr ? "Collective duration per rank (no complete instances yet)"
                            : absl::StrCat("Collective duration per rank: ", pick->second,
                                           " on comm ", common::CommLabel(pick->first));
  if (pick == nullptr) return m;
  const std::vector<CollectiveInstance>& v = instances;
  std::map<int32_t, std::string> rows;
  for (const CollectiveInstance& d : v) {
    for (const RankEntry& r : d.ranks)
      rows.emplace(r.rank, absl::StrCat(r.rank, " (", r.node.str(), ")"));
  }
  std::map<int32_t, size_t> row_index;
  for (const auto& [rank, label] : rows) {
    row_index[rank] = m.rows.size();
    m.rows.push_back(label);
  }
  m.cols = v.size();
  for (const CollectiveInstance& d : v) m.col_labels.push_back(absl::StrCat(d.key.seq));
  m.values.assign(m.rows.size() * m.cols, NAN);
  // Scale from the fastest to the slowest duration shown: the waiting ranks of a straggler's
  // instances glow, the straggler's own short row stays dark.
  double vmax = 0, vmin = std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < v.size(); ++c) {
    for (const RankEntry& r : v[c].ranks) {
      const double s = static_cast<double>(r.end_unix_ns - r.start_unix_ns) / 1e9;
      m.values[row_index[r.rank] * m.cols + c] = static_cast<float>(s);
      vmax = std::max(vmax, s);
      vmin = std::min(vmin, s);
    }
  }
  m.scale_min = std::isfinite(vmin) && vmin < vmax ? vmin : 0;
  m.scale_max = vmax > 0 ? vmax : 1;
  return m;
}

HeatmapModel RanksHeatmapOf(const std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t>& all,
                            const std::string& comm, const std::set<uint64_t>* comms) {
  std::map<uint64_t, uint64_t> per_comm;
  for (const auto& [k, bytes] : all) {  // saturating: counters near 2^64 must not wrap to small
    uint64_t& sum = per_comm[std::get<0>(k)];
    sum = bytes > UINT64_MAX - sum ? UINT64_MAX : sum + bytes;
  }
  uint64_t pick = 0, best = 0;
  bool found = false;
  for (const auto& [c, bytes] : per_comm) {
    if (!comm.empty() && common::CommLabel(c) != comm) continue;
    if (comms != nullptr && !comms->count(c)) continue;
    if (!found || bytes > best) {
      pick = c;
      best = bytes;
      found = true;
    }
  }
  HeatmapModel m;
  m.row_axis = "source rank";
  m.col_axis = "destination rank";
  m.value_label = "bytes sent (proxy, cumulative)";
  m.title = found ? absl::StrCat("Rank x rank bytes, comm ", common::CommLabel(pick))
                  : "Rank x rank bytes (no proxy traffic yet)";
  if (!found) {
    m.note = per_comm.empty()
                 ? "drawn from the bytes each rank's proxy sent to each peer: the NCCL profiler "
                   "plugin records them with its proxy events (collectors/nccl/README.md)"
                 : absl::StrCat("no communicator labelled \"", comm, "\" among the ",
                                per_comm.size(), " with proxy traffic");
    return m;
  }
  int64_t n = 0;  // wide: a rank of INT32_MAX plus one
  for (const auto& [k, bytes] : all) {
    if (std::get<0>(k) != pick) continue;
    n = std::max<int64_t>({n, int64_t{std::get<1>(k)} + 1, int64_t{std::get<2>(k)} + 1});
  }
  n = std::min<int64_t>(n, 1024);
  for (int64_t r = 0; r < n; ++r) {
    m.rows.push_back(absl::StrCat(r));
    m.col_labels.push_back(absl::StrCat(r));
  }
  m.cols = static_cast<size_t>(n);
  m.values.assign(m.rows.size() * m.cols, 0.0f);
  double vmax = 0;
  for (const auto& [k, bytes] : all) {
    if (std::get<0>(k) != pick || std::get<1>(k) >= n || std::get<2>(k) >= n ||
        std::get<1>(k) < 0 || std::get<2>(k) < 0) {
      continue;
    }
    m.values[static_cast<size_t>(std::get<1>(k)) * m.cols + static_cast<size_t>(std::get<2>(k))] =
        static_cast<float>(bytes);
    vmax = std::max(vmax, static_cast<double>(bytes));
  }
  m.scale_max = vmax > 0 ? vmax : 1;
  return m;
}

}  // namespace fabricscope::exporters
