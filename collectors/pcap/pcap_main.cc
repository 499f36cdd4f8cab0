// fabricscope-pcap: offline per-flow loss and retransmission report of a capture file: what an
// engineer runs on a capture someone sent them.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/cli.h"
#include "collectors/common/man_page.h"
#include "collectors/pcap/capture.h"
#include "collectors/pcap/roce_analyzer.h"
#include "collectors/pcap/tcp_analyzer.h"

ABSL_FLAG(bool, json, false, "Print one JSON object instead of the table.");
ABSL_FLAG(int, top, 30, "Table: show this many flows, the busiest first (0 = all).");

namespace {

using namespace fabricscope::collectors::pcap;  // NOLINT: a small program

struct FlowRow {
  FlowKey key;
  const RoceFlowStats* roce = nullptr;
  const TcpFlowStats* tcp = nullptr;
  uint64_t bytes() const { return roce ? roce->bytes : tcp->bytes; }
};

google::protobuf::Value Num(double v) {
  google::protobuf::Value x;
  x.set_number_value(v);
  return x;
}

// Where a capture cut short stopped: the frame libpcap could not read, and its message.
struct Stopped {
  uint64_t frame = 0;  // 1-based; 0 = the file was read to its end
  std::string error;
};

void PrintJson(const std::string& file, const CaptureCounters& c, const RoceAnalyzer& roce,
               const TcpAnalyzer& tcp, const std::vector<FlowRow>& rows, const Stopped& stopped) {
  google::protobuf::Struct root;
  auto& f = *root.mutable_fields();
  f["file"].set_string_value(file);
  if (stopped.frame > 0) {
    f["stopped_at_frame"] = Num(static_cast<double>(stopped.frame));
    f["error"].set_string_value(stopped.error);
  }
  f["packets"] = Num(static_cast<double>(c.frames));
  f["parsed_packets"] = Num(static_cast<double>(c.parsed));
  auto& skipped = *f["skipped"].mutable_struct_value()->mutable_fields();
  skipped["not_ip"] = Num(static_cast<double>(c.not_ip));
  skipped["truncated"] = Num(static_cast<double>(c.truncated));
  skipped["malformed"] = Num(static_cast<double>(c.malformed));
  skipped["unsupported"] = Num(static_cast<double>(c.unsupported));
  const TcpFlowStats& t = tcp.totals().all;
  auto& tj = *f["tcp"].mutable_struct_value()->mutable_fields();
  tj["packets"] = Num(static_cast<double>(t.packets));
  tj["retransmissions"] = Num(static_cast<double>(t.retransmissions));
  tj["fast_retransmissions"] = Num(static_cast<double>(t.fast_retransmissions));
  tj["spurious_retransmissions"] = Num(static_cast<double>(t.spurious_retransmissions));
  tj["out_of_order"] = Num(static_cast<double>(t.out_of_order));
  tj["duplicate_acks"] = Num(static_cast<double>(t.duplicate_acks));
  tj["zero_windows"] = Num(static_cast<double>(t.zero_windows));
  const RoceFlowStats& r = roce.totals();
  auto& rj = *f["roce"].mutable_struct_value()->mutable_fields();
  rj["packets"] = Num(static_cast<double>(r.packets));
  rj["data_packets"] = Num(static_cast<double>(r.data_packets));
  rj["retransmitted_packets"] = Num(static_cast<double>(r.retransmitted_packets));
  rj["psn_gap_packets"] = Num(static_cast<double>(r.psn_gap_packets));
  rj["naks_sequence_error"] = Num(static_cast<double>(r.naks_sequence_error));
  rj["rnr_naks"] = Num(static_cast<double>(r.rnr_naks));
  rj["naks_other"] = Num(static_cast<double>(r.naks_other));
  rj["ack_timeouts"] = Num(static_cast<double>(r.ack_timeouts));
  rj["acks"] = Num(static_cast<double>(r.acks));
  rj["cnps"] = Num(static_cast<double>(r.cnps));
  rj["ecn_ce_packets"] = Num(static_cast<double>(r.ecn_ce_packets));
  auto* flows = f["flows"].mutable_list_value();
  for (const FlowRow& row : rows) {
    auto& o = *flows->add_values()->mutable_struct_value()->mutable_fields();
    o["proto"].set_string_value(row.roce ? "rocev2" : "tcp");
    o["src"].set_string_value(FormatAddress(row.key.src));
    o["dst"].set_string_value(FormatAddress(row.key.dst));
    if (row.roce) {
      const RoceFlowStats& s = *row.roce;
      o["qp"] = Num(row.key.qp);
      o["packets"] = Num(static_cast<double>(s.packets));
      o["bytes"] = Num(static_cast<double>(s.bytes));
      o["data_packets"] = Num(static_cast<double>(s.data_packets));
      o["retransmitted_packets"] = Num(static_cast<double>(s.retransmitted_packets));
      o["psn_gap_packets"] = Num(static_cast<double>(s.psn_gap_packets));
      o["naks_sequence_error"] = Num(static_cast<double>(s.naks_sequence_error));
      o["rnr_naks"] = Num(static_cast<double>(s.rnr_naks));
      o["naks_other"] = Num(static_cast<double>(s.naks_other));
      o["ack_timeouts"] = Num(static_cast<double>(s.ack_timeouts));
      o["cnps"] = Num(static_cast<double>(s.cnps));
      o["ecn_ce_packets"] = Num(static_cast<double>(s.ecn_ce_packets));
    } else {
      const TcpFlowStats& s = *row.tcp;
      o["sport"] = Num(row.key.sport);
      o["dport"] = Num(row.key.dport);
      o["packets"] = Num(static_cast<double>(s.packets));
      o["bytes"] = Num(static_cast<double>(s.bytes));
      o["payload_bytes"] = Num(static_cast<double>(s.payload_bytes));
      o["retransmissions"] = Num(static_cast<double>(s.retransmissions));
      o["fast_retransmissions"] = Num(static_cast<double>(s.fast_retransmissions));
      o["spurious_retransmissions"] = Num(static_cast<double>(s.spurious_retransmissions));
      o["out_of_order"] = Num(static_cast<double>(s.out_of_order));
      o["duplicate_acks"] = Num(static_cast<double>(s.duplicate_acks));
      o["zero_windows"] = Num(static_cast<double>(s.zero_windows));
    }
  }
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(root, &out, opts);
  printf("%s", out.c_str());
}

void PrintTable(const std::string& file, const CaptureCounters& c, const RoceAnalyzer& roce,
                const TcpAnalyzer& tcp, const std::vector<FlowRow>& rows, size_t top) {
  printf(
      "%s: %llu packets (%llu analyzed; skipped: %llu not IP, %llu truncated, %llu "
      "malformed, %llu unsupported)\n\n",
      file.c_str(), static_cast<unsigned long long>(c.frames),
      static_cast<unsigned long long>(c.parsed), static_cast<unsigned long long>(c.not_ip),
      static_cast<unsigned long long>(c.truncated), static_cast<unsigned long long>(c.malformed),
      static_cast<unsigned long long>(c.unsupported));
  const RoceFlowStats& r = roce.totals();
  if (r.packets > 0) {
    printf(
        "RoCEv2: %llu packets, %llu data, %llu retransmitted, %llu lost upstream (PSN gaps), "
        "NAKs: %llu sequence error / %llu RNR / %llu other, %llu ACK timeouts, %llu CNPs, "
        "%llu ECN-CE\n",
        (unsigned long long)r.packets, (unsigned long long)r.data_packets,
        (unsigned long long)r.retransmitted_packets, (unsigned long long)r.psn_gap_packets,
        (unsigned long long)r.naks_sequence_error, (unsigned long long)r.rnr_naks,
        (unsigned long long)r.naks_other, (unsigned long long)r.ack_timeouts,
        (unsigned long long)r.cnps, (unsigned long long)r.ecn_ce_packets);
  }
  const TcpFlowStats& t = tcp.totals().all;
  if (t.packets > 0) {
    printf(
        "TCP:    %llu packets, %llu retransmissions (%llu fast, %llu spurious), %llu "
        "out-of-order, %llu duplicate ACKs, %llu zero windows\n",
        (unsigned long long)t.packets, (unsigned long long)t.retransmissions,
        (unsigned long long)t.fast_retransmissions, (unsigned long long)t.spurious_retransmissions,
        (unsigned long long)t.out_of_order, (unsigned long long)t.duplicate_acks,
        (unsigned long long)t.zero_windows);
  }
  if (rows.empty()) {
    printf("\nno RoCEv2 or TCP flows\n");
    return;
  }
  printf("\n%-6s %-41s %-41s %10s %12s %8s %8s %8s %8s\n", "proto", "source", "destination",
         "packets", "bytes", "retrans", "lost", "naks", "cnps");
  const size_t n = top == 0 ? rows.size() : std::min(top, rows.size());
  for (size_t i = 0; i < n; ++i) {
    const FlowRow& row = rows[i];
    std::string src = FormatAddress(row.key.src), dst = FormatAddress(row.key.dst);
    if (row.roce) {
      const RoceFlowStats& s = *row.roce;
      dst += absl::StrFormat(" qp 0x%06x", row.key.qp);
      printf("%-6s %-41s %-41s %10llu %12llu %8llu %8llu %8llu %8llu\n", "rocev2", src.c_str(),
             dst.c_str(), (unsigned long long)s.packets, (unsigned long long)s.bytes,
             (unsigned long long)s.retransmitted_packets, (unsigned long long)s.psn_gap_packets,
             (unsigned long long)(s.naks_sequence_error + s.rnr_naks + s.naks_other),
             (unsigned long long)s.cnps);
    } else {
      const TcpFlowStats& s = *row.tcp;
      src += absl::StrFormat(":%d", row.key.sport);
      dst += absl::StrFormat(":%d", row.key.dport);
      printf("%-6s %-41s %-41s %10llu %12llu %8llu %8llu %8s %8s\n", "tcp", src.c_str(),
             dst.c_str(), (unsigned long long)s.packets, (unsigned long long)s.bytes,
             (unsigned long long)s.retransmissions, (unsigned long long)s.out_of_order, "-", "-");
    }
  }
  if (n < rows.size()) printf("... %zu more flows (--top=0 shows all)\n", rows.size() - n);
  printf(
      "\nretrans: RoCE retransmitted packets (PSN seen again) / TCP frames tshark would flag "
      "tcp.analysis.retransmission; lost: RoCE PSNs never seen / TCP out-of-order frames\n");
}

}  // namespace

