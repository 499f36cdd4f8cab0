#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "collectors/pcap/capture.h"
#include "collectors/pcap/flow.h"
#include "collectors/pcap/roce_analyzer.h"
#include "collectors/pcap/tcp_analyzer.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::collectors::pcap {

// Runs the RoCEv2 and TCP analyzers over a stream of parsed frames and summarizes them per
// window for the agent's Batch (top-K flows and peer pairs by bytes, loss events, cumulative
// counts). Used by the agent's live capture and by the fabricscope-pcap CLI on files.
// Not thread-safe: one owner thread (the capture thread, or the caller of FillWindow under the
// owner's lock).
class CaptureAnalysis {
 public:
  struct Options {
    size_t top_k = 16;                   // flows and peer pairs per window
    size_t max_events_per_window = 256;  // loss events per window; more are counted
  };
  CaptureAnalysis() : CaptureAnalysis(Options()) {}
  explicit CaptureAnalysis(Options options);

  void Add(ParseResult r, const ParsedPacket& p);
  // Ends open retransmission episodes (end of a file).
  void Flush() { roce_.Flush(); }

  // Fills *out with the cumulative counts, this window's top flows/peers and loss events, and
  // starts a new window. fresh (may be null) gets the window's loss events that
  // TakeNewLossEvents has not returned yet.
  void FillWindow(const std::string& interface, const CaptureCounters& counters,
                  v1::CaptureWindow* out, std::vector<v1::PacketLossEvent>* fresh = nullptr);
  // The loss events since the last call (or the window's start), before the window closes;
  // they stay in the window FillWindow fills. Bounded like the window's list.
  std::vector<v1::PacketLossEvent> TakeNewLossEvents();

  const RoceAnalyzer& roce() const { return roce_; }
  const TcpAnalyzer& tcp() const { return tcp_; }

 private:
  struct Bytes {
    uint64_t packets = 0;
    uint64_t bytes = 0;
  };
  Options options_;
  RoceAnalyzer roce_;
  TcpAnalyzer tcp_;
  // This window's bytes of the flows the analyzers track, by the flow ids their Add gives (an
  // index per frame, not a hash probe: issue 38's profile of the offline analysis), and the ids
  // touched this window. At most 20 bytes per flow id either analyzer gives (3.75 MiB at their
  // default bounds: 65,536 RoCE flows, 131,072 TCP directions).
  struct WindowCounts {
    std::vector<Bytes> by_id;
    std::vector<uint32_t> touched;
    void Add(uint32_t id, uint32_t wire_len);
  };
  WindowCounts roce_window_, tcp_window_;
  // Flows an analyzer had no room for (its max_flows reached), at most 65536 per window.
  absl::flat_hash_map<FlowKey, Bytes> untracked_flows_;
  // Bytes by (src, dst) of the frames of flows neither of the above had room for. The top peer
  // pairs are summed from all three at FillWindow, not probed per frame.
  absl::flat_hash_map<std::pair<IpAddress, IpAddress>, uint64_t> overflow_peers_;
  // The window's flows with their bytes, in no order; their counters reset.
  std::vector<std::pair<FlowKey, Bytes>> TakeWindowFlows();
  uint64_t window_bytes_ = 0;
  uint64_t window_packets_ = 0;
  uint64_t events_dropped_ = 0;
  std::vector<v1::PacketLossEvent> window_events_;  // this window's, in the order found
  size_t events_returned_ = 0;                      // of window_events_, by TakeNewLossEvents
  void StageEvents();
};

}  // namespace fabricscope::collectors::pcap
