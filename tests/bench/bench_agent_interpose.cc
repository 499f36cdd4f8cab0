// fabricscope_bench_agent: the interposed clock_nanosleep() and pread()/pread64() that record the
// sampler threads' wake-ups and reads per tick.

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "tests/bench/bench_agent.h"

// ---- interposed system call wrappers -------------------------------------------------------

namespace fabricscope::bench::rec {

ThreadLog g_logs[kMaxThreads];
std::atomic<int> g_claimed{0};
std::atomic<bool> g_armed{false};
thread_local ThreadLog* t_log = nullptr;
thread_local bool t_checked = false;
thread_local uint32_t t_preads = 0;

inline int64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Called from the wrapper after a successful absolute CLOCK_MONOTONIC sleep.
inline void Record(const timespec* req, int64_t enter, int64_t wake) {
  if (!t_checked) {
    t_checked = true;
    char name[16] = {};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    if (g_armed.load(std::memory_order_acquire) &&
        (std::strcmp(name, "fs-sampler") == 0 || std::strcmp(name, "fs-bench-base") == 0)) {
      const int i = g_claimed.fetch_add(1);
      if (i < kMaxThreads) {
        t_log = &g_logs[i];
        std::memcpy(t_log->name, name, sizeof(name));
        t_log->tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
      }
    }
  }
  const uint32_t preads = t_preads;
  t_preads = 0;
  ThreadLog* log = t_log;
  if (log == nullptr) return;
  const size_t n = log->n.load(std::memory_order_relaxed);
  if (n >= log->cap) return;
  log->wakes[n] =
      Wake{static_cast<int64_t>(req->tv_sec) * 1'000'000'000 + req->tv_nsec, enter, wake, preads};
  log->n.store(n + 1, std::memory_order_release);
}

// Arms recording for threads created from now on; `cap` wake-ups per thread.
void Arm(size_t cap) {
  for (ThreadLog& l : g_logs) {
    delete[] l.wakes;
    l.wakes = new Wake[cap];
    l.cap = cap;
    l.n.store(0);
    l.tid.store(0);
    std::memset(l.name, 0, sizeof(l.name));
  }
  g_claimed.store(0);
  g_armed.store(true, std::memory_order_release);
}
void Disarm() { g_armed.store(false, std::memory_order_release); }

}  // namespace fabricscope::bench::rec

extern "C" {

// glibc semantics: 0 or an error number (errno untouched).
int clock_nanosleep(clockid_t clock, int flags, const struct timespec* req, struct timespec* rem) {
  using namespace fabricscope::bench::rec;
  const int64_t enter = Now();
  const int saved = errno;
  const long r = syscall(SYS_clock_nanosleep, clock, flags, req, rem);
  const int rc = r == 0 ? 0 : errno;
  errno = saved;
  if (rc == 0 && clock == CLOCK_MONOTONIC && (flags & TIMER_ABSTIME) != 0) {
    Record(req, enter, Now());
  }
  return rc;
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  ++fabricscope::bench::rec::t_preads;
  return syscall(SYS_pread64, fd, buf, count, offset);
}

ssize_t pread64(int fd, void* buf, size_t count, off64_t offset) {
  ++fabricscope::bench::rec::t_preads;
  return syscall(SYS_pread64, fd, buf, count, offset);
}

}  // extern "C"