int main(int argc, char** argv) {
  fabricscope::collectors::ConfigureFlagUsage("fabricscope-pcap 0.1.0");
  absl::SetProgramUsageMessage(
      "fabricscope-pcap: per-flow loss and retransmission report of a pcap or pcapng file: "
      "RoCEv2 (PSN gaps, go-back-N retransmissions, NAKs, RNR NAKs, ACK timeouts, CNPs, ECN CE) "
      "and TCP (retransmissions, fast retransmissions, out-of-order, duplicate ACKs, counted as "
      "tshark's tcp.analysis flags count frames).\n\nUsage: fabricscope-pcap FILE [--json] "
      "[--top=N]\nExit status: 0 analyzed; 3 a capture cut short (a frame past the end of the "
      "file, as when tcpdump was killed): what was read before it is reported, with a warning "
      "naming the frame where it stopped; 2 an unusable file, or not exactly one FILE; 1 an "
      "unknown flag or a bad flag value such as --top=x (Abseil's flag parser); 0 --help.");
  std::vector<std::string> storage;
  std::vector<char*> args = fabricscope::collectors::NormalizeFlagDashes(argc, argv, storage);
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string a = args[i];
    if (a == "--help-man" || a == "--help_man") {  // fabricscope-pcap(1), from the same flags
      fabricscope::common::ManPage page;
      page.name = "fabricscope-pcap";
      page.section = "1";
      page.version = "fabricscope 0.1.0";
      page.summary = "per-flow RoCEv2 and TCP loss report of a capture";
      page.synopsis = "FILE [--json] [--top=N]";
      page.description = std::string(absl::ProgramUsageMessage());
      page.see_also = "fabricscope-agent(8), tshark(1), tcpdump(8)";
      for (const char* name : {"json", "top"}) {
        const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
        page.options.push_back({name, "", f->IsOfType<bool>() ? "" : "N",
                                absl::StrCat(f->Help(), " Default: ", f->DefaultValue(), ".")});
      }
      printf("%s", fabricscope::common::RenderManPage(page).c_str());
      return 0;
    }
    if (a == "--help" || a == "-h") {  // ours, not Abseil's: exit 0 and no build paths
      printf("%s\n\nOptions:\n", std::string(absl::ProgramUsageMessage()).c_str());
      for (const char* name : {"json", "top"}) {
        const absl::CommandLineFlag* f = absl::FindCommandLineFlag(name);
        printf("  --%-6s %s (default: %s)\n", name, f->Help().c_str(), f->DefaultValue().c_str());
      }
      return 0;
    }
  }
  int nargs = static_cast<int>(args.size());
  std::vector<char*> rest = absl::ParseCommandLine(nargs, args.data());
  if (rest.size() != 2) {
    fprintf(stderr, "fabricscope-pcap: expected one capture file; see --help\n");
    return 2;
  }
  const std::string file = rest[1];
  auto src = PacketSource::OpenOffline(file);
  if (!src.ok()) {
    fprintf(stderr, "fabricscope-pcap: %s\n", std::string(src.status().message()).c_str());
    return 2;
  }
  RoceAnalyzer roce;
  TcpAnalyzer tcp;
  const PacketSource::Callback cb = [&](ParseResult r, const ParsedPacket& p) {
    if (r != ParseResult::kOk) return;
    if (p.roce) {
      roce.Add(p);
    } else if (p.l4_proto == 6) {
      tcp.Add(p);
    }
  };
  // A read error after the header (libpcap: "truncated dump file; tried to read N captured
  // bytes, only got M") ends the analysis at that frame, not the report.
  Stopped stopped;
  while (true) {
    auto n = (*src)->Dispatch(4096, cb);
    if (!n.ok()) {
      stopped.frame = (*src)->counters().frames + 1;
      stopped.error = std::string(n.status().message());
      break;
    }
    if (*n < 0) break;
  }
  roce.Flush();
  const CaptureCounters c = (*src)->counters();
  const std::map<FlowKey, TcpFlowStats> tcp_flows = tcp.flows();
  std::vector<FlowRow> rows;
  for (const auto& [k, s] : roce.flows()) rows.push_back(FlowRow{k, &s, nullptr});
  for (const auto& [k, s] : tcp_flows) rows.push_back(FlowRow{k, nullptr, &s});
  std::stable_sort(rows.begin(), rows.end(),
                   [](const FlowRow& a, const FlowRow& b) { return a.bytes() > b.bytes(); });
  if (absl::GetFlag(FLAGS_json)) {
    PrintJson(file, c, roce, tcp, rows, stopped);
  } else {
    PrintTable(file, c, roce, tcp, rows,
               static_cast<size_t>(std::max(0, absl::GetFlag(FLAGS_top))));
  }
  if (stopped.frame > 0) {
    fflush(stdout);
    fprintf(stderr,
            "fabricscope-pcap: warning: the capture stops at frame %llu (%s); the report covers "
            "the %llu frames before it\n",
            static_cast<unsigned long long>(stopped.frame), stopped.error.c_str(),
            static_cast<unsigned long long>(stopped.frame - 1));
    return 3;
  }
  return 0;
}
