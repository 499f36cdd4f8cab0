#pragma once

// Shared helpers for the fabricscope benchmarks (tests/bench). Not part of ctest.
//
// Every figure the benchmarks print is reported next to a baseline measured in the same process
// run, and as a ratio against it: the machines these run on are shared and noisy, so absolute
// nanoseconds are only meaningful next to their baseline.

#include <fcntl.h>
#include <gperftools/malloc_extension.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "collectors/port.h"
#include "collectors/sysfs_ports.h"

namespace fabricscope::bench {

// Bytes the program holds on the heap: tcmalloc's count of allocated bytes (the daemons and the
// aggregator benchmarks link it: CMakeLists.txt FABRICSCOPE_MALLOC; mallinfo2 reads 0 there).
inline size_t HeapInUse() {
  size_t bytes = 0;
  MallocExtension::instance()->GetNumericProperty("generic.current_allocated_bytes", &bytes);
  return bytes;
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Nearest-rank percentile (p in [0, 100]) of an already sorted vector.
template <typename T>
T PercentileSorted(const std::vector<T>& sorted, double p) {
  if (sorted.empty()) return T{};
  size_t rank = static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size()) + 0.999999);
  if (rank == 0) rank = 1;
  if (rank > sorted.size()) rank = sorted.size();
  return sorted[rank - 1];
}

inline std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown";
}

inline void PrintMachine() {
  std::printf("machine: nproc=%u, cpu=\"%s\"\n", std::thread::hardware_concurrency(),
              CpuModel().c_str());
}

// File system type of `path`, in words.
inline std::string FsType(const std::string& path) {
  struct statfs s;
  if (statfs(path.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0x01021994UL:
      return "tmpfs";
    case 0x62656572UL:
      return "sysfs";
    case 0xEF53UL:
      return "ext4";
    case 0x794c7630UL:
      return "overlayfs";
    case 0x58465342UL:
      return "xfs";
    case 0x9123683EUL:
      return "btrfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "fs-magic-0x%lx", static_cast<unsigned long>(s.f_type));
      return buf;
    }
  }
}

// Makes every directory under `root` (and root) writable by its owner, so that a copy of the
// read-only tests/testdata can be changed and removed without root.
inline void MakeTreeWritable(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::permissions(root, fs::perms::owner_all, fs::perm_options::add, ec);
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_symlink(ec)) continue;
    fs::permissions(it->path(), fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::add, ec);
    if (it->is_directory(ec)) {
      fs::permissions(it->path(), fs::perms::owner_exec, fs::perm_options::add, ec);
    }
  }
}

