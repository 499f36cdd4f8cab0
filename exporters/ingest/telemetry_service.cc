#include "exporters/ingest/telemetry_service.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectors/common/host_port.h"
#include "exporters/state/cluster_state.h"
#include "glog/logging.h"

namespace fabricscope::exporters {

using common::kAuthMetadataKey;
using common::kNoTokenMessage;
using common::ServerCredentialsFor;
using common::ServerTls;
using common::TokenAuth;
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// The `authorization` metadata value, empty when absent.
std::string AuthorizationOf(const grpc::CallbackServerContext* context) {
  const auto& md = context->client_metadata();
  auto it = md.find(kAuthMetadataKey);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

class AgentStreamReactor final
    : public grpc::ServerBidiReactor<v1::AgentMessage, v1::AggregatorMessage>,
      public TelemetryService::Claimant {
 public:
  AgentStreamReactor(ClusterState& state, TelemetryService& service,
                     grpc::CallbackServerContext* context, StreamPolicy policy)
      : state_(state), service_(service), context_(context), policy_(std::move(policy)) {
    if (policy_.tokens && policy_.tokens->enabled()) {
      authorization_ = AuthorizationOf(context);
      if (authorization_.empty()) {  // no token at all: refused before anything is read
        state_.CountRefusedStream("token");
        absl::MutexLock lock(&mu_);
        status_ = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kNoTokenMessage);
        reading_done_ = true;
        MaybeFinishLocked();
        return;
      }
    }
    StartRead(&in_);
  }

  void Supersede() override { superseded_.store(true); }

  TelemetryService::RequestOutcome Request(const v1::RecordingRequest& request) override {
    using Outcome = TelemetryService::RequestOutcome;
    absl::MutexLock lock(&mu_);
    if (reading_done_ || write_failed_ || finished_) return Outcome::kNoStream;
    if (requests_.size() >= TelemetryService::kMaxQueuedRequests) return Outcome::kQueueFull;
    requests_.push_back(request);
    if (!writing_) WriteNextLocked();
    return Outcome::kQueued;
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent closed its side, or the stream broke
      absl::MutexLock lock(&mu_);
      reading_done_ = true;
      MaybeFinishLocked();
      return;
    }
    absl::StatusOr<uint64_t> ack = Handle(in_);
    absl::MutexLock lock(&mu_);
    if (!ack.ok()) {
      status_ = ToGrpc(ack.status());
      reading_done_ = true;
      MaybeFinishLocked();
      return;
    }
    pending_ack_ = *ack;
    ack_dirty_ = true;
    if (!writing_ && !write_failed_) WriteNextLocked();
    const absl::Duration wait = in_.has_batch() ? TakeToken() : absl::ZeroDuration();
    if (wait <= absl::ZeroDuration()) {
      StartRead(&in_);
      return;
    }
    // Over the stream's rate: the next read waits. Until it starts no Finish can run (only a
    // failed read finishes the stream), so the reactor outlives the alarm.
    state_.CountThrottledBatch();
    throttle_.Set(absl::ToChronoTime(absl::Now() + wait), [this](bool) { StartRead(&in_); });
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The stream is gone: the outstanding read fails too, and OnReadDone finishes.
      write_failed_ = true;
    } else if ((ack_dirty_ || !requests_.empty()) && !reading_done_) {
      WriteNextLocked();
      return;
    }
    MaybeFinishLocked();
  }

  void OnDone() override {
    if (claimed_) service_.Release(claim_, this);
    delete this;
  }

 private:
  absl::StatusOr<uint64_t> Handle(const v1::AgentMessage& m) {
    switch (m.kind_case()) {
      case v1::AgentMessage::kHello:
        return HandleHello(m.hello());
      case v1::AgentMessage::kBatch:
        if (superseded_.load()) {
          return absl::AbortedError(
              "superseded: a newer stream of this agent instance took the node over");
        }
        if (peer_) return service_.admission().OnPeerBatch(node_, instance_, m.batch());
        // Before a Hello node_ is empty, which no Hello registers: the state refuses the batch
        // with FAILED_PRECONDITION and counts it.
        return service_.admission().OnBatch(node_, instance_, m.batch());
      default:
        return absl::InvalidArgumentError("empty AgentMessage");
    }
  }

  absl::StatusOr<uint64_t> HandleHello(const v1::Hello& hello) {
    if (have_hello_) return absl::InvalidArgumentError("second Hello on one stream");
    if (policy_.check_identity) {
      // A peer aggregator names itself by its gRPC address: its certificate names the host.
      const std::string who = hello.peer() ? HostOf(hello.node()) : hello.node();
      if (absl::Status s = CheckIdentity(who); !s.ok()) return s;
    }
    if (policy_.tokens && policy_.tokens->enabled()) {
      if (absl::Status s = policy_.tokens->Check(authorization_, hello.node()); !s.ok()) {
        state_.CountRefusedStream("token");
        return s;
      }
    }
    if (hello.peer()) return HandlePeerHello(hello);
    // Checked before the claim, so that an invalid Hello never supersedes a live stream; then
    // claimed before the state sees it, so that a refused second instance cannot reset the live
    // one's node. A Hello the state still refuses (the node limit reached meanwhile) gives the
    // claim back at once.
    if (absl::Status s = service_.admission().ValidateHello(hello); !s.ok()) return s;
    if (absl::Status s = service_.Claim(hello.node(), hello.instance_id(), context_->peer(), this);
        !s.ok()) {
      return s;
    }
    auto ack = service_.admission().OnHello(hello);
    if (!ack.ok()) {
      service_.Release(hello.node(), this);
      return ack;
    }
    claimed_ = true;
    claim_ = hello.node();
    node_ = hello.node();
    have_hello_ = true;
    instance_ = hello.instance_id();
    return ack;
  }

  // A peer aggregator's forwarding stream (Hello.peer): one live stream per peer, claimed
  // under "peer " + its address so that no node name can collide with it.
  absl::StatusOr<uint64_t> HandlePeerHello(const v1::Hello& hello) {
    if (absl::Status s =
            service_.Claim("peer " + hello.node(), hello.instance_id(), context_->peer(), this);
        !s.ok()) {
      return s;
    }
    auto ack = state_.OnPeerHello(hello);
    if (!ack.ok()) {
      service_.Release("peer " + hello.node(), this);
      return ack;
    }
    claimed_ = true;
    claim_ = "peer " + hello.node();
    peer_ = true;
    node_ = hello.node();
    have_hello_ = true;
    instance_ = hello.instance_id();
    return ack;
  }

  // HOST of a peer's HOST:PORT name (common::SplitHostPort); a name of another form is kept
  // whole, and then names no certificate.
  static std::string HostOf(const std::string& host_port) {
    auto hp = common::SplitHostPort(host_port);
    return hp.ok() ? hp->first : host_port;
  }

  absl::Status CheckIdentity(const std::string& node) {
    std::vector<std::string> ids;
    if (std::shared_ptr<const grpc::AuthContext> auth = context_->auth_context()) {
      for (const grpc::string_ref& id : auth->GetPeerIdentity())
        ids.emplace_back(id.data(), id.size());
    }
    if (std::find(ids.begin(), ids.end(), node) != ids.end()) return absl::OkStatus();
    state_.CountRefusedStream("identity");
    return absl::PermissionDeniedError(
        absl::StrCat("node \"", node, "\" is not the identity of the client certificate (",
                     ids.empty() ? "none" : absl::StrJoin(ids, ", "), ")"));
  }

  // The token bucket of StreamRate: how long the next read must wait (zero when a token is left).
  absl::Duration TakeToken() {
    const absl::Time now = absl::Now();
    const double rate = policy_.rate.batches_per_second;
    if (bucket_time_ == absl::InfinitePast()) bucket_time_ = now;
    tokens_ =
        std::min(policy_.rate.burst, tokens_ + rate * absl::ToDoubleSeconds(now - bucket_time_));
    bucket_time_ = now;
    tokens_ -= 1;
    return tokens_ >= 0 ? absl::ZeroDuration() : absl::Seconds(-tokens_ / rate);
  }

  // The ack when a newer one is due, else the oldest queued request. Call only when no write is
  // in flight.
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ack_dirty_) {
      out_.mutable_ack()->set_seq(pending_ack_);
      ack_dirty_ = false;
    } else if (!requests_.empty()) {
      *out_.mutable_recording_request() = std::move(requests_.front());
      requests_.pop_front();
    } else {
      return;
    }
    writing_ = true;
    StartWrite(&out_);
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reading_done_ && !writing_ && !finished_) {
      finished_ = true;
      Finish(status_);
    }
  }

  ClusterState& state_;
  TelemetryService& service_;
  grpc::CallbackServerContext* const context_;
  const StreamPolicy policy_;  // as it was when the stream opened
  std::string authorization_;  // never logged
  std::atomic<bool> superseded_{false};
  v1::AgentMessage in_;   // touched only by the read chain, one read at a time
  bool claimed_ = false;  // read chain, then OnDone (which follows the last read)
  bool have_hello_ = false;
  bool peer_ = false;  // a peer aggregator's stream (Hello.peer)
  std::string claim_;  // the name claimed in the live-stream registry
  std::string node_;
  uint64_t instance_ = 0;
  // The read chain's token bucket (TakeToken) and the alarm that resumes a delayed read.
  double tokens_ = policy_.rate.burst;
  absl::Time bucket_time_ = absl::InfinitePast();
  grpc::Alarm throttle_;

  absl::Mutex mu_;
  v1::AggregatorMessage out_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_ack_ ABSL_GUARDED_BY(mu_) = 0;
  bool ack_dirty_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::RecordingRequest> requests_ ABSL_GUARDED_BY(mu_);  // to write after acks
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerBidiReactor<v1::AgentMessage, v1::AggregatorMessage>* TelemetryService::Stream(
    grpc::CallbackServerContext* context) {
  streams_total_.fetch_add(1);
  StreamPolicy policy;
  {
    absl::MutexLock lock(&policy_mu_);
    policy = policy_;
  }
  return new AgentStreamReactor(state_, *this, context, std::move(policy));
}

