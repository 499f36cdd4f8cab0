// InfiniBand PerfMgt counters of the ports --pma names, by MADs from --pma-ca's --pma-port
// (collectors/umad_perfquery.h), read by the pma sampler at --pma-period. Off unless --pma is
// given.
#include "absl/strings/str_cat.h"
#include "agent/source_registry.h"
#include "collectors/umad_perfquery.h"

namespace fabricscope::agent {
namespace {

std::unique_ptr<collectors::Collector> Open(const SourceContext& ctx) {
  const AgentOptions& o = ctx.options;
  if (o.pma_targets.empty()) return nullptr;
  std::vector<collectors::PmaTarget> targets;
  for (const PmaTargetOption& t : o.pma_targets) {
    collectors::PmaTarget pt;
    pt.lid = t.lid;
    pt.port_select = t.port;
    // Distinct device names keep the PerfMgt view of a port apart from its sysfs view.
    pt.device = t.lid == 0 ? absl::StrCat("pma:", o.pma_ca.empty() ? "local" : o.pma_ca)
                           : absl::StrCat("lid", t.lid);
    targets.push_back(pt);
  }
  auto q = collectors::UmadPerfQuery::Open(o.pma_ca, o.pma_port);
  if (!q.ok()) {
    ctx.notes.push_back(
        absl::StrCat("InfiniBand PerfMgt source unavailable: ", q.status().message()));
    return nullptr;
  }
  auto c = collectors::UmadPerfQueryCollector::Create(std::move(*q), targets, 1, &ctx.notes);
  if (!c.ok()) {
    ctx.notes.push_back(absl::StrCat("InfiniBand PerfMgt: ", c.status().message()));
    return nullptr;
  }
  return *std::move(c);
}

const bool kRegistered = RegisterSource({.name = "pma",
                                         .order = 10,
                                         .group = SamplerGroupId::kPma,
                                         .options = {"pma", "pma-ca", "pma-port", "pma-period"},
                                         .meaning_group = "pma",
                                         .open = Open});

}  // namespace
}  // namespace fabricscope::agent
