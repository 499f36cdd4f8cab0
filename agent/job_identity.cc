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
  bool agrees = false;
  if (cgroup.scheduler() == "slurm") {
    const std::string job_id = gpu::FixedString(claim.slurm_job_id);
    const std::string sluid = gpu::FixedString(claim.slurm_sluid);
    agrees = (!job_id.empty() && job_id == cgroup.id()) || (!sluid.empty() && sluid == cgroup.id());
    // The step is the cgroup's: the process cannot leave its step's cgroup.
    if (agrees) claimed.set_step(cgroup.step().empty() ? claimed.step() : cgroup.step());
  } else if (cgroup.scheduler() == "kubernetes") {
    agrees = claimed.pod_uid() == cgroup.pod_uid();
    // A pod's id is its uid unless the claim names the job its pods share (a torchrun run, an
    // override set from a job label by the downward API): kept when the pod agrees.
  }
  if (!agrees) {
    *contradicted = !claimed.id().empty();
    return cgroup;
  }
  if (cgroup.scheduler() == "slurm" && claimed.scheduler() != "slurm") {
    claimed.set_id(cgroup.id());  // an override inside a Slurm job: the cgroup's job id
    claimed.set_scheduler("slurm");
  }
  claimed.set_source("cgroup+environment");
  return claimed;
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
