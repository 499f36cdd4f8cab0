// The job a producer is attributed to, with real cgroups: the test creates Slurm-shaped and
// kubepods-shaped cgroups (cgroup v1 on the `pids` hierarchy, cgroup v2 on the unified tree),
// moves a real producer process into one before it connects, and checks the job GpuIngest
// names from its SO_PEERCRED pid, and how its claim (JobRecord) merges. Skips, saying why, where
// no hierarchy is writable (not root, or no such mount).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/gpu_ingest.h"
#include "collectors/gpu/job_identity.h"
#include "collectors/gpu/producer.h"
#include "gtest/gtest.h"
#include "tests/agent/gpu_ingest_util.h"
#include "tests/common/fake_tree.h"
#include "tests/common/wait.h"

namespace fabricscope::agent {
namespace {

namespace gpu = collectors::gpu;
namespace fs = std::filesystem;
using fabricscope::testing::WaitFor;

// A cgroup directory the test made (every level it created), removed bottom-up at the end
// (once the process in it has exited).
class TestCgroup {
 public:
  // mount: "/sys/fs/cgroup/pids" (v1) or "/sys/fs/cgroup/unified" (v2); rel: the layout.
  TestCgroup(const std::string& mount, const std::string& rel) : leaf_(mount + rel) {
    if (!fs::is_directory(mount) || geteuid() != 0) return;
    fs::path p = mount;
    for (const auto& part : fs::path(rel).relative_path()) {
      p /= part;
      std::error_code ec;
      if (fs::create_directory(p, ec)) made_.push_back(p);
      if (ec) return;
    }
    ok_ = fs::is_directory(leaf_);
  }
  ~TestCgroup() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) rmdir(it->c_str());
  }
  bool ok() const { return ok_; }
  bool Move(pid_t pid) const {
    std::ofstream procs(leaf_ + "/cgroup.procs");
    procs << pid << std::flush;
    return static_cast<bool>(procs);
  }

 private:
  std::string leaf_;
  std::vector<fs::path> made_;
  bool ok_ = false;
};

