#include "agent/thread_sched.h"

#include <cap-ng.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fabricscope::agent {

absl::StatusOr<int> ParseSamplerPriority(absl::string_view text) {
  if (text.empty() || text == "normal") return 0;
  int n = 0;
  if (text.substr(0, 5) == "fifo:" && absl::SimpleAtoi(text.substr(5), &n) && n >= 1 &&
      n <= kMaxSamplerFifoPriority) {
    return n;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--sampler-priority=\"", text, "\" is not \"normal\" or \"fifo:N\" with N in 1..",
      kMaxSamplerFifoPriority, " (below the kernel's interrupt threads at 50)"));
}

namespace {

// The CPUs this process may run on; errno's text in *error when they cannot be read.
std::vector<int> AllowedCpus(std::string* error) {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    *error = std::strerror(errno);
    return cpus;
  }
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace

absl::Status CheckThreadSched(const ThreadSched& s) {
  if (s.cpu >= 0) {
    std::string error;
    const std::vector<int> cpus = AllowedCpus(&error);
    if (!error.empty()) {
      return absl::InternalError(
          absl::StrCat("--sampler-cpu=", s.cpu, ": sched_getaffinity failed: ", error));
    }
    bool found = false;
    for (int c : cpus) found = found || c == s.cpu;
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sampler-cpu=", s.cpu, ": this process may run on CPUs ", absl::StrJoin(cpus, ","),
          " only (sched_getaffinity; a cpuset or "
          "systemd's CPUAffinity= sets them)"));
    }
  }
  if (s.fifo_priority > 0) {
    const bool cap =
        capng_get_caps_process() == 0 && capng_have_capability(CAPNG_EFFECTIVE, CAP_SYS_NICE);
    rlimit rt{};
    const bool rlimit_ok =
        getrlimit(RLIMIT_RTPRIO, &rt) == 0 &&
        (rt.rlim_cur == RLIM_INFINITY || rt.rlim_cur >= static_cast<rlim_t>(s.fifo_priority));
    if (!cap && !rlimit_ok) {
      return absl::PermissionDeniedError(absl::StrCat(
          "--sampler-priority=fifo:", s.fifo_priority,
          " needs CAP_SYS_NICE or an RLIMIT_RTPRIO of at least ", s.fifo_priority,
          " (this process has neither: RLIMIT_RTPRIO is ", static_cast<long long>(rt.rlim_cur),
          "); run it as root, or give the unit AmbientCapabilities=CAP_SYS_NICE or LimitRTPRIO=",
          s.fifo_priority, " (deploy/systemd/sampler-realtime.conf), or drop the option"));
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyThreadSched(const ThreadSched& s) {
  if (s.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(s.cpu, &set);
    if (const int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); e != 0) {
      return absl::InternalError(
          absl::StrCat("pinning the sampler thread to CPU ", s.cpu, " failed: ", std::strerror(e)));
    }
  }
  if (s.fifo_priority > 0) {
    sched_param p{};
    p.sched_priority = s.fifo_priority;
    if (const int e = pthread_setschedparam(pthread_self(), SCHED_FIFO, &p); e != 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "SCHED_FIFO ", s.fifo_priority, " for the sampler thread failed: ", std::strerror(e),
          e == EPERM ? " (without CAP_SYS_NICE or RLIMIT_RTPRIO, under a seccomp filter or "
                       "RestrictRealtime=: deploy/systemd/sampler-realtime.conf, or in a cgroup "
                       "v1 cpu controller whose cpu.rt_runtime_us is 0)"
                     : ""));
    }
  }
  return absl::OkStatus();
}

std::string DescribeThreadSched(const ThreadSched& s) {
  return absl::StrCat(s.cpu >= 0 ? absl::StrCat("cpu ", s.cpu) : std::string("unpinned"), ", ",
                      s.fifo_priority > 0 ? absl::StrCat("SCHED_FIFO ", s.fifo_priority)
                                          : std::string("normal priority"));
}

}  // namespace fabricscope::agent
