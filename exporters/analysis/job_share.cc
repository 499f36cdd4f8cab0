#include "exporters/analysis/job_share.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fabricscope::exporters {

namespace {

constexpr int64_t kMaxTransferNs = 3'600'000'000'000;

// Adds `bytes` spread evenly over [start, end] to the columns of `sum` (a transfer of no duration
// whole in its column): the first and last columns directly, the ones between through the
// difference array `interior` (each gets bytes x bucket / length), so a transfer costs O(1)
// whatever its length.
void Spread(int64_t from, int64_t bucket_ns, int64_t start, int64_t end, double bytes,
            std::vector<double>* sum, std::vector<double>* interior) {
  const auto cols = static_cast<int64_t>(sum->size());
  const auto col_of = [&](int64_t ns) {
    return std::clamp<int64_t>((ns - from) / bucket_ns, 0, cols - 1);
  };
  const int64_t c0 = col_of(start), c1 = col_of(end);
  const int64_t length = end - start;
  if (length <= 0) {
    (*sum)[static_cast<size_t>(c0)] += bytes;
    return;
  }
  const double per_ns = bytes / static_cast<double>(length);
  const auto overlap = [&](int64_t c) {
    const int64_t lo = std::max(from + c * bucket_ns, start);
    const int64_t hi = std::min(from + (c + 1) * bucket_ns, end);
    return hi > lo ? static_cast<double>(hi - lo) : 0.0;
  };
  (*sum)[static_cast<size_t>(c0)] += per_ns * overlap(c0);
  if (c1 > c0) (*sum)[static_cast<size_t>(c1)] += per_ns * overlap(c1);
  if (c1 > c0 + 1) {
    const double v = per_ns * static_cast<double>(bucket_ns);
    (*interior)[static_cast<size_t>(c0 + 1)] += v;
    (*interior)[static_cast<size_t>(c1)] -= v;
  }
}

}  // namespace

std::vector<float> JobShareColumns(const NodeTransfers& node, const std::set<uint64_t>& comms,
                                   int64_t from, int64_t bucket_ns, size_t cols) {
  std::vector<float> share(cols, NAN);
  if ((node.truncated && node.transfers.empty()) || bucket_ns <= 0 || cols == 0) return share;
  // interior arrays have one slot more: the difference at c1 may fall on the last column.
  std::vector<double> job(cols, 0), all(cols, 0), job_in(cols + 1, 0), all_in(cols + 1, 0);
  int64_t oldest = std::numeric_limits<int64_t>::max();
  const int64_t to = from + bucket_ns * static_cast<int64_t>(cols);
  for (const NodeTransfer& t : node.transfers) {
    // Unknown times (0), a clock that went backwards, or a span past an hour (an agent's bad
    // clock; it would also overflow the arithmetic) say nothing about when the bytes moved.
    if (t.start_unix_ns <= 0 || t.end_unix_ns < t.start_unix_ns ||
        t.end_unix_ns - t.start_unix_ns > kMaxTransferNs) {
      continue;
    }
    // The node keeps its latest records by arrival, which follows their ends: what it dropped
    // ended before the earliest end it kept.
    oldest = std::min(oldest, t.end_unix_ns);
    if (t.end_unix_ns < from || t.start_unix_ns >= to) continue;
    const auto bytes = static_cast<double>(t.bytes);
    Spread(from, bucket_ns, t.start_unix_ns, t.end_unix_ns, bytes, &all, &all_in);
    if (comms.contains(t.comm)) {
      Spread(from, bucket_ns, t.start_unix_ns, t.end_unix_ns, bytes, &job, &job_in);
    }
  }
  double run_job = 0, run_all = 0;
  for (size_t c = 0; c < cols; ++c) {
    run_job += job_in[c];
    run_all += all_in[c];
    const double j = job[c] + run_job, a = all[c] + run_all;
    const int64_t c_end = from + static_cast<int64_t>(c + 1) * bucket_ns;
    if (node.truncated && c_end <= oldest) continue;  // before the records reach: unknown
    // Running sums leave rounding residue: under a thousandth of a byte is nothing.
    share[c] = a > 1e-3 && j > 1e-3 ? static_cast<float>(std::clamp(j / a, 0.0, 1.0)) : 0.0f;
  }
  return share;
}

size_t WeighByJob(HeatmapModel* m, const std::map<std::string, NodeTransfers>& by_node,
                  const std::set<uint64_t>& comms) {
  static const NodeTransfers kNone;
  std::map<std::string, std::vector<float>> shares;  // per node, computed once
  // Rows kept are moved down in place: row r lands on row `kept` <= r, never read again.
  size_t kept = 0;
  for (size_t r = 0; r < m->rows.size() && r < m->row_nodes.size(); ++r) {
    const std::string& node = m->row_nodes[r];
    auto it = shares.find(node);
    if (it == shares.end()) {
      auto t = by_node.find(node);
      it = shares
               .emplace(node, JobShareColumns(t == by_node.end() ? kNone : t->second, comms,
                                              m->start_unix_ns, m->bucket_ns, m->cols))
               .first;
    }
    const std::vector<float>& s = it->second;
    if (std::none_of(s.begin(), s.end(), [](float v) { return v > 0; })) continue;
    for (size_t c = 0; c < m->cols; ++c) m->values[kept * m->cols + c] = m->at(r, c) * s[c];
    if (kept != r) {
      m->rows[kept] = std::move(m->rows[r]);
      m->row_nodes[kept] = m->row_nodes[r];
    }
    ++kept;
  }
  m->rows.resize(kept);
  m->row_nodes.resize(kept);
  m->values.resize(kept * m->cols);
  return kept;
}

}  // namespace fabricscope::exporters
