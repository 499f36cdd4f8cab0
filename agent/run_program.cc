#include "agent/run_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "collectors/clock.h"

extern char** environ;

namespace fabricscope::agent {

absl::StatusOr<std::string> RunForOutput(const std::vector<std::string>& argv, int64_t timeout_ns,
                                         size_t max_bytes) {
  if (argv.empty() || argv[0].empty()) return absl::InvalidArgumentError("no command to run");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // Above the standard descriptors (a daemon started with 0-2 closed would get them), so that
  // the dups below do not clobber the pipe.
  for (int& fd : fds) {
    if (fd > 2) continue;
    const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    fd = moved;
  }
  if (fds[0] < 0 || fds[1] < 0) {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
    return absl::UnavailableError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // The agent blocks SIGINT, SIGTERM and SIGHUP in its threads (collectors/common daemon loop)
  // and a child inherits the mask: it gets an empty one, and default dispositions.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t child = -1;
  const int rc = posix_spawnp(&child, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::UnavailableError(absl::StrCat(argv[0], ": cannot run: ", std::strerror(rc)));
  }
  std::string out;
  absl::Status failure;
  const int64_t deadline = collectors::MonotonicNowNs() + timeout_ns;
  char buf[65536];
  while (true) {
    const int64_t left_ms = (deadline - collectors::MonotonicNowNs()) / 1'000'000;
    if (left_ms <= 0) {
      failure = absl::DeadlineExceededError(
          absl::StrCat(argv[0], ": no answer within ", timeout_ns / 1'000'000, " ms"));
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    const ssize_t r = read(fds[0], buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // EOF (or an error: what came is judged by the exit status)
    if (out.size() + static_cast<size_t>(r) > max_bytes) {
      failure = absl::ResourceExhaustedError(
          absl::StrCat(argv[0], ": more than ", max_bytes, " bytes of output"));
      break;
    }
    out.append(buf, static_cast<size_t>(r));
  }
  close(fds[0]);
  if (!failure.ok()) kill(child, SIGKILL);
  int status = 0;
  pid_t waited;
  while ((waited = waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  if (!failure.ok()) return failure;
  if (waited != child) {
    return absl::UnavailableError(
        absl::StrCat(argv[0], ": cannot wait for it: ", std::strerror(errno)));
  }
  if (WIFSIGNALED(status)) {
    return absl::UnavailableError(absl::StrCat(argv[0], ": killed by signal ", WTERMSIG(status)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::UnavailableError(absl::StrCat(argv[0], ": exit status ", WEXITSTATUS(status),
                                               WEXITSTATUS(status) == 127 ? " (not found)" : ""));
  }
  return out;
}

}  // namespace fabricscope::agent
