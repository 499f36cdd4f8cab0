// The live page (issue 19): its files compiled in and served with a strict policy, and the two
// JSON endpoints it added (/api/status, /api/ports) computed from what the agents sent. The
// page itself runs in a real browser in tests/e2e/live_page_test.py and cluster_in_a_box.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "exporters/exposition/cluster_json.h"
#include "exporters/exposition/http_server.h"
#include "exporters/exposition/page_assets.h"
#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadSource(const std::string& rel) {
  std::ifstream f(std::string(FABRICSCOPE_SOURCE_DIR) + "/" + rel, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

v1::Hello TwoPortHello(const std::string& node) {
  v1::Hello h;
  h.set_node(node);
  h.set_instance_id(7);
  h.set_resume_seq(1);
  for (uint32_t port : {1u, 2u}) {
    v1::PortInfo* p = h.add_ports();
    p->set_device("mlx5_0");
    p->set_port(port);
    p->set_rdma(true);
    p->set_line_rate_bytes_per_second(50'000'000'000);
  }
  return h;
}

// One 1 s window ending at end_s (agent monotonic seconds) with `ticks` fast-sampler ticks so
// far, `overruns` late ticks, `samples` samples on port 1 (a tenth of them on port 2, as on a
// slower sampler group), and a loss ratio on port 2 only.
v1::Batch Window(uint64_t seq, int64_t end_s, uint64_t ticks, uint64_t overruns, double loss,
                 uint32_t samples = 1000) {
  v1::Batch b;
  b.set_seq(seq);
  b.set_window_start_ns((end_s - 1) * 1'000'000'000);
  b.set_window_end_ns(end_s * 1'000'000'000);
  b.set_unix_offset_ns(1'700'000'000'000'000'000);
  for (uint32_t i = 0; i < 2; ++i) {
    v1::PortWindow* w = b.add_ports();
    w->set_port_index(i);
    w->set_utilization_valid(true);
    w->mutable_transmit()->set_mean_utilization(0.1 * (i + 1));
    w->mutable_transmit()->set_microbursts_total(3 * (i + 1));
    w->mutable_transmit()->set_samples(i == 0 ? samples : samples / 10);
    w->mutable_receive()->set_samples(i == 0 ? samples : samples / 10);
    if (i == 1) {
      w->mutable_derived()->set_loss_ratio(loss);
      w->mutable_derived()->set_retransmits_per_second(12.5);
    }
  }
  v1::AgentStats* a = b.mutable_agent();
  a->set_ticks_total(ticks);
  a->set_overruns_total(overruns);
  // 1,000 intervals: 980 within 1 ms, 15 within 2 ms, 5 above: p99 in the 2 ms bucket.
  v1::Histogram* h = a->mutable_sample_interval_seconds();
  h->add_upper_bounds(0.001);
  h->add_upper_bounds(0.002);
  h->add_bucket_counts(980);
  h->add_bucket_counts(15);
  h->add_bucket_counts(5);
  h->set_count(1000);
  h->set_sum(0.9);
  return b;
}

// Every file under exporters/exposition/page is served as is, with a policy that allows only
// this server, so nothing reaches a CDN (the page works air-gapped).
TEST(LivePage, ServesItsCompiledInFilesWithAStrictPolicy) {
  ClusterState state;
  HttpServer server({}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  ASSERT_EQ(kPageAssetCount, 5u);
  for (const auto& [path, file] : {std::pair<const char*, const char*>{"/", "index.html"},
                                   {"/page.js", "page.js"},
                                   {"/history.js", "history.js"},
                                   {"/page.css", "page.css"},
                                   {"/favicon.svg", "favicon.svg"}}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    const std::string source = ReadSource(std::string("exporters/exposition/page/") + file);
    ASSERT_FALSE(source.empty()) << file;
    EXPECT_EQ(r->body, source) << path << " differs from its source file";
    EXPECT_THAT(r->get_header_value("Content-Security-Policy"), HasSubstr("default-src 'none'"));
    EXPECT_THAT(r->get_header_value("Content-Security-Policy"), HasSubstr("script-src 'self'"));
    EXPECT_EQ(r->get_header_value("X-Content-Type-Options"), "nosniff");
    // The only absolute URL is the SVG namespace, an identifier nothing fetches.
    size_t at = 0;
    while ((at = r->body.find("http", at)) != std::string::npos) {
      EXPECT_EQ(r->body.compare(at, 26, "http://www.w3.org/2000/svg"), 0)
          << path << " names another origin: " << r->body.substr(at, 60);
      ++at;
    }
  }
  const std::string html = c.Get("/")->body;
  for (const char* id :
       {"status", "links-heatmap", "microbursts", "slow-collectives", "history", "loss"}) {
    EXPECT_THAT(html, HasSubstr(std::string("<section id=\"") + id + "\""));
  }
  EXPECT_THAT(c.Get("/")->get_header_value("Content-Type"), HasSubstr("text/html"));
  EXPECT_THAT(c.Get("/page.js")->get_header_value("Content-Type"), HasSubstr("javascript"));
}

// Samples/s from the most samples a port took in the last window over its span (batches sent
// together carry one ticks_total), the p99 interval from the agent's histogram, microbursts
// from the ports' totals, the worst node first.
TEST(LivePage, StatusJsonFromTheAgentsStats) {
  ClusterState state;
  ASSERT_TRUE(state.OnHello(TwoPortHello("calm")).ok());
  ASSERT_TRUE(state.OnHello(TwoPortHello("late")).ok());
  EXPECT_THAT(StatusJson(state, 10), HasSubstr("\"samples_per_second\":null"));
  ASSERT_TRUE(state.OnBatch("calm", 7, Window(1, 10, 10'000, 0, 0, 997)).ok());
  // The second window after a lost one: its own samples count, whatever ticks_total says.
  ASSERT_TRUE(state.OnBatch("late", 7, Window(1, 10, 5'000, 4, 0, 990)).ok());
  ASSERT_TRUE(state.OnBatch("late", 7, Window(3, 12, 5'000, 9, 0, 1000)).ok());
  const std::string all = StatusJson(state, 10);
  EXPECT_THAT(all, HasSubstr("\"nodes_total\":2,\"nodes_reporting\":2,\"ports_total\":4,"
                             "\"samples_per_second_total\":1997,\"samples_total\":15000,"
                             "\"microbursts_total\":18,\"overruns_total\":9,"));
  // The node with overruns first; the p99 in the 2 ms bucket (995 of 1,000 within it).
  EXPECT_THAT(all, HasSubstr("\"nodes\":[{\"node\":\"late\",\"ports\":2,"
                             "\"samples_per_second\":1000,\"p99_interval_seconds\":0.002,"
                             "\"p99_interval_above\":false,\"samples_total\":5000,"
                             "\"microbursts_total\":9,\"overruns_total\":9,"));
  EXPECT_THAT(all, HasSubstr("\"lost_batches\":1"));
  EXPECT_THAT(all, HasSubstr("{\"node\":\"calm\",\"ports\":2,\"samples_per_second\":997,"));
  // limit keeps the worst; the totals stay over all nodes.
  const std::string top = StatusJson(state, 1);
  EXPECT_THAT(top, HasSubstr("\"nodes_total\":2,"));
  EXPECT_THAT(top, HasSubstr("\"late\""));
  EXPECT_THAT(top, Not(HasSubstr("\"calm\"")));
}

// An agent's NaN in a sort key is taken as 0, not left to break the sort.
TEST(LivePage, PortsJsonSortsNaNAsZero) {
  ClusterState state;
  ASSERT_TRUE(state.OnHello(TwoPortHello("a")).ok());
  ASSERT_TRUE(state.OnBatch("a", 7, Window(1, 10, 1, 0, std::nan(""))).ok());
  ASSERT_TRUE(state.OnHello(TwoPortHello("b")).ok());
  ASSERT_TRUE(state.OnBatch("b", 7, Window(1, 10, 1, 0, 0.5)).ok());
  const std::string json = PortsJson(state, "", 4);
  EXPECT_THAT(json, HasSubstr("\"ports\":[{\"node\":\"b\",\"device\":\"mlx5_0\",\"port\":2,"));
  EXPECT_THAT(json, HasSubstr("\"loss_ratio\":null"));  // NaN is written as null
}

// Ports with loss first, then by retransmits and utilization; a counter the port lacks is null.
TEST(LivePage, PortsJsonPutsLossFirstAndSaysWhatIsMissing) {
  ClusterState state;
  ASSERT_TRUE(state.OnHello(TwoPortHello("a")).ok());
  ASSERT_TRUE(state.OnHello(TwoPortHello("b")).ok());
  ASSERT_TRUE(state.OnBatch("a", 7, Window(1, 10, 1, 0, 0.001)).ok());
  ASSERT_TRUE(state.OnBatch("b", 7, Window(1, 10, 1, 0, 0.02)).ok());
  const std::string top = PortsJson(state, "", 2);
  EXPECT_THAT(top, HasSubstr("{\"ports_total\":4,\"ports\":[{\"node\":\"b\",\"device\":"
                             "\"mlx5_0\",\"port\":2,\"kind\":\"rdma\",\"line_rate_bytes_per_second"
                             "\":50000000000,\"transmit_utilization\":0.2,\"receive_utilization\":"
                             "0,\"loss_ratio\":0.02,\"retransmits_per_second\":12.5,"
                             "\"tcp_retransmitted_ratio\":null,"));
  EXPECT_THAT(top, HasSubstr("},{\"node\":\"a\",\"device\":\"mlx5_0\",\"port\":2,"));
  // Port 1 has no loss counter at all.
  const std::string a = PortsJson(state, "a", 10);
  EXPECT_THAT(a, HasSubstr("{\"ports_total\":2,"));
  EXPECT_THAT(a, HasSubstr("\"port\":1,\"kind\":\"rdma\",\"line_rate_bytes_per_second\":"
                           "50000000000,\"transmit_utilization\":0.1,\"receive_utilization\":0,"
                           "\"loss_ratio\":null,"));
  EXPECT_THAT(a, Not(HasSubstr("\"node\":\"b\"")));
  // A port whose line rate nobody knows says null, not 0.
  v1::Hello unknown = TwoPortHello("c");
  for (v1::PortInfo& p : *unknown.mutable_ports()) p.set_line_rate_bytes_per_second(0);
  ASSERT_TRUE(state.OnHello(unknown).ok());
  ASSERT_TRUE(state.OnBatch("c", 7, Window(1, 10, 1, 0, 0.001)).ok());
  EXPECT_THAT(PortsJson(state, "c", 10),
              HasSubstr("\"kind\":\"rdma\",\"line_rate_bytes_per_second\":null,"));
}

// A port's LLDP neighbour (agent/lldp_neighbors.h) is in /api/ports and in /metrics as one
// info series; a port without one has neither, and a hostile switch name stays one label value.
TEST(LivePage, PortNeighbourInPortsJsonAndMetrics) {
  ClusterState state;
  ASSERT_TRUE(state.OnHello(TwoPortHello("a")).ok());
  v1::Batch b = Window(1, 10, 1, 0, 0.001);
  v1::PortNeighbor* n = b.mutable_ports(1)->mutable_neighbor();
  n->set_source("lldp");
  n->set_chassis_name("leaf-3 \"a\\b\"");
  n->set_chassis_id("0c:42:a1:00:00:03");
  n->set_port_id("Ethernet1/5");
  n->set_port_description("to a");
  n->set_management_address("10.0.0.3");
  ASSERT_TRUE(state.OnBatch("a", 7, b).ok());
  const std::string json = PortsJson(state, "a", 10);
  EXPECT_THAT(json, HasSubstr("\"neighbor\":{\"source\":\"lldp\",\"chassis\":\"leaf-3 "
                              "\\\"a\\\\b\\\"\",\"chassis_id\":\"0c:42:a1:00:00:03\","
                              "\"port\":\"Ethernet1/5\",\"port_description\":\"to a\","
                              "\"management_address\":\"10.0.0.3\"}"));
  size_t count = 0;
  for (size_t at = 0; (at = json.find("\"neighbor\"", at)) != std::string::npos; ++at) ++count;
  EXPECT_EQ(count, 1u) << json;  // port 0 has none

  HttpServer server({}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body,
              HasSubstr("fabricscope_port_neighbor_info{node=\"a\",device=\"mlx5_0\",port=\"2\","
                        "source=\"lldp\",neighbor_chassis=\"leaf-3 \\\"a\\\\b\\\"\","
                        "neighbor_chassis_id=\"0c:42:a1:00:00:03\",neighbor_port=\"Ethernet1/5\","
                        "neighbor_port_description=\"to a\","
                        "neighbor_management_address=\"10.0.0.3\"} 1"));
  size_t series = 0;
  for (size_t at = 0;
       (at = r->body.find("\nfabricscope_port_neighbor_info{", at)) != std::string::npos; ++at) {
    ++series;
  }
  EXPECT_EQ(series, 1u);
}

// A browser accepts br; httplib's brotli runs at quality 11 (29 s for a 10 MB /metrics here):
// such clients get gzip, and one that accepts br alone gets the body as is.
TEST(LivePage, BrowsersGetGzipNotBrotli) {
  ClusterState state;
  HttpServer server({}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/page.js", {{"Accept-Encoding", "gzip, deflate, br, zstd"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(r->body, ReadSource("exporters/exposition/page/page.js"));  // decompressed
  r = c.Get("/page.js", {{"Accept-Encoding", "br;q=1.0"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(r->body, ReadSource("exporters/exposition/page/page.js"));
}

// A limit that is not a count is refused with 400 on every endpoint that takes one, as
// /api/collectives/slow does, rather than read as "no limit".
TEST(LivePage, ALimitThatIsNotACountIsRefused) {
  ClusterState state;
  HttpServer server({}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  for (const char* path : {"/api/microbursts", "/api/collectives", "/api/kernels", "/api/status",
                           "/api/ports", "/api/collectives/slow"}) {
    for (const char* bad : {"abc", "-1", "1e3"}) {
      auto r = c.Get(std::string(path) + "?limit=" + bad);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 400) << path << "?limit=" << bad;
    }
    for (const char* good : {"5", ""}) {  // empty: as if absent
      auto r = c.Get(std::string(path) + "?limit=" + good);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 200) << path << "?limit=" << good;
    }
  }
}

// ?limit=N of /api/microbursts: the N latest over all nodes, oldest first; no limit: all held.
TEST(LivePage, MicroburstsLimitKeepsTheLatestOverAllNodes) {
  ClusterState state;
  for (const char* node : {"a", "b"}) ASSERT_TRUE(state.OnHello(TwoPortHello(node)).ok());
  // a's bursts start at 1, 3, 5 ms of its window, b's at 2, 4, 6 ms.
  for (int k = 0; k < 2; ++k) {
    v1::Batch b = Window(1, 10, 1000, 0, 0);
    for (int i = 0; i < 3; ++i) {
      v1::Microburst* m = b.add_microbursts();
      m->set_port_index(0);
      m->set_start_ns(b.window_start_ns() + (1 + 2 * i + k) * 1'000'000);
      m->set_duration_ns(1'000'000);
      m->set_bytes(static_cast<uint64_t>(10 * (1 + 2 * i + k)));
    }
    ASSERT_TRUE(state.OnBatch(k == 0 ? "a" : "b", 7, b).ok());
  }
  auto bytes_in_order = [](const std::string& json) {
    std::vector<int> out;
    for (size_t at = 0; (at = json.find("\"bytes\":", at)) != std::string::npos; ++at) {
      out.push_back(std::atoi(json.c_str() + at + 8));
    }
    return out;
  };
  EXPECT_EQ(bytes_in_order(MicroburstsJson(state.RecentMicrobursts("", 3))),
            (std::vector<int>{40, 50, 60}));
  EXPECT_EQ(bytes_in_order(MicroburstsJson(state.RecentMicrobursts("a", 2))),
            (std::vector<int>{30, 50}));
  EXPECT_EQ(bytes_in_order(MicroburstsJson(state.RecentMicrobursts("", 0))).size(), 6u);
  EXPECT_EQ(bytes_in_order(MicroburstsJson(state.RecentMicrobursts("", 100))).size(), 6u);
}

}  // namespace
}  // namespace fabricscope::exporters
