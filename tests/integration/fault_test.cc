// Faults of the hardware and the host, injected into a fake sysfs tree while the agent (a real
// process, standalone) reads it: saturated and wrapping counters, ports without a PMA, a device
// that vanishes and comes back, a file the agent may not read, a link flap and a speed change.
// Every wait is on a condition seen in /metrics, bounded; the only fixed pauses are outages that
// are themselves the scenario.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"
#include "tests/common/wait.h"
#include "tests/integration/exposition.h"

namespace fabricscope::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Labels = std::map<std::string, std::string>;

constexpr auto kWait = 20s;  // bound of every wait (2-core CI, tests in parallel, ASan)

struct PortSpec {
  std::string rate = "2.5 Gb/sec (1X SDR)";
  uint64_t xmit_words = 1000, rcv_words = 2000, xmit_packets = 10, rcv_packets = 20;
  uint64_t symbol_error = 0, link_downed = 0, port_rcv_errors = 0;
  uint64_t out_of_sequence = 0, rp_cnp_handled = 0;
};

// An mlx5-like port under <root>/sys/class/infiniband/<dev>/ports/<port>/.
std::string PortDir(const std::string& dev, int port = 1) {
  return absl::StrCat("sys/class/infiniband/", dev, "/ports/", port, "/");
}

void WritePort(const FakeTree& t, const std::string& dev, const PortSpec& s) {
  const std::string d = PortDir(dev);
  t.Write(d + "link_layer", "InfiniBand\n");
  t.Write(d + "rate", s.rate + "\n");
  t.Write(d + "state", "4: ACTIVE\n");
  t.Write(d + "phys_state", "5: LinkUp\n");
  t.Write(d + "counters/port_xmit_data", absl::StrCat(s.xmit_words, "\n"));
  t.Write(d + "counters/port_rcv_data", absl::StrCat(s.rcv_words, "\n"));
  t.Write(d + "counters/port_xmit_packets", absl::StrCat(s.xmit_packets, "\n"));
  t.Write(d + "counters/port_rcv_packets", absl::StrCat(s.rcv_packets, "\n"));
  t.Write(d + "counters/symbol_error", absl::StrCat(s.symbol_error, "\n"));
  t.Write(d + "counters/link_downed", absl::StrCat(s.link_downed, "\n"));
  t.Write(d + "counters/port_rcv_errors", absl::StrCat(s.port_rcv_errors, "\n"));
  t.Write(d + "hw_counters/lifespan", "10\n");
  t.Write(d + "hw_counters/out_of_sequence", absl::StrCat(s.out_of_sequence, "\n"));
  t.Write(d + "hw_counters/rp_cnp_handled", absl::StrCat(s.rp_cnp_handled, "\n"));
}

Labels PortLabels(const std::string& dev, Labels extra = {}) {
  Labels l = {{"device", dev}, {"port", "1"}};
  l.insert(extra.begin(), extra.end());
  return l;
}

// The agent on <root>/sys, TCP off (the fake procfs has none).
std::unique_ptr<StandaloneAgent> StartAgent(const FakeTree& t, std::vector<std::string> extra = {},
                                            std::vector<std::string> prefix = {},
                                            std::string binary = FABRICSCOPE_AGENT_BIN) {
  t.Write("empty.yaml", "");
  extra.push_back("--tcp=off");
  // Every counter by name (fabricscope_port_hw_events_total is in the full profile only).
  extra.push_back("--metrics=full");
  return std::make_unique<StandaloneAgent>(t.Path("empty.yaml"), t.Path("sys"), t.Path("proc"),
                                           std::move(extra), std::move(prefix), std::move(binary));
}

