// SIOCETHTOOL statistics of the watched interfaces and of the RoCE ports' netdevs: PFC, pause,
// PHY and discard counters (collectors/ethtool.h), read by the slow sampler. Which statistics:
// those collectors/counter_meaning.cc names (IsTableEthtoolStat).
#include <algorithm>

#include "absl/strings/str_join.h"
#include "agent/source_registry.h"
#include "collectors/ethtool.h"
#include "glog/logging.h"

namespace fabricscope::agent {
namespace {

std::unique_ptr<collectors::Collector> Open(const SourceContext& ctx) {
  if (!ctx.options.ethtool) return nullptr;
  std::vector<std::string> ifnames;
  for (const collectors::PortDescriptor& p : ctx.ports) {
    const std::string& name = p.rdma ? p.netdev : p.device;
    if (!name.empty() && std::find(ifnames.begin(), ifnames.end(), name) == ifnames.end()) {
      ifnames.push_back(name);
    }
  }
  if (ifnames.empty()) return nullptr;
  std::vector<std::string> notes;
  auto c = collectors::EthtoolCollector::Open(ifnames, collectors::EthtoolSelection{}, 1, &notes,
                                              ctx.options.sysfs_root);
  if (!c.ok()) {
    // Virtual and most non-RDMA NICs have none of the RoCE statistics: one quiet line.
    LOG(INFO) << "no ethtool RoCE/PHY statistics on " << absl::StrJoin(ifnames, ", ") << ": "
              << c.status().message();
    return nullptr;
  }
  ctx.notes.insert(ctx.notes.end(), notes.begin(), notes.end());
  return *std::move(c);
}

const bool kRegistered = RegisterSource({.name = "ethtool",
                                         .order = 20,
                                         .group = SamplerGroupId::kSlow,
                                         .options = {"ethtool", "sysfs-root"},
                                         .meaning_group = "ethtool",
                                         .open = Open});

}  // namespace
}  // namespace fabricscope::agent
