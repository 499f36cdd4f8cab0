// Link state, rate and link events of every watched port (collectors/port_state.h), read by the
// slow sampler.
#include "agent/source_registry.h"
#include "collectors/port_state.h"

namespace fabricscope::agent {
namespace {

std::unique_ptr<collectors::Collector> Open(const SourceContext& ctx) {
  auto c = collectors::PortStateCollector::Open(ctx.options.sysfs_root, ctx.ports);
  if (!c.ok()) {
    ctx.notes.push_back(std::string(c.status().message()));
    return nullptr;
  }
  return *std::move(c);
}

const bool kRegistered = RegisterSource({.name = "port_state",
                                         .order = 10,
                                         .group = SamplerGroupId::kSlow,
                                         .options = {"sysfs-root"},
                                         .meaning_group = "",
                                         .open = Open});

}  // namespace
}  // namespace fabricscope::agent