// Waits until `metric{labels}` reads `want` (nullopt: until the series is absent).
::testing::AssertionResult WaitForValue(StandaloneAgent& a, const std::string& metric,
                                        const Labels& labels, std::optional<double> want) {
  std::optional<double> got;
  const bool ok = WaitFor(
      [&] {
        got = Value(a.Samples(), metric, labels);
        return got == want;
      },
      kWait);
  if (ok) return ::testing::AssertionSuccess();
  auto fmt = [](std::optional<double> v) {
    if (!v) return std::string("(absent)");
    char buf[32];
    snprintf(buf, sizeof(buf), "%.17g", *v);
    return std::string(buf);
  };
  return ::testing::AssertionFailure() << SeriesString(metric, labels) << ": want " << fmt(want)
                                       << ", last seen " << fmt(got) << "\n--- agent output ---\n"
                                       << a.Output();
}

// Waits until `n` more windows reached /metrics; calls `each` on every scrape meanwhile.
bool WaitWindows(StandaloneAgent& a, int n,
                 const std::function<void(const std::vector<Sample>&)>& each = nullptr) {
  auto batches = [&](const std::vector<Sample>& s) {
    return Value(s, "fabricscope_aggregator_batches_total").value_or(-1);
  };
  const double start = batches(a.Samples());
  return WaitFor(
      [&] {
        const std::vector<Sample> s = a.Samples();
        if (each) each(s);
        return batches(s) >= start + n;
      },
      kWait);
}

int CountLines(const std::string& text, const std::regex& re) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (std::regex_search(std::string(line), re)) ++n;
  }
  return n;
}

// 1. IB PMA error counters stop at all ones (IBTA vol. 1 16.1.3.5). At the maximum the agent
// reports saturation and keeps the total at the maximum: never a wrap, never a huge delta.
TEST(AgentFaults, SaturatedErrorCounterStaysAtItsMaximum) {
  FakeTree t;
  WritePort(t, "mlx5_0", {.symbol_error = 65530, .link_downed = 255});
  auto a = StartAgent(t);
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels sym = PortLabels("mlx5_0", {{"kind", "symbol_error"}});
  const Labels down = PortLabels("mlx5_0", {{"kind", "link_downed"}});
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_errors_total", sym, 65530));
  // An 8-bit counter already at 255 at start-up is saturated from the first read.
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_errors_total", down, 255));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_errors_saturated", down, 1));
  EXPECT_EQ(Value(a->Samples(), "fabricscope_port_errors_saturated", sym), std::nullopt);

  // The 16-bit symbol_error reaches 2^16 - 1.
  t.Write(PortDir("mlx5_0") + "counters/symbol_error", "65535\n");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_errors_saturated", sym, 1));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_errors_total", sym, 65535));
  // It stays there for several windows: the total never moves, saturation stays reported.
  double max_seen = 0, min_flag = 1;
  ASSERT_TRUE(WaitWindows(*a, 5, [&](const std::vector<Sample>& s) {
    max_seen = std::max(max_seen, Value(s, "fabricscope_port_errors_total", sym).value_or(0));
    min_flag = std::min(min_flag, Value(s, "fabricscope_port_errors_saturated", sym).value_or(0));
  }));
  EXPECT_EQ(max_seen, 65535);
  EXPECT_EQ(min_flag, 1);
  EXPECT_EQ(Value(a->Samples(), "fabricscope_port_errors_total", down), 255);

  // Counters cleared (perfquery -x): a reset, the total continues from the maximum.
  t.Write(PortDir("mlx5_0") + "counters/symbol_error", "0\n");
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_errors_saturated", sym, std::nullopt));
  t.Write(PortDir("mlx5_0") + "counters/symbol_error", "2\n");
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_errors_total", sym, 65537));
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << a->Output();
}

