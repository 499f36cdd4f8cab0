#include "collectors/cupti/activity.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "collectors/gpu/wire_decode.h"

namespace fabricscope::collectors::cupti {
namespace {

using gpu::FixedString;

// Names as CUDA reports them, and their demangled forms (c++filt from binutils 2.40).
constexpr char kElementwise[] =
    "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_"
    "T1_";
constexpr char kElementwiseDemangled[] =
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)";
constexpr char kNcclAllReduce[] =
    "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE";
constexpr char kNcclAllReduceDemangled[] =
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

// An activity record in raw bytes, as CUPTI hands them out (a buffer, not a typed object).
template <typename T>
class Raw {
 public:
  explicit Raw(const T& record) { std::memcpy(bytes_, &record, sizeof(T)); }
  const CUpti_Activity& activity() const {
    return *reinterpret_cast<const CUpti_Activity*>(bytes_);
  }

 private:
  alignas(8) unsigned char bytes_[sizeof(T)];
};

CUpti_ActivityKernel10 Kernel(const char* name) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 1'000'000'123;
  k.end = 1'000'050'456;
  k.deviceId = 3;
  k.contextId = 5;
  k.streamId = 13;
  k.correlationId = 4242;
  k.graphId = 77;
  k.name = name;
  return k;
}

TEST(DemanglerTest, DemanglesItaniumNamesAndKeepsOthers) {
  Demangler d;
  EXPECT_STREQ(d.Demangle(kElementwise), kElementwiseDemangled);
  EXPECT_STREQ(d.Demangle("_Z9vectorAddPKfS0_Pfi"),
               "vectorAdd(float const*, float const*, float*, int)");
  // extern "C" kernel names and names that fail to demangle come back unchanged.
  const char* plain = "my_c_kernel";
  EXPECT_EQ(d.Demangle(plain), plain);
  const char* broken = "_Zfoo";
  EXPECT_EQ(d.Demangle(broken), broken);
  EXPECT_EQ(d.Demangle(nullptr), nullptr);
  // The buffer is reused: a shorter name after a longer one is not polluted by its tail.
  EXPECT_STREQ(d.Demangle("_Z1fv"), "f()");
}

TEST(DemanglerTest, DemangleIntoTruncatesToTheField) {
  Demangler d;
  char small[16];
  EXPECT_TRUE(d.DemangleInto(kElementwise, small));
  EXPECT_EQ(std::string(small), std::string(kElementwiseDemangled).substr(0, 15));
  char field[160];
  EXPECT_FALSE(d.DemangleInto("plain", field));
  EXPECT_STREQ(field, "plain");
  EXPECT_FALSE(d.DemangleInto(nullptr, field));
  EXPECT_STREQ(field, "");
}

TEST(NcclKernelTest, MarksNcclDeviceKernelsOnly) {
  EXPECT_TRUE(IsNcclKernelName(kNcclAllReduceDemangled));
  EXPECT_TRUE(IsNcclKernelName("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"));
  EXPECT_TRUE(IsNcclKernelName("void ncclDevKernel_SendRecv<0>(ncclDevKernelArgsStorage<4096ul>)"));
  EXPECT_FALSE(IsNcclKernelName("my_ncclDevKernel"));
  EXPECT_FALSE(IsNcclKernelName("nccl_helper_kernel"));
  EXPECT_FALSE(IsNcclKernelName("ncclDev"));
  EXPECT_FALSE(IsNcclKernelName(kElementwiseDemangled));
  EXPECT_FALSE(IsNcclKernelName(""));
}

