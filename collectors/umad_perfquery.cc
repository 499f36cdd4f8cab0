#include "collectors/umad_perfquery.h"

#include <infiniband/umad.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectors/clock.h"
#include "collectors/ib_port_counters.h"

namespace fabricscope::collectors {
namespace {

namespace fs = std::filesystem;

// GSI addressing of PerfMgt requests: the General Services Interface is QP1 on every port, and
// GMPs to it carry the well-known Q_Key 0x80010000 (IBTA vol. 1 13.5; IB_QP1 and IB_QP1_QKEY in
// the kernel's include/rdma/ib_mad.h).
constexpr int kGsiQpn = 1;
constexpr uint32_t kGsiQkey = 0x80010000u;

// Extra wait beyond the kernel's timeout x (retries + 1) for its timeout report to arrive, ms.
constexpr int kRecvSlackMs = 50;

// Unicast LIDs are 0x0001-0xBFFF (IBTA vol. 1 4.1.3); 0 means "not assigned".
constexpr unsigned kMaxUnicastLid = 0xBFFF;

size_t CountEntriesWithPrefix(const std::string& dir, absl::string_view prefix) {
  std::error_code ec;
  size_t n = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (absl::StartsWith(it->path().filename().string(), prefix)) ++n;
  }
  return n;
}

std::string ErrnoText(int err) { return std::strerror(err); }

}  // namespace

