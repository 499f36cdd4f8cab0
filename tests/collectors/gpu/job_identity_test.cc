#include "collectors/gpu/job_identity.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "collectors/gpu/wire_decode.h"

namespace fabricscope::collectors::gpu {
namespace {

// Cgroup paths as slurmstepd and the kubelet make them. Slurm cgroup v1: src/plugins/cgroup/v1/
// xcgroup.c xcgroup_create_hierarchy ("%s/uid_%u", "%s/job_%u", "%s/step_%s" under the
// CgroupPrepend "/slurm", "/slurm_%n" with MULTIPLE_SLURMD: src/interfaces/cgroup.c) and
// task_cgroup_*'s "task_%u"; cgroup v2: src/plugins/cgroup/v2/cgroup_v2.c _set_int_cg_ns
// ("%s/%s.scope" in the CgroupSlice, "%s_%s.scope" with the node name under MULTIPLE_SLURMD),
// cgroup_p_step_create ("/job_%u" or the SLUID, "%s/step_%s", "%s/user", "%s/task_%u").
// Kubernetes: pkg/kubelet/cm/cgroup_manager_linux.go (ToSystemd: "-" joined, '-' escaped to
// '_' in each part, ".slice"; ToCgroupfs: "/" joined) of {"kubepods", qos, "pod" + uid}, the
// Guaranteed class without the qos part (pkg/kubelet/cm/qos_container_manager_linux.go).
TEST(JobFromCgroupPath, ReadsSlurmAndKubeletLayouts) {
  struct Case {
    const char* path;
    std::string job, step, pod;
    bool sluid;
    int64_t uid;
  };
  const Case cases[] = {
      {"/slurm/uid_1000/job_8812/step_0/task_3", "8812", "0", "", false, 1000},
      {"/slurm_node7/uid_0/job_17/step_batch", "17", "batch", "", false, 0},
      {"/slurm/uid_5/job_99", "99", "", "", false, 5},
      {"/system.slice/slurmstepd.scope/job_8812/step_2/user/task_0", "8812", "2", "", false, -1},
      {"/system.slice/node7_slurmstepd.scope/job_3/step_extern/slurm", "3", "extern", "", false,
       -1},
      {"/system.slice/slurmstepd.scope/sEKNKTV3WPV500/step_0/user/task_1", "sEKNKTV3WPV500", "0",
       "", true, -1},
      {"/kubepods.slice/kubepods-burstable.slice/"
       "kubepods-burstable-pod4b3f9a2c_1d2e_4f5a_8b9c_0d1e2f3a4b5c.slice/"
       "cri-containerd-0123abcd.scope",
       "", "", "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c", false, -1},
      {"/kubepods.slice/kubepods-pod4b3f9a2c_1d2e_4f5a_8b9c_0d1e2f3a4b5c.slice", "", "",
       "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c", false, -1},
      {"/kubepods/besteffort/pod4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c/0123abcd", "", "",
       "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c", false, -1},
      {"/kubepods/pod4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c/0123abcd", "", "",
       "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c", false, -1},
  };
  // As a reader in a cgroup namespace sees them (cgroup_namespaces(7)): through "..".
  const Case in_namespace[] = {
      {"/../../slurm/uid_0/job_5/step_0", "5", "0", "", false, 0},
      {"/../../besteffort/pod4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c/c1", "", "",
       "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c", false, -1},
  };
  std::vector<Case> all(std::begin(cases), std::end(cases));
  all.insert(all.end(), std::begin(in_namespace), std::end(in_namespace));
  for (const Case& c : all) {
    const CgroupJob j = JobFromCgroupPath(c.path);
    EXPECT_EQ(j.slurm_job, c.job) << c.path;
    EXPECT_EQ(j.slurm_step, c.step) << c.path;
    EXPECT_EQ(j.pod_uid, c.pod) << c.path;
    EXPECT_EQ(j.slurm_job_is_sluid, c.sluid) << c.path;
    EXPECT_EQ(j.slurm_uid, c.uid) << c.path;
  }
}

// Paths that look close but are not a job: slurmstepd's own "system" directory, a user's
// directory named like Slurm's outside its layout, a uid that is not a number, a pod directory
// outside kubepods, a uid of the wrong shape, SLUIDs with letters Crockford's alphabet lacks.
TEST(JobFromCgroupPath, NamesNoJobForLookAlikes) {
  for (const char* path : {"/", "", "/system.slice/slurmstepd.scope/system",
                           "/user.slice/user-1000.slice/job_12/step_0", "/slurm/uid_x/job_12",
                           "/slurm/job_12/step_0", "/pod4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c",
                           "/kubepods/burstable/pod1234", "/kubepods.slice/kubepods-podxyz.slice",
                           "/system.slice/slurmstepd.scope/sEKNKTV3WPV5OU/step_0",
                           "/system.slice/slurmstepd.scope/job_/step_0", "//slurm//uid_0//",
                           // A Slurm v1 layout not at the hierarchy's root.
                           "/x/slurm/uid_0/job_5/step_0",
                           // Below a user's systemd manager: delegated, anyone's to name.
                           "/user.slice/user-1000.slice/user@1000.service/app.slice/"
                           "slurmstepd.scope/job_9001/step_0",
                           "/user.slice/user-1000.slice/user@1000.service/kubepods/"
                           "pod4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c"}) {
    EXPECT_TRUE(JobFromCgroupPath(path).empty()) << path;
  }
}

// /proc/<pid>/cgroup (cgroups(7)): the v2 line "0::path" first, then the v1 lines in order;
// malformed lines are skipped.
TEST(JobFromProcCgroup, ReadsV2FirstThenV1AndSkipsMalformedLines) {
  const std::string v1 =
      "12:pids:/slurm/uid_0/job_4242/step_0/task_0\n"
      "11:memory:/slurm/uid_0/job_4242/step_0\n"
      "1:name=systemd:/user.slice\n"
      "0::/\n";
  CgroupJob j = JobFromProcCgroup(v1);
  EXPECT_EQ(j.slurm_job, "4242");
  EXPECT_EQ(j.slurm_step, "0");
  const std::string both =
      "4:pids:/slurm/uid_0/job_1/step_0\n"
      "0::/system.slice/slurmstepd.scope/job_2/step_1/user/task_0\n";
  EXPECT_EQ(JobFromProcCgroup(both).slurm_job, "2");
  EXPECT_EQ(JobFromProcCgroup("garbage\n::\n7\n\n").slurm_job, "");
  EXPECT_EQ(JobFromProcCgroup("junk line\n3:pids:/slurm/uid_1/job_77/step_0").slurm_job, "77");
  EXPECT_TRUE(JobFromProcCgroup("").empty());
}

std::string Str(const char* fixed) { return std::string(fixed); }

struct Env {
  std::map<std::string, std::string> vars;
  EnvLookup Lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

// The precedence of job_identity.h: FABRICSCOPE_JOB_ID, Slurm, torchrun, the pod, PMIx; what
// the others set fills fields still empty.
TEST(JobFromEnvironment, FollowsThePrecedenceAndFillsTheRest) {
  Env slurm{{{"SLURM_JOB_ID", "8813"},
             {"SLURM_ARRAY_JOB_ID", "8812"},
             {"SLURM_ARRAY_TASK_ID", "1"},
             {"SLURM_JOB_NAME", "llama-70b"},
             {"SLURM_STEP_ID", "0"},
             {"SLURM_JOB_USER", "ana"},
             {"SLURM_JOB_SLUID", "sEKNKTV3WPV500"},
             {"TORCHELASTIC_RUN_ID", "run-7"},
             {"PMI_RANK", "12"},
             {"PMIX_NAMESPACE", "slurm.pmix.8813.0"}}};
  JobRecord r = JobFromEnvironment(slurm.Lookup(), "");
  EXPECT_EQ(r.version, kJobRecordVersion);
  EXPECT_EQ(r.scheduler, static_cast<uint8_t>(JobScheduler::kSlurm));
  EXPECT_EQ(Str(r.id), "8812_1");  // the array task as squeue names it
  EXPECT_EQ(Str(r.slurm_job_id), "8813");
  EXPECT_EQ(Str(r.slurm_sluid), "sEKNKTV3WPV500");
  EXPECT_EQ(Str(r.name), "llama-70b");
  EXPECT_EQ(Str(r.user), "ana");
  EXPECT_EQ(Str(r.step), "0");
  EXPECT_EQ(r.rank, 12);

  slurm.vars["FABRICSCOPE_JOB_ID"] = "exp-3";
  slurm.vars["FABRICSCOPE_JOB_NAME"] = "my experiment";
  r = JobFromEnvironment(slurm.Lookup(), "");
  EXPECT_EQ(r.scheduler, static_cast<uint8_t>(JobScheduler::kOverride));
  EXPECT_EQ(Str(r.id), "exp-3");
  EXPECT_EQ(Str(r.name), "my experiment");
  EXPECT_EQ(Str(r.slurm_job_id), "8813");  // still there for the agent to check

  // torchrun's default run id "none" names no job; a pod from the downward API does.
  Env pod{{{"TORCHELASTIC_RUN_ID", "none"},
           {"RANK", "3"},
           {"FABRICSCOPE_POD_UID", "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c"},
           {"FABRICSCOPE_POD_NAME", "llama-worker-3"},
           {"FABRICSCOPE_POD_NAMESPACE", "research"}}};
  r = JobFromEnvironment(pod.Lookup(), "");
  EXPECT_EQ(r.scheduler, static_cast<uint8_t>(JobScheduler::kKubernetes));
  EXPECT_EQ(Str(r.id), "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c");
  EXPECT_EQ(Str(r.pod), "llama-worker-3");
  EXPECT_EQ(Str(r.pod_namespace), "research");
  EXPECT_EQ(r.rank, 3);
  pod.vars["TORCHELASTIC_RUN_ID"] = "llama-run";
  EXPECT_EQ(Str(JobFromEnvironment(pod.Lookup(), "").id), "llama-run");

  // No pod variables: the pod uid of the process's own cgroup.
  Env bare;
  r = JobFromEnvironment(
      bare.Lookup(),
      "0::/kubepods.slice/kubepods-besteffort.slice/"
      "kubepods-besteffort-pod4b3f9a2c_1d2e_4f5a_8b9c_0d1e2f3a4b5c.slice/cri-containerd-1.scope\n");
  EXPECT_EQ(Str(r.pod_uid), "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c");
  EXPECT_EQ(Str(r.id), "4b3f9a2c-1d2e-4f5a-8b9c-0d1e2f3a4b5c");

  // MPI without a scheduler; nothing at all.
  Env mpi{{{"PMIX_NAMESPACE", "prterun-host-4711@1"}, {"OMPI_COMM_WORLD_RANK", "x"}}};
  r = JobFromEnvironment(mpi.Lookup(), "");
  EXPECT_EQ(r.scheduler, static_cast<uint8_t>(JobScheduler::kMpi));
  EXPECT_EQ(Str(r.id), "prterun-host-4711@1");
  EXPECT_EQ(r.rank, -1);  // not a number
  r = JobFromEnvironment(bare.Lookup(), "");
  EXPECT_EQ(r.scheduler, static_cast<uint8_t>(JobScheduler::kNone));
  EXPECT_EQ(Str(r.id), "");
}

// A 1 MB job name and a name cut inside a UTF-8 character: truncated to the field, still valid
// UTF-8, nothing else disturbed.
TEST(JobFromEnvironment, TruncatesLongValuesAtACharacterBoundary) {
  Env e{{{"FABRICSCOPE_JOB_ID", std::string(1 << 20, 'j')},
         {"FABRICSCOPE_JOB_NAME", std::string(62, 'a') + "\xc3\xa9\xc3\xa9"},
         {"SLURM_JOB_ID", "5"}}};
  const JobRecord r = JobFromEnvironment(e.Lookup(), "");
  EXPECT_EQ(Str(r.id), std::string(sizeof(r.id) - 1, 'j'));
  EXPECT_EQ(Str(r.name), std::string(62, 'a'));  // the é that did not fit whole is left out
  EXPECT_EQ(Str(r.slurm_job_id), "5");
}

// On the wire: a JobRecord of the known layout reaches OnJob with its strings terminated; a
// newer layout is skipped as an unknown record; a visitor that predates OnJob ignores it.
class JobVisitor : public RecordVisitor {
 public:
  void OnComm(const CommRecord&) override {}
  void OnCollective(const CollectiveRecord&) override {}
  void OnProxyOp(const ProxyOpRecord&) override {}
  void OnKernel(const KernelRecord&) override {}
  void OnJob(const JobRecord& r) override { jobs.push_back(r); }
  std::vector<JobRecord> jobs;
};

TEST(JobRecordWire, DecodesTheKnownLayoutAndSkipsANewerOne) {
  Env e{{{"SLURM_JOB_ID", "8813"}, {"SLURM_JOB_NAME", std::string(200, 'n')}}};
  JobRecord r = JobFromEnvironment(e.Lookup(), "");
  std::memset(r.user, 'u', sizeof(r.user));  // no NUL: the decoder terminates it
  alignas(8) uint8_t buf[1024];
  DatagramWriter w(buf, sizeof(buf), Source::kNcclProfiler, 1);
  ASSERT_TRUE(w.Append(r));
  r.version = kJobRecordVersion + 1;
  ASSERT_TRUE(w.Append(r));
  const size_t size = w.Finish(0, 0, 1);
  JobVisitor v;
  DecodeResult result;
  ASSERT_TRUE(DecodeDatagram(absl::Span<const uint8_t>(buf, size), v, &result).ok());
  ASSERT_EQ(v.jobs.size(), 1u);
  EXPECT_EQ(result.records, 1u);
  EXPECT_EQ(result.unknown_records, 1u);
  EXPECT_STREQ(v.jobs[0].id, "8813");
  EXPECT_EQ(Str(v.jobs[0].name), std::string(sizeof(r.name) - 1, 'n'));
  EXPECT_EQ(Str(v.jobs[0].user), std::string(sizeof(r.user) - 1, 'u'));
}

}  // namespace
}  // namespace fabricscope::collectors::gpu
