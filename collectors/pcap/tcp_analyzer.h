#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

#include "collectors/pcap/flow.h"
#include "collectors/pcap/packet.h"

namespace fabricscope::collectors::pcap {

struct TcpAnalyzerOptions {
  // TCP connections tracked at once (both directions of one connection are one entry). Frames
  // of further connections are counted in TcpAnalyzerTotals::untracked_frames and not analyzed.
  size_t max_flows = 65536;
  // LossEvents kept until TakeEvents(); further ones are counted in events_dropped.
  size_t max_events = 65536;
  // Out-of-order threshold when the connection's initial RTT is unknown (no handshake seen):
  // Wireshark's default of 3 ms.
  int64_t default_ooo_threshold_ns = 3'000'000;
  // A fast retransmission must follow the last ACK of the reverse direction within this time.
  int64_t fast_retransmission_window_ns = 20'000'000;
};

struct TcpAnalyzerTotals {
  uint64_t frames = 0;            // every Add()
  uint64_t tcp_frames = 0;        // TCP frames analyzed
  uint64_t connections = 0;       // connections tracked (a reused port pair counts again)
  uint64_t untracked_frames = 0;  // TCP frames of connections beyond max_flows
  uint64_t events_dropped = 0;    // LossEvents beyond max_events
  TcpFlowStats all;               // the sum over every flow, both directions
};

// TCP analysis per connection, following the rules of the Wireshark User's Guide, section 7.5
// "TCP Analysis" (wsug_html_chunked/ChAdvTCPAnalysis.html, Wireshark 4.0), so that each count
// equals the number of frames `tshark` marks with the tcp.analysis.<name> field of the same
// name. Frames must be given in capture order, as Wireshark analyzes them. Terms, per direction:
//
//   next expected sequence number (nextseq): the highest seq + len (+1 for SYN or FIN) seen
//     in this direction; a zero-window probe does not advance it.
//   next expected acknowledgement number (maxseqtobeacked): the end of the contiguous data seen
//     in this direction; the ACKed-unseen rule compares the reverse direction's ACKs with it.
//   last-seen acknowledgement number (lastack) and its time: updated by every frame.
//   initial RTT (iRTT): from the client's (last) SYN to its ACK of the SYN-ACK.
//
// As in Wireshark, the analysis works on the raw 32-bit sequence numbers, compared modulo 2^32
// (RFC 9293 3.4), and a value of 0 means "not set yet" for nextseq, maxseqtobeacked and lastack:
// a segment that ends exactly at 2^32 leaves nextseq unset, like in tshark.
//
// The rules, in the order they are applied (User's Guide 7.5; the precedence and the points
// the guide leaves open were determined by comparing with tshark 4.0 frame by frame, see
// tests/pcap/tcp_analyzer_test.cc):
//   ZeroWindowProbe   len == 1, seq == nextseq, and the reverse direction's last window was 0.
//                     Skips the rules below except ZeroWindow.
//   ZeroWindow        window == 0 and none of SYN, FIN, RST.
//   Previous segment not captured  seq > nextseq (nextseq set), not RST.
//   Keep-Alive        len <= 1, seq == nextseq - 1, none of SYN, FIN, RST.
//   Window Update     len == 0, window != 0 and != this direction's last window,
//                     seq == nextseq, ack == lastack, none of SYN, FIN, RST.
//   Keep-Alive ACK    len == 0, window != 0 and unchanged, seq == nextseq, ack == lastack,
//                     reverse direction's last frame a Keep-Alive, none of SYN, FIN, RST.
//   ZeroWindowProbeAck  as Keep-Alive ACK but window == 0 and the reverse frame a probe.
//   Dup ACK           len == 0, window != 0 and unchanged, seq == nextseq, ack == lastack,
//                     nextseq and lastack set, none of SYN, FIN, RST (not a Keep-Alive ACK or
//                     probe ACK). The direction's dup-ACK count grows; it restarts at 0 when
//                     the ACK number changes.
//   ACKed unseen segment  ACK set and ack > reverse direction's maxseqtobeacked (set).
//   Retransmissions   not a Keep-Alive, len > 0 or SYN or FIN, and nextseq > seq. Then the
//                     first that applies:
//     Fast Retransmission  reverse dup-ACK count >= 2 ("more than two duplicate ACKs": the
//                          original ACK and two duplicates), seq == reverse lastack, and that
//                          ACK seen less than 20 ms ago. tshark also sets
//                          tcp.analysis.retransmission on these frames: so does this class.
//     Spurious Retransmission  len > 0, reverse lastack set, seq + len <= reverse lastack
//                          (already acknowledged). Also sets kRetransmission, like tshark.
//     Out-Of-Order         less than the threshold (iRTT, else 3 ms) since nextseq last
//                          advanced, and seq + len != nextseq.
//     Retransmission       otherwise.
//   Port numbers reused  a SYN without ACK whose seq is not the client's initial sequence
//                     number of the connection already tracked: the state starts afresh.
class TcpAnalyzer {
 public:
  // Analysis flags of one frame (Add's result), each the tshark field tcp.analysis.<name>.
  static constexpr uint32_t kRetransmission = 1u << 0;          // retransmission
  static constexpr uint32_t kFastRetransmission = 1u << 1;      // fast_retransmission
  static constexpr uint32_t kSpuriousRetransmission = 1u << 2;  // spurious_retransmission
  static constexpr uint32_t kOutOfOrder = 1u << 3;              // out_of_order
  static constexpr uint32_t kDuplicateAck = 1u << 4;            // duplicate_ack
  static constexpr uint32_t kZeroWindow = 1u << 5;              // zero_window
  static constexpr uint32_t kKeepAlive = 1u << 6;               // keep_alive
  static constexpr uint32_t kKeepAliveAck = 1u << 7;            // keep_alive_ack
  static constexpr uint32_t kWindowUpdate = 1u << 8;            // window_update
  static constexpr uint32_t kPreviousSegmentNotCaptured = 1u << 9;  // lost_segment
  static constexpr uint32_t kAckedUnseenSegment = 1u << 10;         // ack_lost_segment
  static constexpr uint32_t kZeroWindowProbe = 1u << 11;            // zero_window_probe
  static constexpr uint32_t kZeroWindowProbeAck = 1u << 12;         // zero_window_probe_ack
  static constexpr uint32_t kPortsReused = 1u << 13;                // reused_ports
  static constexpr int kFlagCount = 14;

