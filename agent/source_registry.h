#pragma once

// The agent's counter sources beside the port counters of sysfs: each registers itself from its
// own file under agent/sources/ (name, the sampler group that reads it, the options it reads,
// the counter-meaning group of its counters, how to open it), and Agent::Create
// (agent/agent_setup.cc) opens what the registry lists. A new source is one file there, its
// options in agent/options.inc (the one option table that --help, the config file, the man page
// and README's table read) and its counters' meanings in collectors/counter_meaning.cc.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/options.h"
#include "collectors/collector.h"
#include "collectors/port.h"

namespace fabricscope::agent {

// The sampler threads (Agent::groups_): fast (byte and packet counters at --sample-period),
// slow (--slow-sample-period) and pma (--pma-period).
enum class SamplerGroupId { kFast = 0, kSlow = 1, kPma = 2 };

// What a source opens from: the options, the ports discovery chose (with their netdevs and line
// rates) and the notes shown to the user at start.
struct SourceContext {
  const AgentOptions& options;
  const std::vector<collectors::PortDescriptor>& ports;
  std::vector<std::string>& notes;
};

struct SourceSpec {
  std::string name;  // "port_state", "ethtool", "tcp", "pma"
  // Where it opens among the sources of its group (ascending): the order its ports and
  // counters merge into the agent's (Agent::Attach), fixed whatever the link order.
  int order = 0;
  SamplerGroupId group = SamplerGroupId::kSlow;
  // The command-line flags it reads (agent/options.inc; a test checks each exists there).
  std::vector<std::string> options;
  // The group of its counters in collectors/counter_meaning.cc ("ethtool", "tcp", "pma"); ""
  // for a source whose values are not counters (link state and rate).
  std::string meaning_group;
  // Opens the source: its collector, or null when its options leave it off or it cannot be
  // opened here (it says why in ctx.notes or the log, as fits: a virtual NIC without ethtool
  // statistics is not worth a note). Never throws; the agent goes on without it.
  std::function<std::unique_ptr<collectors::Collector>(const SourceContext& ctx)> open;
};

// Adds a source (from a static initializer of its file: static const bool registered =
// RegisterSource({...});). Returns true. Not thread-safe: static initialization only.
bool RegisterSource(SourceSpec spec);
// Every registered source, by (group, order, name). Built before main; never changes after.
const std::vector<SourceSpec>& Sources();

}  // namespace fabricscope::agent