// A temporary directory under `base`, removed with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& base) {
    std::string tmpl = base + "/fabricscope-bench-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) root_ = tmpl;
  }
  ~TempDir() {
    if (root_.empty()) return;
    MakeTreeWritable(root_);  // copies of the read-only tests/testdata: removable without root
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  bool ok() const { return !root_.empty(); }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// 16 counter files ready for a SysfsCounterCollector, with where they live.
struct CounterTree {
  std::string label;  // "sysfs", "tmpfs", "regular-file"
  std::string where;  // directory or directories, for the report
  std::string fs;     // file system type of the first file
  std::vector<collectors::PortDescriptor> ports;
  std::unique_ptr<TempDir> dir;  // owns the fake tree, if any

  std::vector<std::string> paths() const {
    std::vector<std::string> out;
    for (const auto& p : ports) {
      for (const auto& c : p.counters) out.push_back(c.path);
    }
    return out;
  }
  size_t counters() const { return paths().size(); }
};

inline constexpr size_t kCounters = 16;

inline bool ReadsAsCounter(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[64];
  const ssize_t n = pread(fd, buf, sizeof(buf), 0);
  close(fd);
  return n > 0 && buf[0] >= '0' && buf[0] <= '9';
}

// This machine's /sys/class/net/*/statistics, read-only: the agent's netdev counter set of the
// physical-looking interfaces first (eth*, en*, ib*), then the others, loopback last, until
// kCounters files that read as counters. Returns false when fewer exist.
inline bool RealSysfsTree(CounterTree* out) {
  const std::string class_net = "/sys/class/net";
  std::error_code ec;
  std::vector<std::string> ifaces;
  for (const auto& e : std::filesystem::directory_iterator(class_net, ec)) {
    ifaces.push_back(e.path().filename().string());
  }
  auto rank = [](const std::string& n) {
    if (n == "lo") return 2;
    if (n.rfind("eth", 0) == 0 || n.rfind("en", 0) == 0 || n.rfind("ib", 0) == 0) return 0;
    return 1;
  };
  std::sort(ifaces.begin(), ifaces.end(), [&](const std::string& a, const std::string& b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : a < b;
  });
  out->label = "sysfs";
  out->ports.clear();
  size_t total = 0;
  for (const std::string& ifname : ifaces) {
    if (total >= kCounters) break;
    const std::string stats = class_net + "/" + ifname + "/statistics";
    collectors::PortDescriptor p;
    p.device = ifname;
    for (auto& c : collectors::NetdevCounterSet(stats, 1)) {
      if (total >= kCounters) break;
      if (!ReadsAsCounter(c.path)) continue;
      p.counters.push_back(std::move(c));
      ++total;
    }
    if (p.counters.empty()) continue;
    if (!out->where.empty()) out->where += ", ";
    out->where += stats;
    out->ports.push_back(std::move(p));
  }
  if (total < kCounters) return false;
  out->fs = FsType(out->ports[0].counters[0].path);
  return true;
}

// A copy of the real mlx5_0 port 1 RDMA counter directory from tests/testdata, under a fresh
// temporary directory in `base`, with the agent's RDMA counter set (exactly 16 files).
inline bool FakeRdmaTree(const std::string& base, const std::string& label, CounterTree* out) {
  auto dir = std::make_unique<TempDir>(base);
  if (!dir->ok()) return false;
  const std::string src =
      std::string(FABRICSCOPE_TESTDATA) + "/sysfs-real/class/infiniband/mlx5_0/ports/1/counters";
  const std::string dst = dir->root() + "/class/infiniband/mlx5_0/ports/1/counters";
  std::error_code ec;
  std::filesystem::create_directories(dst, ec);
  std::filesystem::copy(src, dst, std::filesystem::copy_options::recursive, ec);
  if (ec) return false;
  collectors::PortDescriptor p;
  p.device = "mlx5_0";
  p.port = 1;
  p.rdma = true;
  p.counters = collectors::RdmaCounterSet(dst, 1);
  if (p.counters.size() < kCounters) return false;
  p.counters.resize(kCounters);
  out->label = label;
  out->where = dst;
  out->fs = FsType(dst);
  out->ports = {std::move(p)};
  out->dir = std::move(dir);
  return true;
}

// Every tree available here: real sysfs (if this machine has 16 netdev counter files), tmpfs
// (/dev/shm, if it is tmpfs) and a regular-file tree under $TMPDIR or /tmp.
inline std::vector<CounterTree> AllTrees() {
  std::vector<CounterTree> trees;
  CounterTree real;
  if (RealSysfsTree(&real)) {
    trees.push_back(std::move(real));
  } else {
    std::printf("note: fewer than %zu readable /sys/class/net/*/statistics files; no sysfs tree\n",
                kCounters);
  }
  if (FsType("/dev/shm") == "tmpfs") {
    CounterTree t;
    if (FakeRdmaTree("/dev/shm", "tmpfs", &t)) trees.push_back(std::move(t));
  }
  const char* tmpdir = getenv("TMPDIR");
  const std::string base = tmpdir && *tmpdir ? tmpdir : "/tmp";
  CounterTree r;
  if (FakeRdmaTree(base, FsType(base) == "tmpfs" ? "tmpfs-tmpdir" : "regular-file", &r)) {
    trees.push_back(std::move(r));
  }
  return trees;
}

// Adds `--flag=value` defaults to argv unless the caller already gave that flag.
inline std::vector<char*> WithDefaultFlags(int argc, char** argv,
                                           const std::vector<std::string>& defaults,
                                           std::vector<std::string>& storage) {
  storage.assign(argv, argv + argc);
  for (const std::string& d : defaults) {
    const std::string key = d.substr(0, d.find('=') + 1);
    bool given = false;
    for (int i = 1; i < argc; ++i) given |= std::string(argv[i]).rfind(key, 0) == 0;
    if (!given) storage.push_back(d);
  }
  std::vector<char*> out;
  for (std::string& s : storage) out.push_back(s.data());
  return out;
}

// Console output as usual, and every per-repetition run kept (errored runs left out) so that
// main can print medians and ratios after all benchmarks ran.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  struct Sample {
    double real_ns = 0;  // per iteration
    double cpu_ns = 0;   // per iteration
    std::map<std::string, double> counters;
  };

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred || r.iterations == 0) continue;
      Sample s;
      const double it = static_cast<double>(r.iterations);
      s.real_ns = r.real_accumulated_time * 1e9 / it;
      s.cpu_ns = r.cpu_accumulated_time * 1e9 / it;
      for (const auto& [k, c] : r.counters) s.counters[k] = c.value;
      samples_[r.run_name.function_name].push_back(std::move(s));
    }
    ConsoleReporter::ReportRuns(runs);
  }

  bool has(const std::string& name) const { return samples_.count(name) != 0; }
  // Median over repetitions of real (cpu=false) or CPU time per iteration, in ns.
  double MedianNs(const std::string& name, bool cpu = false) const {
    auto it = samples_.find(name);
    if (it == samples_.end()) return 0;
    std::vector<double> v;
    for (const Sample& s : it->second) v.push_back(cpu ? s.cpu_ns : s.real_ns);
    return Median(v);
  }
  // Fastest repetition (real or CPU time per iteration, ns): the least disturbed by other load.
  double MinNs(const std::string& name, bool cpu = false) const {
    auto it = samples_.find(name);
    if (it == samples_.end() || it->second.empty()) return 0;
    double m = cpu ? it->second[0].cpu_ns : it->second[0].real_ns;
    for (const Sample& s : it->second) m = std::min(m, cpu ? s.cpu_ns : s.real_ns);
    return m;
  }
  double MedianCounter(const std::string& name, const std::string& counter) const {
    auto it = samples_.find(name);
    if (it == samples_.end()) return 0;
    std::vector<double> v;
    for (const Sample& s : it->second) {
      if (auto c = s.counters.find(counter); c != s.counters.end()) v.push_back(c->second);
    }
    return Median(v);
  }
  size_t repetitions(const std::string& name) const {
    auto it = samples_.find(name);
    return it == samples_.end() ? 0 : it->second.size();
  }

 private:
  std::map<std::string, std::vector<Sample>> samples_;
};

}  // namespace fabricscope::bench