  // The tshark field name after "tcp.analysis." of flag bit i (0 <= i < kFlagCount).
  static const char* FlagName(int i);

  explicit TcpAnalyzer(TcpAnalyzerOptions options = {});

  // Analyzes one parsed frame (frames in capture order); non-TCP frames are only counted.
  // Returns the analysis flags of this frame. Never allocates once the connection is tracked,
  // except for a LossEvent when the event queue grows.
  uint32_t Add(const ParsedPacket& p);

  // Statistics per directional flow (src -> dst) that sent at least one frame.
  std::map<FlowKey, TcpFlowStats> flows() const;
  // The loss events since the last call (at most max_events; see totals().events_dropped).
  std::vector<LossEvent> TakeEvents();
  const TcpAnalyzerTotals& totals() const { return totals_; }

 private:
  struct Direction {
    uint32_t nextseq = 0;  // 0 = not set (as in Wireshark)
    int64_t nextseq_ns = 0;
    uint32_t maxseqtobeacked = 0;
    uint32_t lastack = 0;
    int64_t lastack_ns = 0;
    int64_t window = -1;  // scaled when scaling is in effect; -1 = no frame yet
    uint32_t dupacks = 0;
    uint32_t last_flags = 0;  // analysis flags of this direction's last frame
    int8_t syn_window_scale = -1;
    bool syn_seen = false;  // SYN sent in this direction (window scale known)
    bool base_set = false;
    uint32_t base_seq = 0;  // initial sequence number: the SYN's, or the first seq - 1
  };
  struct Connection {
    FlowKey key;           // direction 0: key.src -> key.dst
    Direction dir[2];
    TcpFlowStats stats[2];
    bool syn_seen = false;  // a SYN without ACK seen
    int64_t syn_ns = 0;     // time of the last one
    int64_t irtt_ns = 0;    // 0 = unknown
  };
  struct KeyHash {
    size_t operator()(const FlowKey& k) const;
  };

  void Reset(Connection* c);
  void Emit(const FlowKey& flow, LossKind kind, int64_t ts_ns, uint32_t first, uint32_t last);

  TcpAnalyzerOptions options_;
  std::unordered_map<FlowKey, Connection, KeyHash> connections_;  // key: the lower endpoint first
  std::deque<LossEvent> events_;
  TcpAnalyzerTotals totals_;
};

}  // namespace fabricscope::collectors::pcap
