// Correctness against a peer: prometheus-node-exporter (Debian package, 1.5 in Debian 12) reads
// the same sysfs and procfs trees as the agent. Both run as processes on the real fixture trees
// of tests/testdata and on a generated tree with tricky values; every counter both export must
// be equal, after the renames and unit conversions of the table below. node_exporter is the
// reference for parsing.
//
// node_exporter is started with only the collectors that read these trees:
//   --collector.disable-defaults --collector.infiniband --collector.netstat --collector.netdev
//   --no-collector.netdev.netlink   (with netlink, netdev reads the host's interfaces, not
//                                     <procfs>/net/dev)
//   --path.sysfs=<tree>/sys --path.procfs=<tree>/proc
// It reads <procfs>/net/{dev,snmp,netstat} (a copy of /proc/<pid>/net is what the fixture is),
// and so does the agent (--procfs-root=<tree>/proc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"
#include "tests/common/wait.h"
#include "tests/integration/exposition.h"
#include "tests/integration/node_exporter_mapping.h"

namespace fabricscope::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Trees.

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Columns of one header-line/value-line table of /proc/net/snmp or netstat.
std::map<std::string, std::string> ProcTable(const std::string& text, const std::string& table) {
  std::vector<std::vector<std::string>> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, table + ":")) {
      lines.push_back(absl::StrSplit(line, ' ', absl::SkipEmpty()));
    }
  }
  std::map<std::string, std::string> out;
  if (lines.size() >= 2) {
    for (size_t i = 0; i < lines[0].size() && i < lines[1].size(); ++i) {
      out[lines[0][i]] = lines[1][i];
    }
  }
  return out;
}

// One PortXmitWait tick of the port directory `dir` in seconds, from its `rate` text
// ("40 Gb/sec (4X QDR)": 4 lanes / 5e9 bytes per second); 0 when unreadable.
double TickSeconds(const std::string& dir) {
  std::smatch m;
  const std::string rate = ReadFile(dir + "/rate");
  if (!std::regex_search(rate, m, std::regex("^([0-9.]+) Gb/sec \\(([0-9]+)X"))) return 0;
  return std::stod(m[2]) / (std::stod(m[1]) * 125'000'000.0);
}

struct PortRef {
  Scope scope;
  std::string dir;  // absolute
  std::map<std::string, std::string> ne_labels, fs_labels;
};

std::vector<PortRef> PortsOf(const std::string& sysfs) {
  std::vector<PortRef> out;
  std::error_code ec;
  const fs::path ib = fs::path(sysfs) / "class/infiniband";
  for (const auto& dev : fs::directory_iterator(ib, ec)) {
    for (const auto& port : fs::directory_iterator(dev.path() / "ports", ec)) {
      const std::string d = dev.path().filename(), p = port.path().filename();
      out.push_back({Scope::kRdmaPort,
                     port.path(),
                     {{"device", d}, {"port", p}},
                     {{"device", d}, {"port", p}}});
    }
  }
  for (const auto& net : fs::directory_iterator(fs::path(sysfs) / "class/net", ec)) {
    if (!fs::is_directory(net.path() / "statistics")) continue;
    const std::string name = net.path().filename();
    std::string dev_port(absl::StripAsciiWhitespace(ReadFile(net.path() / "dev_port")));
    if (dev_port.empty()) dev_port = "0";
    out.push_back(
        {Scope::kNetdev, net.path(), {{"device", name}}, {{"device", name}, {"port", dev_port}}});
  }
  return out;
}

