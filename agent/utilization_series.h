#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fabricscope::agent {

// Accumulates the per-bucket utilization of one port and direction over one window, for
// v1::UtilizationSeries (the aggregator's link x time heat map).
//
// Each sample covering (t_ns - interval_ns, t_ns] spreads its bytes over the buckets it
// overlaps in proportion to the overlap (the counter says how many bytes moved in the interval,
// not when within it), and adds the overlap to the bucket's covered time. A bucket's
// utilization = bytes / (line rate x covered time); a bucket no sample covered is "missing".
// A sample that straddles the window start (the tick that closes a window ends a sample whose
// first part lies in the closed window) fills a lead bucket [start - bucket, start): the
// series then starts one bucket early and that bucket, missing from the previous window's
// series, is filled in at the aggregator. Older parts and parts after the window end are
// dropped.
//
// Not thread-safe: owned by the pipeline thread. Add() does not allocate.
class UtilizationSeriesBuilder {
 public:
  // window_ns / bucket_ns buckets (rounded up), preallocated; bucket_ns > 0.
  UtilizationSeriesBuilder(int64_t window_ns, int64_t bucket_ns);

  // Starts a window at start_ns, clearing every bucket.
  void Reset(int64_t start_ns);
  void Add(int64_t t_ns, int64_t interval_ns, uint64_t bytes);
  // Appends one common::EncodeUtilization byte per bucket to *out, up to the bucket holding
  // end_ns (a partial last window sends fewer buckets), from the lead bucket when it has data.
  // Returns the start time of the first bucket written. rate_bytes_per_second > 0.
  int64_t Encode(uint64_t rate_bytes_per_second, int64_t end_ns, std::string* out) const;

  int64_t start_ns() const { return start_ns_; }
  int64_t bucket_ns() const { return bucket_ns_; }
  size_t buckets() const { return bytes_.size() - 1; }  // without the lead bucket

 private:
  int64_t bucket_ns_;
  int64_t start_ns_ = 0;
  // Index 0 is the lead bucket [start - bucket, start); index i + 1 is bucket i of the window.
  std::vector<double> bytes_;
  std::vector<int64_t> covered_ns_;
};

}  // namespace fabricscope::agent