// A producer process: waits for the go byte (sent once it is in its cgroup), connects with
// `claim` as its job, sends one CommRecord, and lives until it reads EOF.
pid_t StartProducer(const std::string& socket, const gpu::JobRecord& claim, int* go_fd) {
  int go[2];
  if (pipe(go) != 0) return -1;
  const pid_t pid = fork();
  if (pid != 0) {
    close(go[0]);
    *go_fd = go[1];
    return pid;
  }
  close(go[1]);
  char byte;
  if (read(go[0], &byte, 1) != 1) _exit(2);
  gpu::ProducerChannel channel(gpu::Source::kNcclProfiler, socket);
  channel.SetJob(claim, getpid());
  alignas(8) unsigned char buf[512];
  gpu::DatagramWriter w(buf, sizeof(buf), gpu::Source::kNcclProfiler, getpid());
  gpu::CommRecord comm{};
  comm.comm_hash = 0xabcdef0012345678ull;
  comm.nranks = 1;
  comm.cuda_device = -1;
  w.Append(comm);
  const size_t size = w.Finish(1, 0, gpu::MonotonicNowNs());
  bool sent = false;
  for (int i = 0; i < 200 && !sent; ++i) {
    sent = channel.Send(buf, size);
    if (!sent) usleep(10'000);
  }
  while (read(go[0], &byte, 1) > 0) {
  }
  _exit(sent ? 0 : 1);
}

struct Layout {
  const char* what;
  const char* mount;
  std::string rel;  // the cgroup, from slurmstepd's or the kubelet's layout
  std::string job;  // what the agent must name
  std::string scheduler;
};

std::vector<Layout> Layouts() {
  const std::string n = absl::StrCat(900000 + getpid() % 100000);
  const std::string uid = absl::StrFormat("4b3f9a2c-1d2e-4f5a-8b9c-%012d", getpid());
  std::string uid_ = uid;
  std::replace(uid_.begin(), uid_.end(), '-', '_');
  return {
      // Slurm cgroup v1 (src/plugins/cgroup/v1/xcgroup.c): /slurm/uid_<uid>/job_<id>/step_<s>.
      {"slurm v1", "/sys/fs/cgroup/pids", "/slurm/uid_0/job_" + n + "/step_0/task_0", n, "slurm"},
      // Slurm cgroup v2 (src/plugins/cgroup/v2/cgroup_v2.c) with CgroupJobIdPaths=yes.
      {"slurm v2", "/sys/fs/cgroup/unified",
       "/system.slice/slurmstepd.scope/job_" + n + "/step_0/user/task_0", n, "slurm"},
      // The kubelet's cgroupfs driver on v1 and its systemd driver on v2.
      {"pod cgroupfs v1", "/sys/fs/cgroup/pids", "/kubepods/burstable/pod" + uid + "/c0", uid,
       "kubernetes"},
      {"pod systemd v2", "/sys/fs/cgroup/unified",
       "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uid_ +
           ".slice/cri-containerd-c0.scope",
       uid, "kubernetes"},
  };
}

// A producer with an empty claim (no scheduler variables: the environment of `env -i`), moved
// into each layout before it connects, is named by its cgroup.
TEST(GpuIngestJob, AProducerInARealCgroupIsNamedByIt) {
  fabricscope::testing::FakeTree dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  size_t ran = 0;
  for (const Layout& l : Layouts()) {
    SCOPED_TRACE(l.what);
    TestCgroup cg(l.mount, l.rel);
    if (!cg.ok()) {
      std::cerr << "skipped " << l.what << ": cannot create " << l.mount << l.rel
                << " (needs root and that hierarchy mounted)\n";
      continue;
    }
    int go = -1;
    gpu::JobRecord nothing{};  // what JobFromEnvironment reads from an empty environment
    nothing.version = gpu::kJobRecordVersion;
    nothing.rank = -1;
    const pid_t pid = StartProducer(o.socket_path, nothing, &go);
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(cg.Move(pid));
    ASSERT_EQ(write(go, "g", 1), 1);
    v1::Job job;
    EXPECT_TRUE(WaitFor([&] {
      const auto jobs = ingest.JobsByPid();
      auto it = jobs.find(pid);
      if (it == jobs.end()) return false;
      job = it->second;
      return true;
    }));
    EXPECT_EQ(job.id(), l.job);
    EXPECT_EQ(job.scheduler(), l.scheduler);
    EXPECT_EQ(job.source(), "cgroup");
    close(go);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ++ran;
  }
  if (ran == 0) GTEST_SKIP() << "no cgroup hierarchy writable here (needs root)";
}

// A producer in a Slurm job's cgroup that claims another job (a copied environment) is named by
// its cgroup and counted; one whose claim agrees brings its name along.
TEST(GpuIngestJob, AClaimTheCgroupContradictsIsCountedAndTheCgroupWins) {
  const Layout l = Layouts()[0];
  TestCgroup cg(l.mount, l.rel);
  if (!cg.ok()) GTEST_SKIP() << "cannot create " << l.mount << l.rel << " (needs root)";
  fabricscope::testing::FakeTree dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  auto claim = [](const std::string& job_id, const char* name) {
    gpu::JobRecord r{};
    r.version = gpu::kJobRecordVersion;
    r.scheduler = static_cast<uint8_t>(gpu::JobScheduler::kSlurm);
    r.rank = -1;
    gpu::CopyFixed(r.id, job_id.c_str());
    gpu::CopyFixed(r.slurm_job_id, job_id.c_str());
    gpu::CopyFixed(r.name, name);
    return r;
  };
  for (const auto& [claimed, name, want_name, contradictions] :
       {std::tuple{std::string("1"), "forged", "", 1u}, std::tuple{l.job, "llama", "llama", 1u}}) {
    int go = -1;
    const pid_t pid = StartProducer(o.socket_path, claim(claimed, name), &go);
    ASSERT_GT(pid, 0);
    ASSERT_TRUE(cg.Move(pid));
    ASSERT_EQ(write(go, "g", 1), 1);
    EXPECT_TRUE(WaitFor([&] {
      const auto jobs = ingest.JobsByPid();
      auto it = jobs.find(pid);
      return it != jobs.end() && it->second.id() == l.job && it->second.name() == want_name &&
             StatsOf(ingest).job_claims_contradicted_total() == contradictions;
    })) << claimed;
    close(go);
    waitpid(pid, nullptr, 0);
  }
}

}  // namespace
}  // namespace fabricscope::agent
