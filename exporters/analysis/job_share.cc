#include "exporters/analysis/job_share.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

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

// The job's and all bytes per column of one accumulator (a port, or the transfers of unknown
// ports), spread by Spread; the interior arrays have one slot more: the difference at c1 may
// fall on the last column.
struct ShareColumns {
  explicit ShareColumns(size_t cols)
      : job(cols, 0), all(cols, 0), job_in(cols + 1, 0), all_in(cols + 1, 0) {}
  std::vector<double> job, all, job_in, all_in;
  // Folds the interior differences into job and all.
  void Settle() {
    double run_job = 0, run_all = 0;
    for (size_t c = 0; c < job.size(); ++c) {
      job[c] += run_job += job_in[c];
      all[c] += run_all += all_in[c];
    }
  }
};

}  // namespace

// Every port's columns from one pass over the node's transfers: a transfer of k known ports adds
// 1/k of its bytes to each, one of unknown ports adds to `unknown`; a port's share then counts
// 1/n of `unknown` (n the known ports, at least 1), so that the ports' bytes sum to the node's.
NodeShares::NodeShares(const NodeTransfers& node, const std::set<uint64_t>& comms, int64_t from,
                       int64_t bucket_ns, size_t cols, const std::set<std::string>* wanted)
    : unknown_only_(cols, NAN), node_wide_(cols, NAN) {
  if ((node.truncated && node.transfers.empty()) || bucket_ns <= 0 || cols == 0) return;
  ShareColumns unknown(cols), known_whole(cols);  // the transfers of unknown ports; of known ones
  // The ports asked for get columns; every known port counts in n.
  std::map<std::string_view, ShareColumns> ports;
  std::set<std::string_view> known;
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
    for (const std::string& p : t.ports) {
      if (known.insert(p).second && (wanted == nullptr || wanted->contains(p))) {
        ports.try_emplace(p, cols);
      }
    }
    if (t.end_unix_ns < from || t.start_unix_ns >= to) continue;
    const bool mine = comms.contains(t.comm);
    const double part =
        static_cast<double>(t.bytes) / static_cast<double>(std::max<size_t>(1, t.ports.size()));
    const auto add = [&](ShareColumns& c, double bytes) {
      Spread(from, bucket_ns, t.start_unix_ns, t.end_unix_ns, bytes, &c.all, &c.all_in);
      if (mine) Spread(from, bucket_ns, t.start_unix_ns, t.end_unix_ns, bytes, &c.job, &c.job_in);
    };
    add(t.ports.empty() ? unknown : known_whole, static_cast<double>(t.bytes));
    for (const std::string& p : t.ports) {
      if (auto it = ports.find(p); it != ports.end()) add(it->second, part);
    }
  }
  unknown.Settle();
  known_whole.Settle();
  const double n = static_cast<double>(std::max<size_t>(1, known.size()));
  // ShareColumns before what a truncated node kept stay NaN.
  size_t first = 0;
  while (node.truncated && first < cols &&
         from + static_cast<int64_t>(first + 1) * bucket_ns <= oldest) {
    ++first;
  }
  const auto share = [&](const std::vector<double>& job, const std::vector<double>& all,
                         double unknown_part) {
    std::vector<float> s(cols, NAN);
    for (size_t c = first; c < cols; ++c) {
      const double j = job[c] + unknown.job[c] * unknown_part;
      const double a = all[c] + unknown.all[c] * unknown_part;
      // Running sums leave rounding residue: under a thousandth of a byte is nothing.
      s[c] = a > 1e-3 && j > 1e-3 ? static_cast<float>(std::clamp(j / a, 0.0, 1.0)) : 0.0f;
    }
    return s;
  };
  for (auto& [port, c] : ports) {
    c.Settle();
    by_port_.emplace(std::string(port), share(c.job, c.all, 1 / n));
  }
  const std::vector<double> none(cols, 0);
  unknown_only_ = share(none, none, 1);
  node_wide_ = share(known_whole.job, known_whole.all, 1);
}

const std::vector<float>& NodeShares::Of(const std::string& port) const {
  if (port.empty()) return node_wide_;
  const auto it = by_port_.find(port);
  return it == by_port_.end() ? unknown_only_ : it->second;
}

std::vector<float> JobShareColumns(const NodeTransfers& node, const std::set<uint64_t>& comms,
                                   int64_t from, int64_t bucket_ns, size_t cols,
                                   const std::string& port) {
  return NodeShares(node, comms, from, bucket_ns, cols).Of(port);
}

size_t WeighByJob(HeatmapModel* m, const std::map<std::string, NodeTransfers>& by_node,
                  const std::set<uint64_t>& comms) {
  static const NodeTransfers kNone;
  std::map<std::string, NodeShares> shares;             // per node, computed once
  std::map<std::string, std::set<std::string>> wanted;  // the ports of each node's rows
  for (size_t r = 0; r < m->row_ports.size() && r < m->row_nodes.size(); ++r) {
    wanted[m->row_nodes[r]].insert(m->row_ports[r]);
  }
  // Rows kept are moved down in place: row r lands on row `kept` <= r, never read again.
  size_t kept = 0;
  for (size_t r = 0; r < m->rows.size() && r < m->row_nodes.size(); ++r) {
    const std::string& node = m->row_nodes[r];
    static const std::string kNodeWide;
    const std::string& port = r < m->row_ports.size() ? m->row_ports[r] : kNodeWide;
    auto it = shares.find(node);
    if (it == shares.end()) {
      auto t = by_node.find(node);
      it = shares
               .try_emplace(node, t == by_node.end() ? kNone : t->second, comms, m->start_unix_ns,
                            m->bucket_ns, m->cols, &wanted[node])
               .first;
    }
    const std::vector<float>& s = it->second.Of(port);
    if (std::none_of(s.begin(), s.end(), [](float v) { return v > 0; })) continue;
    for (size_t c = 0; c < m->cols; ++c) m->values[kept * m->cols + c] = m->at(r, c) * s[c];
    if (kept != r) {
      m->rows[kept] = std::move(m->rows[r]);
      m->row_nodes[kept] = m->row_nodes[r];
      if (r < m->row_ports.size()) m->row_ports[kept] = m->row_ports[r];
    }
    ++kept;
  }
  m->rows.resize(kept);
  m->row_nodes.resize(kept);
  if (m->row_ports.size() > kept) m->row_ports.resize(kept);
  m->values.resize(kept * m->cols);
  return kept;
}

}  // namespace fabricscope::exporters
