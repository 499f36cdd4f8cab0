#pragma once

// The job of a producer process (a training rank that loaded the NCCL plugin or the CUPTI
// library), as the agent resolves it: from the process's cgroup, which only slurmstepd or the
// kubelet can set, and from what the process claims in its JobRecord (its environment,
// collectors/gpu/job_identity.h). Where the two disagree the cgroup wins and the disagreement is
// counted (GpuIngestStats.job_claims_contradicted_total).

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "collectors/gpu/job_identity.h"
#include "collectors/gpu/wire.h"
#include "fabricscope/v1/gpu.pb.h"

namespace fabricscope::agent {

// The job /proc/<pid>/cgroup names (under `procfs_root`, "/proc" on a real node): a Slurm job
// (scheduler "slurm", id the job id or, for a Slurm 26.05+ cgroup v2 directory, the SLUID; step;
// user left empty: the cgroup has the uid only) or a Kubernetes pod (scheduler "kubernetes", id
// and pod_uid the pod's uid), source "cgroup". An empty Job (id "") when the file is unreadable
// (the process is gone, or hides in another pid namespace) or names neither.
v1::Job JobFromCgroupOf(const std::string& procfs_root, pid_t pid);

// A producer's JobRecord as a Job (source "environment"); strings are made valid UTF-8.
v1::Job JobFromClaim(const collectors::gpu::JobRecord& claim);

// Merges what a producer claims into what its cgroup says (`cgroup`, from JobFromCgroupOf).
// Returns the job to attribute its records to:
//   * no cgroup job: the claim (source "environment");
//   * the claim agrees (its SLURM_JOB_ID or SLURM_JOB_SLUID is the cgroup's job, its pod uid
//     the cgroup's pod): the cgroup's job, its id unchanged, with the claim's name, user, step,
//     namespace and pod, and the claim's own id in claimed_id where it differs (unverified),
//     source "cgroup+environment";
//   * otherwise the cgroup's job alone; *contradicted is set when the claim carried the
//     scheduler's key (a Slurm job id or SLUID, a pod uid) and it differs. A claim without it
//     (a process that could not read its own pod uid) contradicts nothing.
v1::Job MergeClaim(const v1::Job& cgroup, const collectors::gpu::JobRecord& claim,
                   bool* contradicted);

// Labels a window's communicators with the job of the process that joined each
// (Communicator.job_id, from `jobs_by_pid`: GpuIngest::JobsByPid) and its producers likewise,
// and lists those jobs once each in w->jobs (at most kMaxJobsPerWindow, the first by id).
inline constexpr size_t kMaxJobsPerWindow = 64;
void AttachJobs(const std::map<int32_t, v1::Job>& jobs_by_pid, v1::GpuWindow* w);

}  // namespace fabricscope::agent
