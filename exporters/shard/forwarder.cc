#include "exporters/shard/forwarder.h"

#include <algorithm>
#include <random>

#include "glog/logging.h"

namespace fabricscope::exporters {

Forwarder::Forwarder(ForwarderOptions options)
    : options_(std::move(options)), instance_(std::random_device{}() | 1ull << 40) {}

Forwarder::~Forwarder() { Stop(0); }

std::unique_ptr<Forwarder::Link> Forwarder::OpenLink(const std::string& peer) const {
  auto link = std::make_unique<Link>();
  link->stats.peer = peer;
  v1::Hello hello;
  hello.set_node(options_.self);
  hello.set_instance_id(instance_);
  hello.set_peer(true);
  hello.set_agent_version("fabricscope-aggregator");
  uplink::UplinkOptions uo;
  uo.target = peer;
  uo.max_queued_batches = options_.max_queued_batches;
  uo.initial_backoff_ms = options_.initial_backoff_ms;
  uo.max_backoff_ms = options_.max_backoff_ms;
  uo.tls = options_.tls;
  uo.auth_token = options_.auth_token;
  link->stream = std::make_unique<uplink::GrpcUplink>(std::move(uo), std::move(hello));
  return link;
}

void Forwarder::SetRing(std::shared_ptr<const PeerRing> ring) {
  std::vector<std::unique_ptr<uplink::GrpcUplink>> closing;
  std::vector<Link*> closed;
  std::vector<v1::ForwardedAnalysis> here;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < ring->peers().size(); ++i) {
      if (i == ring->self()) continue;
      const std::string& peer = ring->peers()[i].grpc;
      auto it = links_.find(peer);
      if (it == links_.end()) {
        links_.emplace(peer, OpenLink(peer));
      } else if (it->second->stream == nullptr) {  // a peer that left and came back
        PeerStats kept = it->second->stats;
        it->second = OpenLink(peer);
        it->second->stats = kept;
      }
    }
    std::vector<v1::ForwardedAnalysis> reroute;
    for (auto& [peer, link] : links_) {
      if (ring->IndexOf(peer) >= 0 && static_cast<size_t>(ring->IndexOf(peer)) != ring->self())
        continue;
      for (v1::ForwardedAnalysis& r : *link->pending.mutable_forwarded()) {
        reroute.push_back(std::move(r));
      }
      link->stats.queued -= static_cast<uint64_t>(link->pending.forwarded_size());
      link->pending.Clear();
      link->pending_bytes = 0;
      if (link->stream != nullptr) {
        closing.push_back(std::move(link->stream));
        closed.push_back(link.get());
      }
    }
    ring_ = ring;
    for (v1::ForwardedAnalysis& r : reroute) RouteLocked(*ring, std::move(r), &here);
  }
  MatchHere(std::move(here));
  // A removed peer's stream gets a second to deliver, outside the lock (ingest goes on).
  for (auto& stream : closing) stream->Shutdown(1000);
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < closing.size(); ++i) {
      Link& link = *closed[i];
      for (const auto& [seq, records] : link.in_flight) {
        if (seq <= closing[i]->acked_seq()) {
          link.stats.forwarded += records;
        } else {
          link.stats.dropped += records;
        }
        link.stats.queued -= records;
      }
      link.in_flight.clear();
      link.stats.connected = false;
      LOG(INFO) << "peer " << link.stats.peer << " left the peer list; its stream is closed";
    }
  }
  if (!thread_.joinable()) thread_ = std::jthread([this](std::stop_token st) { Run(st); });
}