// 2. mlx5 queue counters are 32-bit in firmware and wrap: 4294967290 then 5 is 11 more.
// 64-bit congestion counters do not wrap at 2^32: going backwards is a reset.
TEST(AgentFaults, HwCounterWrapsAt32Bits) {
  FakeTree t;
  WritePort(t, "mlx5_0", {.out_of_sequence = 4294967290, .rp_cnp_handled = 1000});
  auto a = StartAgent(t);
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels oos = PortLabels("mlx5_0", {{"counter", "out_of_sequence"}});
  const Labels cnp = PortLabels("mlx5_0", {{"counter", "rp_cnp_handled"}});
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_hw_events_total", oos, 4294967290));
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_out_of_sequence_packets_total",
                           PortLabels("mlx5_0"), 4294967290));
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_hw_events_total", cnp, 1000));

  t.Write(PortDir("mlx5_0") + "hw_counters/out_of_sequence", "5\n");
  t.Write(PortDir("mlx5_0") + "hw_counters/rp_cnp_handled", "10\n");
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_hw_events_total", oos, 4294967290.0 + 11));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_out_of_sequence_packets_total",
                           PortLabels("mlx5_0"), 4294967290.0 + 11));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_hw_events_total", cnp, 1010));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_cnp_handled_total", PortLabels("mlx5_0"), 1010));
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << a->Output();
}

// 3. Drivers without a PMA (iWARP, e.g. i40iw) answer "N/A (no PMA)" in every counters/ file.
// iWARP/i40iw ports whose counters all read "N/A (no PMA)" (node_exporter#966): the port is
// still watched for its state, physical state and rate, its traffic counters are said once to
// be unavailable, and its bytes come from its netdev when one is linked (gid_attrs/ndevs). Its
// utilization is absent, not 0, where it has no bytes at all.
TEST(AgentFaults, NoPmaPortsAreWatchedAndCountTheirNetdevsBytes) {
  FakeTree t;
  WritePort(t, "mlx5_0", {});
  for (const char* dev : {"i40iw0", "i40iw1"}) {
    const std::string iw = PortDir(dev);
    t.Write(iw + "link_layer", "Ethernet\n");
    t.Write(iw + "rate", "10 Gb/sec (1X QDR)\n");
    t.Write(iw + "state", "4: ACTIVE\n");
    t.Write(iw + "phys_state", "5: LinkUp\n");
    for (const char* c :
         {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets",
          "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
          "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
          "port_xmit_constraint_errors", "port_rcv_constraint_errors",
          "local_link_integrity_errors", "excessive_buffer_overrun_errors", "VL15_dropped",
          "port_xmit_wait"}) {
      t.Write(iw + "counters/" + c, "N/A (no PMA)\n");
    }
  }
  // i40iw1's GID table names its netdev; i40iw0 has none.
  t.Write(PortDir("i40iw1") + "gid_attrs/ndevs/0", "eth7\n");
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"tx_bytes", "7000"}, {"rx_bytes", "9000"}, {"tx_packets", "7"}, {"rx_packets", "9"}}) {
    t.Write("sys/class/net/eth7/statistics/" + name, value + "\n");
  }
  t.Write("sys/class/net/eth7/speed", "10000\n");
  // A port where only some counters are missing keeps the others.
  WritePort(t, "mlx5_1", {.port_rcv_errors = 3});
  t.Write(PortDir("mlx5_1") + "counters/symbol_error", "N/A (no PMA)\n");

  auto a = StartAgent(t);
  ASSERT_TRUE(a->Start()) << a->Output();
  ASSERT_TRUE(
      WaitForValue(*a, "fabricscope_port_transmit_bytes_total", PortLabels("mlx5_0"), 4000));
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_errors_total",
                           PortLabels("mlx5_1", {{"kind", "port_rcv_errors"}}), 3));
  ASSERT_TRUE(WaitWindows(*a, 3));
  const std::vector<Sample> s = a->Samples();
  for (const char* dev : {"i40iw0", "i40iw1"}) {
    EXPECT_EQ(Value(s, "fabricscope_port_link_state", PortLabels(dev)), 4) << dev;
    EXPECT_EQ(Value(s, "fabricscope_port_physical_state", PortLabels(dev)), 5) << dev;
    EXPECT_EQ(Value(s, "fabricscope_port_current_rate_bytes_per_second", PortLabels(dev)),
              1'250'000'000)
        << dev;
    EXPECT_EQ(
        Value(s, "fabricscope_port_errors_total", PortLabels(dev, {{"kind", "symbol_error"}})),
        std::nullopt);
  }
  EXPECT_EQ(Value(s, "fabricscope_port_transmit_bytes_total", PortLabels("i40iw0")), std::nullopt);
  EXPECT_EQ(Value(s, "fabricscope_port_utilization_ratio",
                  PortLabels("i40iw0", {{"direction", "transmit"}})),
            std::nullopt);
  EXPECT_EQ(Value(s, "fabricscope_port_transmit_bytes_total", PortLabels("i40iw1")), 7000);
  EXPECT_EQ(Value(s, "fabricscope_port_receive_bytes_total", PortLabels("i40iw1")), 9000);
  EXPECT_EQ(
      Value(s, "fabricscope_port_errors_total", PortLabels("mlx5_1", {{"kind", "symbol_error"}})),
      std::nullopt);
  EXPECT_EQ(Value(s, "fabricscope_port_transmit_bytes_total", PortLabels("mlx5_1")), 4000);
  const std::string out = a->Output();
  EXPECT_EQ(CountLines(out, std::regex("i40iw0:1: .*N/A")), 1) << out;
  EXPECT_EQ(CountLines(out, std::regex("i40iw0:1: no traffic counters and no netdev")), 1) << out;
  EXPECT_EQ(CountLines(out, std::regex("i40iw1:1: bytes and packets from its netdev eth7")), 1)
      << out;
  EXPECT_EQ(CountLines(out, std::regex("mlx5_1:1: .*N/A.*symbol_error")), 1) << out;
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << out;
}

