// The node's TCP counters from <procfs>/net/{snmp,netstat} (collectors/procfs_tcp.h), on the
// node-level `tcp` pseudo-port, read by the slow sampler.
#include "absl/strings/str_cat.h"
#include "agent/source_registry.h"
#include "collectors/procfs_tcp.h"

namespace fabricscope::agent {
namespace {

std::unique_ptr<collectors::Collector> Open(const SourceContext& ctx) {
  if (!ctx.options.tcp) return nullptr;
  auto c = collectors::ProcNetTcpCollector::Open(ctx.options.procfs_root);
  if (!c.ok()) {
    ctx.notes.push_back(absl::StrCat("TCP counters not read: ", c.status().message()));
    return nullptr;
  }
  return *std::move(c);
}

const bool kRegistered = RegisterSource({.name = "tcp",
                                         .order = 30,
                                         .group = SamplerGroupId::kSlow,
                                         .options = {"tcp", "procfs-root"},
                                         .meaning_group = "tcp",
                                         .open = Open});

}  // namespace
}  // namespace fabricscope::agent
