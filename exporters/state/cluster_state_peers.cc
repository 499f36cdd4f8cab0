// ClusterState's side of sharded aggregators (issue 18): where a batch's collective analyses
// are matched (here, or forwarded to the owner of their communicator), and the inbox of what
// peers forward here.

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "exporters/shard/forwarder.h"
#include "exporters/shard/peer_ring.h"
#include "exporters/state/cluster_state.h"
#include "glog/logging.h"

namespace fabricscope::exporters {

void ClusterState::SetSharding(std::shared_ptr<const PeerRing> ring,
                               std::shared_ptr<Forwarder> forwarder) {
  absl::MutexLock lock(&shard_mu_);
  ring_ = std::move(ring);
  forwarder_ = forwarder;
}

std::shared_ptr<const PeerRing> ClusterState::ring() const {
  absl::MutexLock lock(&shard_mu_);
  return ring_;
}

void ClusterState::RankAnalyses(const std::string& node, const v1::Batch& batch) {
  std::shared_ptr<const PeerRing> ring;
  std::shared_ptr<Forwarder> forwarder;
  {
    absl::MutexLock lock(&shard_mu_);
    ring = ring_;
    forwarder = forwarder_;
  }
  if (ring == nullptr || forwarder == nullptr) {
    cross_rank_.OnBatch(node, batch);
    return;
  }
  std::vector<v1::ForwardedAnalysis> forward;
  cross_rank_.OnBatch(node, batch, ring.get(), &forward);
  if (forward.empty()) return;
  AttachJobs(&forward);
  forwarder->Forward(*ring, std::move(forward));
}

void ClusterState::AttachJobs(std::vector<v1::ForwardedAnalysis>* records) const {
  absl::MutexLock lock(&gpu_mu_);
  for (v1::ForwardedAnalysis& f : *records) {
    const v1::Collective& c = f.collective();
    std::vector<std::pair<uint64_t, int32_t>> comms = {{c.comm_hash(), c.rank()}};
    for (const v1::SharerBytes& s : c.analysis().sharers()) comms.emplace_back(s.comm_hash(), -1);
    v1::GpuWindow w;
    std::set<std::string> ids;
    for (const auto& [comm, rank] : comms) {
      if (w.communicators_size() >= static_cast<int>(kMaxForwardedJobs)) break;
      v1::Job job = jobs_.JobOf(comm);
      if (job.id().empty()) continue;
      v1::Communicator* e = w.add_communicators();
      e->set_comm_hash(comm);
      e->set_rank(rank);
      e->set_job_id(job.id());
      if (ids.insert(job.id()).second) *w.add_jobs() = std::move(job);
    }
    if (w.communicators_size() > 0) *f.mutable_jobs() = std::move(w);
  }
}

absl::StatusOr<uint64_t> ClusterState::OnPeerHello(const v1::Hello& hello) {
  absl::MutexLock lock(&shard_mu_);
  const int index = ring_ == nullptr ? -1 : ring_->IndexOf(hello.node());
  if (index < 0 || static_cast<size_t>(index) == ring_->self()) {
    CountRefusedStream("peer");
    return absl::PermissionDeniedError(absl::StrCat(
        "\"", hello.node(), "\" is not a peer of this aggregator",
        ring_ == nullptr ? " (it has no --peers)" : " (not in its --peers, or itself)"));
  }
  PeerInbox& in = inbox_[hello.node()];
  const uint64_t held_from = hello.resume_seq() > 0 ? hello.resume_seq() - 1 : 0;
  if (in.instance != hello.instance_id()) {
    in.instance = hello.instance_id();
    in.contiguous = held_from;
  } else {
    in.contiguous = std::max(in.contiguous, held_from);
  }
  return in.contiguous;
}

absl::StatusOr<uint64_t> ClusterState::OnPeerBatch(const std::string& peer, uint64_t instance,
                                                   const v1::Batch& batch, BatchCheck check) {
  {
    absl::MutexLock lock(&shard_mu_);
    auto it = inbox_.find(peer);
    if (it == inbox_.end() || it->second.instance != instance) {
      return absl::FailedPreconditionError(
          absl::StrCat("batch from peer \"", peer, "\" before its Hello"));
    }
    if (batch.seq() <= it->second.contiguous) {
      absl::MutexLock state_lock(&mu_);
      ++duplicate_batches_total_;
      return it->second.contiguous;
    }
  }
  // One stream per peer (TelemetryService's claim) applies its batches in order: nothing else
  // moves this peer's mark between the check above and the update below.
  const BatchVerdict verdict = check(batch, 0);
  const absl::Status& invalid = verdict.invalid;
  if (invalid.ok()) {
    cross_rank_.OnForwarded(batch);
    absl::MutexLock lock(&gpu_mu_);
    for (const v1::ForwardedAnalysis& f : batch.forwarded()) {
      if (f.has_jobs()) jobs_.OnWindow(f.node(), f.jobs(), Now());
    }
  } else {
    {
      absl::MutexLock lock(&mu_);
      ++rejected_batches_[verdict.reason];
    }
    LOG_EVERY_N(WARNING, 100) << "peer " << peer << ": " << invalid.message()
                              << "; batch dropped (counted in "
                                 "fabricscope_aggregator_rejected_batches_total)";
  }
  absl::MutexLock lock(&shard_mu_);
  PeerInbox& in = inbox_[peer];
  in.contiguous = std::max(in.contiguous, batch.seq());
  if (invalid.ok()) in.received += static_cast<uint64_t>(batch.forwarded_size());
  return in.contiguous;
}

void ClusterState::MatchForwarded(std::vector<v1::ForwardedAnalysis>&& records) {
  v1::Batch batch;
  batch.mutable_forwarded()->Reserve(static_cast<int>(records.size()));
  for (v1::ForwardedAnalysis& r : records) *batch.add_forwarded() = std::move(r);
  cross_rank_.OnForwarded(batch);
}

void ClusterState::DropUnownedComms(CrossRankSnapshot* s) const {
  const std::shared_ptr<const PeerRing> ring = this->ring();
  if (ring == nullptr) return;
  std::erase_if(s->diagnoses, [&ring](const CommDiagnosis& d) { return !ring->Owns(d.comm); });
}

std::vector<CommDiagnosis> ClusterState::OwnedDiagnoses() const {
  CrossRankSnapshot s;
  s.diagnoses = cross_rank_.Diagnoses();
  DropUnownedComms(&s);
  return std::move(s.diagnoses);
}

PeerCounters ClusterState::Peers() const {
  PeerCounters out;
  std::shared_ptr<Forwarder> forwarder;
  {
    absl::MutexLock lock(&shard_mu_);
    forwarder = forwarder_;
    for (const auto& [peer, in] : inbox_) out.received.emplace_back(peer, in.received);
  }
  if (forwarder != nullptr) {
    out.forwarding = true;
    out.forwarded = forwarder->Stats();
    out.peers = forwarder->peers();
  }
  return out;
}

}  // namespace fabricscope::exporters
