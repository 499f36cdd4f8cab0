// The aggregator's ingest path (exporters::ClusterState) on arbitrary AgentMessage bytes from a
// hostile or broken agent: OnHello, OnBatch, then everything a scrape and the JSON endpoints
// render. A clear error or a counted drop, never a crash; what /metrics would show stays finite.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "exporters/exposition/cluster_json.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/exposition/gpu_render.h"
#include "exporters/exposition/link_render.h"
#include "exporters/ingest/admission.h"
#include "exporters/state/cluster_state.h"
#include "fabricscope/v1/telemetry.pb.h"
#include "google/protobuf/stubs/logging.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {
namespace {

v1::Hello ValidHello() {
  v1::Hello h;
  h.set_node("fuzz-node");
  h.set_instance_id(7);
  h.set_resume_seq(1);
  h.set_agent_version("fuzz");
  for (uint32_t port : {1u, 2u}) {
    v1::PortInfo* p = h.add_ports();
    p->set_device("mlx5_0");
    p->set_port(port);
    p->set_rdma(true);
    p->set_line_rate_bytes_per_second(50'000'000'000);
  }
  return h;
}

v1::Batch ValidBatch(uint64_t seq) {
  v1::Batch b;
  b.set_seq(seq);
  b.set_window_start_ns(4'000'000'000);
  b.set_window_end_ns(5'000'000'000);
  b.set_unix_offset_ns(1'700'000'000'000'000'000);
  v1::PortWindow* w = b.add_ports();
  w->set_port_index(0);
  w->set_utilization_valid(true);
  w->mutable_transmit()->set_bytes_total(1000);
  w->mutable_transmit()->set_has_bytes(true);
  w->mutable_transmit()->set_peak_utilization(0.97);
  v1::Microburst* m = b.add_microbursts();
  m->set_port_index(0);
  m->set_duration_ns(200'000);
  v1::Collective* c = b.add_collectives();
  c->set_comm_hash(0xabc);
  c->set_func("AllReduce");
  c->set_seq(1);
  return b;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  v1::AgentMessage hello, batch;
  *hello.mutable_hello() = ValidHello();
  *batch.mutable_batch() = ValidBatch(1);
  return {hello.SerializeAsString(), batch.SerializeAsString()};
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabricscope;
  // Parsing invalid UTF-8 is an expected failure here; protobuf would log each one.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(
        [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    return true;
  }();
  (void)quiet;
  v1::AgentMessage msg;
  if (!msg.ParseFromArray(data, static_cast<int>(size))) return 0;
  exporters::ClusterState state;
  exporters::Admission in(state);  // what the gRPC stream's messages pass
  if (msg.has_hello()) {
    // A hostile Hello, then a batch for it.
    if (in.OnHello(msg.hello()).ok()) {
      in.OnBatch(msg.hello().node(), msg.hello().instance_id(), testing::ValidBatch(1))
          .IgnoreError();
    }
  } else if (msg.has_batch()) {
    // A hostile batch after a valid Hello, and once more (a duplicate or the next seq).
    if (!in.OnHello(testing::ValidHello()).ok()) std::abort();
    in.OnBatch("fuzz-node", 7, msg.batch()).IgnoreError();
    in.OnBatch("fuzz-node", 7, msg.batch()).IgnoreError();
  }
  for (const auto& family : ClusterFamilies(state)) {
    for (const auto& m : family.metric) {
      testing::FuzzCheck(!std::isnan(m.counter.value), "no NaN counter");
    }
  }
  MicroburstsJson(state.RecentMicrobursts(""));
  LossEventsJson(state.RecentLossEvents(""));
  CollectivesJson(state.RecentCollectives("", 10));
  KernelsJson(state.RecentKernels("", 10));
  LossPatternsJson(state.links().Patterns());
  AnomaliesJson(state.links().Anomalies(""));
  FlightRecordingsJson(state.links().FlightRecordings(""));
  SlowJson(state.cross_rank().Slowest(10, ""));
  return 0;
}