// irdma ports have no counters/ (procfs PR 605, node_exporter#2769): their bytes and packets are
// the driver's IPv4 + IPv6 counters in hw_counters, read at twice the hw_counters lifespan, and
// its CNP, ECN and discard counters feed the same metrics as mlx5's
// (tests/testdata/generated/irdma-rocev2, collectors/counter_meaning.cc).
TEST(AgentFaults, IrdmaPortsCountTheDriversBytesAndCongestionCounters) {
  FakeTree t;
  t.CopyTestdata("generated/irdma-rocev2/class", "sys/class");
  auto a = StartAgent(t);
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels port = PortLabels("irdma0");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_receive_bytes_total", port,
                           1'500'000'000'000.0 + 2'000'000'000.0));
  ASSERT_TRUE(WaitWindows(*a, 2));
  std::vector<Sample> s = a->Samples();
  EXPECT_EQ(Value(s, "fabricscope_port_transmit_bytes_total", port), 1'401'000'000'000.0);
  EXPECT_EQ(Value(s, "fabricscope_port_receive_packets_total", port), 366'210'937.0 + 488'281.0);
  EXPECT_EQ(Value(s, "fabricscope_port_cnp_sent_total", port), 3131);
  EXPECT_EQ(Value(s, "fabricscope_port_cnp_handled_total", port), 4242);
  EXPECT_EQ(Value(s, "fabricscope_port_ecn_marked_packets_total", port), 5150);
  Labels reason = port;
  reason["reason"] = "ip4InDiscards";
  EXPECT_EQ(Value(s, "fabricscope_port_discards_total", reason), 17);
  // Utilization is exported (the port has bytes), 0 while the counters stand still.
  EXPECT_EQ(Value(s, "fabricscope_port_utilization_ratio",
                  PortLabels("irdma0", {{"direction", "receive"}})),
            0);
  // 125 MB arrive, 100 MB over IPv4 and 25 MB over IPv6: the total counts both.
  const std::string hw = "sys/class/infiniband/irdma0/ports/1/hw_counters/";
  t.Write(hw + "ip4InOctets", "1500100000000\n");
  t.Write(hw + "ip6InOctets", "2025000000\n");
  // The window that held them had a busy sample at the port's 100 Gb/s (12.5 GB/s) rate: its
  // peak is seen on some scrape until the total has moved and one more window has closed.
  const Labels rx = PortLabels("irdma0", {{"direction", "receive"}});
  const double want = 1'500'000'000'000.0 + 2'000'000'000.0 + 125'000'000.0;
  double peak = 0;
  auto watch = [&](const std::vector<Sample>& now) {
    peak = std::max(peak, Value(now, "fabricscope_port_peak_utilization_ratio", rx).value_or(0));
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::vector<Sample> now = a->Samples();
        watch(now);
        return Value(now, "fabricscope_port_receive_bytes_total", port) == want;
      },
      kWait))
      << a->Output();
  ASSERT_TRUE(WaitWindows(*a, 1, watch));
  EXPECT_GT(peak, 0.0);
  const std::string out = a->Output();
  EXPECT_EQ(CountLines(out, std::regex("irdma0:1: bytes and packets from the driver's "
                                       "hw_counters \\(ip4OutOctets\\+ip6OutOctets")),
            1)
      << out;
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << out;
}

