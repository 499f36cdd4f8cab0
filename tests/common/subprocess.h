#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

extern char** environ;

namespace fabricscope::testing {

// Runs `body` in a forked child (for checks that drop capabilities or limits this test process
// must keep) and returns its exit status: 0 when every check held, 100 when it did not exit.
inline int InChild(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

// A child process with its stdout and stderr on one pipe. Killed (SIGKILL) when destroyed if
// still running, so a failing test never leaves a daemon behind.
class Subprocess {
 public:
  explicit Subprocess(std::vector<std::string> argv) : argv_(std::move(argv)) {}
  ~Subprocess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Adds or replaces NAME=VALUE in the child's environment; call before Start().
  void SetEnv(const std::string& name, const std::string& value) {
    env_.push_back(name + "=" + value);
  }
  // Removes NAME from the child's environment; call before Start().
  void UnsetEnv(const std::string& name) { env_.push_back(name); }
  // The child's process id while it runs, else -1.
  pid_t pid() const { return pid_; }
  // Sends `sig` without waiting (e.g. SIGHUP).
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }

  bool Start() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
    std::vector<char*> args;
    for (std::string& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    // The parent's environment, with the entries of SetEnv() replacing same-named ones.
    std::vector<char*> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const std::string name = entry.substr(0, entry.find('='));
      bool replaced = false;
      for (const std::string& x : env_) replaced |= x == name || x.rfind(name + "=", 0) == 0;
      if (!replaced) env.push_back(*e);
    }
    for (std::string& x : env_) {
      if (x.find('=') != std::string::npos) env.push_back(x.data());  // else: UnsetEnv
    }
    env.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), env.data());
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    fd_ = fds[0];
    if (rc != 0) pid_ = -1;
    return rc == 0;
  }

  // Reads output until a line matches `pattern`; returns the match, or nullopt at timeout/EOF.
  std::optional<std::smatch> WaitForLine(const std::regex& pattern,
                                         std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      size_t nl;
      while ((nl = buffer_.find('\n')) != std::string::npos) {
        lines_.push_back(buffer_.substr(0, nl));
        buffer_.erase(0, nl + 1);
        std::smatch m;
        if (std::regex_search(lines_.back(), m, pattern)) return m;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n <= 0) return std::nullopt;
      buffer_.append(buf, static_cast<size_t>(n));
    }
  }

  // Sends `sig` and waits for the exit; returns the exit status (128+signal if killed).
  int Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // Waits for the process to exit by itself; returns its exit status.
  int Wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // Everything read so far, for failure messages.
  std::string Output() {
    std::string all;
    for (const std::string& l : lines_) all += l + "\n";
    return all + buffer_;
  }

  // Drains whatever output is ready without blocking.
  void Drain() { WaitForLine(std::regex("(?!)"), std::chrono::milliseconds(1)); }

 private:
  std::vector<std::string> argv_;
  std::vector<std::string> env_;
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buffer_;
  std::vector<std::string> lines_;
};

}  // namespace fabricscope::testing
