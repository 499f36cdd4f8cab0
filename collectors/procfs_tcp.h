#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/collector.h"

namespace fabricscope::collectors {

// Parses one table of a procfs header-line/value-line file (/proc/net/snmp, /proc/net/netstat):
// the first line starting with "<table>:" names the columns, the next such line holds the
// values. Columns are matched by name, never by position (kernel
// Documentation/networking/snmp_counter.rst). Negative values (Tcp MaxConn -1) are skipped.
// Errors: NotFound when the table is absent, InvalidArgument when the two lines disagree in
// length or a value is not a number.
absl::StatusOr<std::map<std::string, uint64_t>> ParseProcNetTable(absl::string_view text,
                                                                  absl::string_view table);

// TCP segment and retransmission counters of the node's network namespace, from
// <procfs>/net/snmp (Tcp: InSegs, OutSegs, RetransSegs, InErrs, OutRsts) and <procfs>/net/netstat
// (TcpExt: TCPLostRetransmit, TCPFastRetrans, TCPSlowStartRetrans, TCPTimeouts, TCPLossProbes,
// TCPSpuriousRTOs, TCPSynRetrans, TCPRetransFail). NCCL's socket transport runs on TCP, so these
// are the loss signals of clusters without RDMA.
//
// One node-level PortDescriptor (device "tcp", node_level) whose counters have group "tcp" and
// role kOther. Columns missing from this kernel are left out. Sample() preads each file into a
// buffer allocated at Open and picks the columns by the index found at Open: no allocation.
class ProcNetTcpCollector final : public Collector {
 public:
  // Errors: NotFound when neither file exists under procfs_root; InvalidArgument when a file
  // does not parse.
  static absl::StatusOr<std::unique_ptr<ProcNetTcpCollector>> Open(const std::string& procfs_root,
                                                                   uint32_t tick_divisor = 1);
  ~ProcNetTcpCollector() override;

  const std::vector<PortDescriptor>& ports() const override { return ports_; }
  size_t counter_count() const override { return slots_.size(); }
  void Sample(uint64_t tick, uint64_t* values, ReadStatus* status) override;
  double ReadCostNs(size_t i) const override;

 private:
  struct File {
    int fd = -1;
    std::string table;  // "Tcp" or "TcpExt"
  };
  struct Slot {
    size_t file;    // index into files_
    size_t column;  // 0-based value index after the "<table>:" prefix
  };
  ProcNetTcpCollector() = default;
  // Finds the value line of `table` in buf_[0..len) and fills the slots of `file`.
  void ParseInto(size_t file, size_t len, uint64_t* values, ReadStatus* status) const;

  std::vector<PortDescriptor> ports_;
  std::vector<File> files_;
  std::vector<Slot> slots_;
  uint32_t tick_divisor_ = 1;
  std::unique_ptr<char[]> buf_;
  size_t buf_size_ = 0;
  std::atomic<uint64_t> cost_ns_{0};
  std::atomic<uint64_t> cost_reads_{0};
};

}  // namespace fabricscope::collectors
