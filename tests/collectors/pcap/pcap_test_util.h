#pragma once

// Shared helpers of the pcap tests: addresses, flow keys, readable stats and events, and running
// a generated capture through libpcap, the parser and the RoCE analyzer.

#include <arpa/inet.h>

#include <cstdio>
#include <string>
#include <vector>

#include "collectors/pcap/flow.h"
#include "collectors/pcap/packet.h"
#include "collectors/pcap/roce_analyzer.h"
#include "tests/common/fake_tree.h"
#include "tests/common/pcap_writer.h"
#include "tests/collectors/pcap/roce_scenarios.h"

namespace fabricscope::testing {

namespace pcap = collectors::pcap;

inline pcap::IpAddress Ip(const std::string& text) {
  const TestAddr t = TestAddr::Parse(text);
  pcap::IpAddress a;
  if (t.v6) {
    for (int i = 0; i < 16; ++i) a.bytes[i] = t.bytes[i];
  } else {
    a.bytes = {0, 0, 0,    0,    0,          0,          0,          0,
               0, 0, 0xff, 0xff, t.bytes[0], t.bytes[1], t.bytes[2], t.bytes[3]};
  }
  return a;
}

inline pcap::FlowKey RoceKey(const std::string& src, const std::string& dst, uint32_t qp) {
  pcap::FlowKey k;
  k.src = Ip(src);
  k.dst = Ip(dst);
  k.proto = 17;
  k.qp = qp;
  return k;
}

inline std::string FlowString(const pcap::FlowKey& k) {
  char qp[16];
  std::snprintf(qp, sizeof(qp), "%#x", k.qp);
  return pcap::FormatAddress(k.src) + ">" + pcap::FormatAddress(k.dst) + "/" + qp;
}

// "kind flow [first,last]" with PSNs in hex.
inline std::string EventString(const pcap::LossEvent& e) {
  char range[32];
  std::snprintf(range, sizeof(range), "[%#x,%#x]", e.first, e.last);
  return std::string(pcap::LossKindName(e.kind)) + " " + FlowString(e.flow) + " " + range;
}
inline std::vector<std::string> EventStrings(const std::vector<pcap::LossEvent>& events) {
  std::vector<std::string> out;
  for (const pcap::LossEvent& e : events) out.push_back(EventString(e));
  return out;
}

// Every counter but bytes, in one line, so a mismatch shows all of them.
inline std::string StatsString(const pcap::RoceFlowStats& s) {
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "packets=%llu data=%llu retx=%llu gap_packets=%llu gaps=%llu acks=%llu "
      "nak_seq=%llu rnr=%llu nak_other=%llu ack_timeouts=%llu cnps=%llu ce=%llu",
      static_cast<unsigned long long>(s.packets), static_cast<unsigned long long>(s.data_packets),
      static_cast<unsigned long long>(s.retransmitted_packets),
      static_cast<unsigned long long>(s.psn_gap_packets),
      static_cast<unsigned long long>(s.psn_gaps), static_cast<unsigned long long>(s.acks),
      static_cast<unsigned long long>(s.naks_sequence_error),
      static_cast<unsigned long long>(s.rnr_naks), static_cast<unsigned long long>(s.naks_other),
      static_cast<unsigned long long>(s.ack_timeouts), static_cast<unsigned long long>(s.cnps),
      static_cast<unsigned long long>(s.ecn_ce_packets));
  return buf;
}

// Writes `frames` to a pcap file, reads it back with libpcap, parses every record (all must
// parse) and adds it to `analyzer`. Returns the number of records read.
inline size_t RunCapture(const std::vector<RoceFrame>& frames, pcap::RoceAnalyzer* analyzer) {
  FakeTree dir;
  const std::string path = dir.Path("capture.pcap");
  if (!WriteScenario(path, frames)) return 0;
  int linktype = 0;
  std::vector<PcapRecord> records;
  if (!ReadPcap(path, &linktype, &records)) return 0;
  size_t n = 0;
  for (const PcapRecord& r : records) {
    pcap::ParsedPacket p;
    if (pcap::ParseFrame(linktype, r.data.data(), static_cast<uint32_t>(r.data.size()), r.wire_len,
                         r.ts_ns, &p) != pcap::ParseResult::kOk) {
      continue;
    }
    analyzer->Add(p);
    ++n;
  }
  return n;
}

}  // namespace fabricscope::testing
