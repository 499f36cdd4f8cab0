#pragma once

#include <pcap/pcap.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "collectors/pcap/packet.h"

namespace fabricscope::collectors::pcap {

// BPF filter of a default capture: RoCEv2 and TCP (pcap-filter(7)).
inline constexpr char kDefaultFilter[] = "udp dst port 4791 or tcp";

struct LiveCaptureOptions {
  std::string interface;
  // Headers only: Ethernet + VLAN + IPv6 + TCP with options, or UDP + BTH + RETH/AETH.
  int snaplen = 160;
  std::string filter = kDefaultFilter;
  int buffer_bytes = 16 << 20;  // kernel ring
  // libpcap uses the TPACKET_V3 ring on Linux unless immediate mode is on (pcap-linux.c then
  // falls back to TPACKET_V2 so that each packet is delivered at once). The default keeps
  // TPACKET_V3 and bounds the delivery delay with the block timeout below.
  bool immediate = false;
  int timeout_ms = 50;
};

// Counts of what a source has seen, cumulative.
struct CaptureCounters {
  uint64_t frames = 0;  // handed to the parser
  uint64_t parsed = 0;  // ParseResult::kOk
  uint64_t not_ip = 0;
  uint64_t truncated = 0;
  uint64_t malformed = 0;
  uint64_t unsupported = 0;
  // Live only, from pcap_stats(3PCAP): dropped by the kernel ring (ps_drop) and by the
  // interface/driver (ps_ifdrop). Offline: 0.
  uint64_t kernel_dropped = 0;
  uint64_t interface_dropped = 0;
};

// A libpcap source: a live interface or a pcap/pcapng file. Timestamps in ns (nanosecond
// precision requested from libpcap; Unix time).
//
// Threading: one thread owns it and calls Next/Dispatch; Break() may be called from any
// thread to make a blocked Dispatch return.
class PacketSource {
 public:
  // Errors: NotFound (no such interface), PermissionDenied (needs CAP_NET_RAW), InvalidArgument
  // (the filter does not compile), Unavailable (other libpcap errors), each with libpcap's text.
  static absl::StatusOr<std::unique_ptr<PacketSource>> OpenLive(const LiveCaptureOptions& o);
  // Errors: NotFound (missing file), PermissionDenied, InvalidArgument ("not a pcap or pcapng
  // capture" and other format errors).
  static absl::StatusOr<std::unique_ptr<PacketSource>> OpenOffline(const std::string& path);
  ~PacketSource();
  PacketSource(const PacketSource&) = delete;
  PacketSource& operator=(const PacketSource&) = delete;

  using Callback = std::function<void(ParseResult, const ParsedPacket&)>;
  // Delivers up to max_packets (<= 0: all that are ready, or the whole file) to `fn`, parsed.
  // Returns the number delivered: 0 when a live capture timed out with nothing ready; -1 at
  // the end of a file or after Break().
  // Errors: Unavailable when libpcap fails (e.g. the interface went away).
  absl::StatusOr<int> Dispatch(int max_packets, const Callback& fn);
  void Break();

  // Live only: makes Dispatch return at once with what is ready, and gives the fd to poll(2)
  // for readiness (pcap_get_selectable_fd), so that the owner waits without holding locks.
  // Errors: Unavailable from libpcap.
  absl::StatusOr<int> NonBlockingFd();

  // Counters, with the kernel drop figures refreshed from pcap_stats for a live capture.
  CaptureCounters counters();
  int linktype() const { return linktype_; }
  const std::string& name() const { return name_; }
  bool live() const { return live_; }

 private:
  PacketSource() = default;
  static void OnPacket(u_char* user, const pcap_pkthdr* h, const u_char* bytes);

  pcap_t* pcap_ = nullptr;
  int linktype_ = 0;
  int64_t subsecond_ns_ = 1;  // ns per unit of pcap_pkthdr.ts.tv_usec (nano or micro precision)
  std::string name_;
  bool live_ = false;
  CaptureCounters counters_;
  const Callback* fn_ = nullptr;  // during Dispatch
  ParsedPacket scratch_;
};

}  // namespace fabricscope::collectors::pcap
