#pragma once

#include <atomic>

#include "collectors/uplink/batch_sink.h"
#include "exporters/ingest/admission.h"

namespace fabricscope::agent {

// Standalone mode: hands batches straight to an in-process aggregator's ClusterState, through
// the same admission and Hello/Batch/ack logic the gRPC path uses. Submit() takes the state's
// lock briefly.
class LocalSink final : public uplink::BatchSink {
 public:
  LocalSink(exporters::Admission& admission, v1::Hello hello);

  void Submit(v1::Batch batch) override;
  void Shutdown(int /*timeout_ms*/) override {}
  uint64_t dropped_batches() const override { return rejected_.load(); }
  uint64_t acked_seq() const override { return acked_.load(); }
  bool connected() const override { return true; }

 private:
  exporters::Admission& admission_;
  v1::Hello hello_;
  uint64_t next_seq_ = 1;  // pipeline thread only
  std::atomic<uint64_t> acked_{0};
  std::atomic<uint64_t> rejected_{0};
};

}  // namespace fabricscope::agent
