#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/common/remote_write_options.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/remote_write.pb.h"

namespace fabricscope::exporters {

using common::RemoteWriteOptions;  // collectors/common/remote_write_options.h

// The WriteRequest of one snapshot: one TimeSeries per sample of `families` (a histogram gives
// its _bucket series with `le` spelled as /metrics spells it (AppendSampleValue), _sum and _count,
// as the text exposition does), labels sorted by
// name with __name__, one Sample at `timestamp_ms` each; a summary gives its {quantile}, _sum
// and _count series. Returns how many samples it holds.
size_t BuildWriteRequest(const std::vector<prometheus::MetricFamily>& families,
                         int64_t timestamp_ms, promrw::WriteRequest* out);

// What the receiver's answer means for a request (the spec's "Retries & Backoff"): success (2xx),
// retry with backoff (5xx, 429, or no answer), or drop it (any other 4xx: it would fail again).
enum class WriteOutcome { kSent, kRetry, kDrop };
WriteOutcome ClassifyStatus(int http_status);

// Prometheus remote-write 1.0 (https://prometheus.io/docs/specs/remote_write_spec/) from the
// aggregator and the standalone agent (exporters/README.md "Scaling").
//
// The sender: every interval it takes a snapshot (`collect`, the same families /metrics
// renders), builds and snappy-compresses one WriteRequest, and queues it for each URL; one
// thread per URL POSTs its queue in order (Content-Encoding: snappy, Content-Type:
// application/x-protobuf, X-Prometheus-Remote-Write-Version: 0.1.0), retrying with exponential
// backoff (1 s doubling to 30 s) while the receiver is down, so that nothing is lost until the
// queue passes queue_max_bytes. Its own counters are families of the metric catalog
// (fabricscope_remote_write_*; Collect).
class RemoteWriter : public prometheus::Collectable {
 public:
  using CollectFn = std::function<std::vector<prometheus::MetricFamily>()>;
  // Errors (InvalidArgument): a URL that is not http(s)://host[:port]/path, a token or password
  // file that cannot be read, half a client certificate, an interval below 100 ms.
  static absl::StatusOr<std::unique_ptr<RemoteWriter>> Create(RemoteWriteOptions options,
                                                              CollectFn collect);
  ~RemoteWriter() override;
  void Start();
  // Stops the threads: what is still queued is lost (counted as dropped, reason "shutdown").
  void Stop();
  // Takes one snapshot now and queues it (tests; the timer does the same every interval).
  void SnapshotNow();

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Endpoint;
  RemoteWriter(RemoteWriteOptions options, CollectFn collect);
  void TimerLoop();
  void SendLoop(Endpoint* e);

  const RemoteWriteOptions options_;
  const CollectFn collect_;
  std::string bearer_token_, basic_password_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t seq_ = 0;  // of the snapshots queued
  std::vector<std::thread> threads_;
};

}  // namespace fabricscope::exporters
