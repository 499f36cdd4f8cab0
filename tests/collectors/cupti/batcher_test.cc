#include "collectors/cupti/batcher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectors/gpu/wire_decode.h"

namespace fabricscope::collectors::cupti {
namespace {

using gpu::FixedString;
using gpu::KernelRecord;

class MemorySink : public DatagramSink {
 public:
  bool Send(const void* data, size_t size) override {
    ++attempts;
    if (!accept) return false;
    const auto* p = static_cast<const uint8_t*>(data);
    datagrams.emplace_back(p, p + size);
    return true;
  }
  bool accept = true;
  int attempts = 0;
  std::vector<std::vector<uint8_t>> datagrams;
};

class Collect : public gpu::RecordVisitor {
 public:
  void OnComm(const gpu::CommRecord&) override { ++others; }
  void OnCollective(const gpu::CollectiveRecord&) override { ++others; }
  void OnProxyOp(const gpu::ProxyOpRecord&) override { ++others; }
  void OnKernel(const KernelRecord& r) override { kernels.push_back(r); }
  std::vector<KernelRecord> kernels;
  int others = 0;
};

// An activity buffer laid out as CUPTI fills it (walked by the real cuptiActivityGetNextRecord).
class ActivityBuffer {
 public:
  explicit ActivityBuffer(size_t bytes) : storage_(bytes) {}
  void AddKernel(uint32_t correlation, const char* name) {
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = 1000 * correlation;
    k.end = 1000 * correlation + 500;
    k.correlationId = correlation;
    k.deviceId = 2;
    k.streamId = 7;
    k.name = name;
    Add(k);
  }
  template <typename T>
  void Add(const T& record) {
    ASSERT_LE(used_ + sizeof(T), storage_.size());
    std::memcpy(storage_.data() + used_, &record, sizeof(T));
    used_ += sizeof(T);
  }
  uint8_t* data() { return storage_.data(); }
  size_t used() const { return used_; }

