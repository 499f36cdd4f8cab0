#include "collectors/port_state.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "collectors/clock.h"

namespace fabricscope::collectors {
namespace {

absl::string_view Trim(absl::string_view t) {
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ' || t.back() == '\r')) {
    t.remove_suffix(1);
  }
  return t;
}

// Leading unsigned decimal number; *end = index after it. False when there is none.
bool LeadingNumber(absl::string_view t, uint64_t* value, size_t* end) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') {
    if (v > (~uint64_t{0}) / 10 - 9) return false;
    v = v * 10 + static_cast<uint64_t>(t[i] - '0');
    ++i;
  }
  if (i == 0) return false;
  *value = v;
  *end = i;
  return true;
}

}  // namespace

ReadStatus ParseStateText(absl::string_view text, uint64_t* value) {
  const absl::string_view t = Trim(text);
  size_t end = 0;
  uint64_t v = 0;
  if (!LeadingNumber(t, &v, &end) || end >= t.size() || t[end] != ':') return ReadStatus::kError;
  *value = v;
  return ReadStatus::kOk;
}

ReadStatus ParseRateText(absl::string_view text, uint64_t* bytes_per_second) {
  const absl::string_view t = Trim(text);
  size_t end = 0;
  uint64_t whole = 0;
  if (!LeadingNumber(t, &whole, &end)) return ReadStatus::kError;
  // Optional fraction: "2.5 Gb/sec", "53.125 Gb/sec". Work in units of 1e-3 Gb/s = 125,000 B/s.
  uint64_t milli = whole * 1000;
  if (end < t.size() && t[end] == '.') {
    uint64_t scale = 100;
    size_t i = end + 1;
    for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
      milli += static_cast<uint64_t>(t[i] - '0') * scale;
      scale /= 10;
    }
    end = i;
  }
  if (t.substr(end, 7) != " Gb/sec") return ReadStatus::kError;
  *bytes_per_second = milli * 125'000;  // Gb/s x 125,000,000
  return ReadStatus::kOk;
}

ReadStatus ParseOperstateText(absl::string_view text, uint64_t* value) {
  const absl::string_view t = Trim(text);
  if (t.empty()) return ReadStatus::kError;
  if (t == "up") {
    *value = 4;
  } else if (t == "down" || t == "lowerlayerdown" || t == "notpresent") {
    *value = 1;
  } else {
    *value = 0;
  }
  return ReadStatus::kOk;
}

ReadStatus ParseSpeedText(absl::string_view text, uint64_t* bytes_per_second) {
  const absl::string_view t = Trim(text);
  if (!t.empty() && t[0] == '-') {
    *bytes_per_second = 0;
    return ReadStatus::kOk;
  }
  uint64_t mbps = 0;
  size_t end = 0;
  if (!LeadingNumber(t, &mbps, &end) || end != t.size()) return ReadStatus::kError;
  *bytes_per_second = mbps * 125'000;
  return ReadStatus::kOk;
}

absl::StatusOr<std::unique_ptr<PortStateCollector>> PortStateCollector::Open(
    const std::string& sysfs_root, const std::vector<PortDescriptor>& ports) {
  std::unique_ptr<PortStateCollector> c(new PortStateCollector());
  for (const PortDescriptor& p : ports) {
    if (p.node_level) continue;
    const std::string dir =
        p.rdma ? absl::StrCat(sysfs_root, "/class/infiniband/", p.device, "/ports/", p.port)
               : absl::StrCat(sysfs_root, "/class/net/", p.device);
    struct File {
      const char* file;
      const char* name;
      Kind kind;
    };
    const std::vector<File> files =
        p.rdma ? std::vector<File>{{"state", "state", Kind::kState},
                                   {"phys_state", "phys_state", Kind::kState},
                                   {"rate", "rate", Kind::kRate}}
               : std::vector<File>{{"operstate", "state", Kind::kOperstate},
                                   {"speed", "rate", Kind::kSpeed}};
    PortDescriptor out;
    out.device = p.device;
    out.port = p.port;
    out.rdma = p.rdma;
    out.link_layer = p.link_layer;
    out.is_virtual = p.is_virtual;
    for (const File& f : files) {
      const std::string path = absl::StrCat(dir, "/", f.file);
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      c->slots_.push_back(Slot{fd, f.kind});
      CounterDescriptor d;
      d.name = f.name;
      d.path = path;
      d.group = "state";
      d.role = CounterRole::kState;
      out.counters.push_back(std::move(d));
    }
    if (!out.counters.empty()) c->ports_.push_back(std::move(out));
  }
  if (c->slots_.empty()) {
    return absl::FailedPreconditionError("no link state file of any watched port can be opened");
  }
  return c;
}

PortStateCollector::~PortStateCollector() {
  for (const Slot& s : slots_) close(s.fd);
}

void PortStateCollector::Sample(uint64_t /*tick*/, uint64_t* values, ReadStatus* status) {
  const int64_t t0 = MonotonicNowNs();
  char buf[128];
  for (size_t i = 0; i < slots_.size(); ++i) {
    const ssize_t n = pread(slots_[i].fd, buf, sizeof(buf), 0);
    if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) {
      // EINVAL from `speed` of a link that is down is "unknown", not an error.
      if (n < 0 && errno == EINVAL && slots_[i].kind == Kind::kSpeed) {
        values[i] = 0;
        status[i] = ReadStatus::kOk;
      } else {
        status[i] = ReadStatus::kError;
      }
      continue;
    }
    const absl::string_view text(buf, static_cast<size_t>(n));
    switch (slots_[i].kind) {
      case Kind::kState:
        status[i] = ParseStateText(text, &values[i]);
        break;
      case Kind::kRate:
        status[i] = ParseRateText(text, &values[i]);
        break;
      case Kind::kOperstate:
        status[i] = ParseOperstateText(text, &values[i]);
        break;
      case Kind::kSpeed:
        status[i] = ParseSpeedText(text, &values[i]);
        break;
    }
  }
  cost_ns_.fetch_add(static_cast<uint64_t>(MonotonicNowNs() - t0), std::memory_order_relaxed);
  cost_reads_.fetch_add(1, std::memory_order_relaxed);
}

size_t PortStateCollector::ReopenReplaced() {
  size_t n = 0, i = 0;
  for (const PortDescriptor& p : ports_) {
    for (const CounterDescriptor& c : p.counters) {
      if (ReopenIfReplaced(slots_[i++].fd, c.path)) ++n;
    }
  }
  return n;
}

double PortStateCollector::ReadCostNs(size_t /*i*/) const {
  const uint64_t reads = cost_reads_.load(std::memory_order_relaxed);
  if (reads == 0 || slots_.empty()) return 0;
  return static_cast<double>(cost_ns_.load(std::memory_order_relaxed)) /
         static_cast<double>(reads) / static_cast<double>(slots_.size());
}

}  // namespace fabricscope::collectors
