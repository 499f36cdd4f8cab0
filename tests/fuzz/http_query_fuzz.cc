// The HTTP endpoints' query parsing, over a real socket to the aggregator's HTTP server
// (exporters::HttpServer with a cluster state that holds a node): any request target, or any
// raw request, gets an answer that is not a 500 (an exception in a handler), and the server
// lives on. Inputs starting with "GET " are sent as they are; others are the request target.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "exporters/exposition/http_server.h"
#include "exporters/state/cluster_state.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {
namespace {

struct Served {
  exporters::ClusterState state;
  std::unique_ptr<exporters::HttpServer> http;
  int port = 0;
};

Served& Server() {
  static Served* s = [] {
    auto* out = new Served();
    v1::Hello h;
    h.set_node("fuzz-node");
    h.set_instance_id(7);
    h.set_resume_seq(1);
    v1::PortInfo* p = h.add_ports();
    p->set_device("mlx5_0");
    p->set_port(1);
    p->set_line_rate_bytes_per_second(50'000'000'000);
    if (!out->state.OnHello(h).ok()) std::abort();
    v1::Batch b;
    b.set_seq(1);
    b.set_window_end_ns(1'000'000'000);
    b.set_unix_offset_ns(1'700'000'000'000'000'000);
    b.add_ports()->set_port_index(0);
    out->state.OnBatch("fuzz-node", 7, b).IgnoreError();
    out->http = std::make_unique<exporters::HttpServer>(
        std::vector<const prometheus::Collectable*>{}, &out->state);
    auto port = out->http->Start("127.0.0.1:0");
    if (!port.ok()) std::abort();
    out->port = *port;
    return out;
  }();
  return *s;
}

// Sends one request and returns the whole answer ("" when the server closed without one).
std::string Ask(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval tv{0, 300000};  // a request without its blank line ends by this timeout
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) {
      answer.append(buf, static_cast<size_t>(n));
      if (answer.size() > (8 << 20)) break;
    }
  }
  close(fd);
  return answer;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  return {"/metrics",
          "/api/microbursts?node=fuzz-node",
          "/api/loss_events?node=",
          "/api/collectives?node=fuzz-node&limit=99999999999999999999",
          "/api/kernels?limit=-1",
          "/heatmap/links?seconds=10&node=fuzz-node&format=json",
          "/heatmap/links?seconds=1e308&direction=tx&format=svg",
          "/heatmap/nodes?seconds=-1&format=svg",
          "/heatmap/collectives?comm=abc&func=AllReduce&instances=5",
          "/heatmap/ranks?comm=",
          "/api/collectives/slow?limit=3&comm=x",
          "/api/anomalies?node=%ff%00",
          "/api/flight_recordings",
          "/api/loss_patterns",
          "/api/diagnosis",
          "/heatmap",
          "GET /metrics HTTP/1.0\r\nConnection: close\r\n\r\n"};
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fabricscope::testing;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string request =
      absl::StartsWith(input, "GET ")
          ? input
          : "GET " + input + " HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n\r\n";
  const std::string answer = Ask(Server().port, request);
  FuzzCheck(!absl::StartsWith(answer, "HTTP/1.1 500"), "no handler throws (500)");
  // The server still answers a plain request.
  static int n = 0;
  if (++n % 16 == 0) {
    const std::string health =
        Ask(Server().port, "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
    if (!absl::StartsWith(health, "HTTP/1.1 200")) {
      std::fprintf(stderr, "healthz answered: [%s]\n", health.substr(0, 200).c_str());
    }
    FuzzCheck(absl::StartsWith(health, "HTTP/1.1 200"), "the server lives on");
  }
  return 0;
}
