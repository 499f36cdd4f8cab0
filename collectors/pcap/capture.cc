#include "collectors/pcap/capture.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fabricscope::collectors::pcap {
namespace {

absl::Status LiveError(const std::string& iface, int rc, pcap_t* p) {
  const std::string text = absl::StrCat("capture on ", iface, ": ", pcap_geterr(p));
  switch (rc) {
    case PCAP_ERROR_NO_SUCH_DEVICE:
      return absl::NotFoundError(text);
    case PCAP_ERROR_PERM_DENIED:
      return absl::PermissionDeniedError(absl::StrCat(text, " (needs CAP_NET_RAW)"));
    case PCAP_ERROR_IFACE_NOT_UP:
      return absl::FailedPreconditionError(text);
    default:
      return absl::UnavailableError(text);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<PacketSource>> PacketSource::OpenLive(const LiveCaptureOptions& o) {
  char err[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_create(o.interface.c_str(), err);
  if (p == nullptr) {
    return absl::UnavailableError(absl::StrCat("capture on ", o.interface, ": ", err));
  }
  std::unique_ptr<PacketSource> s(new PacketSource());
  s->pcap_ = p;
  s->name_ = o.interface;
  s->live_ = true;
  pcap_set_snaplen(p, o.snaplen);
  pcap_set_promisc(p, 0);
  pcap_set_timeout(p, o.timeout_ms);
  pcap_set_buffer_size(p, o.buffer_bytes);
  pcap_set_immediate_mode(p, o.immediate ? 1 : 0);
  pcap_set_tstamp_precision(p, PCAP_TSTAMP_PRECISION_NANO);
  const int rc = pcap_activate(p);
  if (rc < 0) return LiveError(o.interface, rc, p);
  if (!o.filter.empty()) {
    bpf_program prog;
    if (pcap_compile(p, &prog, o.filter.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("capture filter \"", o.filter, "\": ", pcap_geterr(p)));
    }
    const int frc = pcap_setfilter(p, &prog);
    pcap_freecode(&prog);
    if (frc != 0) {
      return absl::UnavailableError(absl::StrCat("capture filter: ", pcap_geterr(p)));
    }
  }
  s->linktype_ = pcap_datalink(p);
  s->subsecond_ns_ = pcap_get_tstamp_precision(p) == PCAP_TSTAMP_PRECISION_NANO ? 1 : 1000;
  return s;
}

absl::StatusOr<std::unique_ptr<PacketSource>> PacketSource::OpenOffline(const std::string& path) {
  // Open the file ourselves first, to tell "missing" and "unreadable" from "not a capture".
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int e = errno;
    const std::string text = absl::StrCat(path, ": ", strerror(e));
    if (e == ENOENT || e == ENOTDIR) return absl::NotFoundError(text);
    if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(text);
    return absl::UnavailableError(text);
  }
  char err[PCAP_ERRBUF_SIZE] = {};
  // On success pcap_close() closes f; on failure it stays ours.
  pcap_t* p = pcap_fopen_offline_with_tstamp_precision(f, PCAP_TSTAMP_PRECISION_NANO, err);
  if (p == nullptr) {
    fclose(f);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a pcap or pcapng capture (", err, ")"));
  }
  std::unique_ptr<PacketSource> s(new PacketSource());
  s->pcap_ = p;
  s->name_ = path;
  s->linktype_ = pcap_datalink(p);
  s->subsecond_ns_ = pcap_get_tstamp_precision(p) == PCAP_TSTAMP_PRECISION_NANO ? 1 : 1000;
  return s;
}

PacketSource::~PacketSource() {
  if (pcap_) pcap_close(pcap_);
}

void PacketSource::OnPacket(u_char* user, const pcap_pkthdr* h, const u_char* bytes) {
  PacketSource* self = reinterpret_cast<PacketSource*>(user);
  ++self->counters_.frames;
  const int64_t ts = static_cast<int64_t>(h->ts.tv_sec) * 1'000'000'000 +
                     static_cast<int64_t>(h->ts.tv_usec) * self->subsecond_ns_;
  const ParseResult r = ParseFrame(self->linktype_, bytes, h->caplen, h->len, ts, &self->scratch_);
  switch (r) {
    case ParseResult::kOk:
      ++self->counters_.parsed;
      break;
    case ParseResult::kNotIp:
      ++self->counters_.not_ip;
      break;
    case ParseResult::kTruncated:
      ++self->counters_.truncated;
      break;
    case ParseResult::kMalformed:
      ++self->counters_.malformed;
      break;
    case ParseResult::kUnsupported:
      ++self->counters_.unsupported;
      break;
  }
  (*self->fn_)(r, self->scratch_);
}

absl::StatusOr<int> PacketSource::Dispatch(int max_packets, const Callback& fn) {
  fn_ = &fn;
  const int n = pcap_dispatch(pcap_, max_packets <= 0 ? -1 : max_packets, &PacketSource::OnPacket,
                              reinterpret_cast<u_char*>(this));
  fn_ = nullptr;
  if (n == PCAP_ERROR) {
    return absl::UnavailableError(absl::StrCat(name_, ": ", pcap_geterr(pcap_)));
  }
  if (n == PCAP_ERROR_BREAK) return -1;
  if (n == 0 && !live_) return -1;  // end of file
  // PCAP_ERROR_BREAK can also come as 0 after pcap_breakloop on a non-blocking handle.
  return n;
}

void PacketSource::Break() { pcap_breakloop(pcap_); }

absl::StatusOr<int> PacketSource::NonBlockingFd() {
  char err[PCAP_ERRBUF_SIZE] = {};
  if (pcap_setnonblock(pcap_, 1, err) != 0) {
    return absl::UnavailableError(absl::StrCat(name_, ": ", err));
  }
  const int fd = pcap_get_selectable_fd(pcap_);
  if (fd < 0) return absl::UnavailableError(absl::StrCat(name_, ": no selectable descriptor"));
  return fd;
}

CaptureCounters PacketSource::counters() {
  if (live_) {
    pcap_stat st{};
    if (pcap_stats(pcap_, &st) == 0) {
      counters_.kernel_dropped = st.ps_drop;
      counters_.interface_dropped = st.ps_ifdrop;
    }
  }
  return counters_;
}

}  // namespace fabricscope::collectors::pcap
