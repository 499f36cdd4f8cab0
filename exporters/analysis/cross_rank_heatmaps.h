#pragma once

// The cross-rank heat maps, accumulated from the analysis's plain values: collective duration
// per rank x sequence number, and rank x rank bytes from the NCCL proxy.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "exporters/analysis/cross_rank_types.h"
#include "exporters/analysis/heatmap_model.h"

namespace fabricscope::exporters {

// A (communicator, function) of the recent instances: comm (8-hex-digit label) and func as
// given, "" = any; among those the one with most instances, AllReduce preferred when func is
// "", and with `comms` non-null only among those communicators (a job's,
// exporters/state/job_table.h). Returns false when none matches.
bool PickCollective(const std::map<std::pair<uint64_t, std::string>, size_t>& counts,
                    const std::string& comm, const std::string& func,
                    std::pair<uint64_t, std::string>* pick,
                    const std::set<uint64_t>* comms = nullptr);

// Rank x sequence number: each rank's duration (s) in `instances` (one communicator and
// function, by sequence number), scaled from the fastest to the slowest shown; pick null = no
// complete instance yet (an empty map with a title that says so).
HeatmapModel CollectivesHeatmapOf(const std::pair<uint64_t, std::string>* pick,
                                  const std::vector<CollectiveInstance>& instances);

// Source rank x destination rank bytes of one communicator from (comm, src, dst) -> cumulative
// bytes (GpuWindow.rank_pairs): comm its label, "" = the one with the most bytes (summed
// saturating at 2^64 - 1), with `comms` non-null among those only. At most 1,024 ranks a side.
HeatmapModel RanksHeatmapOf(const std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t>& all,
                            const std::string& comm, const std::set<uint64_t>* comms = nullptr);

}  // namespace fabricscope::exporters