// 4. Hot-unplug and re-plug. On real sysfs, reads of an unplugged device's open attribute files
// fail (ENODEV). Simulated in place: the files stay (same inodes, as the agent's open
// descriptors see them) but read empty, then come back with lower values (a re-plugged device
// restarts its counters at 0). The agent keeps running, skips the failed reads, and continues
// the byte total monotonically: old total + new value.
TEST(AgentFaults, DeviceVanishesAndComesBackWithRestartedCounters) {
  FakeTree t;
  WritePort(t, "mlx5_0", {});
  auto a = StartAgent(t);
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels port = PortLabels("mlx5_0");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 4000));
  t.Write(PortDir("mlx5_0") + "counters/port_xmit_data", "2000\n");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 8000));

  // Unplugged: every attribute of the port fails to read.
  for (const auto& e : fs::recursive_directory_iterator(t.Path(PortDir("mlx5_0")))) {
    if (e.is_regular_file()) t.Write(fs::relative(e.path(), t.root()), "");
  }
  // The outage: windows keep coming, the totals hold (a failed read is skipped, not zero).
  double min_tx = 1e300, max_tx = 0;
  ASSERT_TRUE(WaitWindows(*a, 4, [&](const std::vector<Sample>& s) {
    const double v = Value(s, "fabricscope_port_transmit_bytes_total", port).value_or(-1);
    min_tx = std::min(min_tx, v);
    max_tx = std::max(max_tx, v);
  })) << a->Output();
  EXPECT_EQ(min_tx, 8000);
  EXPECT_EQ(max_tx, 8000);
  EXPECT_EQ(absl::StripAsciiWhitespace(HttpGet(a->port(), "/healthz")), "ok");

  // Re-plugged with counters restarted: 10 words is 40 more bytes, not a wrap, not a drop.
  WritePort(t, "mlx5_0", {.xmit_words = 10, .rcv_words = 20});
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 8000 + 40));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_receive_bytes_total", port, 8000 + 80));
  t.Write(PortDir("mlx5_0") + "counters/port_xmit_data", "30\n");
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 8000 + 120));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_link_state", port, 4));
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << a->Output();
}

// 4b. The same with the device directory removed and created again, as the kernel does: the
// re-plugged device's files are new inodes (new kernfs nodes). The agent checks once a second
// whether a counter file's path names another inode than the descriptor it reads, and reopens
// it (Agent::Maintain); the re-plugged counters start low, a reset the totals continue across.
TEST(AgentFaults, DeviceDirectoryRemovedAndRecreated) {
  FakeTree t;
  WritePort(t, "mlx5_0", {});
  auto a = StartAgent(t);
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels port = PortLabels("mlx5_0");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 4000));
  t.Write(PortDir("mlx5_0") + "counters/port_xmit_data", "2000\n");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 8000));

  fs::remove_all(t.Path("sys/class/infiniband/mlx5_0"));
  ASSERT_TRUE(WaitWindows(*a, 3)) << a->Output();
  EXPECT_EQ(absl::StripAsciiWhitespace(HttpGet(a->port(), "/healthz")), "ok");
  WritePort(t, "mlx5_0", {.xmit_words = 10, .rcv_words = 20});
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 8000 + 40));
  t.Write(PortDir("mlx5_0") + "counters/port_xmit_data", "30\n");
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 8000 + 120));
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << a->Output();
}

