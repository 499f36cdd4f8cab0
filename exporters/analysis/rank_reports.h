#pragma once

// The cross-rank analysis's rank reports (RankReport), built from a node's own batch or from
// the records a peer aggregator forwarded (sharded aggregators, issue 18) in the same way, so
// that an owner matches a forwarded rank exactly as a local one.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "exporters/analysis/cross_rank_types.h"
#include "exporters/shard/peer_ring.h"

namespace fabricscope::exporters {

// Thread-safe as its NameTable and FabricLoss are; holds references to both, which must
// outlive it.
class ReportBuilder {
 public:
  ReportBuilder(NameTable& names, const FabricLoss& fabric_loss)
      : names_(names), fabric_loss_(fabric_loss) {}

  // The analysed collectives of `node`'s batch appended to *reports; *dropped counts those
  // whose ranks are impossible (outside 1..kMaxRanksPerInstance, or a rank outside its
  // communicator) or whose function name has no room. With a ring, those of communicators
  // another peer owns go to *forward instead, with their node, port label, offset, recording
  // and fabric-loss evidence.
  void FromBatch(Name node, const v1::Batch& batch, const NodePorts& ports, const PeerRing* ring,
                 std::vector<v1::ForwardedAnalysis>* forward, std::vector<RankReport>* reports,
                 uint64_t* dropped);
  // A peer's Batch.forwarded, each as its origin node's own report would be; a record naming
  // no node, or a name the table has no room for, counted in *dropped.
  void FromForwarded(const v1::Batch& batch, std::vector<RankReport>* reports, uint64_t* dropped);

 private:
  // The function names of one batch, each looked up in names_ once.
  class FuncNames;
  // One analysed collective's report appended to *reports, its detail to *details (the
  // batch's shared buffer); false (to be counted as dropped) when its ranks are impossible or
  // its function name has no room. port: its port_index's label, when known there.
  // fabric_loss: its port's loss against the fabric (FabricLoss::Of) where known.
  static bool Add(Name node, const v1::Collective& c, int64_t unix_offset_ns,
                  std::optional<Name> port, const v1::FlightRecording* recording,
                  const v1::FabricLossEvidence& fabric_loss, FuncNames& funcs, std::string* details,
                  std::vector<RankReport>* reports);

  NameTable& names_;
  const FabricLoss& fabric_loss_;
};

}  // namespace fabricscope::exporters
