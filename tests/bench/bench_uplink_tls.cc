// Uplink ingest cost by security mode (issue 13): one agent stream on loopback to a real
// TelemetryServer sends `--batches` one-second batches of an 8-port node (port windows and
// 1 ms utilization series, ~18 KB each) back to back; per batch, the wall time from the first
// write to the last ack and the CPU time of the process (agent and aggregator sides together:
// both ends of the TLS work are in it). Modes: plain text (the baseline), a token, TLS, mTLS
// with the node identity check, TLS with a token. Certificates are made by openssl (P-256, as
// README shows). Modes are interleaved round by round and reported as medians with their ratio
// to plain text measured in the same run. Plain binary, not part of ctest.
//
// Usage: fabricscope_bench_uplink_tls [--batches=2000] [--rounds=3]
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/common/stream_auth.h"
#include "collectors/common/tls.h"
#include "exporters/ingest/telemetry_service.h"
#include "exporters/state/cluster_state.h"
#include "tests/bench/bench_common.h"
#include "tests/bench/bench_hello.h"

namespace fabricscope::bench {
namespace {

constexpr int kPorts = 8;
constexpr int64_t kWindowNs = 1'000'000'000;
constexpr int64_t kBucketNs = 1'000'000;
const char kToken[] = "bench-token-0123456789abcdef0123456789";

struct Mode {
  const char* name;
  bool tls = false;
  bool mutual = false;
  bool token = false;
};

class Pki {
 public:
  Pki() {
    dir_ = (std::filesystem::temp_directory_path() / "fabricscope-bench-tls-XXXXXX").string();
    if (mkdtemp(dir_.data()) == nullptr) std::abort();
    ok_ = Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
              "-keyout ca.key -out ca.pem -days 2 -subj /CN=bench-ca") &&
          Leaf("server", "aggregator.test") && Leaf("node", NodeName(0));
    std::ofstream(Path("token")) << kToken << "\n";
  }
  ~Pki() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  bool ok() const { return ok_; }
  std::string Path(const std::string& f) const { return dir_ + "/" + f; }

 private:
  bool Run(const std::string& cmd) const {
    return std::system(("cd " + dir_ + " && " + cmd + " >/dev/null 2>&1").c_str()) == 0;
  }
  bool Leaf(const std::string& n, const std::string& dns) const {
    std::ofstream(Path(n + ".ext")) << "subjectAltName=DNS:" << dns << "\n";
    return Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + n +
               ".key -out " + n + ".csr -subj /CN=" + dns) &&
           Run("openssl x509 -req -in " + n +
               ".csr -CA ca.pem -CAkey ca.key -CAcreateserial "
               "-days 2 -out " +
               n + ".pem -extfile " + n + ".ext");
  }
  std::string dir_;
  bool ok_ = false;
};

