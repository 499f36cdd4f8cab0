// Early batches: analysed collectives sent ahead of their window (Batch.early).

#include <algorithm>
#include <limits>
#include <utility>

#include "agent/agent.h"
#include "agent/batch_assembler.h"
#include "collectors/clock.h"

namespace fabricscope::agent {

namespace {

// Slow, or named a cause: worth the aggregator's seeing now.
bool Urgent(const v1::CollectiveAnalysis& a) {
  return a.slow() ||
         (a.cause() != v1::COLLECTIVE_CAUSE_NORMAL && a.cause() != v1::COLLECTIVE_CAUSE_UNKNOWN &&
          a.cause() != v1::COLLECTIVE_CAUSE_UNSPECIFIED);
}

}  // namespace

void Agent::Submit(v1::Batch batch) {
  ++submitted_;
  sink_->Submit(std::move(batch));
}

void Agent::SubmitEarly() {
  const int64_t interval = options_.collectives.early_send_interval_ns;
  if (!gpu_ingest_ || interval <= 0) return;
  // Sample time both samplers have reached: the counter deltas up to it are in.
  int64_t data_until = std::numeric_limits<int64_t>::max();
  for (size_t g = 0; g < kGroups; ++g) {
    if (groups_[g].sampler) data_until = std::min(data_until, last_tick_ns_[g]);
  }
  if (data_until <= 0 || data_until == std::numeric_limits<int64_t>::max()) return;
  if (data_until - early_checked_ns_ < interval / 4) return;
  early_checked_ns_ = data_until;

  const int64_t offset = collectors::MeasureUnixOffsetNs();
  if (capture_) {
    collective_analyzer_->AddCaptureLoss(capture_->interface(), capture_->NewLossEvents(), offset);
  }
  const size_t before = carry_.collectives.size();
  std::vector<v1::Collective> completed;
  gpu_timeline_->FillEarly(data_until, &completed);
  for (v1::Collective& c : completed) collective_analyzer_->AddCollective(std::move(c), &carry_);
  collective_analyzer_->Process(data_until, data_until, data_until, &carry_,
                                /*close_window=*/false);
  bool urgent = false;
  for (size_t i = before; i < carry_.collectives.size(); ++i) {
    const v1::Collective& c = carry_.collectives[i];
    urgent = urgent || (c.has_analysis() && Urgent(c.analysis()));
  }
  const bool empty = carry_.collectives.empty();
  if (empty || (!urgent && data_until - early_sent_ns_ < interval)) return;
  // Behind (an outage, or a slow aggregator): the window's batch takes them.
  if (!sink_->connected() || submitted_ > sink_->acked_seq() + 2) return;
  BatchParts parts;
  parts.early = true;
  parts.unix_offset_ns = offset;
  parts.window.set_window_start_ns(data_until);
  parts.window.set_window_end_ns(data_until);
  parts.analysed.Append(std::move(carry_));
  Submit(AssembleBatch(std::move(parts)));
  early_sent_ns_ = data_until;
}

}  // namespace fabricscope::agent
