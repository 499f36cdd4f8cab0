#include "collectors/counter_meaning.h"

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "collectors/priority_stat.h"

namespace fabricscope::collectors {
namespace {

struct Entry {
  const char* group;
  const char* name;
  Meaning meaning;
  uint8_t width_bits;
};

using M = Meaning;

// The counters whose meaning an analysis reads, by source.
constexpr Entry kTable[] = {
    // IB PortCounters (IBTA vol. 1 16.1.3.5 PortXmitWait; kernel drivers/infiniband/core/
    // sysfs.c): ticks during which the port had data to send but no credits.
    {"counters", "port_xmit_wait", M::kTransmitWait, 0},
    // The same counter read over PerfMgt MADs (collectors/umad_perfquery.cc, group "pma").
    {"pma", "port_xmit_wait", M::kTransmitWait, 0},

    // mlx5 hw_counters (kernel drivers/infiniband/hw/mlx5/counters.c: the Q counters are 32-bit
    // firmware counters, the congestion ones 64-bit; meanings from NVIDIA "Understanding mlx5
    // Linux counters" and Documentation/networking/device_drivers/ethernet/mellanox/mlx5/
    // counters.rst).
    {"hw_counters", "out_of_sequence", M::kOutOfSequence, 32},
    {"hw_counters", "packet_seq_err", M::kRetransmit, 32},         // NAK: PSN sequence error
    {"hw_counters", "local_ack_timeout_err", M::kRetransmit, 32},  // ack timer expired
    {"hw_counters", "duplicate_request", M::kRetransmit, 32},      // a retransmission arrived
    {"hw_counters", "roce_adp_retrans", M::kRetransmit, 32},       // adaptive retransmission
    {"hw_counters", "implied_nak_seq_err", M::kRetransmit, 32},    // implied NAK: resend
    {"hw_counters", "rnr_nak_retry_err", M::kRetransmit, 32},      // RNR NAK: resend later
    {"hw_counters", "out_of_buffer", M::kDiscard, 32},             // no receive WQE: dropped
    {"hw_counters", "np_cnp_sent", M::kCnpSent, 64},
    {"hw_counters", "rp_cnp_handled", M::kCnpHandled, 64},
    {"hw_counters", "np_ecn_marked_roce_packets", M::kEcnMarked, 64},

    // irdma hw_counters (Intel E810/X722; kernel drivers/infiniband/hw/irdma/verbs.c
    // irdma_hw_stat_names). The driver adds each hardware delta, with its roll-over, into a u64
    // (ctrl.c irdma_update_stats), so every file is 64-bit. The octets are those of the RDMA
    // engine's IP packets (iWARP or RoCEv2), without the Ethernet header and FCS; a port's bytes
    // are the IPv4 plus the IPv6 counters (collectors/sysfs_ports.cc adds them).
    {"hw_counters", "ip4InOctets", M::kReceiveBytes, 64},
    {"hw_counters", "ip6InOctets", M::kReceiveBytes, 64},
    {"hw_counters", "ip4OutOctets", M::kTransmitBytes, 64},
    {"hw_counters", "ip6OutOctets", M::kTransmitBytes, 64},
    {"hw_counters", "ip4InPkts", M::kReceivePackets, 64},
    {"hw_counters", "ip6InPkts", M::kReceivePackets, 64},
    {"hw_counters", "ip4OutPkts", M::kTransmitPackets, 64},
    {"hw_counters", "ip6OutPkts", M::kTransmitPackets, 64},
    {"hw_counters", "ip4InDiscards", M::kDiscard, 64},
    {"hw_counters", "ip6InDiscards", M::kDiscard, 64},
    {"hw_counters", "ip4InTruncatedPkts", M::kDrop, 64},
    {"hw_counters", "ip6InTruncatedPkts", M::kDrop, 64},
    {"hw_counters", "ip4OutNoRoutes", M::kDrop, 64},
    {"hw_counters", "ip6OutNoRoutes", M::kDrop, 64},
    {"hw_counters", "rxVlanErrors", M::kDrop, 64},
    {"hw_counters", "tcpRetransSegs", M::kRetransmit, 64},  // iWARP's TCP (before 6.2)
    {"hw_counters", "RetransSegs", M::kRetransmit, 64},     // its name since 6.2
    // gen3 (E830): NAKs, timeouts and out-of-order arrivals of the RDMA transport itself.
    {"hw_counters", "Nak Sequence Error", M::kRetransmit, 64},
    {"hw_counters", "Nak Sequence Error Implied", M::kRetransmit, 64},
    {"hw_counters", "RTO", M::kRetransmit, 64},
    {"hw_counters", "RNR received", M::kRetransmit, 64},
    {"hw_counters", "Rcvd Out of order packets", M::kOutOfSequence, 64},
    {"hw_counters", "CRC errors", M::kDrop, 64},
    {"hw_counters", "cnpSent", M::kCnpSent, 64},
    {"hw_counters", "cnpHandled", M::kCnpHandled, 64},
    {"hw_counters", "RxECNMrkd", M::kEcnMarked, 64},

    // mlx5 ethtool port counters (counters.rst, PPCNT).
    {"ethtool", "rx_out_of_buffer", M::kDiscard, 0},
    {"ethtool", "rx_discards_phy", M::kDiscard, 0},
    {"ethtool", "tx_discards_phy", M::kDiscard, 0},
    {"ethtool", "rx_corrected_bits_phy", M::kCorrectedBits, 0},
    {"ethtool", "rx_bits_phy", M::kPhyBits, 0},
    // The PFC storm prevention (counters.rst "tx_pause_storm_warning_events": the device
    // paused for longer than the warning threshold; "..._error_events": it stopped sending
    // pause frames).
    {"ethtool", "tx_pause_storm_warning_events", M::kPauseStorm, 0},
    {"ethtool", "tx_pause_storm_error_events", M::kPauseStorm, 0},
    // Read and exported by name; no analysis reads them (counters.rst: link-level pause frames,
    // the receive buffer's threshold, PHY errors, link-down events).
    {"ethtool", "rx_pause_ctrl_phy", M::kNone, 0},
    {"ethtool", "tx_pause_ctrl_phy", M::kNone, 0},
    {"ethtool", "rx_buffer_passed_thres_phy", M::kNone, 0},
    {"ethtool", "rx_crc_errors_phy", M::kNone, 0},
    {"ethtool", "rx_symbol_err_phy", M::kNone, 0},
    {"ethtool", "link_down_events_phy", M::kNone, 0},

    // Netdev statistics (include/uapi/linux/if_link.h rtnl_link_stats64: rx_dropped "no space
    // in linux buffers", rx_missed_errors "receiver missed packet").
    {"statistics", "rx_dropped", M::kNetdevDrop, 0},
    {"statistics", "rx_missed_errors", M::kNetdevDrop, 0},

    // Node-level TCP (RFC 4022 tcpRetransSegs, tcpOutSegs; /proc/net/snmp).
    {"tcp", "RetransSegs", M::kTcpRetransmit, 0},
    {"tcp", "OutSegs", M::kTcpSent, 0},
};

using NameMap = absl::flat_hash_map<std::string, CounterMeaning>;

// group -> name -> meaning; std::string keys take string_view lookups without allocating.
const absl::flat_hash_map<std::string, NameMap>& Table() {
  static const auto* table = [] {
    auto* t = new absl::flat_hash_map<std::string, NameMap>();
    for (const Entry& e : kTable) (*t)[e.group][e.name] = CounterMeaning{e.meaning, e.width_bits};
    return t;
  }();
  return *table;
}

// mlx5 per-priority counters {rx,tx}_prio<p>_<kind> (counters.rst): the kinds the agent reads
// and what each means: pause time in µs, and the discards per priority.
struct PriorityKind {
  StatDirection direction;
  const char* kind;
  Meaning meaning;
};
constexpr PriorityKind kPriorityKinds[] = {
    {StatDirection::kRx, "bytes", M::kNone},
    {StatDirection::kRx, "packets", M::kNone},
    {StatDirection::kRx, "pause", M::kNone},
    {StatDirection::kRx, "pause_duration", M::kPauseMicroseconds},
    {StatDirection::kRx, "pause_transition", M::kNone},
    {StatDirection::kRx, "discards", M::kPriorityDiscard},
    {StatDirection::kRx, "buf_discard", M::kDiscard},
    {StatDirection::kRx, "cong_discard", M::kDiscard},
    {StatDirection::kRx, "marked", M::kNone},
    {StatDirection::kTx, "bytes", M::kNone},
    {StatDirection::kTx, "packets", M::kNone},
    {StatDirection::kTx, "pause", M::kNone},
    {StatDirection::kTx, "pause_duration", M::kPauseMicroseconds},
};

const PriorityKind* PriorityKindOf(absl::string_view name) {
  const std::optional<EthtoolStatName> p = ParsePriorityStat(name);
  if (!p) return nullptr;
  for (const PriorityKind& k : kPriorityKinds) {
    if (k.direction == p->direction && p->kind == k.kind) return &k;
  }
  return nullptr;
}

std::optional<Meaning> PriorityMeaning(absl::string_view name) {
  const PriorityKind* k = PriorityKindOf(name);
  if (k == nullptr || k->meaning == Meaning::kNone) return std::nullopt;
  return k->meaning;
}

// The width of an hw_counters file the table does not name, by mlx5's rule (the source of the
// mlx5 block above, kernel drivers/infiniband/hw/mlx5/counters.c): its congestion counters
// (np_*, rp_*) and rx_icrc_encapsulated are 64-bit, its Q counters 32-bit.
uint8_t DefaultHwCounterWidth(absl::string_view name) {
  const bool wide = absl::StartsWith(name, "np_") || absl::StartsWith(name, "rp_") ||
                    name == "rx_icrc_encapsulated";
  return wide ? 64 : 32;
}

}  // namespace

CounterMeaning MeaningOf(absl::string_view group, absl::string_view name) {
  const auto& t = Table();
  if (auto g = t.find(group); g != t.end()) {
    if (auto it = g->second.find(name); it != g->second.end()) return it->second;
  }
  const uint8_t width = group == "hw_counters" ? DefaultHwCounterWidth(name) : 0;
  if (group == "ethtool") {
    if (std::optional<Meaning> m = PriorityMeaning(name)) return CounterMeaning{*m, 0};
  }
  if (absl::StrContains(name, "discard") || absl::StrContains(name, "drop") ||
      absl::StrContains(name, "out_of_buffer")) {
    return CounterMeaning{Meaning::kDrop, width};
  }
  return CounterMeaning{Meaning::kNone, width};
}

bool IsTableEthtoolStat(absl::string_view name) {
  const auto& t = Table();
  if (auto g = t.find("ethtool"); g != t.end() && g->second.contains(name)) return true;
  return PriorityKindOf(name) != nullptr;
}

bool HasMeaningGroup(absl::string_view group) { return Table().contains(group); }

bool IsLoss(Meaning m) {
  switch (m) {
    case Meaning::kOutOfSequence:
    case Meaning::kRetransmit:
    case Meaning::kDiscard:
    case Meaning::kPriorityDiscard:
    case Meaning::kDrop:
    case Meaning::kNetdevDrop:
    case Meaning::kTcpRetransmit:
      return true;
    default:
      return false;
  }
}

bool IsCongestionFeedback(Meaning m) {
  return m == Meaning::kCnpSent || m == Meaning::kCnpHandled || m == Meaning::kEcnMarked;
}

}  // namespace fabricscope::collectors
