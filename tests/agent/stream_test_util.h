#pragma once

// Helpers of the tests that open agent streams to a real TelemetryServer on loopback
// (tls_test.cc, stream_auth_test.cc).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/state/cluster_state.h"
#include "fabricscope/v1/telemetry.grpc.pb.h"

namespace fabricscope::testing {

inline v1::Hello Hello(const std::string& node, uint64_t instance = 7) {
  v1::Hello h;
  h.set_node(node);
  h.set_instance_id(instance);
  v1::PortInfo* p = h.add_ports();
  p->set_device("mlx5_0");
  p->set_port(1);
  return h;
}

inline v1::Batch Batch() {
  v1::Batch b;
  b.set_window_end_ns(1'000'000'000);
  return b;
}

// One stream with `creds` and the given metadata: a Hello for `node`, then the status the
// aggregator ends it with (DEADLINE_EXCEEDED after `hold` when it accepted the Hello and kept
// the stream open).
using Metadata = std::vector<std::pair<std::string, std::string>>;

inline grpc::Status TryHello(std::shared_ptr<grpc::ChannelCredentials> creds, int port,
                             const v1::Hello& hello, const Metadata& metadata = {},
                             std::chrono::milliseconds hold = std::chrono::seconds(3)) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("aggregator.test");
  auto stub = v1::Telemetry::NewStub(
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), creds, args));
  grpc::ClientContext ctx;
  for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
  ctx.set_deadline(std::chrono::system_clock::now() + hold);
  auto stream = stub->Stream(&ctx);
  v1::AgentMessage m;
  *m.mutable_hello() = hello;
  stream->Write(m);
  v1::AggregatorMessage in;
  while (stream->Read(&in)) {
  }
  return stream->Finish();
}

inline grpc::Status TryHello(std::shared_ptr<grpc::ChannelCredentials> creds, int port,
                             const std::string& node, const Metadata& metadata = {},
                             std::chrono::milliseconds hold = std::chrono::seconds(3)) {
  return TryHello(std::move(creds), port, Hello(node), metadata, hold);
}

// fabricscope_aggregator_refused_streams_total{reason}; -1 when the series is missing.
inline double Refused(const exporters::ClusterState& s, const std::string& reason) {
  for (const auto& f : ClusterFamilies(s)) {
    if (f.name != "fabricscope_aggregator_refused_streams_total") continue;
    for (const auto& m : f.metric) {
      if (m.label.size() == 1 && m.label[0].value == reason) return m.counter.value;
    }
  }
  return -1;
}

}  // namespace fabricscope::testing
