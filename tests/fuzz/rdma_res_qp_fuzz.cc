// The `rdma -j res show qp` parser (agent::ParseRdmaResQp) and the map built from what it returns
// (agent::PortsOfProcesses): no input may crash; every QP kept names a device and the map holds
// only indices of the ports given, sorted and without duplicates.
#include <cstdint>
#include <string>
#include <vector>

#include "agent/qp_ports.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {

std::vector<std::string> FuzzSeeds() {
  // The shape iproute2 prints (rdma/res-qp.c res_qp_parse_cb, rdma/res.c print_link), a kernel
  // QP without pid and port, and near misses.
  return {
      "[{\"ifindex\":0,\"ifname\":\"mlx5_0\",\"port\":1,\"lqpn\":1234,\"rqpn\":55,\"type\":\"RC\","
      "\"state\":\"RTS\",\"rq-psn\":1,\"sq-psn\":2,\"path-mig-state\":\"MIGRATED\",\"pdn\":3,"
      "\"pid\":4242,\"comm\":\"python3\"},"
      "{\"ifindex\":1,\"ifname\":\"mlx5_1\",\"lqpn\":1,\"type\":\"GSI\",\"state\":\"RTS\","
      "\"comm\":\"[ib_core]\"}]",
      "[]", "[1,\"x\",null,{}]", "{\"ifname\":\"mlx5_0\"}",
      "[{\"ifname\":\"mlx5_0\",\"port\":-1,\"lqpn\":1e3,\"pid\":4294967296}]"};
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto list = fabricscope::agent::ParseRdmaResQp(text);
  if (!list.ok()) return 0;
  std::vector<fabricscope::collectors::PortDescriptor> ports(2);
  ports[0].device = "mlx5_0";
  ports[1].device = "mlx5_1";
  for (auto& p : ports) {
    p.port = 1;
    p.rdma = true;
  }
  for (const auto& q : list->qps) {
    fabricscope::testing::FuzzCheck(!q.device.empty(), "a kept QP names its device");
  }
  size_t unmatched = 0;
  for (const auto& [pid, idx] :
       fabricscope::agent::PortsOfProcesses(list->qps, ports, &unmatched)) {
    fabricscope::testing::FuzzCheck(pid > 0 && !idx.empty(), "a user process with ports");
    for (size_t i = 0; i < idx.size(); ++i) {
      fabricscope::testing::FuzzCheck(idx[i] < ports.size(), "an index of the given ports");
      fabricscope::testing::FuzzCheck(i == 0 || idx[i - 1] < idx[i], "sorted, no duplicates");
    }
  }
  return 0;
}
