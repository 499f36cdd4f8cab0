#include "collectors/sysfs_collector.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectors/clock.h"

namespace fabricscope::collectors {

absl::StatusOr<std::unique_ptr<SysfsCounterCollector>> SysfsCounterCollector::Open(
    std::vector<PortDescriptor> ports, std::vector<std::string>* notes) {
  std::vector<Slot> fds;
  std::vector<PortDescriptor> kept;
  for (PortDescriptor& port : ports) {
    std::vector<CounterDescriptor> opened;
    for (CounterDescriptor& c : port.counters) {
      Slot slot{-1, c.tick_divisor == 0 ? 1 : c.tick_divisor, {}};
      bool ok = true;
      for (size_t i = 0; ok && i <= c.part_paths.size(); ++i) {
        const std::string& path = i == 0 ? c.path : c.part_paths[i - 1];
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
          if (notes) notes->push_back(absl::StrCat(path, ": ", strerror(errno), ", not sampled"));
          ok = false;
        } else if (i == 0) {
          slot.fd = fd;
        } else {
          slot.part_fds.push_back(fd);
        }
      }
      if (!ok) {
        if (slot.fd >= 0) close(slot.fd);
        for (int fd : slot.part_fds) close(fd);
        continue;
      }
      fds.push_back(std::move(slot));
      opened.push_back(std::move(c));
    }
    if (opened.empty()) continue;
    port.counters = std::move(opened);
    kept.push_back(std::move(port));
  }
  if (fds.empty()) {
    return absl::FailedPreconditionError("no counter file could be opened");
  }
  return std::unique_ptr<SysfsCounterCollector>(
      new SysfsCounterCollector(std::move(kept), std::move(fds)));
}

SysfsCounterCollector::SysfsCounterCollector(std::vector<PortDescriptor> ports,
                                             std::vector<Slot> fds)
    : ports_(std::move(ports)),
      fds_(std::move(fds)),
      cost_ns_sum_(new std::atomic<uint64_t>[fds_.size()]),
      cost_reads_(new std::atomic<uint64_t>[fds_.size()]) {
  for (size_t i = 0; i < fds_.size(); ++i) {
    cost_ns_sum_[i].store(0, std::memory_order_relaxed);
    cost_reads_[i].store(0, std::memory_order_relaxed);
  }
}

SysfsCounterCollector::~SysfsCounterCollector() {
  for (const Slot& s : fds_) {
    close(s.fd);
    for (int fd : s.part_fds) close(fd);
  }
}

namespace {

ReadStatus ReadOne(int fd, uint64_t* value) {
  char buf[64];
  const ssize_t n = pread(fd, buf, sizeof(buf), 0);
  // Error, EOF (file emptied), or a value longer than any counter: not a counter.
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) return ReadStatus::kError;
  return ParseCounterText(absl::string_view(buf, static_cast<size_t>(n)), value);
}

}  // namespace

ReadStatus SysfsCounterCollector::ReadSlot(const Slot& s, uint64_t* value) {
  ReadStatus st = ReadOne(s.fd, value);
  for (int fd : s.part_fds) {
    if (st != ReadStatus::kOk) break;
    uint64_t part = 0;
    st = ReadOne(fd, &part);
    *value += part;  // modulo 2^64, as the 64-bit parts themselves wrap
  }
  return st;
}

void SysfsCounterCollector::Sample(uint64_t tick, uint64_t* values, ReadStatus* status) {
  const bool measure = tick % kCostTickStride == 0;
  for (size_t i = 0; i < fds_.size(); ++i) {
    const Slot& s = fds_[i];
    if (tick % s.tick_divisor != 0) {
      status[i] = ReadStatus::kNotRead;
      continue;
    }
    const int64_t t0 = measure ? MonotonicNowNs() : 0;
    status[i] = ReadSlot(s, &values[i]);
    if (measure) {
      cost_ns_sum_[i].fetch_add(static_cast<uint64_t>(MonotonicNowNs() - t0),
                                std::memory_order_relaxed);
      cost_reads_[i].fetch_add(1, std::memory_order_relaxed);
    }
  }
}

bool ReopenIfReplaced(int fd, const std::string& path) {
  struct stat now, held;
  if (stat(path.c_str(), &now) != 0) return false;  // still gone
  if (fstat(fd, &held) == 0 && held.st_ino == now.st_ino && held.st_dev == now.st_dev) {
    return false;
  }
  const int fresh = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fresh < 0) return false;
  const bool ok = dup2(fresh, fd) == fd;
  close(fresh);
  return ok;
}

size_t SysfsCounterCollector::ReopenReplaced() {
  size_t n = 0, i = 0;
  for (const PortDescriptor& p : ports_) {
    for (const CounterDescriptor& c : p.counters) {
      const Slot& s = fds_[i++];
      if (ReopenIfReplaced(s.fd, c.path)) ++n;
      for (size_t k = 0; k < s.part_fds.size() && k < c.part_paths.size(); ++k) {
        if (ReopenIfReplaced(s.part_fds[k], c.part_paths[k])) ++n;
      }
    }
  }
  return n;
}

double SysfsCounterCollector::ReadCostNs(size_t i) const {
  const uint64_t reads = cost_reads_[i].load(std::memory_order_relaxed);
  if (reads == 0) return 0;
  return static_cast<double>(cost_ns_sum_[i].load(std::memory_order_relaxed)) /
         static_cast<double>(reads);
}

}  // namespace fabricscope::collectors