// 4c. A re-plug on a fast link: the byte counter restarts at a value far below the old one
// after an outage of a few windows. DISABLED: collectors::ComputeDelta unfolds a 64-bit
// counter at 2^32 whenever the unfolded step fits in 2 x line rate x the time since the last
// good read; after an outage of more than 2^32 words / (2 x 50e9 B/s / 4) = 0.17 s on 400 Gb/s
// any decrease from below 2^32 words passes, so the reset becomes a phantom 2^32-word
// (16 GiB) wrap. Enable once a reset after a long gap is not taken for a 32-bit wrap.
TEST(AgentFaults, ResetAfterAnOutageOnAFastLinkIsNotA32BitWrap) {
  FakeTree t;
  WritePort(t, "mlx5_0", {.rate = "400 Gb/sec (4X NDR)"});
  auto a = StartAgent(t);
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels port = PortLabels("mlx5_0");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 4000));
  for (const char* c :
       {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"}) {
    t.Write(PortDir("mlx5_0") + "counters/" + c, "");
  }
  ASSERT_TRUE(WaitWindows(*a, 4)) << a->Output();  // the outage: at least 0.3 s
  t.Write(PortDir("mlx5_0") + "counters/port_xmit_data", "10\n");
  t.Write(PortDir("mlx5_0") + "counters/port_rcv_data", "20\n");
  t.Write(PortDir("mlx5_0") + "counters/port_xmit_packets", "1\n");
  t.Write(PortDir("mlx5_0") + "counters/port_rcv_packets", "2\n");
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 4000 + 40));
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << a->Output();
}

// Runs the agent as an unprivileged user when this test runs as root (root bypasses file
// modes): setpriv from util-linux, with the agent binary copied into the tree so that the
// build directory's permissions do not matter.
struct Unprivileged {
  std::vector<std::string> prefix;
  std::string binary = FABRICSCOPE_AGENT_BIN;
  std::string skip;  // why it cannot run here
};

Unprivileged PrepareUnprivileged(const FakeTree& t) {
  Unprivileged u;
  t.Write("empty.yaml", "");
  // Everything readable by others (FakeTree's root is mkdtemp's 0700; the umask may be strict).
  fs::permissions(t.root(), fs::perms(0755));
  for (const auto& e : fs::recursive_directory_iterator(t.root())) {
    fs::permissions(e.path(), e.is_directory() ? fs::perms(0755) : fs::perms(0644));
  }
  if (geteuid() != 0) return u;  // file modes apply to us already
  const std::string setpriv = FindProgram({"setpriv"});
  if (setpriv.empty()) {
    u.skip = "setpriv (util-linux) not found";
    return u;
  }
  u.binary = t.Path("fabricscope-agent");
  fs::copy_file(FABRICSCOPE_AGENT_BIN, u.binary);
  fs::permissions(u.binary, fs::perms(0755));
  // nobody:nogroup on Debian.
  u.prefix = {setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--"};
  return u;
}

// 5. One counter file the agent may not read: it starts, says which file, exports the rest.
TEST(AgentFaults, UnreadableCounterFileIsNotedAndTheRestExported) {
  FakeTree t;
  WritePort(t, "mlx5_0", {.port_rcv_errors = 4});
  Unprivileged u = PrepareUnprivileged(t);
  if (!u.skip.empty()) GTEST_SKIP() << u.skip;
  const std::string denied = t.Path(PortDir("mlx5_0") + "counters/symbol_error");
  fs::permissions(denied, fs::perms::none);

  auto a = StartAgent(t, {}, u.prefix, u.binary);
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels port = PortLabels("mlx5_0");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_transmit_bytes_total", port, 4000));
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_errors_total",
                           PortLabels("mlx5_0", {{"kind", "port_rcv_errors"}}), 4));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_hw_events_total",
                           PortLabels("mlx5_0", {{"counter", "out_of_sequence"}}), 0));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_link_state", port, 4));
  EXPECT_EQ(Value(a->Samples(), "fabricscope_port_errors_total",
                  PortLabels("mlx5_0", {{"kind", "symbol_error"}})),
            std::nullopt);
  const std::string out = a->Output();
  EXPECT_EQ(CountLines(out, std::regex(absl::StrCat(denied, ".*Permission denied"))), 1) << out;
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << out;
}

