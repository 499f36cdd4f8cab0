// Helpers the cross-rank tests share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "exporters/analysis/cross_rank.h"
#include "exporters/exposition/cross_rank_render.h"
#include "fabricscope/v1/telemetry.pb.h"
#include "tests/common/units.h"

namespace fabricscope::exporters {

// fabricscope_collective_analyses_dropped_total of x, -1 when absent.
inline double DroppedAnalyses(const CrossRankAnalysis& x) {
  std::vector<prometheus::MetricFamily> f;
  AddCrossRankFamilies(x.Snapshot(), &f);
  for (const auto& fam : f) {
    if (fam.name == "fabricscope_collective_analyses_dropped_total") {
      return fam.metric.at(0).counter.value;
    }
  }
  return -1;
}

// One rank's AllReduce of 64 MiB in a cross-rank schedule: instance `seq` of `comm` starts at
// seq * period on the cluster's clock; rank `node` runs on a clock `node * skew` behind it
// (Batch.unix_offset_ns says by how much), and `late_rank` arrives `late` after the others
// and finishes with them (a compute straggler). The analysis names port 0 with 20 samples and
// `cause`; callers add what their scenario needs.
struct RankSchedule {
  int nranks = 0;
  int64_t period_ns = 0;
  int64_t duration_ns = 200 * kMs;
  int64_t skew_ns = 0;
  int64_t unix_base_ns = 0;
  int late_rank = -1;
  int64_t late_ns = 0;
};

inline v1::Collective* AddRankCollective(const RankSchedule& s, int node, uint64_t comm,
                                         uint64_t seq, v1::Batch* b) {
  b->set_unix_offset_ns(s.unix_base_ns + node * s.skew_ns);
  const int64_t late = node == s.late_rank ? s.late_ns : 0;
  const int64_t start = static_cast<int64_t>(seq) * s.period_ns + late - node * s.skew_ns;
  v1::Collective* c = b->add_collectives();
  c->set_comm_hash(comm);
  c->set_rank(node);
  c->set_nranks(s.nranks);
  c->set_func("AllReduce");
  c->set_seq(seq);
  c->set_bytes(64 << 20);
  c->set_start_ns(start);
  c->set_end_ns(start + s.duration_ns - late);
  v1::CollectiveAnalysis* a = c->mutable_analysis();
  a->set_cause(v1::COLLECTIVE_CAUSE_NORMAL);
  a->set_port_index(0);
  v1::PortActivity* p = a->add_ports();
  p->set_port_index(0);
  p->set_samples(20);
  return c;
}

}  // namespace fabricscope::exporters