// Netdevs node_exporter sees in <procfs>/net/dev that have no statistics/ in the sysfs tree
// (the fixture's eth0): the agent cannot export them, so they are not compared.
std::set<std::string> NetdevsWithoutStatistics(const std::string& sysfs,
                                               const std::string& procfs) {
  std::set<std::string> out;
  for (absl::string_view line : absl::StrSplit(ReadFile(procfs + "/net/dev"), '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || line.find('|') != absl::string_view::npos) continue;
    const std::string name(absl::StripAsciiWhitespace(line.substr(0, colon)));
    if (!fs::is_directory(sysfs + "/class/net/" + name + "/statistics")) out.insert(name);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// node_exporter.

std::string NodeExporterBinary() {
  const char* env = std::getenv("FABRICSCOPE_NODE_EXPORTER");
  return FindProgram({env ? env : "", "prometheus-node-exporter", "node_exporter"});
}

// node_exporter 1.5's default --collector.netstat.fields, plus the TcpExt columns the agent
// reads that the default leaves out.
constexpr char kNetstatFields[] =
    "^(.*_(InErrors|InErrs)|Ip_Forwarding|Ip(6|Ext)_(InOctets|OutOctets)|Icmp6?_(InMsgs|OutMsgs)|"
    "TcpExt_(Listen.*|Syncookies.*|TCPSynRetrans|TCPTimeouts)|"
    "Tcp_(ActiveOpens|InSegs|OutSegs|OutRsts|PassiveOpens|RetransSegs|CurrEstab)|"
    "Udp6?_(InDatagrams|OutDatagrams|NoPorts|RcvbufErrors|SndbufErrors)|"
    "TcpExt_(TCPLostRetransmit|TCPFastRetrans|TCPSlowStartRetrans|TCPLossProbes|"
    "TCPSpuriousRTOs|TCPRetransFail))$";

class NodeExporter {
 public:
  NodeExporter(const std::string& binary, const std::string& sysfs, const std::string& procfs)
      : proc_({binary, "--collector.disable-defaults", "--collector.infiniband",
               "--collector.netstat", "--collector.netdev", "--no-collector.netdev.netlink",
               std::string("--collector.netstat.fields=") + kNetstatFields, "--path.sysfs=" + sysfs,
               "--path.procfs=" + procfs, "--web.listen-address=127.0.0.1:0"}) {}
  bool Start() {
    if (!proc_.Start()) return false;
    // It logs the address it bound, with the port the kernel picked.
    auto m =
        proc_.WaitForLine(std::regex("msg=\"Listening on\" address=127\\.0\\.0\\.1:(\\d+)"), 20s);
    if (!m) return false;
    port_ = std::stoi((*m)[1]);
    return true;
  }
  std::string Metrics() { return HttpGet(port_, "/metrics"); }
  std::string Output() {
    proc_.Drain();
    return proc_.Output();
  }

 private:
  Subprocess proc_;
  int port_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The comparison.

std::string Fmt(std::optional<double> v) {
  if (!v) return "(missing)";
  char buf[64];
  snprintf(buf, sizeof(buf), "%.17g", *v);
  return buf;
}

struct Comparison {
  size_t compared = 0;
  std::vector<std::string> diffs;     // one line per failed pair
  std::vector<std::string> unmapped;  // node_exporter series the table does not account for
  std::vector<std::string> unlisted;  // files of a port dir that no row or FilesNotCompared names
};

// Files under a port directory that no row of the table and no FilesNotCompared entry names.
std::vector<std::string> UnlistedFiles(const std::string& sysfs, const std::string& dir,
                                       const std::vector<Pair>& table) {
  std::set<std::string> named;
  for (const Pair& p : table) {
    for (absl::string_view part : absl::StrSplit(p.source, '+')) named.insert(std::string(part));
    if (!p.unless.empty()) named.insert(p.unless);
  }
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string rel = fs::relative(it->path(), dir).string();
    if (named.count(rel)) continue;
    bool listed = false;
    for (const auto& [re, why] : FilesNotCompared()) listed |= std::regex_match(rel, re);
    if (!listed) out.push_back(fs::relative(it->path(), sysfs).string());
  }
  return out;
}

// The number a sysfs attribute file starts with: "123\n" and "4: ACTIVE" (IB state files) both
// parse; "100 Gb/sec (4X EDR)" does not (a rate is compared through node_exporter only).
std::optional<double> FileNumber(const std::string& path) {
  std::string text = std::string(absl::StripAsciiWhitespace(ReadFile(path)));
  if (const size_t colon = text.find(':'); colon != std::string::npos) text.resize(colon);
  uint64_t raw = 0;
  if (!absl::SimpleAtoi(text, &raw)) return std::nullopt;
  return static_cast<double>(raw);
}

// ne_rdma_ok: node_exporter's infiniband collector succeeded; when it did not (1.5 on irdma,
// node_exporter#2769), every RDMA row is compared with its file instead.
Comparison Compare(const std::string& sysfs, const std::string& procfs,
                   const std::vector<Sample>& ne, const std::vector<Sample>& fsx,
                   bool ne_rdma_ok = true) {
  Comparison c;
  const std::vector<Pair> table = MappingTable();
  bool ne_has_hw = false;
  for (const Pair& p : table) {
    if (p.hw && !Select(ne, p.node_exporter).empty()) ne_has_hw = true;
  }
  std::set<std::string> used;  // node_exporter series the table compared
  auto compare = [&](const Pair& p, const std::map<std::string, std::string>& ne_labels,
                     std::map<std::string, std::string> fs_labels, std::optional<double> file,
                     const std::string& where, double tick = 0) {
    ++c.compared;
    std::optional<double> want;
    std::string ref;
    if (p.node_exporter.empty() || (p.hw && !ne_has_hw) ||
        (!ne_rdma_ok && p.scope == Scope::kRdmaPort)) {
      want = file;
      ref = "file (node_exporter does not read it here)";
    } else {
      want = Value(ne, p.node_exporter, ne_labels);
      ref = SeriesString(p.node_exporter, ne_labels);
      used.insert(ref);
    }
    std::optional<double> got = 0.0;
    std::vector<std::string> names;
    for (const FsSeries& s : p.fabricscope) {
      std::map<std::string, std::string> l = fs_labels;
      if (!s.label.empty()) l[s.label] = s.value;
      names.push_back(SeriesString(s.metric, l));
      auto v = Value(fsx, s.metric, l);
      if (!v) {
        got.reset();
        break;
      }
      *got += *v;
    }
    if (p.per_tick && want && got && std::fabs(*want * tick - *got) <= 1e-12 * *got) return;
    if (!p.per_tick && want && got && *want == *got) return;
    c.diffs.push_back(absl::StrCat(where, ": ", ref, " = ", Fmt(want), "  vs  ",
                                   absl::StrJoin(names, " + "), " = ", Fmt(got)));
  };

  for (const PortRef& port : PortsOf(sysfs)) {
    for (std::string& f : UnlistedFiles(sysfs, port.dir, table)) c.unlisted.push_back(f);
    for (const Pair& p : table) {
      if (p.scope != port.scope) continue;
      const std::vector<std::string> parts = absl::StrSplit(p.source, '+');
      if (!std::all_of(parts.begin(), parts.end(),
                       [&](const std::string& f) { return fs::exists(port.dir + "/" + f); })) {
        continue;
      }
      const std::string file = port.dir + "/" + parts[0];
      if (!p.unless.empty() && fs::exists(port.dir + "/" + p.unless)) {
        used.insert(SeriesString(p.node_exporter, port.ne_labels));
        continue;
      }
      std::optional<double> file_value = 0.0;
      for (const std::string& f : parts) {
        const std::optional<double> v = FileNumber(port.dir + "/" + f);
        file_value = v && file_value ? std::optional<double>(*file_value + *v) : std::nullopt;
      }
      if (!file_value && !ne_rdma_ok && port.scope == Scope::kRdmaPort) continue;
      compare(p, port.ne_labels, port.fs_labels, file_value,
              fs::relative(port.dir, sysfs).string() + "/" + p.source, TickSeconds(port.dir));
    }
  }
  const std::string snmp = ReadFile(procfs + "/net/snmp");
  const std::string netstat = ReadFile(procfs + "/net/netstat");
  for (const Pair& p : table) {
    if (p.scope != Scope::kTcp) continue;
    const std::vector<std::string> tc = absl::StrSplit(p.source, ':');
    const auto cols = ProcTable(tc[0] == "Tcp" ? snmp : netstat, tc[0]);
    if (!cols.count(tc[1])) continue;
    compare(p, {}, {}, std::nullopt,
            "net/" + std::string(tc[0] == "Tcp" ? "snmp " : "netstat ") + p.source);
  }

  // Every node_exporter series of the compared families is accounted for.
  const std::set<std::string> no_stats = NetdevsWithoutStatistics(sysfs, procfs);
  for (const Sample& s : ne) {
    if (!InComparedFamilies(s.name)) continue;
    const std::string key = SeriesString(s.name, s.labels);
    if (used.count(key)) continue;
    bool listed = false;
    for (const auto& [re, why] : NotExported()) {
      if (std::regex_match(s.name, re)) listed = true;
    }
    if (s.name.rfind("node_network_", 0) == 0 && s.labels.count("device") &&
        no_stats.count(s.labels.at("device"))) {
      listed = true;  // the interface has no sysfs statistics/: nothing for the agent to read
    }
    if (!listed) c.unmapped.push_back(key);
  }
  return c;
}

// Runs both exporters on <root>/sys and <root>/proc and compares them.
// ne_rdma_ok: whether node_exporter's infiniband collector is expected to read the tree.
void CompareOnTree(const FakeTree& tree, size_t min_pairs, bool ne_rdma_ok = true) {
  const std::string ne_bin = NodeExporterBinary();
  ASSERT_FALSE(ne_bin.empty())
      << "prometheus-node-exporter not found: install it with deploy/install-deps.sh (or set "
         "FABRICSCOPE_NODE_EXPORTER to a node_exporter binary)";
  const std::string sysfs = tree.Path("sys"), procfs = tree.Path("proc");
  tree.Write("empty.yaml", "");

  NodeExporter ne(ne_bin, sysfs, procfs);
  ASSERT_TRUE(ne.Start()) << ne.Output();
  // Every counter by name: the hw_counters and TcpExt breakdowns are in the full profile only.
  StandaloneAgent agent(tree.Path("empty.yaml"), sysfs, procfs, {"--metrics=full"});
  ASSERT_TRUE(agent.Start()) << agent.Output();

  // The agent's first window carries every counter (the tree does not change).
  std::vector<Sample> fsx;
  ASSERT_TRUE(WaitFor(
      [&] {
        fsx = agent.Samples();
        return !Select(fsx, "fabricscope_port_transmit_bytes_total").empty() &&
               !Select(fsx, "fabricscope_tcp_events_total").empty();
      },
      20s))
      << agent.Output();
  fsx = agent.Samples();  // a whole later window, to be sure nothing moves
  const std::string ne_body = ne.Metrics();
  const std::vector<Sample> nes = ParseExposition(ne_body);
  ASSERT_FALSE(nes.empty()) << ne.Output();
  for (const char* collector : {"infiniband", "netstat", "netdev"}) {
    const bool ok = ne_rdma_ok || std::string(collector) != "infiniband";
    EXPECT_EQ(Value(nes, "node_scrape_collector_success", {{"collector", collector}}),
              ok ? 1.0 : 0.0)
        << collector << "\n"
        << ne.Output();
  }

  const Comparison c = Compare(sysfs, procfs, nes, fsx, ne_rdma_ok);
  EXPECT_GE(c.compared, min_pairs);
  EXPECT_TRUE(c.diffs.empty()) << c.diffs.size() << " of " << c.compared
                               << " pairs differ (node_exporter is the reference):\n  "
                               << absl::StrJoin(c.diffs, "\n  ");
  EXPECT_TRUE(c.unmapped.empty())
      << "node_exporter exports series the mapping table neither compares nor lists as not "
         "exported by fabricscope (add them to MappingTable() or NotExported()):\n  "
      << absl::StrJoin(c.unmapped, "\n  ");
  EXPECT_TRUE(c.unlisted.empty())
      << "files of a port that neither the mapping table nor FilesNotCompared() names (say "
         "who reads them):\n  "
      << absl::StrJoin(c.unlisted, "\n  ");
  std::cout << "compared " << c.compared << " node_exporter/fabricscope pairs\n";
  EXPECT_EQ(agent.proc().Stop(SIGTERM), 0) << agent.Output();
}

TEST(NodeExporterPeer, RealTreesMatch) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "sys/class");
  tree.CopyTestdata("procfs-real/net", "proc/net");
  // 4 ports x (17 counters + 4 gauges) + mlx5_0's 24 hw_counters files (26 rows) + 15 TCP rows.
  CompareOnTree(tree, 4 * 21 + 26 + 15);
}

// The values of WriteTrickyTree that probe the exposition's number formatting.
struct BigValues {
  // Every one above 2^53 (not all integers are doubles there) but below 10^16, so 16
  // significant digits print each double exactly.
  std::string xmit_words = "2251799813685249";  // x4 = 9007199254740996 bytes
  std::string rx_bytes = "9007199254740993";    // 2^53 + 1: rounds to 2^53
  std::string tx_bytes = "9999999999999998";
  std::string out_segs = "9999999999999999";  // rounds to 10^16
  std::string out_rsts = "4294967296123";
};

// Values of 10^16 and above, up to 2^64 - 1: doubles there need 17 significant digits.
BigValues SeventeenDigitValues() {
  return {"3086419725308642",      // x4 = 12345678901234568 bytes
          "12345678901234567890",  // > 2^63
          "18446744073709551615",  // 2^64 - 1
          "12345678901234567", "18446744073709551615"};
}

// One mlx5-like RoCE port and its netdev, with values chosen to break sloppy parsing or
// formatting: 64-bit data counters above 2^32 and above 2^53, 4-, 8- and 16-bit error counters
// at their maxima, 32-bit hw counters at 2^32-1 and 64-bit ones far above, netdev and TCP
// counters above 2^53, and the TcpExt columns in a different order than the kernel's.
void WriteTrickyTree(const FakeTree& t, const BigValues& big = {}) {
  const std::string dev = "sys/class/infiniband/mlx5_3/";
  const std::string port = dev + "ports/1/";
  t.Write(dev + "board_id", "MT_0000000223\n");
  t.Write(dev + "fw_ver", "28.39.1002\n");
  t.Write(dev + "hca_type", "MT4129\n");
  t.Write(port + "link_layer", "Ethernet\n");
  t.Write(port + "rate", "200 Gb/sec (4X HDR)\n");
  t.Write(port + "state", "4: ACTIVE\n");
  t.Write(port + "phys_state", "5: LinkUp\n");
  const std::vector<std::pair<std::string, std::string>> counters = {
      {"port_xmit_data", big.xmit_words},
      {"port_rcv_data", "4294967297"},         // 2^32 + 1
      {"port_xmit_packets", "1099511627783"},  // 2^40 + 7
      {"port_rcv_packets", "4294967296"},
      {"symbol_error", "65535"},  // 16-bit, saturated
      {"port_rcv_errors", "65534"},
      {"port_xmit_discards", "65535"},
      {"port_rcv_remote_physical_errors", "1"},
      {"port_rcv_switch_relay_errors", "2"},
      {"VL15_dropped", "65535"},
      {"link_downed", "255"},  // 8-bit, saturated
      {"link_error_recovery", "254"},
      {"port_xmit_constraint_errors", "3"},
      {"port_rcv_constraint_errors", "255"},
      {"local_link_integrity_errors", "15"},  // 4-bit, saturated
      {"excessive_buffer_overrun_errors", "14"},
      {"port_xmit_wait", "4294967295"},  // 32-bit, saturated
      {"unicast_xmit_packets", "1099511627783"},
  };
  for (const auto& [name, value] : counters) t.Write(port + "counters/" + name, value + "\n");
  const std::vector<std::pair<std::string, std::string>> hw = {
      {"lifespan", "10"},
      {"out_of_sequence", "4294967295"},  // 32-bit maximum
      {"packet_seq_err", "4294967294"},
      {"duplicate_request", "123456789"},
      {"local_ack_timeout_err", "4000000000"},
      {"implied_nak_seq_err", "0"},
      {"rnr_nak_retry_err", "2147483648"},
      {"out_of_buffer", "77"},
      {"np_cnp_sent", "1125899906842624"},                 // 2^50, 64-bit
      {"np_ecn_marked_roce_packets", "9007199254740991"},  // 2^53 - 1
      {"rp_cnp_handled", "98765432109876"},
      {"rp_cnp_ignored", "0"},
      {"rx_icrc_encapsulated", "8589934592"},  // 2^33
      {"roce_adp_retrans", "3000000000"},
      {"roce_adp_retrans_to", "17"},
      {"roce_slow_restart", "1"},
      {"roce_slow_restart_cnps", "2"},
      {"roce_slow_restart_trans", "3"},
      {"rx_read_requests", "4294967295"},
      {"rx_write_requests", "1"},
      {"rx_atomic_requests", "0"},
      {"rx_dct_connect", "0"},
      {"req_cqe_error", "5"},
      {"req_cqe_flush_error", "6"},
      {"req_remote_access_errors", "7"},
      {"req_remote_invalid_request", "8"},
      {"resp_cqe_error", "9"},
      {"resp_cqe_flush_error", "10"},
      {"resp_local_length_error", "11"},
      {"resp_remote_access_errors", "12"},
  };
  for (const auto& [name, value] : hw) t.Write(port + "hw_counters/" + name, value + "\n");

  // The port's netdev, and /proc/net/dev with the same numbers folded as the kernel does.
  const std::string net = "sys/class/net/ens1f0np0/";
  t.Write(net + "type", "1\n");
  t.Write(net + "dev_port", "0\n");
  t.Write(net + "speed", "200000\n");
  t.Write(net + "operstate", "up\n");
  const std::vector<std::pair<std::string, std::string>> stats = {
      {"rx_bytes", big.rx_bytes}, {"tx_bytes", big.tx_bytes}, {"rx_packets", "4294967301"},
      {"tx_packets", "1"},        {"rx_errors", "7"},         {"tx_errors", "8"},
      {"rx_dropped", "9"},        {"rx_missed_errors", "10"}, {"tx_dropped", "11"},
      {"rx_fifo_errors", "12"},   {"tx_fifo_errors", "13"},   {"tx_carrier_errors", "14"},
      {"rx_crc_errors", "15"},    {"multicast", "16"},        {"collisions", "0"},
      {"rx_length_errors", "0"},  {"rx_over_errors", "0"},    {"rx_frame_errors", "0"},
      {"tx_aborted_errors", "0"}, {"tx_window_errors", "0"},  {"tx_heartbeat_errors", "0"},
      {"rx_compressed", "0"},     {"tx_compressed", "0"},
  };
  for (const auto& [name, value] : stats) t.Write(net + "statistics/" + name, value + "\n");
  t.Write("proc/net/dev",
          "Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
          "errs drop fifo colls carrier compressed\n"
          "    lo:       0       0    0    0    0     0          0         0        0       0 "
          "   0    0    0     0       0          0\n"
          "ens1f0np0: " +
              big.rx_bytes + " 4294967301    7   19   12    15          0        16 " +
              big.tx_bytes + "       1    8   11   13     0      14          0\n");
  t.Write("proc/net/snmp",
          "Ip: Forwarding DefaultTTL\n"
          "Ip: 1 64\n"
          "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails "
          "EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
          // InSegs 2^53 + 1 (not a double), RetransSegs 2^32.
          "Tcp: 1 200 120000 -1 5 6 7 8 9 9007199254740993 " +
              big.out_segs + " 4294967296 65536 " + big.out_rsts +
              " 0\n"
              "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors "
              "InCsumErrors IgnoredMulti\n"
              "Udp: 1 2 3 4 5 6 7 8\n");
  t.Write("proc/net/netstat",
          "TcpExt: TCPTimeouts SyncookiesSent TCPLostRetransmit TCPSynRetrans TCPFastRetrans "
          "ListenDrops TCPSlowStartRetrans TCPLossProbes TCPSpuriousRTOs TCPRetransFail "
          "ListenOverflows DelayedACKs\n"
          "TcpExt: 4294967295 1 4294967296 3 1099511627776 2 5 6 7 8 9 10\n"
          "IpExt: InNoRoutes InOctets OutOctets\n"
          "IpExt: 0 1 2\n");
}

// The legacy mlx4 layout (tests/testdata/generated/mlx4-legacy): the data and packet counters
// are compared with node_exporter's node_infiniband_legacy_* (counters_ext/*_64), not with its
// port_* series from the 32-bit counters/ files stuck at 2^32 - 1.
TEST(NodeExporterPeer, LegacyCountersExtTreeMatches) {
  FakeTree tree;
  tree.CopyTestdata("generated/mlx4-legacy/class", "sys/class");
  tree.CopyTestdata("procfs-real/net", "proc/net");
  // 1 port: 4 counters_ext + 13 counters/ + 4 gauges; 15 TCP rows.
  CompareOnTree(tree, 4 + 13 + 4 + 15);
}

// irdma (tests/testdata/generated/irdma-rocev2): no counters/, so node_exporter 1.5's
// infiniband collector fails on the whole tree (node_exporter#2769; procfs PR 605 made later
// versions skip counters/ for irdma). The agent's series are compared with the files: state,
// physical state, the IPv4 + IPv6 bytes and packets, CNP, ECN, discards and every other
// driver counter. (The rate is not a number in its file: AgentFaults.IrdmaPorts... checks it.)
TEST(NodeExporterPeer, IrdmaTreeMatchesItsFiles) {
  FakeTree tree;
  tree.CopyTestdata("generated/irdma-rocev2/class", "sys/class");
  tree.CopyTestdata("procfs-real/net", "proc/net");
  // 1 port: state, phys_state, 4 traffic sums, 7 congestion and discard rows, 38 driver
  // counters by name; the 13 TCP rows of the real procfs (procfs-real/net).
  CompareOnTree(tree, 2 + 4 + 7 + 38 + 13, /*ne_rdma_ok=*/false);
}

TEST(NodeExporterPeer, GeneratedTrickyTreeMatches) {
  FakeTree tree;
  WriteTrickyTree(tree);
  // 1 port: 17 counters + 4 gauges + 29 hw_counters files (34 rows); 1 netdev: 12 rows; 15 TCP.
  CompareOnTree(tree, 17 + 4 + 34 + 12 + 15);
}

// The same with counters of 10^16 and more (10 PB: 2.3 days of a 400 Gb/s port at line rate;
// netdev and TCP counters up to 2^64 - 1). Both sides must print values that parse back to the
// same double: node_exporter the shortest round-trip text, fabricscope
// exporters/exposition/exposition.h (prometheus-cpp 1.0.1's 16 significant digits printed
// 12345678901234570 for the counter's 12345678901234568).
TEST(NodeExporterPeer, SeventeenDigitValuesMatch) {
  FakeTree tree;
  WriteTrickyTree(tree, SeventeenDigitValues());
  CompareOnTree(tree, 17 + 4 + 34 + 12 + 15);
}

}  // namespace
}  // namespace fabricscope::testing
