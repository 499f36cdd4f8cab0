// libFuzzer target for the frame parser (collectors/pcap/packet.h) and the RoCE analyzer: no
// input may crash, read out of bounds (ASan) or hit undefined behaviour (UBSan), and the
// analyzer's per-flow counters must add up to its totals. Run with tests/fuzz/run.sh.

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "collectors/pcap/packet.h"
#include "collectors/pcap/roce_analyzer.h"
#include "tests/fuzz/packet_fuzz_input.h"

namespace {

using fabricscope::collectors::pcap::ParsedPacket;
using fabricscope::collectors::pcap::ParseFrame;
using fabricscope::collectors::pcap::ParseResult;
using fabricscope::collectors::pcap::RoceAnalyzer;
using fabricscope::collectors::pcap::RoceFlowStats;
using fabricscope::testing::kFuzzLinkTypeCount;
using fabricscope::testing::kFuzzLinkTypes;

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // 1. The whole input as one frame of every link type (libFuzzer's buffer is exactly `size`).
  for (int linktype : kFuzzLinkTypes) {
    ParsedPacket p;
    ParseFrame(linktype, data, static_cast<uint32_t>(size), static_cast<uint32_t>(size), 0, &p);
  }
  // 2. The input as a capture (packet_fuzz_input.h), through the parser into an analyzer.
  RoceAnalyzer::Options options;
  options.max_flows = 16;
  options.max_events = 32;
  RoceAnalyzer analyzer(options);
  size_t off = 0;
  int64_t ts = 0;
  uint64_t roce = 0;
  while (off + 3 <= size) {
    const int linktype = kFuzzLinkTypes[data[off] % kFuzzLinkTypeCount];
    size_t len = static_cast<size_t>(data[off + 1]) << 8 | data[off + 2];
    off += 3;
    if (len > size - off) len = size - off;
    // An exact-size copy, so that ASan sees a read past this frame's end.
    std::vector<uint8_t> frame(data + off, data + off + len);
    off += len;
    ParsedPacket p;
    if (ParseFrame(linktype, frame.data(), static_cast<uint32_t>(len), static_cast<uint32_t>(len),
                   ts++, &p) != ParseResult::kOk) {
      continue;
    }
    Check(p.bth_psn <= 0xFFFFFF && p.bth_dest_qp <= 0xFFFFFF, "24-bit BTH fields");
    if (p.roce) ++roce;
    analyzer.Add(p);
    if (ts % 8 == 0) analyzer.TakeEvents();
  }
  analyzer.Flush();
  analyzer.TakeEvents();
  RoceFlowStats sum;
  for (const auto& [key, s] : analyzer.flows()) {
    sum.packets += s.packets;
    sum.data_packets += s.data_packets;
    sum.retransmitted_packets += s.retransmitted_packets;
    sum.psn_gaps += s.psn_gaps;
    sum.ack_timeouts += s.ack_timeouts;
    sum.cnps += s.cnps;
  }
  const RoceFlowStats& t = analyzer.totals();
  Check(t.packets == roce, "totals.packets == RoCE frames");
  Check(sum.packets + analyzer.untracked_packets() == t.packets, "flow packets add up");
  Check(sum.data_packets == t.data_packets, "data packets add up");
  Check(sum.retransmitted_packets == t.retransmitted_packets, "retransmissions add up");
  Check(sum.psn_gaps == t.psn_gaps, "gaps add up");
  Check(sum.ack_timeouts == t.ack_timeouts, "ack timeouts add up");
  Check(sum.cnps <= t.cnps, "cnps");
  Check(analyzer.flows().size() <= options.max_flows, "flow bound");
  return 0;
}
