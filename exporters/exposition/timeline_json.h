#pragma once

// The timeline of /api/timeline (issue 37 item 2) in the Trace Event Format, the JSON that
// Perfetto UI (ui.perfetto.dev, "Open trace file") and chrome://tracing read. Every field used
// is the format document's ("Trace Event Format", Google, rev. 2016; its sections cited here):
//   - "JSON Object Format": {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}};
//     fabricscope adds "distributedInfo" beside them (the key PyTorch profiler traces carry, read
//     by tools that line up per-rank traces, e.g. Holistic Trace Analysis): backend, the
//     communicator and world size when the trace has one, and each rank's node, pid and tid.
//   - "Metadata Events" (ph "M"): process_name / process_sort_index per node, thread_name /
//     thread_sort_index per rank, the thread's args also giving rank, world_size and comm.
//   - "Complete Events" (ph "X", ts and dur in µs): each rank's collective (args: func, seq,
//     bytes, busbw_gbps, cause, comm) and, on the same thread inside it, the NCCL kernels
//     CUPTI saw in its process (nested by their times, as the section says complete events on
//     one thread nest). Each channel's share of the kernel, "channel N" (cat "kernel_channel",
//     from the NCCL profiler's KernelCh events where the plugin sends them,
//     FABRICSCOPE_NCCL_CHANNEL_SPANS=1), on a thread of its own under the rank's ("rank R
//     channel N": channels run in parallel, and events on one thread must nest), cut to the
//     collective and to the kernel CUPTI saw around it (the two clocks are fitted separately).
//   - "Flow Events" (ph "s" and "f", cat "straggler", one id per waiting rank, "bp": "e" so that
//     each end binds to the enclosing slice): from the late rank's collective, at its start, to
//     every rank that waited for it.
//   - "Counter Events" (ph "C", process-local): per port "<port> utilization" with the series
//     transmit and receive, 0..1 (1 ms buckets for what memory holds, else the history's 10 s
//     entries), and "<port> samples (flight recorder)" at the agent's sampling period where it
//     attached its samples (around a slow collective, a burst with loss).
//   - "Instant Events" (ph "i", "s": "p", process scope): microbursts, loss episodes, link state
//     changes and diagnosis changes, their fields in args.
// Times: ts is µs since otherData.from_unix_ns (fractions keep ns), since absolute Unix µs need
// more digits than a double holds.

#include <cstdint>
#include <string>
#include <vector>

namespace fabricscope::exporters {

struct TimelineSlice {  // one rank's collective
  std::string node;
  uint64_t comm = 0;
  int32_t rank = -1, nranks = 0, pid = 0;
  std::string func;
  std::string cause = "";
  uint64_t seq = 0, bytes = 0;
  double busbw = -1;                 // bytes/s; < 0 unknown
  int64_t start_ns = 0, end_ns = 0;  // Unix
  struct Channel {
    uint32_t channel = 0;
    int64_t start_ns = 0, end_ns = 0;  // Unix, inside the slice
  };
  std::vector<Channel> channels = {};  // its kernel's per-channel spans, when the plugin sent them
};

struct TimelineWait {  // the late rank, and one rank that waited for it
  uint64_t comm = 0;
  std::string func;
  uint64_t seq = 0;
  std::string late_node, waiting_node;
  int32_t late_rank = -1, waiting_rank = -1;
  int64_t at_ns = 0;        // the late rank's start (Unix)
  int64_t lateness_ns = 0;  // after the waiting rank's start
};

struct TimelineKernel {
  std::string node, name;
  int32_t pid = 0;
  int64_t start_ns = 0, end_ns = 0;
};

struct TimelineCounter {  // one port's utilization track
  std::string node, port;
  // What the track holds, after the port in its name: "utilization" (1 ms buckets from memory,
  // 10 s entries from the history) or "samples (flight recorder)" (the agent's own samples at
  // its sampling period, attached around a slow collective or a burst with loss).
  std::string track = "utilization";
  struct Point {
    int64_t ns = 0;
    double transmit = 0, receive = 0;
  };
  std::vector<Point> points;  // in time order
};

struct TimelineInstant {
  std::string node, name;
  int64_t ns = 0;
  std::string args_json = "{}";  // a JSON object
};

struct TimelineInput {
  int64_t from_ns = 0, to_ns = 0;  // Unix
  std::string scope;               // what was asked: "job=8812", "comm=9f0c1a2b", "node=n3"
  std::vector<TimelineSlice> slices;
  std::vector<TimelineWait> waits;
  std::vector<TimelineKernel> kernels;
  std::vector<TimelineCounter> counters;
  std::vector<TimelineInstant> instants;
  std::vector<std::string> notes;  // where a part came from, what was not available
};

// Trace events the input renders to (metadata included), what the 500,000 bound counts.
size_t TimelineEventCount(const TimelineInput& in);
// The whole trace. Pure.
std::string RenderTimelineJson(const TimelineInput& in);

}  // namespace fabricscope::exporters
