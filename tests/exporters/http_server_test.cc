#include "exporters/http_server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "exporters/cluster_state.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace fabricscope::exporters {
namespace {

using ::testing::HasSubstr;

TEST(SplitHostPort, Forms) {
  EXPECT_EQ(*SplitHostPort("127.0.0.1:9470"), std::make_pair(std::string("127.0.0.1"), 9470));
  EXPECT_EQ(*SplitHostPort(":9470"), std::make_pair(std::string("0.0.0.0"), 9470));
  EXPECT_EQ(*SplitHostPort("[::1]:0"), std::make_pair(std::string("::1"), 0));
  EXPECT_FALSE(SplitHostPort("localhost").ok());
  EXPECT_FALSE(SplitHostPort("h:99999").ok());
  EXPECT_FALSE(SplitHostPort("h:port").ok());
}

TEST(HttpServer, ServesMetricsHealthAndIndexOnLoopback) {
  ClusterState state;
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(1);
  h.add_ports()->set_device("eth0");
  ASSERT_TRUE(state.OnHello(h).ok());
  prometheus::Registry registry;
  prometheus::BuildCounter()
      .Name("extra_things_total")
      .Help("x")
      .Register(registry)
      .Add({})
      .Increment(3);
  HttpServer server({&state, &registry}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(r->body, HasSubstr("# TYPE fabricscope_agent_info gauge"));
  EXPECT_THAT(r->body, HasSubstr("fabricscope_agent_info{node=\"n1\""));
  EXPECT_THAT(r->body, HasSubstr("extra_things_total 3"));
  EXPECT_EQ(c.Get("/healthz")->body, "ok\n");
  EXPECT_THAT(c.Get("/")->body, HasSubstr("/metrics"));
  EXPECT_EQ(c.Get("/nope")->status, 404);
  EXPECT_THAT(c.Get("/api/microbursts?node=n1")->body, HasSubstr("\"microbursts\""));
  server.Stop();
}

TEST(HttpServer, PortInUseIsAClearError) {
  ClusterState state;
  HttpServer first({&state}, &state);
  auto port = first.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  HttpServer second({&state}, &state);
  auto again = second.Start("127.0.0.1:" + std::to_string(*port));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(again.status().message(), HasSubstr("cannot listen"));
}

TEST(HttpServer, StopRightAfterStartDoesNotHang) {
  ClusterState state;
  for (int i = 0; i < 20; ++i) {
    HttpServer s({&state}, &state);
    ASSERT_TRUE(s.Start("127.0.0.1:0").ok());
    s.Stop();
  }
}

}  // namespace
}  // namespace fabricscope::exporters