// 5b. The unreadable file is the byte counter. DISABLED: the port's other counters are read, and
// the aggregator then exports fabricscope_port_transmit_bytes_total 0 for it (the pipeline's
// total of a counter it does not have is 0, exporters/state/cluster_state.cc exports the four
// traffic totals of every port unconditionally): a counter that claims no traffic instead of no
// series.
TEST(AgentFaults, UnreadableByteCounterIsAbsentNotZero) {
  FakeTree t;
  WritePort(t, "mlx5_0", {.port_rcv_errors = 4});
  Unprivileged u = PrepareUnprivileged(t);
  if (!u.skip.empty()) GTEST_SKIP() << u.skip;
  fs::permissions(t.Path(PortDir("mlx5_0") + "counters/port_xmit_data"), fs::perms::none);

  auto a = StartAgent(t, {}, u.prefix, u.binary);
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels port = PortLabels("mlx5_0");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_receive_bytes_total", port, 8000));
  EXPECT_EQ(Value(a->Samples(), "fabricscope_port_transmit_bytes_total", port), std::nullopt);
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << a->Output();
}

// 6. A link flap and a speed change written while the agent runs; the slow sampler reads the
// state every 10 ms, so a DOWN held until /metrics shows it is seen.
TEST(AgentFaults, LinkFlapAndRateChange) {
  FakeTree t;
  WritePort(t, "mlx5_0", {.rate = "25 Gb/sec (1X EDR)"});
  auto a = StartAgent(t, {"--slow-sample-period=10ms"});
  ASSERT_TRUE(a->Start()) << a->Output();
  const Labels port = PortLabels("mlx5_0");
  const std::string d = PortDir("mlx5_0");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_link_state", port, 4));
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_link_flaps_total", port, 0));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_current_rate_bytes_per_second", port, 3.125e9));

  t.Write(d + "state", "1: DOWN\n");
  t.Write(d + "phys_state", "3: Disabled\n");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_link_state", port, 1));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_physical_state", port, 3));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_link_flaps_total", port, 1));
  // The link trains again at a lower speed.
  t.Write(d + "rate", "10 Gb/sec (1X QDR)\n");
  t.Write(d + "phys_state", "5: LinkUp\n");
  t.Write(d + "state", "4: ACTIVE\n");
  ASSERT_TRUE(WaitForValue(*a, "fabricscope_port_link_state", port, 4));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_physical_state", port, 5));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_current_rate_bytes_per_second", port, 1.25e9));
  EXPECT_TRUE(WaitForValue(*a, "fabricscope_port_rate_changes_total", port, 1));
  // Coming back up is not a flap; one flap, one rate change, and they stay.
  ASSERT_TRUE(WaitWindows(*a, 3));
  const std::vector<Sample> s = a->Samples();
  EXPECT_EQ(Value(s, "fabricscope_port_link_flaps_total", port), 1);
  EXPECT_EQ(Value(s, "fabricscope_port_rate_changes_total", port), 1);
  EXPECT_EQ(a->proc().Stop(SIGTERM), 0) << a->Output();
}

}  // namespace
}  // namespace fabricscope::testing
