#include "agent/job_identity.h"

#include "absl/strings/str_cat.h"
#include "collectors/gpu/wire_decode.h"
#include "collectors/sysfs_ports.h"

namespace fabricscope::agent {

namespace gpu = collectors::gpu;

namespace {

const char* SchedulerName(uint8_t s) {
  switch (static_cast<gpu::JobScheduler>(s)) {
    case gpu::JobScheduler::kOverride:
      return "override";
    case gpu::JobScheduler::kSlurm:
      return "slurm";
    case gpu::JobScheduler::kTorchrun:
      return "torchrun";
    case gpu::JobScheduler::kKubernetes:
      return "kubernetes";
    case gpu::JobScheduler::kMpi:
      return "mpi";
    case gpu::JobScheduler::kNone:
      break;
  }
  return "";
}

}  // namespace

v1::Job JobFromCgroupOf(const std::string& procfs_root, pid_t pid) {
  v1::Job job;
  // A process in 60 cgroup v1 hierarchies with deep paths stays well under 64 KiB.
  auto text = collectors::ReadSmallFile(absl::StrCat(procfs_root, "/", pid, "/cgroup"), 65536);
  if (!text.ok()) return job;
  const gpu::CgroupJob c = gpu::JobFromProcCgroup(*text);
  if (!c.slurm_job.empty()) {
    job.set_id(c.slurm_job);
    job.set_scheduler("slurm");
    job.set_step(c.slurm_step);
  } else if (!c.pod_uid.empty()) {
    job.set_id(c.pod_uid);
    job.set_scheduler("kubernetes");
    job.set_pod_uid(c.pod_uid);
  } else {
    return job;
  }
  job.set_source("cgroup");
  return job;
}

v1::Job JobFromClaim(const gpu::JobRecord& claim) {
  v1::Job job;
  job.set_id(gpu::FixedString(claim.id));
  job.set_scheduler(SchedulerName(claim.scheduler));
  job.set_name(gpu::FixedString(claim.name));
  job.set_user(gpu::FixedString(claim.user));
  job.set_step(gpu::FixedString(claim.step));
  job.set_pod_namespace(gpu::FixedString(claim.pod_namespace));
  job.set_pod(gpu::FixedString(claim.pod));
  job.set_pod_uid(gpu::FixedString(claim.pod_uid));
  if (!job.id().empty()) job.set_source("environment");
  return job;
}

v1::Job MergeClaim(const v1::Job& cgroup, const gpu::JobRecord& claim, bool* contradicted) {
  *contradicted = false;
  v1::Job claimed = JobFromClaim(claim);
  if (cgroup.id().empty()) return claimed;
  // Does the claim speak of the cgroup's job, and does it agree? Only the scheduler's own key
  // can: the Slurm job id or SLUID, the pod uid. A claim without that key says nothing.
  bool stated = false, agrees = false;
  if (cgroup.scheduler() == "slurm") {
    const std::string job_id = gpu::FixedString(claim.slurm_job_id);
    const std::string sluid = gpu::FixedString(claim.slurm_sluid);
    stated = !job_id.empty() || !sluid.empty();
    agrees = cgroup.id() == job_id || cgroup.id() == sluid;
  } else if (cgroup.scheduler() == "kubernetes") {
    stated = !claimed.pod_uid().empty();
    agrees = claimed.pod_uid() == cgroup.pod_uid();
  }
  if (!agrees) {
    *contradicted = stated;
    return cgroup;
  }
  // The id stays the cgroup's; the claim adds what describes it. Its own id (an array task's
  // form, the numeric id of a SLUID, a run or override the pods share) is kept beside, marked
  // unverified: a process may write anything there.
  v1::Job merged = cgroup;
  merged.set_name(claimed.name());
  merged.set_user(claimed.user());
  if (merged.step().empty()) merged.set_step(claimed.step());
  merged.set_pod_namespace(claimed.pod_namespace());
  merged.set_pod(claimed.pod());
  if (!claimed.id().empty() && claimed.id() != cgroup.id()) merged.set_claimed_id(claimed.id());
  merged.set_source("cgroup+environment");
  return merged;
}

void AttachJobs(const std::map<int32_t, v1::Job>& jobs_by_pid, v1::GpuWindow* w) {
  std::map<std::string, const v1::Job*> used;
  auto job_of = [&](int32_t pid) -> std::string {
    auto it = jobs_by_pid.find(pid);
    if (it == jobs_by_pid.end()) return "";
    used.emplace(it->second.id(), &it->second);
    return it->second.id();
  };
  for (v1::Communicator& c : *w->mutable_communicators()) c.set_job_id(job_of(c.pid()));
  for (v1::GpuProducer& p : *w->mutable_ingest()->mutable_producers()) {
    const std::string id = job_of(p.pid());
    if (!id.empty()) p.set_job_id(id);
  }
  for (const auto& [id, job] : used) {
    if (static_cast<size_t>(w->jobs_size()) >= kMaxJobsPerWindow) break;
    *w->add_jobs() = *job;
  }
}

}  // namespace fabricscope::agent
