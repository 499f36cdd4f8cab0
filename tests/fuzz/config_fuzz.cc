// Both daemons' YAML config loaders (agent::LoadYamlConfig, exporters::LoadAggregatorConfig) on
// arbitrary file contents: a clear error or a loaded config, never a crash, an uncaught
// exception or a hang. The bytes go through a real file, as the daemons read them.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent/options.h"
#include "exporters/aggregator_config.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {

std::vector<std::string> FuzzSeeds() {
  return {
      "node: n1\nsample_period: 1ms\nwindow: 1s\ninterfaces: [mlx5_0, eth0]\n"
      "line_rates: {eth0: 100gbit}\nmicroburst: {enter: 0.9, exit: 0.7}\n"
      "spool: {dir: /var/lib/fabricscope/spool, max_bytes: 256MiB}\n"
      "collectives: {rails: [mlx5_0], delay: 25ms}\n",
      "grpc_listen: 127.0.0.1:9471\nhttp_listen: 127.0.0.1:9470\nnode_expiry: 10m\n"
      "limits: {max_nodes: 100}\ncollectives: {straggler_skew_ratio: 0.25}\n",
      "tls: {cert: a, key: b}\nauth: {token_file: t}\n",
      "[1, 2, {a: b}]\n",
      "",
      "a: &x [*x]\n"};
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // In the working directory (ctest: the build's tests/fuzz), one file per process.
  static const std::string path = "config-fuzz-" + std::to_string(getpid()) + ".yaml";
  if (size > (64 << 10)) return 0;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return 0;
  const ssize_t n = write(fd, data, size);
  close(fd);
  if (n != static_cast<ssize_t>(size)) return 0;
  fabricscope::agent::AgentOptions agent;
  fabricscope::agent::LoadYamlConfig(path, &agent).IgnoreError();
  fabricscope::exporters::AggregatorOptions aggregator;
  fabricscope::exporters::LoadAggregatorConfig(path, &aggregator).IgnoreError();
  return 0;
}
