#include "agent/utilization_series.h"

#include <algorithm>

#include "collectors/common/utilization_codec.h"

namespace fabricscope::agent {

UtilizationSeriesBuilder::UtilizationSeriesBuilder(int64_t window_ns, int64_t bucket_ns)
    : bucket_ns_(bucket_ns > 0 ? bucket_ns : 1'000'000) {
  const int64_t n = std::max<int64_t>(1, (window_ns + bucket_ns_ - 1) / bucket_ns_) + 1;
  bytes_.assign(static_cast<size_t>(n), 0.0);
  covered_ns_.assign(static_cast<size_t>(n), 0);
}

void UtilizationSeriesBuilder::Reset(int64_t start_ns) {
  start_ns_ = start_ns;
  std::fill(bytes_.begin(), bytes_.end(), 0.0);
  std::fill(covered_ns_.begin(), covered_ns_.end(), 0);
}

void UtilizationSeriesBuilder::Add(int64_t t_ns, int64_t interval_ns, uint64_t bytes) {
  if (interval_ns <= 0) return;
  const int64_t lead = start_ns_ - bucket_ns_;  // start of index 0
  const int64_t end_of_window = lead + bucket_ns_ * static_cast<int64_t>(bytes_.size());
  const int64_t from = std::max(t_ns - interval_ns, lead);
  const int64_t to = std::min(t_ns, end_of_window);
  if (to <= from) return;
  const double per_ns = static_cast<double>(bytes) / static_cast<double>(interval_ns);
  size_t b = static_cast<size_t>((from - lead) / bucket_ns_);
  for (int64_t at = from; at < to && b < bytes_.size(); ++b) {
    const int64_t bucket_end = lead + bucket_ns_ * static_cast<int64_t>(b + 1);
    const int64_t overlap = std::min(to, bucket_end) - at;
    bytes_[b] += per_ns * static_cast<double>(overlap);
    covered_ns_[b] += overlap;
    at += overlap;
  }
}

int64_t UtilizationSeriesBuilder::Encode(uint64_t rate_bytes_per_second, int64_t end_ns,
                                         std::string* out) const {
  const int64_t n = std::clamp<int64_t>((end_ns - start_ns_ + bucket_ns_ - 1) / bucket_ns_, 0,
                                        static_cast<int64_t>(bytes_.size()) - 1);
  const double rate = static_cast<double>(rate_bytes_per_second);
  const size_t first = covered_ns_[0] > 0 ? 0 : 1;
  for (size_t b = first; b <= static_cast<size_t>(n); ++b) {
    const double util = covered_ns_[b] > 0 && rate > 0
                            ? bytes_[b] / (rate * static_cast<double>(covered_ns_[b]) / 1e9)
                            : NAN;
    out->push_back(static_cast<char>(common::EncodeUtilization(util)));
  }
  return first == 0 ? start_ns_ - bucket_ns_ : start_ns_;
}

}  // namespace fabricscope::agent
