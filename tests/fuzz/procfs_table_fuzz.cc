// The /proc/net/snmp and /proc/net/netstat table parser (collectors::ParseProcNetTable): no
// input may crash, and every column it returns was named in the table's header line.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "collectors/procfs_tcp.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {

std::vector<std::string> FuzzSeeds() {
  return {
      "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens "
      "PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts "
      "InCsumErrors\nTcp: 1 200 120000 -1 5 6 7 8 9 10 11 12 13 14 0\n",
      "TcpExt: SyncookiesSent TCPTimeouts TCPLostRetransmit\nTcpExt: 0 18446744073709551615 3\n"
      "IpExt: InNoRoutes InOctets\nIpExt: 0 1\n",
      "Tcp: a b\nTcp: 1\n", "Tcp:\nTcp:\n"};
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  for (const char* table : {"Tcp", "TcpExt", "Ip", ""}) {
    auto cols = fabricscope::collectors::ParseProcNetTable(text, table);
    if (!cols.ok()) continue;
    for (const auto& [name, value] : *cols) {
      fabricscope::testing::FuzzCheck(absl::StrContains(text, name), "a column the text names");
    }
  }
  return 0;
}
