#pragma once

// Which job a training process belongs to, in the user's terms (a Slurm job, a Kubernetes pod, a
// torchrun run), from the two places a process's identity can be read:
//   * its environment, read once by the producer libraries at init (JobFromEnvironment): what the
//     process claims;
//   * its cgroup, /proc/<pid>/cgroup, read by the agent for the producer's SO_PEERCRED pid
//     (JobFromProcCgroup): what the process cannot forge, since creating and entering these
//     cgroups takes root (slurmstepd, the kubelet). So a layout counts only where root alone
//     makes directories: the Slurm v1 layout at a hierarchy's root, and nothing below a user's
//     systemd manager (user.slice, user@<uid>.service), whose subtree systemd delegates to the
//     user (a user could name a directory there .../slurmstepd.scope/job_9001).
//
// Dependency-free (libc + libstdc++ only), like producer.h: linked into the producer libraries
// loaded by training processes, and into the agent.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "collectors/gpu/wire.h"

namespace fabricscope::collectors::gpu {

// What a cgroup path says about its process. Empty strings = not found.
struct CgroupJob {
  // Slurm (src/plugins/cgroup/v1/xcgroup.c xcgroup_create_hierarchy, cgroup v1:
  //   /slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/task_<n> under each controller;
  // src/plugins/cgroup/v2/cgroup_v2.c cgroup_p_step_create, cgroup v2:
  //   /<slice>/[<node>_]slurmstepd.scope/job_<id>/step_<step>/user/task_<n>, where from Slurm
  //   26.05 the job directory is the job's SLUID, "s" + 13 base-32 characters
  //   (src/common/sluid.c print_sluid), unless cgroup.conf sets CgroupJobIdPaths=yes).
  std::string slurm_job;  // "8812", or the SLUID "sEKNKTV3WPV500"
  bool slurm_job_is_sluid = false;
  std::string slurm_step;  // log_build_step_id_str: "0", "batch", "extern", "interactive", "0+1"
  int64_t slurm_uid = -1;  // v1 only (uid_<uid>)
  // Kubernetes (kubelet pkg/kubelet/cm/cgroup_manager_linux.go CgroupName.ToSystemd and
  // escapeSystemdCgroupName, pod_container_manager_linux.go GetPodContainerName): the pod's
  // cgroup is "pod<uid>" under kubepods[/<qos>] with the cgroupfs driver, and
  // kubepods[-<qos>]-pod<uid with '-' as '_'>.slice with the systemd driver.
  std::string pod_uid;  // with dashes, as the API server spells it

  bool empty() const { return slurm_job.empty() && pod_uid.empty(); }
};

// Reads one cgroup path (the third field of a /proc/<pid>/cgroup line, or a path under a cgroup
// mount). Leading ".." components (a reader in a cgroup namespace, cgroup_namespaces(7)) are
// skipped, and with them a "pod<uid>" directory is taken without its kubepods parent.
// Components that match none of the layouts above are ignored; the first match wins.
CgroupJob JobFromCgroupPath(std::string_view path);

// Reads the text of /proc/<pid>/cgroup (cgroups(7): "hierarchy-ID:controller-list:path" per
// line; cgroup v2's line is "0::path"). The v2 line is read first, then each v1 line in order;
// the first line whose path names a job wins. Malformed lines are skipped.
CgroupJob JobFromProcCgroup(std::string_view text);

// The environment variables a process's identity is read from, in precedence order (the first
// that names a job sets JobRecord::id and ::scheduler; fields of the others that are set fill
// what is still empty):
//   FABRICSCOPE_JOB_ID, FABRICSCOPE_JOB_NAME   override (any launcher)
//   SLURM_JOB_ID, SLURM_ARRAY_JOB_ID + SLURM_ARRAY_TASK_ID ("<array job>_<task>", as squeue
//     prints an array task), SLURM_JOB_NAME, SLURM_STEP_ID, SLURM_JOB_USER,
//     SLURM_JOB_SLUID (Slurm's src/common/env.c setup_env and env_array_for_batch_job)
//   TORCHELASTIC_RUN_ID (torchrun's --rdzv-id; its default "none" names no job)
//   FABRICSCOPE_POD_UID, FABRICSCOPE_POD_NAME, FABRICSCOPE_POD_NAMESPACE   (set from the
//     Kubernetes downward API, metadata.uid / .name / .namespace: deploy/README.md has the
//     snippet); without them, the pod uid of this process's own cgroup
//   PMIX_NAMESPACE (the PMIx job namespace that Open MPI 5 and Slurm's PMIx plugin set)
// The rank: OMPI_COMM_WORLD_RANK, PMI_RANK, then RANK (torchrun); -1 when none is a number.
// `getenv` looks a variable up (nullptr = unset); `self_cgroup` is the text of
// /proc/self/cgroup ("" when unreadable). Long values are truncated (CopyFixed).
using EnvLookup = std::function<const char*(const char*)>;
JobRecord JobFromEnvironment(const EnvLookup& getenv, std::string_view self_cgroup);

// JobFromEnvironment(::getenv, the contents of /proc/self/cgroup). Call once, at init.
JobRecord JobOfThisProcess();

}  // namespace fabricscope::collectors::gpu
