#pragma once

#include <cstdint>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::uplink {

// Where the agent's pipeline hands finished batches: the gRPC uplink, or the in-process
// aggregator in standalone mode.
//
// Threading: Submit() is called from the pipeline thread only and must not block on the
// network; stats may be read from any thread.
class BatchSink {
 public:
  virtual ~BatchSink() = default;

  // Takes a batch without a sequence number; the sink numbers it (1, 2, ...).
  virtual void Submit(v1::Batch batch) = 0;

  // Tries for at most timeout_ms to deliver what is queued, then stops. Control thread.
  virtual void Shutdown(int timeout_ms) = 0;

  virtual uint64_t dropped_batches() const = 0;
  // Batches the receiver refused as invalid or too large, dropped instead of resent.
  virtual uint64_t refused_batches() const { return 0; }
  virtual uint64_t acked_seq() const = 0;
  virtual bool connected() const = 0;
};

}  // namespace fabricscope::uplink
