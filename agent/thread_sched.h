#pragma once

// Where and at which priority the fast sampler thread runs (--sampler-cpu, --sampler-priority;
// issue 38): on a node busy with a training job's data loaders, the default CFS thread misses
// its 100 us deadlines while other runnable threads hold its CPU. Pinning it to a CPU the job
// leaves alone, or giving it SCHED_FIFO, keeps it on time.
//
// SCHED_FIFO is bounded two ways: the priority is at most kMaxSamplerFifoPriority, below the
// kernel's threaded interrupt handlers (they run at FIFO 50: kernel/irq/manage.c
// setup_irq_thread -> sched_set_fifo, MAX_RT_PRIO / 2), so the NIC's own interrupts still come
// first; and the sampler sleeps between ticks (clock_nanosleep), using a few percent of one CPU
// at 100 us, under the kernel's real-time throttle (sched_rt_runtime_us, 95% by default).

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricscope::agent {

inline constexpr int kMaxSamplerFifoPriority = 49;

struct ThreadSched {
  int cpu = -1;           // pin to this CPU; -1 = wherever the scheduler puts it
  int fifo_priority = 0;  // SCHED_FIFO at this priority (1..kMaxSamplerFifoPriority); 0 = normal
};

// Parses --sampler-priority: "normal" (or empty) -> 0, "fifo:N" -> N in 1..49.
// Errors: InvalidArgument naming the text and the accepted forms.
absl::StatusOr<int> ParseSamplerPriority(absl::string_view text);

// Checks, before any thread starts, that `s` can be applied: the CPU exists and is in this
// process's affinity mask (sched_getaffinity: a cpuset or systemd's CPUAffinity may narrow it),
// and SCHED_FIFO is allowed: CAP_SYS_NICE in the effective set, or RLIMIT_RTPRIO at least the
// priority (sched(7)). Errors: InvalidArgument for a CPU outside the mask (the mask is listed),
// PermissionDenied for FIFO without either, saying how to grant it.
absl::Status CheckThreadSched(const ThreadSched& s);

// Applies `s` to the calling thread (pthread_setaffinity_np, pthread_setschedparam). Errors:
// the errno of the call that failed, with what was asked (a cgroup v1 cpu controller with no
// real-time budget, cpu.rt_runtime_us = 0, refuses FIFO even to root: EPERM).
absl::Status ApplyThreadSched(const ThreadSched& s);

// "cpu 3, SCHED_FIFO 10", "unpinned, normal priority".
std::string DescribeThreadSched(const ThreadSched& s);

}  // namespace fabricscope::agent
