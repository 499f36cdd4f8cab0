#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "collectors/pcap/flow.h"
#include "collectors/pcap/packet.h"

namespace fabricscope::collectors::pcap {

struct TcpAnalyzerOptions {
  // TCP connections tracked (both directions of one connection are one entry, about 450 bytes
  // with the hash table's share and its key by id: 28 MiB at the default). Frames of further
  // connections are counted in TcpAnalyzerTotals::untracked_frames and not analyzed. Like tshark, a
  // connection is kept for the analyzer's lifetime (a closed one may still see retransmissions).
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
// "TCP Analysis" (wsug_html_chunked/ChAdvTCPAnalysis.html of Wireshark 4.0), so that each
// count equals the number of frames `tshark` marks with the tcp.analysis.<name> field of the
// same name. Implemented from the guide's text; where the guide is silent or differs from what
// tshark 4.0.17 does, the behaviour was determined by feeding tshark crafted captures and
// comparing frame by frame (tests/collectors/pcap/tcp_analyzer_test.cc keeps those sequences and
// checks them against tshark again). Frames must be given in capture order, as Wireshark analyzes
// them. The state, per direction:
//
//   nextseq   "next expected sequence number": the highest seq + len (+1 for SYN or FIN) seen
//             in this direction, and the time it last advanced. A zero-window probe does not
//             advance it (the guide says it does; tshark 4.0 does not).
//   lastack   "last-seen acknowledgment number", with its time: set by every frame.
//   window    the last window field, compared unscaled (as tshark does: with window scaling,
//             RFC 7323, a SYN's window and the same number after it are different windows, yet
//             the same field value is "unchanged" to tshark).
//   dupacks   duplicate ACKs since the ACK number last changed.
//   base      the initial sequence number: the SYN's, else one less than the first sequence
//             number seen, or than the first ACK number the other direction sent.
// and per connection the initial RTT (iRTT): from the client's last SYN to the first frame,
// in either direction, that has ACK set and is not a SYN-ACK (the client's handshake ACK); it
// applies from the frame after that one (0, two frames at the same time, counts as unknown).
//
// As in Wireshark, the analysis works on the raw 32-bit sequence numbers, compared modulo 2^32
// (RFC 9293 3.4), and nextseq or lastack 0 means "not set yet": a segment that ends exactly at
// 2^32 leaves nextseq unset, like in tshark.
//
// The rules, in the order they apply to a frame (len: TCP payload bytes):
//   ZeroWindowProbe     len == 1, seq == nextseq, the other direction's last window 0. A probe
//                       skips the rules up to the retransmission ones (no ZeroWindow on it).
//   ZeroWindow          window == 0, none of SYN, FIN, RST.
//   Previous segment not captured  nextseq set, seq > nextseq, not RST.
//   Keep-Alive          len <= 1, seq == nextseq - 1, none of SYN, FIN, RST.
//   Window Update       len == 0, window != 0 and not the last window, seq == nextseq,
//                       ack == lastack, none of SYN, FIN, RST.
//   Keep-Alive ACK      len == 0, window != 0 and unchanged, seq == nextseq, ack == lastack,
//                       the other direction's last frame a Keep-Alive, none of SYN, FIN, RST.
//   ZeroWindowProbeAck  the same with window 0 and the other direction's last frame a probe.
//   Dup ACK             len == 0, window != 0 and unchanged, seq == nextseq, ack == lastack,
//                       none of SYN, FIN, RST, and not one of the two above; dupacks grows.
//                       (The guide also asks for nextseq and lastack to be non-zero; tshark
//                       4.0 does not.)
//   Retransmissions     not a Keep-Alive, len > 0 or SYN or FIN; "below" means nextseq set
//                       and seq < nextseq, except a segment of more than one byte starting at
//                       nextseq - 1 (the guide's note on a probe byte the receiver dropped,
//                       which tshark applies to any such segment). The first that applies:
//     Fast Retransmission  below, the other direction's dupacks >= 2 ("more than two duplicate
//                          ACKs" counts the original ACK), seq == its lastack, seen less than
//                          20 ms ago. tshark sets tcp.analysis.retransmission on these frames
//                          too, and so does this class (both counters count them).
//     Spurious Retransmission  len > 0, the other direction's lastack set, seq + len <= it:
//                          all its bytes acknowledged already (a FIN's own sequence number not
//                          counted). Applies whether or not the segment is below (as in
//                          tshark); also sets kRetransmission.
//     Out-Of-Order         below, less than the iRTT (3 ms when unknown) since nextseq last
//                          advanced, and seq + len (+1 for SYN/FIN) != nextseq. Not a
//                          retransmission.
//     Retransmission       below.
//   Port numbers reused  a SYN whose seq is not the base of its direction: the connection's
//                       state starts afresh (its flows' counters go on).
//
// Not implemented: "ACKed unseen segment" and "Window Full". Known differences with tshark 4.0,
// all in captures that lack frames or break TCP (tests/collectors/pcap/tcp_analyzer_test.cc
// generates conversations without them): once a frame acknowledges data tshark has not seen
// contiguously from the other side (frames the capture missed, or a zero-window probe's byte),
// tshark takes that side's later retransmissions at the acknowledged sequence number for fast
// retransmissions even without duplicate ACKs (no documented rule; here they stay
// retransmissions); a SYN with the connection's own initial sequence number after its side sent
// other segments changes tshark's state in undocumented ways; a SYN-ACK from a side not seen
// before on an existing conversation is "reused ports" to tshark, not here.
class TcpAnalyzer {
 public:
  // Analysis flags of one frame (Add's result), each the tshark field tcp.analysis.<name>.
  static constexpr uint32_t kRetransmission = 1u << 0;              // retransmission
  static constexpr uint32_t kFastRetransmission = 1u << 1;          // fast_retransmission
  static constexpr uint32_t kSpuriousRetransmission = 1u << 2;      // spurious_retransmission
  static constexpr uint32_t kOutOfOrder = 1u << 3;                  // out_of_order
  static constexpr uint32_t kDuplicateAck = 1u << 4;                // duplicate_ack
  static constexpr uint32_t kZeroWindow = 1u << 5;                  // zero_window
  static constexpr uint32_t kKeepAlive = 1u << 6;                   // keep_alive
  static constexpr uint32_t kKeepAliveAck = 1u << 7;                // keep_alive_ack
  static constexpr uint32_t kWindowUpdate = 1u << 8;                // window_update
  static constexpr uint32_t kPreviousSegmentNotCaptured = 1u << 9;  // lost_segment
  static constexpr uint32_t kZeroWindowProbe = 1u << 10;            // zero_window_probe
  static constexpr uint32_t kZeroWindowProbeAck = 1u << 11;         // zero_window_probe_ack
  static constexpr uint32_t kPortsReused = 1u << 12;                // reused_ports
  static constexpr int kFlagCount = 13;

