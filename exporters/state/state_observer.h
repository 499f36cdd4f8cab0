#pragma once

// What happens to the cluster state, told as it happens, to whoever keeps a record of it (the
// event history, exporters/history/history_recorder.h). The state calls it and knows nothing
// else of the listener; a listener may read the state back (the calls come under the node's
// ingest stripe, with no other lock of the state held, except OnInstance's, below).

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "exporters/analysis/cross_rank_types.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

class StateObserver {
 public:
  virtual ~StateObserver() = default;
  // A Hello of a new node, or of a new agent instance of a known one, once stored.
  virtual void OnNodeJoined(const v1::Hello& hello) = 0;
  // A batch the state stored (not a duplicate, not refused; an early one too), after the state
  // took it, under the node's stripe.
  virtual void OnBatch(const std::string& node, const v1::Batch& batch) = 0;
  // A node forgotten after its silence (ClusterState::ExpireNodes).
  virtual void OnNodeExpired(const std::string& node, absl::Time now) = 0;
  // A completed cross-rank instance whose cause is not normal. Called under a communicator
  // shard's lock of the cross-rank analysis: quick, no lock of the state taken, and a copy only
  // of what is kept.
  virtual void OnInstance(const CollectiveInstance& instance) = 0;
};

}  // namespace fabricscope::exporters
