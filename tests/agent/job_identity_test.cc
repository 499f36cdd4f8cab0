#include "agent/job_identity.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/common/fake_tree.h"

namespace fabricscope::agent {
namespace {

namespace gpu = collectors::gpu;

gpu::JobRecord Claim(gpu::JobScheduler s, const char* id, const char* slurm_job_id = "",
                     const char* name = "", const char* pod_uid = "") {
  gpu::JobRecord r{};
  r.version = gpu::kJobRecordVersion;
  r.scheduler = static_cast<uint8_t>(s);
  r.rank = -1;
  gpu::CopyFixed(r.id, id);
  gpu::CopyFixed(r.slurm_job_id, slurm_job_id);
  gpu::CopyFixed(r.name, name);
  gpu::CopyFixed(r.pod_uid, pod_uid);
  return r;
}

v1::Job SlurmCgroup(const std::string& id, const std::string& step = "0") {
  v1::Job j;
  j.set_id(id);
  j.set_scheduler("slurm");
  j.set_step(step);
  j.set_source("cgroup");
  return j;
}

// The cgroup is read from <procfs_root>/<pid>/cgroup; an unreadable one names no job.
TEST(JobFromCgroupOf, ReadsTheProcessCgroupFile) {
  fabricscope::testing::FakeTree proc;
  proc.Write("4242/cgroup", "8:pids:/slurm/uid_1000/job_8813/step_0/task_1\n0::/\n");
  proc.Write("4243/cgroup",
             "0::/kubepods.slice/kubepods-besteffort.slice/"
             "kubepods-besteffort-pod4b3f9a2c_1d2e_4f5a_8b9c_0d1e2f3a4b5c.slice/x.scope\n");
  const v1::Job slurm = JobFromCgroupOf(proc.root(), 4242);
  EXPECT_EQ(slurm.id(), "8813");
  EXPECT_EQ(slurm.scheduler(), "slurm");
  EXPECT_EQ(slurm.step(), "0");
  EXPECT_EQ(slurm.source(), "cgroup");
  const v1::Job pod = JobFromCgroupOf(proc.root(), 4243);
  EXPECT_EQ(pod.id(), "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c");
  EXPECT_EQ(pod.scheduler(), "kubernetes");
  EXPECT_EQ(pod.pod_uid(), pod.id());
  EXPECT_EQ(JobFromCgroupOf(proc.root(), 4244).id(), "");  // gone
}

// The merge of agent/job_identity.h: the claim alone without a cgroup job; the cgroup's id with
// the claim's details when the claim's own key (Slurm job id or SLUID, pod uid) agrees; the
// cgroup's job, counted, when that key differs. A claim's id never replaces the cgroup's.
TEST(MergeClaim, TheCgroupWinsAndAnAgreeingClaimAddsItsDetails) {
  bool contradicted = true;
  // No scheduler cgroup: what the process says (a torchrun run on a bare node).
  v1::Job j = MergeClaim(v1::Job{}, Claim(gpu::JobScheduler::kTorchrun, "run-7"), &contradicted);
  EXPECT_EQ(j.id(), "run-7");
  EXPECT_EQ(j.scheduler(), "torchrun");
  EXPECT_EQ(j.source(), "environment");
  EXPECT_FALSE(contradicted);

  // A Slurm array task: its own job id in the cgroup; the array form is kept beside, unverified.
  j = MergeClaim(SlurmCgroup("8813"),
                 Claim(gpu::JobScheduler::kSlurm, "8812_1", "8813", "llama-70b"), &contradicted);
  EXPECT_EQ(j.id(), "8813");
  EXPECT_EQ(j.claimed_id(), "8812_1");
  EXPECT_EQ(j.name(), "llama-70b");
  EXPECT_EQ(j.step(), "0");
  EXPECT_EQ(j.source(), "cgroup+environment");
  EXPECT_FALSE(contradicted);

  // A Slurm 26.05 cgroup v2 directory holds the SLUID; the claim's SLURM_JOB_SLUID ties it, and
  // the numeric id it claims stays a claim: a process that writes its own SLUID and another
  // job's id does not become that job.
  gpu::JobRecord sluid = Claim(gpu::JobScheduler::kSlurm, "9001", "9001");
  gpu::CopyFixed(sluid.slurm_sluid, "sEKNKTV3WPV500");
  j = MergeClaim(SlurmCgroup("sEKNKTV3WPV500"), sluid, &contradicted);
  EXPECT_EQ(j.id(), "sEKNKTV3WPV500");
  EXPECT_EQ(j.claimed_id(), "9001");
  EXPECT_FALSE(contradicted);

  // An override inside a Slurm job: the Slurm job id, the override's name, its id as a claim.
  j = MergeClaim(SlurmCgroup("8813"),
                 Claim(gpu::JobScheduler::kOverride, "exp-3", "8813", "my experiment"),
                 &contradicted);
  EXPECT_EQ(j.id(), "8813");
  EXPECT_EQ(j.scheduler(), "slurm");
  EXPECT_EQ(j.name(), "my experiment");
  EXPECT_EQ(j.claimed_id(), "exp-3");
  EXPECT_FALSE(contradicted);

  // A claim of another job (a process that copied another job's environment): the cgroup's
  // job, none of the claim's details, counted.
  j = MergeClaim(SlurmCgroup("8813"), Claim(gpu::JobScheduler::kSlurm, "9999", "9999", "not mine"),
                 &contradicted);
  EXPECT_EQ(j.id(), "8813");
  EXPECT_EQ(j.name(), "");
  EXPECT_EQ(j.source(), "cgroup");
  EXPECT_TRUE(contradicted);
  // A claim without the scheduler's key contradicts nothing.
  j = MergeClaim(SlurmCgroup("8813"), Claim(gpu::JobScheduler::kNone, ""), &contradicted);
  EXPECT_EQ(j.id(), "8813");
  EXPECT_FALSE(contradicted);
  j = MergeClaim(SlurmCgroup("8813"), Claim(gpu::JobScheduler::kTorchrun, "run-7"), &contradicted);
  EXPECT_EQ(j.id(), "8813");
  EXPECT_FALSE(contradicted);

  // A pod: its uid is the id; the run its pods share is a claim beside it. Another pod's uid
  // contradicts; no uid at all (a process that could not read its own cgroup) does not.
  v1::Job pod;
  pod.set_id("4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c");
  pod.set_scheduler("kubernetes");
  pod.set_pod_uid(pod.id());
  pod.set_source("cgroup");
  j = MergeClaim(pod,
                 Claim(gpu::JobScheduler::kTorchrun, "llama-run", "", "",
                       "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c"),
                 &contradicted);
  EXPECT_EQ(j.id(), pod.id());
  EXPECT_EQ(j.claimed_id(), "llama-run");
  EXPECT_EQ(j.source(), "cgroup+environment");
  EXPECT_FALSE(contradicted);
  j = MergeClaim(pod,
                 Claim(gpu::JobScheduler::kKubernetes, "00000000-0000-0000-0000-000000000000", "",
                       "", "00000000-0000-0000-0000-000000000000"),
                 &contradicted);
  EXPECT_EQ(j.id(), pod.id());
  EXPECT_TRUE(contradicted);
  j = MergeClaim(pod, Claim(gpu::JobScheduler::kTorchrun, "llama-run"), &contradicted);
  EXPECT_EQ(j.id(), pod.id());
  EXPECT_EQ(j.source(), "cgroup");
  EXPECT_FALSE(contradicted);
}

// A name that is not valid UTF-8 (a producer may send anything) is repaired, not passed on:
// protobuf cannot serialize it.
TEST(MergeClaim, RepairsNamesThatAreNotUtf8) {
  bool contradicted = false;
  const v1::Job j = MergeClaim(v1::Job{}, Claim(gpu::JobScheduler::kOverride, "a\xff", "", "b\xc3"),
                               &contradicted);
  EXPECT_EQ(j.id(), "a\xef\xbf\xbd");
  EXPECT_EQ(j.name(), "b\xef\xbf\xbd");
}

// Communicators and producers are labelled with their process's job; each job is listed once.
TEST(AttachJobs, LabelsCommunicatorsAndListsEachJobOnce) {
  std::map<int32_t, v1::Job> jobs;
  jobs[100] = SlurmCgroup("8813");
  jobs[101] = SlurmCgroup("8813");
  jobs[200] = SlurmCgroup("77");
  v1::GpuWindow w;
  for (int32_t pid : {100, 101, 200, 300}) {
    v1::Communicator* c = w.add_communicators();
    c->set_pid(pid);
    w.mutable_ingest()->add_producers()->set_pid(pid);
  }
  AttachJobs(jobs, &w);
  EXPECT_EQ(w.communicators(0).job_id(), "8813");
  EXPECT_EQ(w.communicators(1).job_id(), "8813");
  EXPECT_EQ(w.communicators(2).job_id(), "77");
  EXPECT_EQ(w.communicators(3).job_id(), "");
  EXPECT_EQ(w.ingest().producers(2).job_id(), "77");
  ASSERT_EQ(w.jobs_size(), 2);
  EXPECT_EQ(w.jobs(0).id(), "77");
  EXPECT_EQ(w.jobs(1).id(), "8813");
}

}  // namespace
}  // namespace fabricscope::agent
