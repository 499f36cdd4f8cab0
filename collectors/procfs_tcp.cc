#include "collectors/procfs_tcp.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectors/clock.h"
#include "collectors/sysfs_ports.h"

namespace fabricscope::collectors {
namespace {

// The two lines of `table` ("Tcp" -> "Tcp: a b c" / "Tcp: 1 2 3"), without the prefix.
bool FindTableLines(absl::string_view text, absl::string_view table, absl::string_view* header,
                    absl::string_view* values) {
  int found = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.size() > table.size() && line.substr(0, table.size()) == table &&
        line[table.size()] == ':') {
      absl::string_view rest = line.substr(table.size() + 1);
      if (found == 0) {
        *header = rest;
      } else {
        *values = rest;
        return true;
      }
      ++found;
    }
  }
  return false;
}

struct Wanted {
  const char* file;  // under <procfs>/net/
  const char* table;
  const char* column;
};

// Kernel Documentation/networking/snmp_counter.rst (Tcp: in /proc/net/snmp, TcpExt: in
// /proc/net/netstat).
constexpr Wanted kWanted[] = {
    {"snmp", "Tcp", "InSegs"},
    {"snmp", "Tcp", "OutSegs"},
    {"snmp", "Tcp", "RetransSegs"},
    {"snmp", "Tcp", "InErrs"},
    {"snmp", "Tcp", "OutRsts"},
    {"netstat", "TcpExt", "TCPLostRetransmit"},
    {"netstat", "TcpExt", "TCPFastRetrans"},
    {"netstat", "TcpExt", "TCPSlowStartRetrans"},
    {"netstat", "TcpExt", "TCPTimeouts"},
    {"netstat", "TcpExt", "TCPLossProbes"},
    {"netstat", "TcpExt", "TCPSpuriousRTOs"},
    {"netstat", "TcpExt", "TCPSynRetrans"},
    {"netstat", "TcpExt", "TCPRetransFail"},
};

constexpr size_t kBufferBytes = 64 * 1024;

}  // namespace

absl::StatusOr<std::map<std::string, uint64_t>> ParseProcNetTable(absl::string_view text,
                                                                  absl::string_view table) {
  absl::string_view header, values;
  if (!FindTableLines(text, table, &header, &values)) {
    return absl::NotFoundError(absl::StrCat("no \"", table, ":\" header/value line pair"));
  }
  std::vector<absl::string_view> names = absl::StrSplit(header, ' ', absl::SkipEmpty());
  std::vector<absl::string_view> vals = absl::StrSplit(values, ' ', absl::SkipEmpty());
  if (names.size() != vals.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", table, ":\" has ", names.size(), " names but ", vals.size(), " values"));
  }
  std::map<std::string, uint64_t> out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!vals[i].empty() && vals[i][0] == '-') continue;  // MaxConn -1: not a counter
    uint64_t v = 0;
    if (!absl::SimpleAtoi(vals[i], &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", table, ":\" ", names[i], " = \"", vals[i], "\" is not a number"));
    }
    out[std::string(names[i])] = v;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ProcNetTcpCollector>> ProcNetTcpCollector::Open(
    const std::string& procfs_root, uint32_t tick_divisor) {
  std::unique_ptr<ProcNetTcpCollector> c(new ProcNetTcpCollector());
  c->tick_divisor_ = tick_divisor == 0 ? 1 : tick_divisor;
  PortDescriptor port;
  port.device = "tcp";
  port.node_level = true;
  for (const char* file : {"snmp", "netstat"}) {
    const std::string path = absl::StrCat(procfs_root, "/net/", file);
    auto text = ReadSmallFile(path, kBufferBytes);
    if (!text.ok()) continue;
    const char* table = std::strcmp(file, "snmp") == 0 ? "Tcp" : "TcpExt";
    absl::string_view header, values;
    if (!FindTableLines(*text, table, &header, &values)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": no \"", table, ":\" lines"));
    }
    std::vector<absl::string_view> names = absl::StrSplit(header, ' ', absl::SkipEmpty());
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const size_t file_index = c->files_.size();
    c->files_.push_back(File{fd, table});
    for (const Wanted& w : kWanted) {
      if (std::strcmp(w.file, file) != 0) continue;
      for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] != w.column) continue;
        c->slots_.push_back(Slot{file_index, i});
        CounterDescriptor d;
        d.name = w.column;
        d.path = path;
        d.group = "tcp";
        d.role = CounterRole::kOther;
        d.meaning = MeaningOf(d.group, d.name).meaning;
        d.spec = CounterSpec{64, CounterBehavior::kWrapping, 1};
        d.tick_divisor = c->tick_divisor_;
        port.counters.push_back(std::move(d));
      }
    }
  }
  if (c->files_.empty()) {
    return absl::NotFoundError(
        absl::StrCat("neither ", procfs_root, "/net/snmp nor ", procfs_root, "/net/netstat"));
  }
  c->ports_.push_back(std::move(port));
  c->buf_.reset(new char[kBufferBytes]);
  c->buf_size_ = kBufferBytes;
  return c;
}

ProcNetTcpCollector::~ProcNetTcpCollector() {
  for (const File& f : files_) close(f.fd);
}

void ProcNetTcpCollector::ParseInto(size_t file, size_t len, uint64_t* values,
                                    ReadStatus* status) const {
  const absl::string_view text(buf_.get(), len);
  absl::string_view header, vals;
  const bool found = FindTableLines(text, files_[file].table, &header, &vals);
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].file != file) continue;
    status[s] = ReadStatus::kError;
    if (!found) continue;
    // Walk to the column'th space-separated token.
    size_t col = 0, i = 0;
    while (i < vals.size()) {
      while (i < vals.size() && vals[i] == ' ') ++i;
      const size_t start = i;
      while (i < vals.size() && vals[i] != ' ') ++i;
      if (start == i) break;
      if (col == slots_[s].column) {
        status[s] = ParseCounterText(vals.substr(start, i - start), &values[s]);
        break;
      }
      ++col;
    }
  }
}

void ProcNetTcpCollector::Sample(uint64_t tick, uint64_t* values, ReadStatus* status) {
  if (tick % tick_divisor_ != 0) {
    for (size_t s = 0; s < slots_.size(); ++s) status[s] = ReadStatus::kNotRead;
    return;
  }
  const int64_t t0 = MonotonicNowNs();
  for (size_t f = 0; f < files_.size(); ++f) {
    size_t len = 0;
    while (len < buf_size_) {
      const ssize_t n =
          pread(files_[f].fd, buf_.get() + len, buf_size_ - len, static_cast<off_t>(len));
      if (n <= 0) break;
      len += static_cast<size_t>(n);
    }
    ParseInto(f, len, values, status);
  }
  cost_ns_.fetch_add(static_cast<uint64_t>(MonotonicNowNs() - t0), std::memory_order_relaxed);
  cost_reads_.fetch_add(1, std::memory_order_relaxed);
}

double ProcNetTcpCollector::ReadCostNs(size_t /*i*/) const {
  const uint64_t reads = cost_reads_.load(std::memory_order_relaxed);
  if (reads == 0 || slots_.empty()) return 0;
  // One sweep reads every column; charge each its share.
  return static_cast<double>(cost_ns_.load(std::memory_order_relaxed)) /
         static_cast<double>(reads) / static_cast<double>(slots_.size());
}

}  // namespace fabricscope::collectors