namespace {

// gRPC's peer string without its port: "ipv4:10.0.0.5:51234" -> "ipv4:10.0.0.5".
std::string PeerHost(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

}  // namespace

absl::Status TelemetryService::Claim(const std::string& node, uint64_t instance,
                                     const std::string& peer, Claimant* who) {
  absl::MutexLock lock(&live_mu_);
  auto [it, inserted] = live_.try_emplace(node, Live{instance, peer, who});
  if (inserted || it->second.who == who) return absl::OkStatus();
  // The same instance from the same host: that agent reconnected. From another host it is a
  // forger who learned the instance id (it is in every Hello), refused like any duplicate.
  if (it->second.instance == instance && PeerHost(it->second.peer) == PeerHost(peer)) {
    // The same agent reconnected: its old stream is dead on its side. Supersede only sets a
    // flag, so no reactor is touched after this lock is released.
    it->second.who->Supersede();
    it->second = Live{instance, peer, who};
    return absl::OkStatus();
  }
  state_.CountRefusedStream("duplicate");
  LOG_EVERY_N(WARNING, 100)
      << "node \"" << node << "\": a second agent (instance " << instance << ", " << peer
      << ") refused while instance " << it->second.instance << " (" << it->second.peer
      << ") streams (counted in "
      << "fabricscope_aggregator_refused_streams_total{reason=\"duplicate\"})";
  // The live stream's instance and address go to the log only: a refused client must not learn
  // what would let it pass for the live agent.
  return absl::AlreadyExistsError(
      absl::StrCat("node \"", node,
                   "\" already has a live stream from another agent; one agent per node name (a "
                   "dead stream is closed by keepalive within 30 s)"));
}

TelemetryService::RequestOutcome TelemetryService::RequestRecording(
    const std::string& node, const v1::RecordingRequest& request) {
  absl::MutexLock lock(&live_mu_);
  auto it = live_.find(node);
  return it == live_.end() ? RequestOutcome::kNoStream : it->second.who->Request(request);
}

void TelemetryService::Release(const std::string& node, Claimant* who) {
  absl::MutexLock lock(&live_mu_);
  auto it = live_.find(node);
  if (it != live_.end() && it->second.who == who) live_.erase(it);
}

TelemetryServer::TelemetryServer(ClusterState& state, int max_message_bytes, ServerTls tls,
                                 std::shared_ptr<const TokenAuth> tokens, StreamRate rate,
                                 AdmissionLimits limits)
    : service_(state, StreamPolicy{!tls.client_ca.empty(), std::move(tokens), rate, limits}),
      max_message_bytes_(max_message_bytes),
      tls_(std::move(tls)) {}

TelemetryServer::~TelemetryServer() { Stop(0); }

absl::StatusOr<int> TelemetryServer::Start(const std::string& listen) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, ServerCredentialsFor(tls_), &port);
  builder.RegisterService(&service_);
  builder.SetMaxReceiveMessageSize(max_message_bytes_);
  // Keepalive on both ends together (agent side in collectors/uplink/uplink.cc): a dead agent's
  // stream is closed within keepalive time + timeout.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  // Two aggregators must not share a port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server_ = builder.BuildAndStart();
  if (!server_ || port == 0) {
    server_.reset();
    return absl::UnavailableError("cannot listen for gRPC on " + listen +
                                  " (address in use or not local?)");
  }
  return port;
}

void TelemetryServer::Stop(int grace_ms) {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server_->Wait();
  server_.reset();
}

}  // namespace fabricscope::exporters
