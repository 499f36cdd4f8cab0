#include "collectors/pcap/flow.h"

#include <arpa/inet.h>

namespace fabricscope::collectors::pcap {

FlowKey FlowKeyOf(const ParsedPacket& p) {
  FlowKey k;
  k.src = p.src;
  k.dst = p.dst;
  k.proto = p.roce ? 17 : 6;
  if (p.roce) {
    k.qp = p.bth_dest_qp & 0xFFFFFF;  // the BTH's 24-bit destination QP (IBTA vol. 1 9.2)
  } else {
    k.sport = p.sport;
    k.dport = p.dport;
  }
  return k;
}

std::string FormatAddress(const IpAddress& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.is_v4()) {
    inet_ntop(AF_INET, a.bytes.data() + 12, buf, sizeof(buf));
  } else {
    inet_ntop(AF_INET6, a.bytes.data(), buf, sizeof(buf));
  }
  return buf;
}

const char* LossKindName(LossKind k) {
  switch (k) {
    case LossKind::kRocePsnGap:
      return "psn_gap";
    case LossKind::kRoceRetransmission:
      return "go_back_n";
    case LossKind::kRoceNakSequence:
      return "nak_sequence_error";
    case LossKind::kRoceRnrNak:
      return "rnr_nak";
    case LossKind::kRoceNakOther:
      return "nak_other";
    case LossKind::kRoceAckTimeout:
      return "ack_timeout";
    case LossKind::kTcpRetransmission:
      return "retransmission";
    case LossKind::kTcpFastRetransmission:
      return "fast_retransmission";
    case LossKind::kTcpSpuriousRetransmission:
      return "spurious_retransmission";
    case LossKind::kTcpOutOfOrder:
      return "out_of_order";
  }
  return "unknown";
}

}  // namespace fabricscope::collectors::pcap
