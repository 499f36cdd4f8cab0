// The fast sampler's CPU and priority (agent/thread_sched.h, --sampler-cpu and
// --sampler-priority): parsing, the checks before start (in forked children for the ones that
// drop capabilities or lower RLIMIT_RTPRIO), what the kernel then reports for the thread, and a
// Sampler that cannot get its CPU refusing to start.
#include "agent/thread_sched.h"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "agent/privileges.h"
#include "agent/sampler.h"
#include "collectors/spsc_ring.h"
#include "tests/common/subprocess.h"

namespace fabricscope::agent {
namespace {

using ::fabricscope::testing::InChild;

int FirstAllowedCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) return c;
  }
  return -1;
}

TEST(ThreadSched, ParsesPriorities) {
  EXPECT_EQ(*ParseSamplerPriority("normal"), 0);
  EXPECT_EQ(*ParseSamplerPriority(""), 0);
  EXPECT_EQ(*ParseSamplerPriority("fifo:1"), 1);
  EXPECT_EQ(*ParseSamplerPriority("fifo:49"), 49);
  for (const char* bad : {"fifo:0", "fifo:50", "fifo:99", "fifo:", "fifo:-3", "rr:10", "FIFO:5",
                          "fifo:10x", "high"}) {
    auto p = ParseSamplerPriority(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find("1..49"), std::string::npos) << p.status();
  }
}

TEST(ThreadSched, ACpuOutsideTheAffinityMaskIsRefusedWithTheMask) {
  const absl::Status s = CheckThreadSched(ThreadSched{CPU_SETSIZE - 1, 0});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("may run on CPUs " + std::to_string(FirstAllowedCpu())),
            std::string::npos)
      << s;
  EXPECT_TRUE(CheckThreadSched(ThreadSched{FirstAllowedCpu(), 0}).ok());
  EXPECT_TRUE(CheckThreadSched(ThreadSched{}).ok());
}

TEST(ThreadSched, FifoWithoutCapSysNiceOrRtprioIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (CAP_SYS_NICE to drop)";
  EXPECT_EQ(InChild([] {
              if (!CheckThreadSched(ThreadSched{-1, 10}).ok()) return 1;  // root: allowed
              if (!DropCapabilitiesExcept({}).ok()) return 2;
              rlimit none{0, 0};
              if (setrlimit(RLIMIT_RTPRIO, &none) != 0) return 3;
              const absl::Status s = CheckThreadSched(ThreadSched{-1, 10});
              if (!absl::IsPermissionDenied(s)) return 4;
              if (s.message().find("CAP_SYS_NICE") == absl::string_view::npos) return 5;
              if (s.message().find("LimitRTPRIO=10") == absl::string_view::npos) return 6;
              // And the kernel agrees: the thread cannot get SCHED_FIFO either.
              if (ApplyThreadSched(ThreadSched{-1, 10}).ok()) return 7;
              return 0;
            }),
            0);
}

TEST(ThreadSched, RtprioAllowsFifoUpToItsLimitWithoutTheCapability) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (CAP_SYS_NICE to drop)";
  rlimit now{};
  ASSERT_EQ(getrlimit(RLIMIT_RTPRIO, &now), 0);
  if (now.rlim_max != RLIM_INFINITY && now.rlim_max < 10 &&
      InChild([] {
        rlimit ten{10, 10};
        return setrlimit(RLIMIT_RTPRIO, &ten) == 0 ? 0 : 1;
      }) != 0) {
    GTEST_SKIP() << "RLIMIT_RTPRIO's hard limit is " << now.rlim_max
                 << " and this root lacks CAP_SYS_RESOURCE to raise it";
  }
  EXPECT_EQ(InChild([] {
              rlimit ten{10, 10};  // raised while root still holds CAP_SYS_RESOURCE
              if (setrlimit(RLIMIT_RTPRIO, &ten) != 0) return 2;
              if (!DropCapabilitiesExcept({}).ok()) return 1;
              if (!CheckThreadSched(ThreadSched{-1, 10}).ok()) return 3;
              if (CheckThreadSched(ThreadSched{-1, 11}).ok()) return 4;
              return 0;
            }),
            0);
}

TEST(ThreadSched, AppliedToTheThreadAsTheKernelReportsIt) {
  const int cpu = FirstAllowedCpu();
  ASSERT_GE(cpu, 0);
  std::thread t([cpu] {
    ASSERT_TRUE(ApplyThreadSched(ThreadSched{cpu, 0}).ok());
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(set), &set), 0);
    EXPECT_EQ(CPU_COUNT(&set), 1);
    EXPECT_TRUE(CPU_ISSET(cpu, &set));
    EXPECT_EQ(sched_getcpu(), cpu);
  });
  t.join();
  if (geteuid() != 0) return;
  std::thread f([] {
    const absl::Status s = ApplyThreadSched(ThreadSched{-1, 7});
    if (!s.ok()) {
      // A cgroup v1 cpu controller without real-time budget refuses even root: said so.
      EXPECT_NE(s.message().find("rt_runtime_us"), std::string::npos) << s;
      return;
    }
    int policy = 0;
    sched_param p{};
    ASSERT_EQ(pthread_getschedparam(pthread_self(), &policy, &p), 0);
    EXPECT_EQ(policy, SCHED_FIFO);
    EXPECT_EQ(p.sched_priority, 7);
  });
  f.join();
  EXPECT_EQ(DescribeThreadSched(ThreadSched{3, 10}), "cpu 3, SCHED_FIFO 10");
  EXPECT_EQ(DescribeThreadSched(ThreadSched{}), "unpinned, normal priority");
}

TEST(ThreadSched, ASamplerThatCannotGetItsCpuDoesNotStart) {
  collectors::SpscSlotRing ring(16, TickLayout{0}.slot_bytes());
  Sampler sampler({}, ring, TickLayout{0},
                  SamplerOptions{1'000'000, ThreadSched{CPU_SETSIZE - 1, 0}});
  const absl::Status s = sampler.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("CPU " + std::to_string(CPU_SETSIZE - 1)), std::string::npos) << s;
  EXPECT_EQ(sampler.ticks(), 0u);
  sampler.Stop();  // nothing to join: idempotent
  Sampler ok({}, ring, TickLayout{0}, SamplerOptions{1'000'000, ThreadSched{FirstAllowedCpu(), 0}});
  ASSERT_TRUE(ok.Start().ok());
  ok.Stop();
}

}  // namespace
}  // namespace fabricscope::agent
