#pragma once

#include <cstdint>
#include <optional>

#include "agent/collective_analysis.h"
#include "agent/gpu_timeline.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// The typed parts of one batch, as the agent's sources hand them over; AssembleBatch is the one
// place a v1::Batch is written from them (issue 16: the batch is built once, not filled by each
// source in turn and read back).
struct BatchParts {
  // The pipeline's window (Pipeline::TakeReady): its bounds, the ports' summaries, microbursts,
  // link events and the flight recordings of bursts with loss. An early batch's is empty but
  // for its bounds (both the sample time its analyses are complete to).
  v1::Batch window;
  int64_t unix_offset_ns = 0;                // unix = monotonic + this (Batch.unix_offset_ns)
  bool early = false;                        // analysed collectives sent ahead of their window
  std::optional<v1::AgentStats> agent;       // the agent's own counters (every window batch)
  std::optional<v1::CaptureWindow> capture;  // the packet capture's window (the last batch)
  std::optional<GpuWindowParts> gpu;         // GPU totals and kernel spans (with GPU ingest)
  AnalyzerOutput analysed;                   // collectives with their analyses, recordings, stats
};

// The batch of `parts`: the window with every other part moved in. Collectives keep their order
// (the window's own, then those carried from early analysis), as do recordings (the window's
// burst recordings first). Cost: moves only.
v1::Batch AssembleBatch(BatchParts parts);

}  // namespace fabricscope::agent
