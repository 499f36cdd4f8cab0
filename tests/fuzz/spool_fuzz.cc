// The spool reader (collectors/uplink/spool.h) on arbitrary segment bytes, as a crash, a power cut
// or a bad disk may leave them: recovery at start (Spool::Open) and the replay read (ReadSegment)
// must give a clear count, never a crash, and keep only records whose CRC32C holds.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "collectors/uplink/spool.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {
namespace {

namespace fs = std::filesystem;

const std::string& Root() {
  // In the working directory (ctest: the build's tests/fuzz), one per process.
  static const std::string root = "spool-fuzz-" + std::to_string(getpid());
  return root;
}

v1::Hello HelloOf(uint64_t instance) {
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(instance);
  return h;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  // A real segment of three batches, as the spool writes it.
  const std::string dir = Root() + "/seed";
  fs::remove_all(dir);
  std::string seg;
  {
    auto s = uplink::Spool::Open({.dir = dir}, HelloOf(1));
    if (s.ok()) {
      for (uint64_t seq = 1; seq <= 3; ++seq) {
        v1::Batch b;
        b.set_seq(seq);
        b.add_collectives()->set_func("AllReduce");
        (*s)->Append(b).IgnoreError();
      }
    }
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".seg") {
      std::ifstream in(e.path(), std::ios::binary);
      seg.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  fs::remove_all(dir);
  return {seg, seg.substr(0, seg.size() / 2)};
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  using fabricscope::testing::FuzzCheck;
  const std::string dir = fabricscope::testing::Root() + "/run";
  fs::remove_all(dir);
  const std::string instance_dir = dir + "/0000000000000001";
  fs::create_directories(instance_dir);
  std::ofstream(instance_dir + "/hello.pb", std::ios::binary)
      << fabricscope::testing::HelloOf(1).SerializeAsString();
  const std::string seg = instance_dir + "/00000000000000000001.seg";
  std::ofstream(seg, std::ios::binary)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  auto read = fabricscope::uplink::Spool::ReadSegment(seg);
  FuzzCheck(read.ok(), "a readable segment reads");
  auto spool = fabricscope::uplink::Spool::Open({.dir = dir}, fabricscope::testing::HelloOf(2));
  FuzzCheck(spool.ok(), "start-up never fails on a damaged segment");
  const auto stats = (*spool)->stats();
  FuzzCheck(stats.dropped_corrupt <= 1, "one torn tail at most per segment");
  // What recovery kept reads back whole, record for record.
  if (!(*spool)->Leftovers().empty()) {
    auto again = fabricscope::uplink::Spool::ReadSegment(seg);
    FuzzCheck(again.ok() && again->size() <= stats.batches, "kept records read back");
  }
  return 0;
}
