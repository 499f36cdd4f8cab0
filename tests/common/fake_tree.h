#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fabricscope::testing {

// A temporary directory tree, removed when the object goes away. Tests build fake sysfs/procfs
// trees in it, starting from a copy of tests/testdata.
class FakeTree {
 public:
  FakeTree() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "fabricscope-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    root_ = tmpl;
  }
  ~FakeTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeTree(const FakeTree&) = delete;
  FakeTree& operator=(const FakeTree&) = delete;

  const std::string& root() const { return root_; }
  std::string Path(const std::string& rel) const { return root_ + "/" + rel; }

  // Copies tests/testdata/<rel> to <root>/<dest>.
  void CopyTestdata(const std::string& rel, const std::string& dest) const {
    std::filesystem::create_directories(std::filesystem::path(Path(dest)).parent_path());
    std::filesystem::copy(std::string(FABRICSCOPE_TESTDATA) + "/" + rel, Path(dest),
                          std::filesystem::copy_options::recursive);
  }

  // Writes (creating directories) a file with exactly `content`. Rewrites in place, so an fd
  // opened earlier sees the new content on its next pread.
  void Write(const std::string& rel, const std::string& content) const {
    std::filesystem::create_directories(std::filesystem::path(Path(rel)).parent_path());
    std::ofstream(Path(rel), std::ios::trunc) << content;
  }

  // A netdev with the standard statistics files, all set to `value`.
  void AddNetdev(const std::string& name, const std::string& speed = "-1",
                 uint64_t value = 0) const {
    AddNetdevAt("class/net/" + name, speed, value);
  }
  // A netdev under devices/<parent>/net/<name> linked from class/net/<name>, as the kernel lays
  // them out; parent "virtual" makes it a virtual interface (lo, veth, bridges).
  void AddLinkedNetdev(const std::string& name, const std::string& parent,
                       const std::string& speed = "-1") const {
    const std::string dir = "devices/" + parent + "/net/" + name;
    AddNetdevAt(dir, speed);
    std::filesystem::create_directories(Path("class/net"));
    std::filesystem::create_symlink("../../" + dir, Path("class/net/" + name));
  }
  // The same at any directory (e.g. devices/virtual/net/veth0, linked from class/net).
  void AddNetdevAt(const std::string& dir, const std::string& speed = "-1",
                   uint64_t value = 0) const {
    Write(dir + "/speed", speed + "\n");
    Write(dir + "/type", "1\n");
    Write(dir + "/dev_port", "0\n");
    for (const char* c : {"tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "rx_errors",
                          "tx_errors", "rx_dropped", "tx_dropped"}) {
      Write(dir + "/statistics/" + c, std::to_string(value) + "\n");
    }
  }

 private:
  std::string root_;
};

}  // namespace fabricscope::testing