  // The tshark field name after "tcp.analysis." of flag bit i (0 <= i < kFlagCount).
  static const char* FlagName(int i);

  explicit TcpAnalyzer(TcpAnalyzerOptions options = {});

  // Analyzes one parsed frame (frames in capture order); non-TCP frames are only counted.
  // Returns the analysis flags of this frame. Never allocates once the connection is tracked,
  // except for a LossEvent when the event queue grows. *flow (may be null) gets the frame's
  // directional flow id (its index for key_of), or kUntracked.
  uint32_t Add(const ParsedPacket& p, uint32_t* flow = nullptr);
  // The directional key (src -> dst) of flow id `id`, as Add gave it.
  FlowKey key_of(uint32_t id) const {
    const FlowKey& k = keys_[id / 2];
    return id % 2 == 0 ? k : k.Reversed();
  }

  // Statistics per directional flow (src -> dst) that sent at least one frame.
  std::map<FlowKey, TcpFlowStats> flows() const;
  // The loss events since the last call (at most max_events; see totals().events_dropped).
  std::vector<LossEvent> TakeEvents();
  const TcpAnalyzerTotals& totals() const { return totals_; }

 private:
  struct Direction {
    uint32_t nextseq = 0;  // 0 = not set (as in Wireshark)
    int64_t nextseq_ns = 0;
    uint32_t lastack = 0;
    int64_t lastack_ns = 0;
    int32_t window = -1;  // the last window field, unscaled; -1 = no frame yet
    uint32_t dupacks = 0;
    uint32_t last_flags = 0;  // analysis flags of this direction's last frame
    bool base_set = false;
    uint32_t base_seq = 0;  // initial sequence number: the SYN's, or the first seq - 1
  };
  struct Connection {
    FlowKey key;      // direction 0: key.src -> key.dst
    uint32_t id = 0;  // its index in keys_; direction d's flow id is 2 id + d
    Direction dir[2];
    TcpFlowStats stats[2];
    bool syn_seen = false;  // a SYN without ACK seen
    int64_t syn_ns = 0;     // time of the last one
    int64_t irtt_ns = 0;    // 0 = unknown
  };
  void Reset(Connection* c);
  // Add's steps, in the order they apply to a frame. Defined in the .cc and used only there;
  // inline so that the per-frame path stays one function (AddConnection, taken only for a new
  // connection, stays out of line).
  inline Connection* FindConnection(const ParsedPacket& p, bool lower_first);
  Connection* AddConnection(const FlowKey& key);
  inline uint32_t UpdateBases(Connection* c, int d, uint32_t seq, uint32_t ack, bool syn,
                              bool has_ack);
  inline uint32_t RetransmissionFlags(const Connection& c, int d, uint32_t seq, uint32_t len,
                                      uint32_t nxt, int64_t now);
  static inline void UpdateIrtt(Connection* c, bool syn, bool has_ack, int64_t now);
  void Emit(const FlowKey& flow, LossKind kind, int64_t ts_ns, uint32_t first, uint32_t last);

  TcpAnalyzerOptions options_;
  // Key: the lower endpoint first. Abseil's hash table of FlowKey: one probe per frame (issue
  // 38's profile); its nodes stay put (the slots of a flat table would double the memory of a
  // full table at its growth step).
  absl::node_hash_map<FlowKey, Connection> connections_;
  std::vector<FlowKey> keys_;  // by connection id
  std::deque<LossEvent> events_;
  TcpAnalyzerTotals totals_;
};

}  // namespace fabricscope::collectors::pcap