void Forwarder::RouteLocked(const PeerRing& ring, v1::ForwardedAnalysis&& record,
                            std::vector<v1::ForwardedAnalysis>* here) {
  // The current list decides: the caller's may be older (a SIGHUP between its OnBatch and now).
  const PeerRing& r = ring_ != nullptr ? *ring_ : ring;
  const size_t owner = r.OwnerOf(record.collective().comm_hash());
  auto it = owner == r.self() ? links_.end() : links_.find(r.peers()[owner].grpc);
  if (it == links_.end() || it->second->stream == nullptr) {
    here->push_back(std::move(record));
    return;
  }
  Link& link = *it->second;
  if (stopped_) {  // nothing will send it: counted, not kept
    ++link.stats.dropped;
    return;
  }
  link.pending_bytes += record.ByteSizeLong();
  *link.pending.add_forwarded() = std::move(record);
  ++link.stats.queued;
  if (static_cast<size_t>(link.pending.forwarded_size()) >= options_.max_records_per_batch ||
      link.pending_bytes >= options_.max_batch_bytes) {
    SubmitLocked(link);
  }
}

void Forwarder::MatchHere(std::vector<v1::ForwardedAnalysis>&& here) const {
  if (!here.empty() && options_.match_here) options_.match_here(std::move(here));
}

void Forwarder::Forward(const PeerRing& ring, std::vector<v1::ForwardedAnalysis>&& records) {
  std::vector<v1::ForwardedAnalysis> here;
  {
    absl::MutexLock lock(&mu_);
    for (v1::ForwardedAnalysis& r : records) RouteLocked(ring, std::move(r), &here);
  }
  MatchHere(std::move(here));
}

void Forwarder::SubmitLocked(Link& link) {
  if (link.pending.forwarded_size() == 0 || link.stream == nullptr) return;
  const auto records = static_cast<uint64_t>(link.pending.forwarded_size());
  link.stream->Submit(std::move(link.pending));
  link.pending.Clear();
  link.pending_bytes = 0;
  link.in_flight.emplace_back(++link.submitted, records);
  // The stream keeps max_queued_batches unacked and drops its oldest beyond (GrpcUplink::
  // Submit): the same ones leave in_flight here.
  while (link.in_flight.size() > options_.max_queued_batches) {
    link.stats.dropped += link.in_flight.front().second;
    link.stats.queued -= link.in_flight.front().second;
    link.in_flight.pop_front();
  }
}

void Forwarder::SettleLocked(Link& link) {
  if (link.stream == nullptr) return;
  const uint64_t acked = link.stream->acked_seq();
  while (!link.in_flight.empty() && link.in_flight.front().first <= acked) {
    link.stats.forwarded += link.in_flight.front().second;
    link.stats.queued -= link.in_flight.front().second;
    link.in_flight.pop_front();
  }
  link.stats.connected = link.stream->connected();
}

void Forwarder::Run(std::stop_token stop) {
  while (!stop.stop_requested()) {
    {
      absl::MutexLock lock(&mu_);
      for (auto& [peer, link] : links_) {
        SubmitLocked(*link);
        SettleLocked(*link);
      }
    }
    absl::SleepFor(options_.flush_interval);
  }
}

void Forwarder::Stop(int timeout_ms) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
  std::vector<uplink::GrpcUplink*> streams;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [peer, link] : links_) {
      SubmitLocked(*link);
      if (link->stream != nullptr) streams.push_back(link->stream.get());
    }
  }
  for (uplink::GrpcUplink* s : streams) s->Shutdown(timeout_ms);
  absl::MutexLock lock(&mu_);
  for (auto& [peer, link] : links_) SettleLocked(*link);
}

std::vector<Forwarder::PeerStats> Forwarder::Stats() const {
  absl::MutexLock lock(&mu_);
  std::vector<PeerStats> out;
  for (const auto& [peer, link] : links_) out.push_back(link->stats);
  std::sort(out.begin(), out.end(),
            [](const PeerStats& a, const PeerStats& b) { return a.peer < b.peer; });
  return out;
}

size_t Forwarder::peers() const {
  absl::MutexLock lock(&mu_);
  return ring_ == nullptr ? 0 : ring_->peers().size();
}

}  // namespace fabricscope::exporters