TEST(ConvertActivityTest, KernelRecordCarriesEveryField) {
  Demangler d;
  const CUpti_ActivityKernel10 k = Kernel(kElementwise);
  gpu::KernelRecord out;
  ASSERT_EQ(ConvertActivity(Raw(k).activity(), d, &out), ConvertResult::kKernel);
  EXPECT_EQ(out.start_ns, 1'000'000'123);
  EXPECT_EQ(out.end_ns, 1'000'050'456);
  EXPECT_EQ(out.correlation_id, 4242u);
  EXPECT_EQ(out.graph_id, 77u);
  EXPECT_EQ(out.bytes, 0u);
  EXPECT_EQ(out.device, 3u);
  EXPECT_EQ(out.context, 5u);
  EXPECT_EQ(out.stream, 13u);
  EXPECT_EQ(out.kind, static_cast<uint8_t>(gpu::ActivityKind::kKernel));
  EXPECT_EQ(out.is_nccl, 0);
  EXPECT_EQ(out.memcpy_kind, 0);
  // 160-byte field: the demangled name (167 characters) is cut to 159 plus the terminator.
  ASSERT_GT(std::strlen(kElementwiseDemangled), sizeof(out.name));
  EXPECT_EQ(FixedString(out.name), std::string(kElementwiseDemangled).substr(0, 159));
}

TEST(ConvertActivityTest, NcclKernelIsMarkedEvenWhenItsNameIsTruncated) {
  Demangler d;
  gpu::KernelRecord out;
  CUpti_ActivityKernel10 k = Kernel(kNcclAllReduce);
  k.kind = CUPTI_ACTIVITY_KIND_KERNEL;  // the serializing kind converts the same way
  ASSERT_EQ(ConvertActivity(Raw(k).activity(), d, &out), ConvertResult::kKernel);
  EXPECT_EQ(out.is_nccl, 1);
  EXPECT_EQ(FixedString(out.name), kNcclAllReduceDemangled);

  std::string long_name = "ncclDevKernel_" + std::string(300, 'x');
  k.name = long_name.c_str();
  ASSERT_EQ(ConvertActivity(Raw(k).activity(), d, &out), ConvertResult::kKernel);
  EXPECT_EQ(out.is_nccl, 1);
  EXPECT_EQ(FixedString(out.name).size(), 159u);
}

TEST(ConvertActivityTest, KernelWithoutTimingOrNameKeepsZeros) {
  Demangler d;
  CUpti_ActivityKernel10 k = Kernel(nullptr);
  k.start = 0;
  k.end = 0;
  gpu::KernelRecord out;
  ASSERT_EQ(ConvertActivity(Raw(k).activity(), d, &out), ConvertResult::kKernel);
  EXPECT_EQ(out.start_ns, 0);
  EXPECT_EQ(out.end_ns, 0);
  EXPECT_EQ(FixedString(out.name), "");
  EXPECT_EQ(out.is_nccl, 0);
}

TEST(ConvertActivityTest, MemcpyRecord) {
  Demangler d;
  CUpti_ActivityMemcpy6 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.bytes = 1 << 20;
  m.start = 500;
  m.end = 9500;
  m.deviceId = 1;
  m.contextId = 2;
  m.streamId = 3;
  m.correlationId = 99;
  m.graphId = 8;
  gpu::KernelRecord out;
  ASSERT_EQ(ConvertActivity(Raw(m).activity(), d, &out), ConvertResult::kMemcpy);
  EXPECT_EQ(out.kind, static_cast<uint8_t>(gpu::ActivityKind::kMemcpy));
  EXPECT_EQ(out.memcpy_kind, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH);
  EXPECT_EQ(out.bytes, 1u << 20);
  EXPECT_EQ(out.start_ns, 500);
  EXPECT_EQ(out.end_ns, 9500);
  EXPECT_EQ(out.device, 1u);
  EXPECT_EQ(out.context, 2u);
  EXPECT_EQ(out.stream, 3u);
  EXPECT_EQ(out.correlation_id, 99u);
  EXPECT_EQ(out.graph_id, 8u);
  EXPECT_EQ(out.is_nccl, 0);
  EXPECT_EQ(FixedString(out.name), "[memcpy DtoH]");

  m.copyKind = 200;  // a kind this version does not know
  ASSERT_EQ(ConvertActivity(Raw(m).activity(), d, &out), ConvertResult::kMemcpy);
  EXPECT_EQ(FixedString(out.name), "[memcpy unknown]");
}

TEST(ConvertActivityTest, OtherKindsAreNotConverted) {
  Demangler d;
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  gpu::KernelRecord out;
  EXPECT_EQ(ConvertActivity(Raw(api).activity(), d, &out), ConvertResult::kUnsupported);
}

// The record layout the conversion assumes is the one libcupti itself walks: records packed
// back to back at their struct sizes, walked here with the real cuptiActivityGetNextRecord
// (which needs no GPU).
TEST(ConvertActivityTest, RealCuptiWalksABufferBuiltFromTheHeaderLayouts) {
  std::vector<uint8_t> storage(4096);  // operator new: 16-byte aligned, CUPTI needs 8
  uint8_t* buffer = storage.data();
  size_t used = 0;
  const auto add = [&](const auto& record) {
    std::memcpy(buffer + used, &record, sizeof(record));
    used += sizeof(record);
  };
  add(Kernel(kElementwise));
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  add(api);
  CUpti_ActivityMemcpy6 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.bytes = 64;
  add(m);
  add(Kernel(kNcclAllReduce));

  Demangler d;
  std::vector<std::string> names;
  std::vector<uint8_t> nccl;
  size_t unsupported = 0;
  CUpti_Activity* record = nullptr;
  CUptiResult status;
  while ((status = cuptiActivityGetNextRecord(buffer, used, &record)) == CUPTI_SUCCESS) {
    gpu::KernelRecord out;
    if (ConvertActivity(*record, d, &out) == ConvertResult::kUnsupported) {
      ++unsupported;
      continue;
    }
    names.push_back(FixedString(out.name));
    nccl.push_back(out.is_nccl);
  }
  EXPECT_EQ(status, CUPTI_ERROR_MAX_LIMIT_REACHED);
  EXPECT_EQ(unsupported, 1u);
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], std::string(kElementwiseDemangled).substr(0, 159));
  EXPECT_EQ(names[1], "[memcpy unknown]");  // copyKind 0 = CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN
  EXPECT_EQ(names[2], kNcclAllReduceDemangled);
  EXPECT_EQ(nccl, (std::vector<uint8_t>{0, 0, 1}));
}

}  // namespace
}  // namespace fabricscope::collectors::cupti
