#include "exporters/telemetry_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "exporters/cluster_state.h"

namespace fabricscope::exporters {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

class AgentStreamReactor final
    : public grpc::ServerBidiReactor<v1::AgentMessage, v1::AggregatorMessage> {
 public:
  AgentStreamReactor(ClusterState& state, grpc::CallbackServerContext* context, bool check_identity)
      : state_(state), context_(context), check_identity_(check_identity) {
    StartRead(&in_);
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
    if (!writing_ && !write_failed_) WriteAckLocked();
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The stream is gone: the outstanding read fails too, and OnReadDone finishes.
      write_failed_ = true;
    } else if (ack_dirty_ && !reading_done_) {
      WriteAckLocked();
      return;
    }
    MaybeFinishLocked();
  }

  void OnDone() override { delete this; }

 private:
  absl::StatusOr<uint64_t> Handle(const v1::AgentMessage& m) {
    switch (m.kind_case()) {
      case v1::AgentMessage::kHello: {
        if (have_hello_) return absl::InvalidArgumentError("second Hello on one stream");
        if (check_identity_) {
          if (absl::Status s = CheckIdentity(m.hello().node()); !s.ok()) return s;
        }
        auto ack = state_.OnHello(m.hello());
        if (ack.ok()) {
          have_hello_ = true;
          node_ = m.hello().node();
          instance_ = m.hello().instance_id();
        }
        return ack;
      }
      case v1::AgentMessage::kBatch:
        // Before a Hello node_ is empty, which no Hello registers: the state refuses the batch
        // with FAILED_PRECONDITION and counts it.
        return state_.OnBatch(node_, instance_, m.batch());
      default:
        return absl::InvalidArgumentError("empty AgentMessage");
    }
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

  void WriteAckLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    out_.mutable_ack()->set_seq(pending_ack_);
    ack_dirty_ = false;
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
  grpc::CallbackServerContext* const context_;
  const bool check_identity_;
  v1::AgentMessage in_;  // touched only by the read chain, one read at a time
  bool have_hello_ = false;
  std::string node_;
  uint64_t instance_ = 0;

  absl::Mutex mu_;
  v1::AggregatorMessage out_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_ack_ ABSL_GUARDED_BY(mu_) = 0;
  bool ack_dirty_ ABSL_GUARDED_BY(mu_) = false;
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
  return new AgentStreamReactor(state_, context, check_identity_);
}

TelemetryServer::TelemetryServer(ClusterState& state, int max_message_bytes, ServerTls tls)
    : service_(state, !tls.client_ca.empty()),
      max_message_bytes_(max_message_bytes),
      tls_(std::move(tls)) {}

TelemetryServer::~TelemetryServer() { Stop(0); }

absl::StatusOr<int> TelemetryServer::Start(const std::string& listen) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, ServerCredentialsFor(tls_), &port);
  builder.RegisterService(&service_);
  builder.SetMaxReceiveMessageSize(max_message_bytes_);
  // Keepalive on both ends together (agent side in agent/uplink.cc): a dead agent's stream is
  // closed within keepalive time + timeout.
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
