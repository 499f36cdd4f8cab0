#include "collectors/gpu/wire.h"

#include <cstring>
#include <vector>

#include "collectors/gpu/wire_decode.h"
#include "gtest/gtest.h"

namespace fabricscope::collectors::gpu {
namespace {

class CollectingVisitor : public RecordVisitor {
 public:
  void OnComm(const CommRecord& r) override { comms.push_back(r); }
  void OnCollective(const CollectiveRecord& r) override { collectives.push_back(r); }
  void OnProxyOp(const ProxyOpRecord& r) override { proxy_ops.push_back(r); }
  void OnKernel(const KernelRecord& r) override { kernels.push_back(r); }
  void OnChannels(const ChannelSpansRecord& r) override { channels.push_back(r); }
  size_t total() const {
    return comms.size() + collectives.size() + proxy_ops.size() + kernels.size();
  }
  std::vector<CommRecord> comms;
  std::vector<CollectiveRecord> collectives;
  std::vector<ProxyOpRecord> proxy_ops;
  std::vector<KernelRecord> kernels;
  std::vector<ChannelSpansRecord> channels;
};

CommRecord MakeComm() {
  CommRecord r{};
  r.comm_hash = 0x1234'5678'9abc'def0;
  r.rank = 3;
  r.nranks = 8;
  r.nnodes = 2;
  r.cuda_device = -1;
  CopyFixed(r.name, "a-communicator-name-that-is-longer-than-forty-eight-bytes-really");
  return r;
}

CollectiveRecord MakeCollective() {
  CollectiveRecord r{};
  r.comm_hash = 77;
  r.seq = 42;
  r.count = 1 << 20;
  r.bytes = 4 << 20;
  r.enqueue_start_ns = 1000;
  r.enqueue_end_ns = 2000;
  r.start_ns = 1500;
  r.end_ns = 9000;
  r.proxy_bytes = 123456;
  r.rank = 1;
  r.nranks = 4;
  r.root = -1;
  r.peer = -1;
  r.proxy_ops = 6;
  r.kind = static_cast<uint8_t>(OpKind::kCollective);
  r.timing_source = static_cast<uint8_t>(TimingSource::kKernelChannel);
  r.nchannels = 2;
  r.graph_captured = 1;
  CopyFixed(r.func, "AllReduce");
  CopyFixed(r.datatype, "ncclFloat32");
  CopyFixed(r.algo, "RING");
  CopyFixed(r.proto, "SIMPLE");
  return r;
}

ProxyOpRecord MakeProxyOp() {
  ProxyOpRecord r{};
  r.comm_hash = 77;
  r.op_seq = 42;
  r.start_ns = 1600;
  r.end_ns = 8000;
  r.bytes = 65536;
  r.rank = 1;
  r.peer = 2;
  r.steps = 4;
  r.chunk_size = 16384;
  r.pid = 4242;
  r.channel = 1;
  r.is_send = 1;
  r.kind = static_cast<uint8_t>(OpKind::kCollective);
  CopyFixed(r.func, "AllReduce");
  return r;
}

KernelRecord MakeKernel() {
  KernelRecord r{};
  r.start_ns = 10;
  r.end_ns = 20;
  r.correlation_id = 99;
  r.graph_id = 5;
  r.device = 0;
  r.context = 1;
  r.stream = 7;
  r.kind = static_cast<uint8_t>(ActivityKind::kKernel);
  r.is_nccl = 1;
  CopyFixed(r.name, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
  return r;
}

std::vector<uint8_t> Build(uint64_t sequence = 7, uint64_t dropped = 3) {
  std::vector<uint8_t> buf(kMaxDatagramBytes);
  DatagramWriter w(buf.data(), buf.size(), Source::kNcclProfiler, 4242);
  EXPECT_TRUE(w.Append(MakeComm()));
  EXPECT_TRUE(w.Append(MakeCollective()));
  EXPECT_TRUE(w.Append(MakeProxyOp()));
  EXPECT_TRUE(w.Append(MakeKernel()));
  buf.resize(w.Finish(sequence, dropped, 555));
  return buf;
}

TEST(WireTest, CopyFixedTruncatesAndPads) {
  char s[8];
  CopyFixed(s, "AllReduce");
  EXPECT_EQ(std::string(s), "AllRedu");
  CopyFixed(s, nullptr);
  EXPECT_EQ(s[0], '\0');
  CopyFixed(s, "ab");
  EXPECT_EQ(std::memcmp(s, "ab\0\0\0\0\0\0", 8), 0);
}

TEST(WireTest, RoundTripsEveryRecordType) {
  const auto dg = Build();
  EXPECT_EQ(dg.size(), sizeof(DatagramHeader) + 4 * sizeof(RecordHeader) + sizeof(CommRecord) +
                           sizeof(CollectiveRecord) + sizeof(ProxyOpRecord) + sizeof(KernelRecord));
  CollectingVisitor v;
  DecodeResult result;
  ASSERT_TRUE(DecodeDatagram(dg, v, &result).ok());
  EXPECT_EQ(result.records, 4u);
  EXPECT_EQ(result.unknown_records, 0u);
  EXPECT_EQ(result.header.magic, kWireMagic);
  EXPECT_EQ(result.header.source, static_cast<uint16_t>(Source::kNcclProfiler));
  EXPECT_EQ(result.header.pid, 4242);
  EXPECT_EQ(result.header.record_count, 4u);
  EXPECT_EQ(result.header.sequence, 7u);
  EXPECT_EQ(result.header.dropped_records_total, 3u);
  EXPECT_EQ(result.header.send_ns, 555);

  ASSERT_EQ(v.comms.size(), 1u);
  const CommRecord c = MakeComm();
  EXPECT_EQ(std::memcmp(&v.comms[0], &c, sizeof(c)), 0);
  EXPECT_EQ(FixedString(v.comms[0].name).size(), 47u);  // truncated to 47 + NUL
  ASSERT_EQ(v.collectives.size(), 1u);
  const CollectiveRecord k = MakeCollective();
  EXPECT_EQ(std::memcmp(&v.collectives[0], &k, sizeof(k)), 0);
  EXPECT_EQ(FixedString(v.collectives[0].func), "AllReduce");
  EXPECT_EQ(FixedString(v.collectives[0].proto), "SIMPLE");
  ASSERT_EQ(v.proxy_ops.size(), 1u);
  const ProxyOpRecord p = MakeProxyOp();
  EXPECT_EQ(std::memcmp(&v.proxy_ops[0], &p, sizeof(p)), 0);
  ASSERT_EQ(v.kernels.size(), 1u);
  const KernelRecord kr = MakeKernel();
  EXPECT_EQ(std::memcmp(&v.kernels[0], &kr, sizeof(kr)), 0);
}

// Channel spans round-trip; a count past the record's 4 spans (a lying producer) is cut to 4, so
// no reader walks past the array.
TEST(WireTest, ChannelSpansRoundTripAndALyingCountIsCut) {
  std::vector<uint8_t> buf(kMaxDatagramBytes);
  DatagramWriter w(buf.data(), buf.size(), Source::kNcclProfiler, 9);
  ChannelSpansRecord r{};
  r.comm_hash = 77;
  r.seq = 42;
  r.rank = 1;
  r.count = 2;
  CopyFixed(r.func, "AllReduce");
  r.spans[0] = ChannelSpan{100, 200, 3, {}};
  r.spans[1] = ChannelSpan{110, 190, 7, {}};
  ASSERT_TRUE(w.Append(r));
  r.count = 200;
  ASSERT_TRUE(w.Append(r));
  const size_t n = w.Finish(1, 0, 0);
  CollectingVisitor v;
  ASSERT_TRUE(DecodeDatagram(absl::MakeConstSpan(buf.data(), n), v, nullptr).ok());
  ASSERT_EQ(v.channels.size(), 2u);
  EXPECT_EQ(v.channels[0].count, 2);
  EXPECT_EQ(v.channels[0].spans[1].channel, 7);
  EXPECT_EQ(v.channels[0].spans[1].end_ns, 190);
  EXPECT_EQ(FixedString(v.channels[0].func), "AllReduce");
  EXPECT_EQ(v.channels[1].count, ChannelSpansRecord::kSpans);
}

TEST(WireTest, WriterRefusesRecordsThatDoNotFitAndResets) {
  std::vector<uint8_t> buf(sizeof(DatagramHeader) + sizeof(RecordHeader) + sizeof(CommRecord) + 4);
  DatagramWriter w(buf.data(), buf.size(), Source::kCupti, 1);
  EXPECT_TRUE(w.empty());
  EXPECT_TRUE(w.Append(MakeComm()));
  EXPECT_FALSE(w.Append(MakeComm()));
  EXPECT_EQ(w.record_count(), 1u);
  const size_t n = w.Finish(1, 0, 0);
  CollectingVisitor v;
  ASSERT_TRUE(DecodeDatagram(absl::MakeConstSpan(buf.data(), n), v, nullptr).ok());
  EXPECT_EQ(v.comms.size(), 1u);
  w.Reset();
  EXPECT_TRUE(w.empty());
  EXPECT_EQ(w.size(), sizeof(DatagramHeader));
}

TEST(WireTest, StringsWithoutNulAreTerminatedByTheDecoder) {
  auto dg = Build();
  // Overwrite the collective's func with 16 non-NUL bytes.
  const size_t coll_payload =
      sizeof(DatagramHeader) + sizeof(RecordHeader) + sizeof(CommRecord) + sizeof(RecordHeader);
  std::memset(dg.data() + coll_payload + offsetof(CollectiveRecord, func), 'x', 16);
  CollectingVisitor v;
  ASSERT_TRUE(DecodeDatagram(dg, v, nullptr).ok());
  ASSERT_EQ(v.collectives.size(), 1u);
  EXPECT_EQ(FixedString(v.collectives[0].func), std::string(15, 'x'));
}

TEST(WireTest, UnknownTypesAreSkippedBySize) {
  std::vector<uint8_t> dg = Build();
  RecordHeader rh{999, 5, 0};
  const uint8_t extra[5] = {1, 2, 3, 4, 5};
  dg.insert(dg.end(), reinterpret_cast<uint8_t*>(&rh), reinterpret_cast<uint8_t*>(&rh) + 8);
  dg.insert(dg.end(), extra, extra + 5);
  DatagramHeader h;
  std::memcpy(&h, dg.data(), sizeof(h));
  h.record_count = 5;
  std::memcpy(dg.data(), &h, sizeof(h));
  CollectingVisitor v;
  DecodeResult result;
  ASSERT_TRUE(DecodeDatagram(dg, v, &result).ok());
  EXPECT_EQ(result.records, 4u);
  EXPECT_EQ(result.unknown_records, 1u);
  EXPECT_EQ(v.total(), 4u);
}

TEST(WireTest, LongerPayloadOfAKnownTypeIsAccepted) {
  // A newer producer appends fields: the payload is longer than the struct this agent knows.
  std::vector<uint8_t> buf(kMaxDatagramBytes);
  DatagramWriter w(buf.data(), buf.size(), Source::kNcclProfiler, 1);
  struct Bigger {
    CommRecord comm;
    uint64_t extra;
  };
  buf.resize(w.Finish(1, 0, 0));
  RecordHeader rh{static_cast<uint16_t>(RecordType::kComm), sizeof(Bigger), 0};
  Bigger big{MakeComm(), 0xffff};
  buf.insert(buf.end(), reinterpret_cast<uint8_t*>(&rh), reinterpret_cast<uint8_t*>(&rh) + 8);
  buf.insert(buf.end(), reinterpret_cast<uint8_t*>(&big),
             reinterpret_cast<uint8_t*>(&big) + sizeof(big));
  DatagramHeader h;
  std::memcpy(&h, buf.data(), sizeof(h));
  h.record_count = 1;
  std::memcpy(buf.data(), &h, sizeof(h));
  CollectingVisitor v;
  ASSERT_TRUE(DecodeDatagram(buf, v, nullptr).ok());
  ASSERT_EQ(v.comms.size(), 1u);
  EXPECT_EQ(v.comms[0].rank, 3);
}

// Each malformed case of wire_decode.h's docstring: the documented code, nothing delivered.
struct Malformed {
  const char* name;
  absl::StatusCode code;
  std::vector<uint8_t> (*make)();
};

void SetHeader(std::vector<uint8_t>& dg, void (*edit)(DatagramHeader&)) {
  DatagramHeader h;
  std::memcpy(&h, dg.data(), sizeof(h));
  edit(h);
  std::memcpy(dg.data(), &h, sizeof(h));
}

const Malformed kMalformed[] = {
    {"shorter than header", absl::StatusCode::kInvalidArgument,
     [] {
       auto dg = Build();
       dg.resize(sizeof(DatagramHeader) - 1);
       return dg;
     }},
    {"empty", absl::StatusCode::kInvalidArgument, [] { return std::vector<uint8_t>(); }},
    {"wrong magic", absl::StatusCode::kInvalidArgument,
     [] {
       auto dg = Build();
       SetHeader(dg, [](DatagramHeader& h) { h.magic = 0x12345678; });
       return dg;
     }},
    {"unsupported version", absl::StatusCode::kFailedPrecondition,
     [] {
       auto dg = Build();
       SetHeader(dg, [](DatagramHeader& h) { h.version = kWireVersion + 1; });
       return dg;
     }},
    {"truncated record header", absl::StatusCode::kInvalidArgument,
     [] {
       auto dg = Build();
       dg.push_back(1);  // trailing bytes shorter than a record header
       dg.push_back(0);
       return dg;
     }},
    {"payload past the end", absl::StatusCode::kInvalidArgument,
     [] {
       auto dg = Build();
       dg.resize(dg.size() - 1);
       return dg;
     }},
    {"known type shorter than its struct", absl::StatusCode::kInvalidArgument,
     [] {
       std::vector<uint8_t> buf(kMaxDatagramBytes);
       DatagramWriter w(buf.data(), buf.size(), Source::kNcclProfiler, 1);
       w.Append(MakeComm());
       buf.resize(w.Finish(1, 0, 0));
       RecordHeader rh{static_cast<uint16_t>(RecordType::kCollective), 16, 0};
       buf.insert(buf.end(), reinterpret_cast<uint8_t*>(&rh), reinterpret_cast<uint8_t*>(&rh) + 8);
       buf.insert(buf.end(), 16, 0);
       SetHeader(buf, [](DatagramHeader& h) { h.record_count = 2; });
       return buf;
     }},
    {"trailing bytes as a whole bogus record", absl::StatusCode::kInvalidArgument,
     [] {
       auto dg = Build();
       RecordHeader rh{static_cast<uint16_t>(RecordType::kProxyOp), 200, 0};
       dg.insert(dg.end(), reinterpret_cast<uint8_t*>(&rh), reinterpret_cast<uint8_t*>(&rh) + 8);
       dg.insert(dg.end(), 10, 0);
       return dg;
     }},
    {"count larger than present", absl::StatusCode::kInvalidArgument,
     [] {
       auto dg = Build();
       SetHeader(dg, [](DatagramHeader& h) { h.record_count = 5; });
       return dg;
     }},
    {"count smaller than present", absl::StatusCode::kInvalidArgument,
     [] {
       auto dg = Build();
       SetHeader(dg, [](DatagramHeader& h) { h.record_count = 3; });
       return dg;
     }},
};

TEST(WireTest, MalformedDatagramsReturnTheDocumentedErrorAndDeliverNothing) {
  for (const Malformed& m : kMalformed) {
    SCOPED_TRACE(m.name);
    const auto dg = m.make();
    CollectingVisitor v;
    DecodeResult result;
    result.records = 99;
    const absl::Status s = DecodeDatagram(dg, v, &result);
    EXPECT_EQ(s.code(), m.code) << s;
    EXPECT_FALSE(s.message().empty());
    EXPECT_EQ(v.total(), 0u);
    EXPECT_EQ(result.records, 0u);
  }
}

}  // namespace
}  // namespace fabricscope::collectors::gpu
