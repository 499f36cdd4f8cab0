#include "tests/integration/node_exporter_mapping.h"

#include "absl/strings/str_cat.h"

namespace fabricscope::testing {
namespace {

// Shorthands of the rows: the scopes, and the fabricscope series of the common shapes (one
// series without a label; a port error kind; a port hardware event counter; a TCP counter).
constexpr Scope P = Scope::kRdmaPort, N = Scope::kNetdev, T = Scope::kTcp;

std::vector<FsSeries> fsm(std::string metric) {
  return std::vector<FsSeries>{{std::move(metric), "", ""}};
}
std::vector<FsSeries> err(std::string kind) {
  return std::vector<FsSeries>{{"fabricscope_port_errors_total", "kind", std::move(kind)}};
}
std::vector<FsSeries> hwc(std::string counter) {
  return std::vector<FsSeries>{{"fabricscope_port_hw_events_total", "counter", std::move(counter)}};
}
std::vector<FsSeries> tcp(std::string column) {
  return std::vector<FsSeries>{{"fabricscope_tcp_events_total", "counter", std::move(column)}};
}

std::vector<Pair> PortCounterRows() {
  return {
      // IB PortCounters / PortCountersExtended. Data: both export bytes (4 x the 4-octet words).
      {P, "counters/port_xmit_data", "node_infiniband_port_data_transmitted_bytes_total",
       fsm("fabricscope_port_transmit_bytes_total"), false, false,
       "counters_ext/port_xmit_data_64"},
      {P, "counters/port_rcv_data", "node_infiniband_port_data_received_bytes_total",
       fsm("fabricscope_port_receive_bytes_total"), false, false, "counters_ext/port_rcv_data_64"},
      {P, "counters/port_xmit_packets", "node_infiniband_port_packets_transmitted_total",
       fsm("fabricscope_port_transmit_packets_total"), false, false,
       "counters_ext/port_xmit_packets_64"},
      {P, "counters/port_rcv_packets", "node_infiniband_port_packets_received_total",
       fsm("fabricscope_port_receive_packets_total"), false, false,
       "counters_ext/port_rcv_packets_64"},
      // The legacy mlx4 layout: node_exporter calls counters_ext "legacy" (data x 4 as well).
      {P, "counters_ext/port_xmit_data_64", "node_infiniband_legacy_data_transmitted_bytes_total",
       fsm("fabricscope_port_transmit_bytes_total")},
      {P, "counters_ext/port_rcv_data_64", "node_infiniband_legacy_data_received_bytes_total",
       fsm("fabricscope_port_receive_bytes_total")},
      {P, "counters_ext/port_xmit_packets_64", "node_infiniband_legacy_packets_transmitted_total",
       fsm("fabricscope_port_transmit_packets_total")},
      {P, "counters_ext/port_rcv_packets_64", "node_infiniband_legacy_packets_received_total",
       fsm("fabricscope_port_receive_packets_total")},
      {P, "counters/symbol_error", "node_infiniband_symbol_error_total", err("symbol_error")},
      {P, "counters/link_error_recovery", "node_infiniband_link_error_recovery_total",
       err("link_error_recovery")},
      {P, "counters/link_downed", "node_infiniband_link_downed_total", err("link_downed")},
      {P, "counters/port_rcv_errors", "node_infiniband_port_errors_received_total",
       err("port_rcv_errors")},
      {P, "counters/port_rcv_remote_physical_errors",
       "node_infiniband_port_receive_remote_physical_errors_total",
       err("port_rcv_remote_physical_errors")},
      {P, "counters/port_rcv_switch_relay_errors",
       "node_infiniband_port_receive_switch_relay_errors_total",
       err("port_rcv_switch_relay_errors")},
      {P, "counters/port_xmit_discards", "node_infiniband_port_discards_transmitted_total",
       err("port_xmit_discards")},
      {P, "counters/port_xmit_constraint_errors",
       "node_infiniband_port_constraint_errors_transmitted_total",
       err("port_xmit_constraint_errors")},
      {P, "counters/port_rcv_constraint_errors",
       "node_infiniband_port_constraint_errors_received_total", err("port_rcv_constraint_errors")},
      {P, "counters/local_link_integrity_errors",
       "node_infiniband_local_link_integrity_errors_total", err("local_link_integrity_errors")},
      {P, "counters/excessive_buffer_overrun_errors",
       "node_infiniband_excessive_buffer_overrun_errors_total",
       err("excessive_buffer_overrun_errors")},
      {P, "counters/VL15_dropped", "node_infiniband_vl15_dropped_total", err("VL15_dropped")},
      {P, "counters/port_xmit_wait", "node_infiniband_port_transmit_wait_total",
       fsm("fabricscope_port_transmit_wait_seconds_total"), false, true},
  };
}

std::vector<Pair> PortAttributeRows() {
  return {
      // Port attributes (gauges): IB PortState and PortPhysicalState numbers, rate in bytes/s.
      {P, "state", "node_infiniband_state_id", fsm("fabricscope_port_link_state")},
      {P, "phys_state", "node_infiniband_physical_state_id",
       fsm("fabricscope_port_physical_state")},
      {P, "rate", "node_infiniband_rate_bytes_per_second",
       fsm("fabricscope_port_line_rate_bytes_per_second")},
      {P, "rate", "node_infiniband_rate_bytes_per_second",
       fsm("fabricscope_port_current_rate_bytes_per_second")},
  };
}

std::vector<Pair> Mlx5HwCounterRows() {
  return {
      // hw_counters (mlx5). node_exporter names from its infiniband collector (newer than 1.5).
      {P, "hw_counters/duplicate_request", "node_infiniband_duplicate_requests_packets_total",
       hwc("duplicate_request"), true},
      {P, "hw_counters/implied_nak_seq_err", "node_infiniband_implied_nak_seq_errors_total",
       hwc("implied_nak_seq_err"), true},
      {P, "hw_counters/local_ack_timeout_err", "node_infiniband_local_ack_timeout_errors_total",
       hwc("local_ack_timeout_err"), true},
      {P, "hw_counters/np_cnp_sent", "node_infiniband_np_cnp_packets_sent_total",
       hwc("np_cnp_sent"), true},
      {P, "hw_counters/np_cnp_sent", "node_infiniband_np_cnp_packets_sent_total",
       fsm("fabricscope_port_cnp_sent_total"), true},
      {P, "hw_counters/np_ecn_marked_roce_packets",
       "node_infiniband_np_ecn_marked_roce_packets_received_total",
       hwc("np_ecn_marked_roce_packets"), true},
      {P, "hw_counters/np_ecn_marked_roce_packets",
       "node_infiniband_np_ecn_marked_roce_packets_received_total",
       fsm("fabricscope_port_ecn_marked_packets_total"), true},
      {P, "hw_counters/out_of_buffer", "node_infiniband_out_of_buffer_drops_total",
       hwc("out_of_buffer"), true},
      {P,
       "hw_counters/out_of_buffer",
       "node_infiniband_out_of_buffer_drops_total",
       {{"fabricscope_port_discards_total", "reason", "out_of_buffer"}},
       true},
      {P, "hw_counters/out_of_sequence", "node_infiniband_out_of_sequence_packets_received_total",
       hwc("out_of_sequence"), true},
      {P, "hw_counters/out_of_sequence", "node_infiniband_out_of_sequence_packets_received_total",
       fsm("fabricscope_port_out_of_sequence_packets_total"), true},
      {P, "hw_counters/packet_seq_err", "node_infiniband_packet_sequence_errors_total",
       hwc("packet_seq_err"), true},
      {P, "hw_counters/req_cqe_error", "node_infiniband_req_cqes_errors_total",
       hwc("req_cqe_error"), true},
      {P, "hw_counters/req_cqe_flush_error", "node_infiniband_req_cqes_flush_errors_total",
       hwc("req_cqe_flush_error"), true},
      {P, "hw_counters/req_remote_access_errors", "node_infiniband_req_remote_access_errors_total",
       hwc("req_remote_access_errors"), true},
      {P, "hw_counters/req_remote_invalid_request",
       "node_infiniband_req_remote_invalid_request_errors_total", hwc("req_remote_invalid_request"),
       true},
      {P, "hw_counters/resp_cqe_error", "node_infiniband_resp_cqes_errors_total",
       hwc("resp_cqe_error"), true},
      {P, "hw_counters/resp_cqe_flush_error", "node_infiniband_resp_cqes_flush_errors_total",
       hwc("resp_cqe_flush_error"), true},
      {P, "hw_counters/resp_local_length_error", "node_infiniband_resp_local_length_errors_total",
       hwc("resp_local_length_error"), true},
      {P, "hw_counters/resp_remote_access_errors",
       "node_infiniband_resp_remote_access_errors_total", hwc("resp_remote_access_errors"), true},
      {P, "hw_counters/rnr_nak_retry_err", "node_infiniband_rnr_nak_retry_packets_received_total",
       hwc("rnr_nak_retry_err"), true},
      {P, "hw_counters/roce_adp_retrans", "node_infiniband_roce_adp_retransmits_total",
       hwc("roce_adp_retrans"), true},
      {P, "hw_counters/roce_adp_retrans_to", "node_infiniband_roce_adp_retransmits_timeout_total",
       hwc("roce_adp_retrans_to"), true},
      {P, "hw_counters/roce_slow_restart", "node_infiniband_roce_slow_restart_used_total",
       hwc("roce_slow_restart"), true},
      {P, "hw_counters/roce_slow_restart_cnps", "node_infiniband_roce_slow_restart_cnps_total",
       hwc("roce_slow_restart_cnps"), true},
      {P, "hw_counters/roce_slow_restart_trans", "node_infiniband_roce_slow_restart_total",
       hwc("roce_slow_restart_trans"), true},
      {P, "hw_counters/rp_cnp_handled", "node_infiniband_rp_cnp_packets_handled_total",
       hwc("rp_cnp_handled"), true},
      {P, "hw_counters/rp_cnp_handled", "node_infiniband_rp_cnp_packets_handled_total",
       fsm("fabricscope_port_cnp_handled_total"), true},
      {P, "hw_counters/rp_cnp_ignored", "node_infiniband_rp_cnp_ignored_packets_received_total",
       hwc("rp_cnp_ignored"), true},
      {P, "hw_counters/rx_atomic_requests", "node_infiniband_rx_atomic_requests_total",
       hwc("rx_atomic_requests"), true},
      {P, "hw_counters/rx_dct_connect", "node_infiniband_rx_dct_connect_requests_total",
       hwc("rx_dct_connect"), true},
      {P, "hw_counters/rx_read_requests", "node_infiniband_rx_read_requests_total",
       hwc("rx_read_requests"), true},
      {P, "hw_counters/rx_write_requests", "node_infiniband_rx_write_requests_total",
       hwc("rx_write_requests"), true},
      {P, "hw_counters/rx_icrc_encapsulated", "node_infiniband_rx_icrc_encapsulated_errors_total",
       hwc("rx_icrc_encapsulated"), true},
  };
}

std::vector<Pair> IrdmaTrafficRows() {
  return {
      // hw_counters (irdma; kernel drivers/infiniband/hw/irdma/verbs.c irdma_hw_stat_descs).
      // node_exporter (1.5, and its collector today) reads none of them: "" compares the
      // agent with the file itself. The bytes and packets are the IPv4 + IPv6 files summed.
      {P, "hw_counters/ip4OutOctets+hw_counters/ip6OutOctets", "",
       fsm("fabricscope_port_transmit_bytes_total")},
      {P, "hw_counters/ip4InOctets+hw_counters/ip6InOctets", "",
       fsm("fabricscope_port_receive_bytes_total")},
      {P, "hw_counters/ip4OutPkts+hw_counters/ip6OutPkts", "",
       fsm("fabricscope_port_transmit_packets_total")},
      {P, "hw_counters/ip4InPkts+hw_counters/ip6InPkts", "",
       fsm("fabricscope_port_receive_packets_total")},
      {P, "hw_counters/cnpSent", "", fsm("fabricscope_port_cnp_sent_total")},
      {P, "hw_counters/cnpHandled", "", fsm("fabricscope_port_cnp_handled_total")},
      {P, "hw_counters/RxECNMrkd", "", fsm("fabricscope_port_ecn_marked_packets_total")},
      {P,
       "hw_counters/ip4InDiscards",
       "",
       {{"fabricscope_port_discards_total", "reason", "ip4InDiscards"}}},
      {P,
       "hw_counters/ip6InDiscards",
       "",
       {{"fabricscope_port_discards_total", "reason", "ip6InDiscards"}}},
  };
}

std::vector<Pair> NetdevRows() {
  return {
      // Netdevs: node_exporter reads <procfs>/net/dev, the agent <sysfs>/class/net/IF/statistics.
      // The kernel's /proc/net/dev (net/core/net-procfs.c dev_seq_printf_stats) prints
      // drop = rx_dropped + rx_missed_errors, frame = rx_length + rx_over + rx_crc +
      // rx_frame errors, carrier = tx_carrier + tx_aborted + tx_window + tx_heartbeat errors.
      // The agent reads rx_crc_errors and tx_carrier_errors alone; the generated tree keeps the
      // other terms at 0, so frame and carrier are compared with them.
      {N, "statistics/rx_bytes", "node_network_receive_bytes_total",
       fsm("fabricscope_port_receive_bytes_total")},
      {N, "statistics/tx_bytes", "node_network_transmit_bytes_total",
       fsm("fabricscope_port_transmit_bytes_total")},
      {N, "statistics/rx_packets", "node_network_receive_packets_total",
       fsm("fabricscope_port_receive_packets_total")},
      {N, "statistics/tx_packets", "node_network_transmit_packets_total",
       fsm("fabricscope_port_transmit_packets_total")},
      {N, "statistics/rx_errors", "node_network_receive_errs_total", err("rx_errors")},
      {N, "statistics/tx_errors", "node_network_transmit_errs_total", err("tx_errors")},
      {N,
       "statistics/rx_dropped",
       "node_network_receive_drop_total",
       {{"fabricscope_port_errors_total", "kind", "rx_dropped"},
        {"fabricscope_port_errors_total", "kind", "rx_missed_errors"}}},
      {N, "statistics/tx_dropped", "node_network_transmit_drop_total", err("tx_dropped")},
      {N, "statistics/rx_fifo_errors", "node_network_receive_fifo_total", err("rx_fifo_errors")},
      {N, "statistics/tx_fifo_errors", "node_network_transmit_fifo_total", err("tx_fifo_errors")},
      {N, "statistics/rx_crc_errors", "node_network_receive_frame_total", err("rx_crc_errors")},
      {N, "statistics/tx_carrier_errors", "node_network_transmit_carrier_total",
       err("tx_carrier_errors")},
  };
}

std::vector<Pair> TcpRows() {
  return {
      // TCP (node-wide). node_exporter's default --collector.netstat.fields covers the Tcp
      // columns and TcpExt TCPSynRetrans/TCPTimeouts; the test widens it to the other TcpExt
      // columns the agent reads.
      {T, "Tcp:InSegs", "node_netstat_Tcp_InSegs", tcp("InSegs")},
      {T, "Tcp:OutSegs", "node_netstat_Tcp_OutSegs", tcp("OutSegs")},
      {T, "Tcp:OutSegs", "node_netstat_Tcp_OutSegs", fsm("fabricscope_tcp_sent_segments_total")},
      {T, "Tcp:RetransSegs", "node_netstat_Tcp_RetransSegs", tcp("RetransSegs")},
      {T, "Tcp:RetransSegs", "node_netstat_Tcp_RetransSegs",
       fsm("fabricscope_tcp_retransmitted_segments_total")},
      {T, "Tcp:InErrs", "node_netstat_Tcp_InErrs", tcp("InErrs")},
      {T, "Tcp:OutRsts", "node_netstat_Tcp_OutRsts", tcp("OutRsts")},
      {T, "TcpExt:TCPSynRetrans", "node_netstat_TcpExt_TCPSynRetrans", tcp("TCPSynRetrans")},
      {T, "TcpExt:TCPTimeouts", "node_netstat_TcpExt_TCPTimeouts", tcp("TCPTimeouts")},
      {T, "TcpExt:TCPLostRetransmit", "node_netstat_TcpExt_TCPLostRetransmit",
       tcp("TCPLostRetransmit")},
      {T, "TcpExt:TCPFastRetrans", "node_netstat_TcpExt_TCPFastRetrans", tcp("TCPFastRetrans")},
      {T, "TcpExt:TCPSlowStartRetrans", "node_netstat_TcpExt_TCPSlowStartRetrans",
       tcp("TCPSlowStartRetrans")},
      {T, "TcpExt:TCPLossProbes", "node_netstat_TcpExt_TCPLossProbes", tcp("TCPLossProbes")},
      {T, "TcpExt:TCPSpuriousRTOs", "node_netstat_TcpExt_TCPSpuriousRTOs", tcp("TCPSpuriousRTOs")},
      {T, "TcpExt:TCPRetransFail", "node_netstat_TcpExt_TCPRetransFail", tcp("TCPRetransFail")},
  };
}

std::vector<Pair> IrdmaEventCounterRows() {
  std::vector<Pair> t;
  // The rest of irdma's files, each exported by name as a driver event counter.
  for (const char* n : {"cnpSent",
                        "cnpHandled",
                        "cnpIgnored",
                        "RxECNMrkd",
                        "ip4InDiscards",
                        "ip6InDiscards",
                        "ip4InTruncatedPkts",
                        "ip6InTruncatedPkts",
                        "ip4OutNoRoutes",
                        "ip6OutNoRoutes",
                        "rxVlanErrors",
                        "ip4InReasmRqd",
                        "ip6InReasmRqd",
                        "ip4OutSegRqd",
                        "ip6OutSegRqd",
                        "ip4InMcastPkts",
                        "ip6InMcastPkts",
                        "ip4OutMcastPkts",
                        "ip6OutMcastPkts",
                        "ip4InMcastOctets",
                        "ip6InMcastOctets",
                        "ip4OutMcastOctets",
                        "ip6OutMcastOctets",
                        "InRdmaReads",
                        "InRdmaSends",
                        "InRdmaWrites",
                        "OutRdmaReads",
                        "OutRdmaSends",
                        "OutRdmaWrites",
                        "RdmaBnd",
                        "RdmaInv",
                        "RxUDP",
                        "TxUDP",
                        "RetransSegs",
                        "InOptErrors",
                        "InProtoErrors",
                        "InSegs",
                        "OutSegs"}) {
    t.push_back({P, absl::StrCat("hw_counters/", n), "", hwc(n)});
  }
  return t;
}

}  // namespace

// The groups of rows, one after the other in this order.
std::vector<Pair> MappingTable() {
  std::vector<Pair> t;
  for (auto rows : {PortCounterRows, PortAttributeRows, Mlx5HwCounterRows, IrdmaTrafficRows,
                    NetdevRows, TcpRows, IrdmaEventCounterRows}) {
    const std::vector<Pair> r = rows();
    t.insert(t.end(), r.begin(), r.end());
  }
  return t;
}

const std::vector<std::pair<std::regex, std::string>>& NotExported() {
  static const auto* list = new std::vector<std::pair<std::regex, std::string>>{
      {std::regex("node_infiniband_(unicast|multicast)_packets_(received|transmitted)_total"),
       "counters/{unicast,multicast}_{rcv,xmit}_packets are not read by the agent"},
      {std::regex("node_infiniband_legacy_(unicast|multicast)_packets_(received|transmitted)_"
                  "total"),
       "counters_ext/port_{unicast,multicast}_{rcv,xmit}_packets are not read by the agent"},
      {std::regex("node_infiniband_port_discards_received_total"), "not a sysfs counter file"},
      {std::regex("node_infiniband_info"), "device identity, not a counter"},
      {std::regex("node_infiniband_lifespan_seconds"), "hw_counters/lifespan is a setting"},
      {std::regex("node_network_(receive|transmit)_compressed_total"),
       "statistics/{rx,tx}_compressed are not read by the agent"},
      {std::regex("node_network_receive_multicast_total"), "statistics/multicast is not read"},
      {std::regex("node_network_transmit_colls_total"), "statistics/collisions is not read"},
      {std::regex("node_netstat_Tcp_(ActiveOpens|PassiveOpens|CurrEstab)"),
       "connection counts, not loss signals; not read by the agent"},
      {std::regex("node_netstat_TcpExt_(Listen.*|Syncookies.*)"),
       "listen-queue and syncookie counters are not read by the agent"},
  };
  return *list;
}

const std::vector<std::pair<std::regex, std::string>>& FilesNotCompared() {
  static const auto* list = new std::vector<std::pair<std::regex, std::string>>{
      {std::regex("counters/(unicast|multicast)_(xmit|rcv)_packets"),
       "node_exporter reads them; the agent does not (the port's packets are port_*_packets)"},
      {std::regex("counters_ext/port_(unicast|multicast)_(xmit|rcv)_packets"),
       "node_exporter reads them (legacy_*); the agent does not"},
      {std::regex("hw_counters/lifespan"),
       "a setting, not a counter: the agent reads it for the group's resolution (and writes it "
       "with --hw-lifespan); node_exporter 1.5 does not read it"},
      {std::regex("link_layer"),
       "the agent reads it (InfiniBand or Ethernet: the port's label and rules); node_exporter "
       "does not"},
      {std::regex("lid|sm_lid|lid_mask_count|sm_sl|cap_mask"),
       "subnet addressing, not a counter: neither reads it"},
      {std::regex("gid_attrs/ndevs/.*"),
       "the agent reads it to find a RoCE port's netdev; node_exporter does not"},
      {std::regex("(gids|gid_attrs/types|pkeys)/.*"), "addressing tables: neither reads them"},
      {std::regex("hw_counters/(ip4|ip6)(In|Out)(Octets|Pkts)"),
       "irdma: compared summed (IPv4 + IPv6) in the traffic rows above"},
      {std::regex("dev_port"), "the agent reads it for the port label; node_exporter does not"},
      {std::regex("speed"),
       "the agent reads it for the line rate; node_exporter 1.5's netdev collector does not"},
      {std::regex("operstate"),
       "the agent reads it for the link state; node_exporter's netclass collector (not "
       "compared) does too"},
      {std::regex("type"), "the agent reads it to tell Ethernet from IPoIB; neither exports it"},
      {std::regex("statistics/rx_missed_errors"),
       "compared inside the rx_dropped row: /proc/net/dev's drop is rx_dropped + rx_missed"},
      {std::regex("statistics/(rx_length|rx_over|rx_frame)_errors"),
       "in /proc/net/dev's frame column with rx_crc_errors; the agent reads rx_crc_errors only "
       "(the generated tree keeps these at 0)"},
      {std::regex("statistics/tx_(aborted|window|heartbeat)_errors"),
       "in /proc/net/dev's carrier column with tx_carrier_errors; the agent reads "
       "tx_carrier_errors only (0 in the generated tree)"},
      {std::regex("statistics/(rx|tx)_compressed|statistics/multicast|statistics/collisions"),
       "node_exporter reads them (/proc/net/dev); the agent does not (see NotExported)"},
  };
  return *list;
}

bool InComparedFamilies(const std::string& name) {
  return name.rfind("node_infiniband_", 0) == 0 || name.rfind("node_network_", 0) == 0 ||
         name.rfind("node_netstat_Tcp_", 0) == 0 || name.rfind("node_netstat_TcpExt_", 0) == 0;
}

}  // namespace fabricscope::testing