// A one-second window of an 8-port node: counters, histograms and the 1 ms utilization series
// the heat map reads (1,000 buckets per direction and port).
v1::Batch MakeBatch(uint64_t seq) {
  v1::Batch b;
  b.set_seq(seq);
  const int64_t start = static_cast<int64_t>(seq) * kWindowNs;
  b.set_window_start_ns(start);
  b.set_window_end_ns(start + kWindowNs);
  for (int p = 0; p < kPorts; ++p) {
    v1::PortWindow* pw = b.add_ports();
    pw->set_port_index(static_cast<uint32_t>(p));
    pw->set_utilization_valid(true);
    for (v1::DirectionWindow* d : {pw->mutable_transmit(), pw->mutable_receive()}) {
      d->set_has_bytes(true);
      d->set_has_packets(true);
      d->set_bytes(30'000'000'000);
      d->set_bytes_total(seq * 30'000'000'000);
      d->set_packets(7'000'000);
      d->set_packets_total(seq * 7'000'000);
      d->set_mean_utilization(0.6);
      d->set_peak_utilization(0.98);
      d->set_samples(10'000);
    }
    v1::UtilizationSeries* u = b.add_utilization_series();
    u->set_port_index(static_cast<uint32_t>(p));
    u->set_start_ns(start);
    u->set_bucket_ns(kBucketNs);
    std::string series(kWindowNs / kBucketNs, '\0');
    for (size_t i = 0; i < series.size(); ++i) series[i] = static_cast<char>((i * 7 + p) % 201);
    u->set_transmit(series);
    u->set_receive(series);
  }
  return b;
}

double CpuSeconds() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

struct Figures {
  double wall_us = 0;  // per batch
  double cpu_us = 0;   // per batch, both ends
};

// One stream of `batches` batches in `mode`; false when the stream failed.
bool RunOnce(const Pki& pki, const Mode& mode, int batches, uint64_t instance, Figures* out) {
  common::ServerTls st;
  if (mode.tls) st = {.cert = pki.Path("server.pem"), .key = pki.Path("server.key")};
  if (mode.mutual) st.client_ca = pki.Path("ca.pem");
  std::shared_ptr<const common::TokenAuth> tokens;
  if (mode.token) tokens = *common::TokenAuth::Load(pki.Path("token"), "");
  exporters::ClusterState state;
  exporters::TelemetryServer server(state, exporters::TelemetryServer::kDefaultMaxMessageBytes, st,
                                    tokens);
  auto port = server.Start("127.0.0.1:0");
  if (!port.ok()) return false;
  common::ClientTls ct;
  if (mode.tls) ct = {.ca = pki.Path("ca.pem"), .server_name = "aggregator.test"};
  if (mode.mutual) {
    ct.cert = pki.Path("node.pem");
    ct.key = pki.Path("node.key");
  }
  grpc::ChannelArguments args;
  if (mode.tls) args.SetSslTargetNameOverride("aggregator.test");
  auto stub = v1::Telemetry::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", *port), common::ChannelCredentialsFor(ct), args));
  grpc::ClientContext ctx;
  if (mode.token) ctx.AddMetadata("authorization", std::string("Bearer ") + kToken);
  auto stream = stub->Stream(&ctx);
  v1::AgentMessage m;
  *m.mutable_hello() = MakeHello(0, kPorts);
  m.mutable_hello()->set_instance_id(instance);
  v1::AggregatorMessage ack;
  if (!stream->Write(m) || !stream->Read(&ack)) return false;  // handshake and Hello done
  std::vector<v1::AgentMessage> msgs(static_cast<size_t>(batches));
  for (int i = 0; i < batches; ++i)
    *msgs[static_cast<size_t>(i)].mutable_batch() = MakeBatch(i + 1);
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread reader([&] {
    v1::AggregatorMessage a;
    while (stream->Read(&a)) {
      if (a.ack().seq() >= static_cast<uint64_t>(batches)) break;
    }
  });
  for (const v1::AgentMessage& msg : msgs) {
    if (!stream->Write(msg)) break;
  }
  reader.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = CpuSeconds() - cpu0;
  stream->WritesDone();
  const grpc::Status s = stream->Finish();
  if (!s.ok()) std::fprintf(stderr, "%s: stream ended: %s\n", mode.name, s.error_message().c_str());
  out->wall_us = wall / batches * 1e6;
  out->cpu_us = cpu / batches * 1e6;
  return s.ok();
}

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) {
  using namespace fabricscope::bench;
  int batches = 2000, rounds = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--batches=", 10) == 0) {
      batches = std::atoi(argv[i] + 10);
    } else if (std::strncmp(argv[i], "--rounds=", 9) == 0) {
      rounds = std::atoi(argv[i] + 9);
    } else {
      std::fprintf(stderr, "usage: %s [--batches=2000] [--rounds=3]\n", argv[0]);
      return 2;
    }
  }
  if (batches < 1 || rounds < 1) return 2;
  PrintMachine();
  Pki pki;
  if (!pki.ok()) {
    std::fprintf(stderr, "openssl could not make the certificates\n");
    return 1;
  }
  const std::vector<Mode> modes = {{"plain text"},
                                   {"token", false, false, true},
                                   {"TLS", true},
                                   {"mTLS + identity", true, true},
                                   {"TLS + token", true, false, true}};
  std::printf("batch: %zu bytes (8 ports, 1 ms series); %d batches per stream, %d rounds\n",
              MakeBatch(1).ByteSizeLong(), batches, rounds);
  std::vector<std::vector<double>> wall(modes.size()), cpu(modes.size());
  uint64_t instance = 1;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < modes.size(); ++i) {
      Figures f;
      if (!RunOnce(pki, modes[i], batches, instance++, &f)) {
        std::fprintf(stderr, "%s: the stream failed\n", modes[i].name);
        return 1;
      }
      wall[i].push_back(f.wall_us);
      cpu[i].push_back(f.cpu_us);
    }
  }
  std::printf("=== uplink ingest per batch (median of %d rounds; ratio to plain text, same run)\n",
              rounds);
  std::printf("%-18s %12s %8s %12s %8s\n", "mode", "wall us", "ratio", "cpu us", "ratio");
  const double base_wall = Median(wall[0]), base_cpu = Median(cpu[0]);
  for (size_t i = 0; i < modes.size(); ++i) {
    std::printf("%-18s %12.1f %7.2fx %12.1f %7.2fx\n", modes[i].name, Median(wall[i]),
                Median(wall[i]) / base_wall, Median(cpu[i]), Median(cpu[i]) / base_cpu);
  }
  return 0;
}
