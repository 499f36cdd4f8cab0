#pragma once

#include <cstdint>
#include <string>

#include "collectors/counter_meaning.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::testing {

// Appends to `window` the CounterValue an agent sends for counter `name` of `group`: with the
// meaning its discovery set (collectors/port.h CounterDescriptor::meaning, from
// collectors::MeaningOf) and agent/pipeline.cc FillCounters copies into CounterValue.meaning.
inline v1::CounterValue* AddAgentCounter(v1::PortWindow* window, const std::string& group,
                                         const std::string& name, uint64_t delta,
                                         uint64_t total = 0) {
  v1::CounterValue* c = window->add_counters();
  c->set_group(group);
  c->set_name(name);
  c->set_meaning(static_cast<uint32_t>(collectors::MeaningOf(group, name).meaning));
  c->set_delta(delta);
  c->set_total(total);
  return c;
}

}  // namespace fabricscope::testing
