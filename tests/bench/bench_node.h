#pragma once

// Benchmark helpers for whole-node set-ups (tests/bench): fake sysfs/procfs trees of mlx5-like
// RDMA ports with their netdevs, and a throw-away network namespace with veth pairs whose
// ethtool statistics stand in for a NIC's. Not part of ctest.

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/bench/bench_common.h"

extern char** environ;

namespace fabricscope::bench {

// Runs argv[0] (looked up in PATH) with argv, no shell; stdout and stderr go to *output.
// Returns the exit status, or -1 when it could not be started.
inline int RunCommand(const std::vector<std::string>& argv, std::string* output = nullptr) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pipefd[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  if (output) *output = out;
  if (rc != 0) {
    if (output) *output = std::string("cannot run ") + argv[0] + ": " + strerror(rc);
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Clean-up on SIGINT/SIGTERM/SIGHUP (Ctrl-C during run.sh): deletes the benchmark's network
// namespaces (up to kMaxNamespaces) and removes its fake tree, then dies of the signal as usual.
// The handler only uses async-signal-safe calls (fork, execv, waitpid); what it needs is prepared
// beforehand.
namespace cleanup_detail {
inline char g_ip_path[256];
inline constexpr int kMaxNamespaces = 4;
inline char g_ns_names[kMaxNamespaces][64];
inline char g_tree[512];
inline bool g_installed = false;

inline void RunFromSignal(const char* path, char* const argv[]) {
  const pid_t pid = fork();
  if (pid == 0) {
    execv(path, argv);
    _exit(127);
  }
  if (pid > 0) {
    int st;
    waitpid(pid, &st, 0);
  }
}

inline void OnSignal(int sig) {
  for (char* name : g_ns_names) {
    if (name[0] == '\0' || g_ip_path[0] == '\0') continue;
    char a0[] = "ip", a1[] = "netns", a2[] = "del";
    char* argv[] = {a0, a1, a2, name, nullptr};
    RunFromSignal(g_ip_path, argv);
  }
  if (g_tree[0] != '\0') {
    char a0[] = "rm", a1[] = "-rf", a2[] = "--";
    char* argv[] = {a0, a1, a2, g_tree, nullptr};
    RunFromSignal("/bin/rm", argv);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

inline void Install() {
  if (g_installed) return;
  g_installed = true;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}
}  // namespace cleanup_detail

// Removes `dir` (a fake tree) if the process is killed by SIGINT/SIGTERM/SIGHUP; "" forgets it.
inline void RemoveTreeOnSignal(const std::string& dir) {
  cleanup_detail::Install();
  std::snprintf(cleanup_detail::g_tree, sizeof(cleanup_detail::g_tree), "%s",
                dir.size() < sizeof(cleanup_detail::g_tree) ? dir.c_str() : "");
}

inline bool WriteFile(const std::string& path, const std::string& content) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream out(path, std::ios::trunc);
  out << content;
  return static_cast<bool>(out);
}

// Copies tests/testdata/sysfs-real/class/infiniband/mlx5_0 (port 1: 21 counters/ files, of which
// the agent's RDMA set takes 16, and 24 hw_counters/ files plus lifespan) to
// <root>/class/infiniband/<name>, writable.
inline bool CopyFixtureMlx5(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path src = std::string(FABRICSCOPE_TESTDATA) + "/sysfs-real/class/infiniband/mlx5_0";
  const fs::path dst = root + "/class/infiniband/" + name;
  // By hand rather than fs::copy(recursive): that gives each new directory the fixture's
  // read-only mode before filling it, which fails without root.
  std::error_code ec;
  fs::create_directories(dst, ec);
  if (ec) return false;
  for (fs::recursive_directory_iterator it(src, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path to = dst / fs::relative(it->path(), src, ec);
    if (ec) return false;
    if (it->is_directory(ec)) {
      fs::create_directories(to, ec);
    } else {
      fs::copy_file(it->path(), to, fs::copy_options::overwrite_existing, ec);
      if (!ec) fs::permissions(to, fs::perms::owner_write, fs::perm_options::add, ec);
    }
    if (ec) return false;
  }
  return !ec;
}

// A fake node: `ports` mlx5-like RoCE ports mlx5_0..mlx5_<ports-1> (copies of the fixture port,
// link layer Ethernet, each pointing at its netdev through ports/1/gid_attrs/ndevs/0), and their
// netdevs netdevs[i] under class/net with the 13 statistics/ files the agent reads, speed
// 100000 (100 Gb/s), type 1, dev_port 0, operstate up. Optionally a procfs tree (net/snmp and
// net/netstat from tests/testdata/procfs-real) at <root>/proc.
struct FakeNode {
  std::unique_ptr<TempDir> dir;
  std::string sysfs_root;
  std::string procfs_root;
  std::vector<std::string> netdevs;
};

inline bool BuildFakeNode(const std::string& base, const std::vector<std::string>& netdevs,
                          FakeNode* out, std::string* why) {
  auto dir = std::make_unique<TempDir>(base);
  if (!dir->ok()) {
    *why = "mkdtemp under " + base + ": " + strerror(errno);
    return false;
  }
  const std::string root = dir->root() + "/sys";
  for (size_t i = 0; i < netdevs.size(); ++i) {
    const std::string dev = "mlx5_" + std::to_string(i);
    if (!CopyFixtureMlx5(root, dev)) {
      *why = "cannot copy the mlx5_0 fixture to " + root;
      return false;
    }
    const std::string port = root + "/class/infiniband/" + dev + "/ports/1";
    WriteFile(port + "/link_layer", "Ethernet\n");
    WriteFile(port + "/gid_attrs/ndevs/0", netdevs[i] + "\n");
    const std::string nd = root + "/class/net/" + netdevs[i];
    WriteFile(nd + "/speed", "100000\n");
    WriteFile(nd + "/type", "1\n");
    WriteFile(nd + "/dev_port", "0\n");
    WriteFile(nd + "/operstate", "up\n");
    WriteFile(nd + "/carrier", "1\n");
    uint64_t v = 1'000'000 + i;
    for (const char* c :
         {"tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "rx_errors", "tx_errors",
          "rx_dropped", "tx_dropped", "rx_crc_errors", "rx_missed_errors", "rx_fifo_errors",
          "tx_fifo_errors", "tx_carrier_errors"}) {
      if (!WriteFile(nd + "/statistics/" + c, std::to_string(v++) + "\n")) {
        *why = "cannot write " + nd + "/statistics/" + c;
        return false;
      }
    }
  }
  const std::string proc = dir->root() + "/proc";
  std::error_code ec;
  std::filesystem::create_directories(proc + "/net", ec);
  for (const char* f : {"snmp", "netstat"}) {
    std::filesystem::copy_file(std::string(FABRICSCOPE_TESTDATA) + "/procfs-real/net/" + f,
                               proc + "/net/" + f,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) {
      *why = std::string("cannot copy procfs-real/net/") + f + ": " + ec.message();
      return false;
    }
  }
  MakeTreeWritable(proc);
  RemoveTreeOnSignal(dir->root());
  out->sysfs_root = root;
  out->procfs_root = proc;
  out->netdevs = netdevs;
  out->dir = std::move(dir);
  return true;
}

// The directory benchmarks put fake trees in: /dev/shm when it is tmpfs, else $TMPDIR or /tmp.
inline std::string FakeTreeBase() {
  if (FsType("/dev/shm") == "tmpfs" && access("/dev/shm", W_OK) == 0) return "/dev/shm";
  const char* tmpdir = getenv("TMPDIR");
  return tmpdir && *tmpdir ? tmpdir : "/tmp";
}

// A network namespace "fsbench-<pid>" (or "fsbench-<pid>-<tag>") with veth pairs (<name>,
// <name>p), all up, removed with everything in it on destruction and on SIGINT/SIGTERM/SIGHUP
// (cleanup_detail; up to kMaxNamespaces at a time). Namespaces left by an earlier run that was
// killed (their pid gone) are removed first. Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and ip(8).
class BenchNetns {
 public:
  static std::unique_ptr<BenchNetns> Create(const std::vector<std::string>& ifnames,
                                            std::string* why, const std::string& tag = "") {
    if (geteuid() != 0) {
      *why = "not root (a network namespace and veth pairs need CAP_SYS_ADMIN/CAP_NET_ADMIN)";
      return nullptr;
    }
    std::string ip_path;
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (access(p, X_OK) == 0) {
        ip_path = p;
        break;
      }
    }
    if (ip_path.empty()) {
      *why = "ip(8) not found (iproute2)";
      return nullptr;
    }
    RemoveStale(ip_path);
    std::unique_ptr<BenchNetns> ns(new BenchNetns());
    ns->ip_ = ip_path;
    ns->name_ = "fsbench-" + std::to_string(getpid()) + (tag.empty() ? "" : "-" + tag);
    cleanup_detail::Install();
    std::snprintf(cleanup_detail::g_ip_path, sizeof(cleanup_detail::g_ip_path), "%s",
                  ip_path.c_str());
    for (int i = 0; i < cleanup_detail::kMaxNamespaces; ++i) {
      if (cleanup_detail::g_ns_names[i][0] == '\0') {
        ns->slot_ = i;
        break;
      }
    }
    if (ns->slot_ < 0 || ns->name_.size() >= sizeof(cleanup_detail::g_ns_names[0])) {
      *why = "too many benchmark namespaces, or a name too long: " + ns->name_;
      return nullptr;
    }
    char* slot = cleanup_detail::g_ns_names[ns->slot_];
    std::snprintf(slot, sizeof(cleanup_detail::g_ns_names[0]), "%s", ns->name_.c_str());
    std::string out;
    if (RunCommand({ip_path, "netns", "add", ns->name_}, &out) != 0) {
      *why = "ip netns add " + ns->name_ + ": " + Trim(out);
      return nullptr;  // the destructor frees the slot
    }
    ns->created_ = true;
    for (const std::string& ifname : ifnames) {
      const std::string peer = ifname + "p";
      if (RunCommand({ip_path, "-n", ns->name_, "link", "add", ifname, "type", "veth", "peer",
                      "name", peer},
                     &out) != 0 ||
          RunCommand({ip_path, "-n", ns->name_, "link", "set", ifname, "up"}, &out) != 0 ||
          RunCommand({ip_path, "-n", ns->name_, "link", "set", peer, "up"}, &out) != 0) {
        *why = "veth " + ifname + " in " + ns->name_ + ": " + Trim(out);
        return nullptr;  // the destructor removes the namespace
      }
    }
    ns->fd_ = open(("/run/netns/" + ns->name_).c_str(), O_RDONLY | O_CLOEXEC);
    if (ns->fd_ < 0) {
      *why = "/run/netns/" + ns->name_ + ": " + strerror(errno);
      return nullptr;
    }
    return ns;
  }

  ~BenchNetns() {
    if (fd_ >= 0) close(fd_);
    if (created_) {
      std::string out;
      if (RunCommand({ip_, "netns", "del", name_}, &out) != 0) {
        std::fprintf(stderr, "warning: ip netns del %s: %s\n", name_.c_str(), Trim(out).c_str());
      }
    }
    if (slot_ >= 0) cleanup_detail::g_ns_names[slot_][0] = '\0';
  }
  BenchNetns(const BenchNetns&) = delete;
  BenchNetns& operator=(const BenchNetns&) = delete;

  const std::string& name() const { return name_; }

  // Runs `ip -n <this namespace> args...`. Returns false with ip's output in *why on failure.
  bool Ip(const std::vector<std::string>& args, std::string* why) const {
    std::vector<std::string> argv = {ip_, "-n", name_};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    if (RunCommand(argv, &out) == 0) return true;
    std::string cmd = "ip -n " + name_;
    for (const std::string& a : args) cmd += " " + a;
    *why = cmd + ": " + Trim(out);
    return false;
  }

  // A veth pair joining two namespaces: `ifname` here, `peer_ifname` in `peer`, both up.
  bool AddVethTo(const std::string& ifname, const BenchNetns& peer, const std::string& peer_ifname,
                 std::string* why) const {
    return Ip({"link", "add", ifname, "type", "veth", "peer", "name", peer_ifname, "netns",
               peer.name_},
              why) &&
           Ip({"link", "set", ifname, "up"}, why) &&
           peer.Ip({"link", "set", peer_ifname, "up"}, why);
  }

  // Runs fn() with the calling thread in the namespace (sockets it creates belong there), then
  // moves the thread back. Returns false (fn not run) when setns fails.
  template <typename F>
  bool Within(F&& fn, std::string* why = nullptr) {
    const int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (self < 0 || setns(fd_, CLONE_NEWNET) != 0) {
      if (why) *why = std::string("setns: ") + strerror(errno);
      if (self >= 0) close(self);
      return false;
    }
    fn();
    if (setns(self, CLONE_NEWNET) != 0) {
      std::fprintf(stderr, "fatal: cannot return to the original network namespace: %s\n",
                   strerror(errno));
      std::abort();
    }
    close(self);
    return true;
  }

 private:
  BenchNetns() = default;

  static std::string Trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  static void RemoveStale(const std::string& ip_path) {
    std::string list;
    if (RunCommand({ip_path, "netns", "list"}, &list) != 0) return;
    size_t pos = 0;
    while (pos < list.size()) {
      const size_t eol = list.find('\n', pos);
      std::string line = list.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
      pos = eol == std::string::npos ? list.size() : eol + 1;
      line = line.substr(0, line.find(' '));
      if (line.rfind("fsbench-", 0) != 0) continue;
      const long pid = std::atol(line.c_str() + 8);
      if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        std::fprintf(stderr, "note: removing stale network namespace %s\n", line.c_str());
        RunCommand({ip_path, "netns", "del", line});
      }
    }
  }

  std::string ip_;
  std::string name_;
  bool created_ = false;
  int fd_ = -1;
  int slot_ = -1;  // in cleanup_detail::g_ns_names
};

}  // namespace fabricscope::bench