absl::Status CheckUmadPresent(const std::string& sysfs_root, const std::string& dev_root) {
  const std::string mad_dir = sysfs_root + "/class/infiniband_mad";
  std::error_code ec;
  if (!fs::is_directory(mad_dir, ec)) {
    return absl::UnavailableError(absl::StrCat("no InfiniBand MAD device: ", mad_dir,
                                               " is absent (no IB HCA, or the ib_umad module is "
                                               "not loaded)"));
  }
  if (CountEntriesWithPrefix(mad_dir, "umad") == 0) {
    return absl::UnavailableError(absl::StrCat(
        "no InfiniBand MAD device: ", mad_dir,
        " lists no umad<N> device (ib_umad is loaded but no RDMA device registered a MAD port)"));
  }
  const std::string dev_dir = dev_root + "/infiniband";
  if (CountEntriesWithPrefix(dev_dir, "umad") == 0) {
    return absl::UnavailableError(absl::StrCat(
        "no InfiniBand MAD device node: ", dev_dir, "/umad<N> is absent although ", mad_dir,
        " lists devices (udev did not create the nodes; in a container, pass /dev/infiniband "
        "in)"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// UmadPerfQuery

absl::StatusOr<std::unique_ptr<UmadPerfQuery>> UmadPerfQuery::Open(
    const std::string& ca_name, int port, const UmadPerfQueryOptions& options) {
  if (port < 1 || port > 254) {
    return absl::InvalidArgumentError(absl::StrCat("port ", port, " is not a CA port (1-254)"));
  }
  if (options.timeout_ms <= 0 || options.retries < 0 || options.sl < 0 || options.sl > 15 ||
      options.pkey_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad umad options: timeout_ms ", options.timeout_ms, ", retries ",
                     options.retries, ", sl ", options.sl, ", pkey_index ", options.pkey_index));
  }
  if (absl::Status s = CheckUmadPresent(options.sysfs_root, options.dev_root); !s.ok()) return s;
  // A no-op since libibumad release 18; older ones fail here when the ABI does not match.
  if (umad_init() < 0) {
    return absl::UnavailableError("umad_init failed: the kernel's umad ABI is not supported");
  }

  std::string ca = ca_name;
  if (ca.empty()) {
    char names[UMAD_MAX_DEVICES][UMAD_CA_NAME_LEN];
    const int n = umad_get_cas_names(names, UMAD_MAX_DEVICES);
    if (n <= 0) return absl::UnavailableError("umad_get_cas_names found no InfiniBand CA");
    std::vector<std::string> seen;
    for (int i = 0; i < n && ca.empty(); ++i) {
      umad_port_t p;
      std::memset(&p, 0, sizeof(p));
      if (umad_get_port(names[i], port, &p) < 0) {
        seen.push_back(absl::StrCat(names[i], ": no port ", port));
        continue;
      }
      const std::string link_layer = p.link_layer;
      umad_release_port(&p);
      if (link_layer == "InfiniBand") {
        ca = names[i];
      } else {
        seen.push_back(absl::StrCat(names[i], ": ", link_layer));
      }
    }
    if (ca.empty()) {
      return absl::UnavailableError(absl::StrCat("no CA has an InfiniBand port ", port, " (",
                                                 absl::StrJoin(seen, "; "), ")"));
    }
  }

  umad_port_t p;
  std::memset(&p, 0, sizeof(p));
  if (const int r = umad_get_port(ca.c_str(), port, &p); r < 0) {
    return absl::NotFoundError(
        absl::StrCat("no port ", port, " on CA ", ca, " (umad_get_port: ", ErrnoText(-r), ")"));
  }
  const std::string link_layer = p.link_layer;
  const unsigned lid = p.base_lid;
  const unsigned state = p.state;
  umad_release_port(&p);
  if (link_layer != "InfiniBand") {
    return absl::FailedPreconditionError(
        absl::StrCat(ca, " port ", port, " has link layer \"", link_layer,
                     "\": PerfMgt MADs are LID-routed and need an InfiniBand port (read RoCE "
                     "ports from sysfs)"));
  }
  if (lid == 0 || lid > kMaxUnicastLid) {
    return absl::UnavailableError(
        absl::StrCat(ca, " port ", port, " has LID ", lid, " (port state ", state,
                     "): no subnet manager has configured it yet, so its PMA cannot be addressed"));
  }

  const int fd = umad_open_port(ca.c_str(), port);
  if (fd < 0) {
    const int err = -fd;
    const std::string what =
        absl::StrCat("cannot open the umad device of ", ca, " port ", port, ": ", ErrnoText(err));
    if (err == EACCES || err == EPERM) {
      return absl::PermissionDeniedError(
          absl::StrCat(what,
                       " (needs read/write access to /dev/infiniband/umad<N>: root, or a "
                       "udev rule granting it)"));
    }
    return absl::UnavailableError(what);
  }
  // method_mask nullptr: a client agent that only receives answers to its own requests.
  const int agent = umad_register(fd, kMgmtClassPerfMgt, kPerfMgtClassVersion, 0, nullptr);
  if (agent < 0) {
    umad_close_port(fd);
    return absl::UnavailableError(absl::StrCat("umad_register of a PerfMgt agent on ", ca, " port ",
                                               port, " failed: ", ErrnoText(-agent)));
  }

  std::unique_ptr<UmadPerfQuery> q(new UmadPerfQuery());
  q->ca_name_ = ca;
  q->port_ = port;
  q->base_lid_ = static_cast<uint16_t>(lid);
  q->options_ = options;
  q->fd_ = fd;
  q->agent_ = agent;
  q->buf_size_ = umad_size() + kMadSize;
  q->buf_.reset(new uint64_t[(q->buf_size_ + 7) / 8]());
  // Any start value will do; the low 32 bits are what identifies a request (kTidMatchMask).
  q->next_tid_ = static_cast<uint32_t>(MonotonicNowNs()) ^ (static_cast<uint32_t>(getpid()) << 16);
  return q;
}

UmadPerfQuery::~UmadPerfQuery() {
  if (agent_ >= 0) umad_unregister(fd_, agent_);
  if (fd_ >= 0) umad_close_port(fd_);
}

absl::Span<const uint8_t> UmadPerfQuery::mad() const {
  void* umad = buf_.get();
  return absl::Span<const uint8_t>(static_cast<const uint8_t*>(umad_get_mad(umad)), mad_len_);
}

absl::Status UmadPerfQuery::RoundTrip(uint16_t lid, uint16_t attribute_id, uint8_t port_select,
                                      uint64_t* tid) {
  const uint16_t dlid = lid == 0 ? base_lid_ : lid;
  const uint8_t select = lid == 0 && port_select == 0 ? static_cast<uint8_t>(port_) : port_select;
  void* umad = buf_.get();
  std::memset(umad, 0, buf_size_);
  mad_len_ = 0;
  if (++next_tid_ == 0) ++next_tid_;  // keep the low 32 bits non-zero
  const uint64_t sent_tid = next_tid_;
  uint8_t* request = static_cast<uint8_t*>(umad_get_mad(umad));
  // Cannot fail: the buffer holds kMadSize bytes after the umad header.
  EncodePerfMgtGet(attribute_id, select, sent_tid, absl::MakeSpan(request, kMadSize)).IgnoreError();
  umad_set_addr(umad, dlid, kGsiQpn, options_.sl, static_cast<int>(kGsiQkey));
  umad_set_pkey(umad, options_.pkey_index);

  if (const int r = umad_send(fd_, agent_, umad, static_cast<int>(kMadSize), options_.timeout_ms,
                              options_.retries);
      r < 0) {
    return absl::UnavailableError(
        absl::StrCat("umad_send to LID ", dlid, " failed: ", ErrnoText(errno ? errno : -r)));
  }
  const int64_t budget_ms = int64_t{options_.timeout_ms} * (options_.retries + 1) + kRecvSlackMs;
  const int64_t deadline_ns = MonotonicNowNs() + budget_ms * 1'000'000;
  for (;;) {
    const int64_t left_ns = deadline_ns - MonotonicNowNs();
    if (left_ns <= 0) break;
    int len = static_cast<int>(kMadSize);
    const int wait_ms = static_cast<int>(std::max<int64_t>(1, (left_ns + 999'999) / 1'000'000));
    const int r = umad_recv(fd_, umad, &len, wait_ms);
    if (r == -ETIMEDOUT) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("umad_recv on ", ca_name_, " port ", port_, " failed: ", ErrnoText(-r)));
    }
    mad_len_ = static_cast<size_t>(std::clamp(len, 0, static_cast<int>(kMadSize)));
    const absl::StatusOr<MadHeader> h = DecodeMadHeader(mad());
    // An answer (or timeout report) for an earlier request that had already given up: skip.
    if (!h.ok() || (h->transaction_id & kTidMatchMask) != (sent_tid & kTidMatchMask)) continue;
    if (const int st = umad_status(umad); st != 0) {
      // The kernel hands the request back with a status: ETIMEDOUT after every retry.
      if (st == ETIMEDOUT) break;
      return absl::UnavailableError(
          absl::StrCat("MAD to LID ", dlid, " failed in the kernel: ", ErrnoText(st)));
    }
    *tid = sent_tid;
    return absl::OkStatus();
  }
  mad_len_ = 0;
  return absl::DeadlineExceededError(absl::StrCat("no PerfMgt answer from LID ", dlid, " port ",
                                                  select, " within ", options_.timeout_ms, " ms x ",
                                                  options_.retries + 1, " tries"));
}

absl::StatusOr<PerfMgtClassPortInfo> UmadPerfQuery::GetClassPortInfo(uint16_t lid) {
  uint64_t tid = 0;
  if (absl::Status s = RoundTrip(lid, kPmaAttrClassPortInfo, 0, &tid); !s.ok()) return s;
  return DecodeClassPortInfoResponse(mad(), tid);
}

absl::StatusOr<PortCountersSample> UmadPerfQuery::GetPortCounters(uint16_t lid,
                                                                  uint8_t port_select) {
  uint64_t tid = 0;
  if (absl::Status s = RoundTrip(lid, kPmaAttrPortCounters, port_select, &tid); !s.ok()) {
    return s;
  }
  return DecodePortCountersResponse(mad(), tid);
}

absl::StatusOr<PortCountersExtendedSample> UmadPerfQuery::GetPortCountersExtended(
    uint16_t lid, uint8_t port_select) {
  uint64_t tid = 0;
  if (absl::Status s = RoundTrip(lid, kPmaAttrPortCountersExtended, port_select, &tid); !s.ok()) {
    return s;
  }
  return DecodePortCountersExtendedResponse(mad(), tid);
}

// ---------------------------------------------------------------------------------------------
// UmadPerfQueryCollector

namespace {

// The answer field a counter slot reads.
enum Field : uint8_t {
  // PortCountersExtended (16.1.4.11).
  kExtXmitData,
  kExtRcvData,
  kExtXmitPackets,
  kExtRcvPackets,
  kExtUnicastXmitPackets,
  kExtUnicastRcvPackets,
  kExtMulticastXmitPackets,
  kExtMulticastRcvPackets,
  // PortCounters (16.1.3.5).
  kXmitData,
  kRcvData,
  kXmitPackets,
  kRcvPackets,
  kSymbolError,
  kLinkErrorRecovery,
  kLinkDowned,
  kRcvErrors,
  kRcvRemotePhysicalErrors,
  kRcvSwitchRelayErrors,
  kXmitDiscards,
  kXmitConstraintErrors,
  kRcvConstraintErrors,
  kLocalLinkIntegrityErrors,
  kExcessiveBufferOverrunErrors,
  kVl15Dropped,
  kXmitWait,
};

bool IsExtendedField(uint8_t f) { return f <= kExtMulticastRcvPackets; }

uint64_t ExtendedValue(const PortCountersExtendedSample& s, uint8_t f) {
  switch (f) {
    case kExtXmitData:
      return s.port_xmit_data;
    case kExtRcvData:
      return s.port_rcv_data;
    case kExtXmitPackets:
      return s.port_xmit_packets;
    case kExtRcvPackets:
      return s.port_rcv_packets;
    case kExtUnicastXmitPackets:
      return s.port_unicast_xmit_packets;
    case kExtUnicastRcvPackets:
      return s.port_unicast_rcv_packets;
    case kExtMulticastXmitPackets:
      return s.port_multicast_xmit_packets;
    case kExtMulticastRcvPackets:
      return s.port_multicast_rcv_packets;
    default:
      return 0;
  }
}

uint64_t CountersValue(const PortCountersSample& s, uint8_t f) {
  switch (f) {
    case kXmitData:
      return s.port_xmit_data;
    case kRcvData:
      return s.port_rcv_data;
    case kXmitPackets:
      return s.port_xmit_packets;
    case kRcvPackets:
      return s.port_rcv_packets;
    case kSymbolError:
      return s.symbol_error;
    case kLinkErrorRecovery:
      return s.link_error_recovery;
    case kLinkDowned:
      return s.link_downed;
    case kRcvErrors:
      return s.port_rcv_errors;
    case kRcvRemotePhysicalErrors:
      return s.port_rcv_remote_physical_errors;
    case kRcvSwitchRelayErrors:
      return s.port_rcv_switch_relay_errors;
    case kXmitDiscards:
      return s.port_xmit_discards;
    case kXmitConstraintErrors:
      return s.port_xmit_constraint_errors;
    case kRcvConstraintErrors:
      return s.port_rcv_constraint_errors;
    case kLocalLinkIntegrityErrors:
      return s.local_link_integrity_errors;
    case kExcessiveBufferOverrunErrors:
      return s.excessive_buffer_overrun_errors;
    case kVl15Dropped:
      return s.vl15_dropped;
    case kXmitWait:
      return s.port_xmit_wait;
    default:
      return 0;
  }
}

// A counter of a PerfMgt reply: its sysfs name (collectors/ib_port_counters.h has its width and
// role) and where the decoded sample keeps it.
struct PmaField {
  const char* name;
  Field field;
};

// PortCountersExtended data/packet counters (64-bit, wrapping).
constexpr PmaField kExtendedData[] = {{"port_xmit_data", kExtXmitData},
                                      {"port_rcv_data", kExtRcvData},
                                      {"port_xmit_packets", kExtXmitPackets},
                                      {"port_rcv_packets", kExtRcvPackets}};
// PortCounters data/packet counters for PMAs without the extended set (32-bit, saturating).
constexpr PmaField kLegacyData[] = {{"port_xmit_data", kXmitData},
                                    {"port_rcv_data", kRcvData},
                                    {"port_xmit_packets", kXmitPackets},
                                    {"port_rcv_packets", kRcvPackets}};
// PortCounters error counters (saturating), then PortXmitWait.
constexpr PmaField kErrorCounters[] = {
    {"symbol_error", kSymbolError},
    {"link_error_recovery", kLinkErrorRecovery},
    {"link_downed", kLinkDowned},
    {"port_rcv_errors", kRcvErrors},
    {"port_rcv_remote_physical_errors", kRcvRemotePhysicalErrors},
    {"port_rcv_switch_relay_errors", kRcvSwitchRelayErrors},
    {"port_xmit_discards", kXmitDiscards},
    {"port_xmit_constraint_errors", kXmitConstraintErrors},
    {"port_rcv_constraint_errors", kRcvConstraintErrors},
    {"local_link_integrity_errors", kLocalLinkIntegrityErrors},
    {"excessive_buffer_overrun_errors", kExcessiveBufferOverrunErrors},
    {"VL15_dropped", kVl15Dropped},
    {"port_xmit_wait", kXmitWait},
};

// Only with the full extended set (kPmaCapExtendedWidth, not NoIETF): not PortCounters, so not
// in kIbPortCounters. 64-bit, wrapping.
constexpr PmaField kExtendedCasts[] = {{"unicast_xmit_packets", kExtUnicastXmitPackets},
                                       {"unicast_rcv_packets", kExtUnicastRcvPackets},
                                       {"multicast_xmit_packets", kExtMulticastXmitPackets},
                                       {"multicast_rcv_packets", kExtMulticastRcvPackets}};

// Appends the counters of `table` to the port and their fields to slots: the spec from
// kIbPortCounters (its extended form when `extended`), or 64-bit wrapping for the casts.
template <size_t N>
void AddCounters(const PmaField (&table)[N], bool extended, uint32_t tick_divisor,
                 PortDescriptor& port, std::vector<uint8_t>& slots) {
  for (const PmaField& f : table) {
    CounterDescriptor d;
    d.name = f.name;
    d.group = "pma";
    if (const IbPortCounter* c = FindIbPortCounter(f.name)) {
      d.spec = IbCounterSpec(*c, extended);
      d.role = c->role;
    } else {
      d.spec = CounterSpec{64, CounterBehavior::kWrapping, 1};
      d.role = CounterRole::kOther;
    }
    d.meaning = MeaningOf(d.group, d.name).meaning;
    d.tick_divisor = tick_divisor;
    port.counters.push_back(std::move(d));
    slots.push_back(f.field);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<UmadPerfQueryCollector>> UmadPerfQueryCollector::Create(
    std::unique_ptr<PerfMgtQuerier> querier, std::vector<PmaTarget> targets, uint32_t tick_divisor,
    std::vector<std::string>* notes) {
  if (querier == nullptr) return absl::InvalidArgumentError("no PerfMgt querier");
  if (targets.empty()) targets.push_back(PmaTarget{});
  std::unique_ptr<UmadPerfQueryCollector> c(new UmadPerfQueryCollector());
  c->tick_divisor_ = tick_divisor == 0 ? 1 : tick_divisor;
  absl::Status first_error;
  for (PmaTarget& where : targets) {
    const bool local = where.lid == 0;
    PortDescriptor port;
    port.device = !where.device.empty() ? where.device
                  : local               ? querier->ca_name()
                                        : absl::StrCat("lid", where.lid);
    port.port = local && where.port_select == 0 ? static_cast<uint32_t>(querier->port())
                                                : where.port_select;
    port.rdma = true;
    port.link_layer = LinkLayer::kInfiniBand;
    const absl::StatusOr<PerfMgtClassPortInfo> cpi = querier->GetClassPortInfo(where.lid);
    if (!cpi.ok()) {
      const std::string what = absl::StrCat(port.Key(), " (LID ", where.lid,
                                            "): ", cpi.status().message(), ", not sampled");
      if (notes) notes->push_back(what);
      if (first_error.ok()) first_error = absl::Status(cpi.status().code(), what);
      continue;
    }
    Target t;
    t.where = where;
    t.extended = (cpi->capability_mask & (kPmaCapExtendedWidth | kPmaCapExtendedWidthNoIetf)) != 0;
    t.first_slot = c->slots_.size();
    if (t.extended) {
      AddCounters(kExtendedData, true, c->tick_divisor_, port, c->slots_);
      if (cpi->capability_mask & kPmaCapExtendedWidth) {
        AddCounters(kExtendedCasts, true, c->tick_divisor_, port, c->slots_);
      }
    } else {
      AddCounters(kLegacyData, false, c->tick_divisor_, port, c->slots_);
      if (notes) {
        notes->push_back(absl::StrCat(port.Key(),
                                      ": PMA has no PortCountersExtended; data/packet counters "
                                      "are 32-bit and saturate"));
      }
    }
    AddCounters(kErrorCounters, false, c->tick_divisor_, port, c->slots_);
    t.slot_count = c->slots_.size() - t.first_slot;
    c->slot_target_.resize(c->slots_.size(), c->targets_.size());
    c->targets_.push_back(std::move(t));
    c->ports_.push_back(std::move(port));
  }
  if (c->targets_.empty()) return first_error;
  c->cost_ns_.reset(new std::atomic<uint64_t>[c->targets_.size()]);
  c->cost_reads_.reset(new std::atomic<uint64_t>[c->targets_.size()]);
  for (size_t i = 0; i < c->targets_.size(); ++i) {
    c->cost_ns_[i].store(0, std::memory_order_relaxed);
    c->cost_reads_[i].store(0, std::memory_order_relaxed);
  }
  c->querier_ = std::move(querier);
  return c;
}

void UmadPerfQueryCollector::Sample(uint64_t tick, uint64_t* values, ReadStatus* status) {
  if (tick % tick_divisor_ != 0) {
    std::fill(status, status + slots_.size(), ReadStatus::kNotRead);
    return;
  }
  for (size_t ti = 0; ti < targets_.size(); ++ti) {
    const Target& t = targets_[ti];
    const int64_t t0 = MonotonicNowNs();
    PortCountersExtendedSample ext;
    bool ext_ok = false;
    if (t.extended) {
      absl::StatusOr<PortCountersExtendedSample> r =
          querier_->GetPortCountersExtended(t.where.lid, t.where.port_select);
      if (r.ok()) {
        ext = *r;
        ext_ok = true;
      } else {
        failed_queries_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    PortCountersSample pc;
    bool pc_ok = false;
    {
      absl::StatusOr<PortCountersSample> r =
          querier_->GetPortCounters(t.where.lid, t.where.port_select);
      if (r.ok()) {
        pc = *r;
        pc_ok = true;
      } else {
        failed_queries_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    cost_ns_[ti].fetch_add(static_cast<uint64_t>(MonotonicNowNs() - t0), std::memory_order_relaxed);
    cost_reads_[ti].fetch_add(1, std::memory_order_relaxed);
    for (size_t i = t.first_slot; i < t.first_slot + t.slot_count; ++i) {
      const uint8_t f = slots_[i];
      const bool ok = IsExtendedField(f) ? ext_ok : pc_ok;
      status[i] = ok ? ReadStatus::kOk : ReadStatus::kError;
      if (ok) values[i] = IsExtendedField(f) ? ExtendedValue(ext, f) : CountersValue(pc, f);
    }
  }
}

double UmadPerfQueryCollector::ReadCostNs(size_t i) const {
  if (i >= slot_target_.size()) return 0;
  const size_t ti = slot_target_[i];
  const uint64_t reads = cost_reads_[ti].load(std::memory_order_relaxed);
  if (reads == 0) return 0;
  return static_cast<double>(cost_ns_[ti].load(std::memory_order_relaxed)) /
         static_cast<double>(reads) / static_cast<double>(targets_[ti].slot_count);
}

}  // namespace fabricscope::collectors
