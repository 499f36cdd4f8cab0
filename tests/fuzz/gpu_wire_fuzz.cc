// The GPU hand-off datagram decoder (collectors/gpu/wire_decode.h) on bytes from another
// process: no input may crash, and every string it hands over is NUL-terminated in its field.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectors/gpu/wire.h"
#include "collectors/gpu/wire_decode.h"
#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {
namespace {

using namespace fabricscope::collectors::gpu;

template <size_t N>
void CheckString(const char (&s)[N]) {
  FuzzCheck(std::memchr(s, '\0', N) != nullptr, "a fixed string is NUL-terminated");
}

class Checker final : public RecordVisitor {
 public:
  void OnComm(const CommRecord& r) override { CheckString(r.name); }
  void OnCollective(const CollectiveRecord& r) override { CheckString(r.func); }
  void OnProxyOp(const ProxyOpRecord&) override {}
  void OnKernel(const KernelRecord& r) override { CheckString(r.name); }
};

}  // namespace

std::vector<std::string> FuzzSeeds() {
  std::vector<uint8_t> buf(kMaxDatagramBytes);
  DatagramWriter w(buf.data(), buf.size(), Source::kNcclProfiler, 4242);
  CommRecord comm{};
  CopyFixed(comm.name, "comm-a");
  CollectiveRecord coll{};
  CopyFixed(coll.func, "AllReduce");
  KernelRecord kernel{};
  CopyFixed(kernel.name, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  w.Append(comm);
  w.Append(coll);
  w.Append(ProxyOpRecord{});
  w.Append(kernel);
  buf.resize(w.Finish(7, 0, 555));
  return {std::string(buf.begin(), buf.end())};
}

}  // namespace fabricscope::testing

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fabricscope::testing::Checker v;
  fabricscope::collectors::gpu::DecodeResult result;
  fabricscope::collectors::gpu::DecodeDatagram(absl::MakeConstSpan(data, size), v, &result)
      .IgnoreError();
  return 0;
}