 private:
  std::vector<uint8_t> storage_;
  size_t used_ = 0;
};

struct Decoded {
  std::vector<gpu::DecodeResult> headers;
  std::vector<KernelRecord> kernels;
};

Decoded DecodeAll(const MemorySink& sink) {
  Decoded out;
  Collect visitor;
  for (const auto& d : sink.datagrams) {
    EXPECT_LE(d.size(), gpu::kMaxDatagramBytes);
    gpu::DecodeResult result;
    const absl::Status status = gpu::DecodeDatagram(d, visitor, &result);
    EXPECT_TRUE(status.ok()) << status;
    out.headers.push_back(result);
  }
  EXPECT_EQ(visitor.others, 0);
  out.kernels = visitor.kernels;
  return out;
}

class BatcherTest : public ::testing::Test {
 protected:
  MemorySink sink_;
  std::unique_ptr<ActivityBatcher> batcher_ =
      std::make_unique<ActivityBatcher>(sink_, getpid(), &cuptiActivityGetNextRecord);
};

TEST_F(BatcherTest, OneBufferBecomesOneDatagram) {
  ActivityBuffer buffer(4096);
  buffer.AddKernel(1, "_Z1fv");
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  buffer.Add(api);
  buffer.AddKernel(2, "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)");

  EXPECT_EQ(batcher_->ProcessBuffer(buffer.data(), buffer.used()), 2u);
  ASSERT_EQ(sink_.datagrams.size(), 1u);
  const Decoded d = DecodeAll(sink_);
  const gpu::DatagramHeader& h = d.headers[0].header;
  EXPECT_EQ(h.source, static_cast<uint16_t>(gpu::Source::kCupti));
  EXPECT_EQ(h.pid, getpid());
  EXPECT_EQ(h.sequence, 1u);
  EXPECT_EQ(h.record_count, 2u);
  EXPECT_EQ(h.dropped_records_total, 0u);
  ASSERT_EQ(d.kernels.size(), 2u);
  EXPECT_EQ(FixedString(d.kernels[0].name), "f()");
  EXPECT_EQ(d.kernels[0].correlation_id, 1u);
  EXPECT_EQ(d.kernels[0].start_ns, 1000);
  EXPECT_EQ(d.kernels[0].end_ns, 1500);
  EXPECT_EQ(d.kernels[0].device, 2u);
  EXPECT_EQ(d.kernels[0].stream, 7u);
  EXPECT_EQ(d.kernels[0].is_nccl, 0);
  EXPECT_EQ(d.kernels[1].is_nccl, 1);

  const BatcherStats s = batcher_->stats();
  EXPECT_EQ(s.buffers, 1u);
  EXPECT_EQ(s.kernels, 2u);
  EXPECT_EQ(s.unsupported, 1u);
  EXPECT_EQ(s.records_sent, 2u);
  EXPECT_EQ(s.datagrams_sent, 1u);
}

TEST_F(BatcherTest, LargeBufferIsSplitIntoFullDatagramsWithoutLoss) {
  // 216-byte records + 8-byte record headers: 292 fit in one 64 KiB datagram after its header.
  constexpr uint32_t kRecords = 1000;
  ActivityBuffer buffer(kRecords * sizeof(CUpti_ActivityKernel10));
  for (uint32_t i = 1; i <= kRecords; ++i) buffer.AddKernel(i, "_Z9vectorAddPKfS0_Pfi");
  EXPECT_EQ(batcher_->ProcessBuffer(buffer.data(), buffer.used()), kRecords);

  const size_t per_datagram = (gpu::kMaxDatagramBytes - sizeof(gpu::DatagramHeader)) /
                              (sizeof(gpu::RecordHeader) + sizeof(KernelRecord));
  const size_t expected_datagrams = (kRecords + per_datagram - 1) / per_datagram;
  ASSERT_EQ(sink_.datagrams.size(), expected_datagrams);
  const Decoded d = DecodeAll(sink_);
  for (size_t i = 0; i < d.headers.size(); ++i) {
    EXPECT_EQ(d.headers[i].header.sequence, i + 1);
    if (i + 1 < d.headers.size()) {
      EXPECT_EQ(d.headers[i].header.record_count, per_datagram);
    }
  }
  ASSERT_EQ(d.kernels.size(), kRecords);
  for (uint32_t i = 0; i < kRecords; ++i) {
    ASSERT_EQ(d.kernels[i].correlation_id, i + 1) << "records arrive complete and in order";
  }
  EXPECT_EQ(FixedString(d.kernels[999].name), "vectorAdd(float const*, float const*, float*, int)");
}

TEST_F(BatcherTest, RefusedDatagramsAreCountedAndReportedInTheNextOne) {
  ActivityBuffer first(4096);
  for (uint32_t i = 1; i <= 3; ++i) first.AddKernel(i, "k");
  sink_.accept = false;  // agent absent or its socket buffer full
  batcher_->ProcessBuffer(first.data(), first.used());
  EXPECT_EQ(sink_.attempts, 1);
  EXPECT_EQ(batcher_->stats().channel_dropped, 3u);

  batcher_->AddCuptiDropped(5);  // CUPTI ran out of buffer space meanwhile
  sink_.accept = true;
  ActivityBuffer second(4096);
  second.AddKernel(4, "k");
  batcher_->ProcessBuffer(second.data(), second.used());
  const Decoded d = DecodeAll(sink_);
  ASSERT_EQ(d.headers.size(), 1u);
  EXPECT_EQ(d.headers[0].header.sequence, 2u) << "the refused datagram leaves a gap";
  EXPECT_EQ(d.headers[0].header.dropped_records_total, 8u);
  ASSERT_EQ(d.kernels.size(), 1u);
  EXPECT_EQ(d.kernels[0].correlation_id, 4u);
  const BatcherStats s = batcher_->stats();
  EXPECT_EQ(s.dropped_records_total(), 8u);
  EXPECT_EQ(s.datagrams_failed, 1u);
  EXPECT_EQ(s.records_sent, 1u);
}

TEST_F(BatcherTest, DropsAloneAreReportedOnceInAnEmptyDatagram) {
  batcher_->ProcessBuffer(nullptr, 0);
  EXPECT_EQ(sink_.attempts, 0) << "nothing new: nothing sent";
  batcher_->AddCuptiDropped(7);
  batcher_->ProcessBuffer(nullptr, 0);
  batcher_->ProcessBuffer(nullptr, 0);
  const Decoded d = DecodeAll(sink_);
  ASSERT_EQ(d.headers.size(), 1u);
  EXPECT_EQ(d.headers[0].header.record_count, 0u);
  EXPECT_EQ(d.headers[0].header.dropped_records_total, 7u);
}

TEST_F(BatcherTest, IncompleteRecordEndsTheWalkAndIsCounted) {
  ActivityBuffer buffer(4096);
  buffer.AddKernel(1, "k");
  CUpti_ActivityKernel10 invalid{};
  invalid.kind = CUPTI_ACTIVITY_KIND_INVALID;  // what CUPTI leaves in a record not yet written
  buffer.Add(invalid);
  buffer.AddKernel(3, "k");
  EXPECT_EQ(batcher_->ProcessBuffer(buffer.data(), buffer.used()), 1u);
  EXPECT_EQ(batcher_->stats().walk_errors, 1u);
  const Decoded d = DecodeAll(sink_);
  ASSERT_EQ(d.kernels.size(), 1u);
  EXPECT_EQ(d.kernels[0].correlation_id, 1u);
}

}  // namespace
}  // namespace fabricscope::collectors::cupti
