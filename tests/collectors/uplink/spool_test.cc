#include "collectors/uplink/spool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>
#include <utime.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_format.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::uplink {
namespace {

namespace fs = std::filesystem;

v1::Hello HelloOf(uint64_t instance) {
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(instance);
  h.add_ports()->set_device("mlx5_0");
  return h;
}

v1::Batch BatchOf(uint64_t seq, size_t pad = 100) {
  v1::Batch b;
  b.set_seq(seq);
  b.set_window_end_ns(static_cast<int64_t>(seq) * 1'000'000'000);
  b.add_collectives()->set_func(std::string(pad, 'x'));
  return b;
}

std::string InstanceDir(const std::string& root, uint64_t instance) {
  return absl::StrFormat("%s/%016x", root, instance);
}

std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".seg") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> SeqsOf(const std::vector<v1::Batch>& batches) {
  std::vector<uint64_t> out;
  for (const v1::Batch& b : batches) out.push_back(b.seq());
  return out;
}

TEST(Spool, Crc32cIsCastagnoli) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // RFC 3720 check value
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Spool, AppendedBatchesReadBackAndLeaveOnceAcked) {
  testing::FakeTree t;
  auto s = Spool::Open({.dir = t.root(), .segment_bytes = 300}, HelloOf(7));
  ASSERT_TRUE(s.ok()) << s.status();
  for (uint64_t seq = 1; seq <= 10; ++seq) ASSERT_TRUE((*s)->Append(BatchOf(seq)).ok());
  EXPECT_EQ((*s)->FirstSeq(), 1u);
  EXPECT_EQ((*s)->stats().batches, 10u);
  const size_t segments = Segments(InstanceDir(t.root(), 7)).size();
  EXPECT_GE(segments, 3u);  // ~125 bytes a record, sealed past 300: 3 a segment
  auto b = (*s)->Read(4);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->window_end_ns(), 4'000'000'000);
  (*s)->Acked(6);
  EXPECT_FALSE((*s)->Holds(6));
  EXPECT_TRUE((*s)->Holds(7));
  EXPECT_EQ((*s)->FirstSeq(), 7u);
  EXPECT_LT(Segments(InstanceDir(t.root(), 7)).size(), segments);
  (*s)->Acked(10);
  EXPECT_EQ((*s)->stats().batches, 0u);
  EXPECT_EQ((*s)->stats().bytes, 0u);
  EXPECT_TRUE(Segments(InstanceDir(t.root(), 7)).empty());
  EXPECT_EQ((*s)->FirstSeq(), 0u);
  EXPECT_FALSE((*s)->Read(8).has_value());
}

// The next process finds the unacked batches of the one before, under that one's Hello.
TEST(Spool, ANewInstanceFindsTheLeftoversOfTheOneBefore) {
  testing::FakeTree t;
  {
    auto s = Spool::Open({.dir = t.root(), .segment_bytes = 300}, HelloOf(7));
    ASSERT_TRUE(s.ok());
    for (uint64_t seq = 1; seq <= 6; ++seq) ASSERT_TRUE((*s)->Append(BatchOf(seq)).ok());
    (*s)->Acked(2);
  }  // as after kill -9: nothing else is written at exit
  auto s = Spool::Open({.dir = t.root()}, HelloOf(8));
  ASSERT_TRUE(s.ok());
  const std::vector<Spool::Leftover> left = (*s)->Leftovers();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].hello.instance_id(), 7u);
  EXPECT_EQ(left[0].hello.node(), "n1");
  std::vector<v1::Batch> all;
  for (const std::string& seg : left[0].segments) {
    auto batches = Spool::ReadSegment(seg);
    ASSERT_TRUE(batches.ok());
    all.insert(all.end(), batches->begin(), batches->end());
  }
  // 1 and 2 were acked, but may share a segment with 3: a replay sends them again, and the
  // aggregator drops the duplicates. Every unacked one is there, in order.
  std::vector<uint64_t> seqs = SeqsOf(all);
  ASSERT_GE(seqs.size(), 4u);
  EXPECT_EQ(std::vector<uint64_t>(seqs.end() - 4, seqs.end()), (std::vector<uint64_t>{3, 4, 5, 6}));
  EXPECT_EQ((*s)->stats().batches, seqs.size());
  for (const std::string& seg : left[0].segments) (*s)->RemoveLeftoverSegment(seg, 1);
  EXPECT_TRUE((*s)->Leftovers().empty());
  EXPECT_FALSE(fs::exists(InstanceDir(t.root(), 7)));
  EXPECT_EQ((*s)->stats().replayed, left[0].segments.size());
  EXPECT_EQ((*s)->stats().batches, 0u);
}

// A torn tail (the process died inside a write, or a power cut inside the open segment) is
// truncated at the last good record and counted; start-up goes on.
TEST(Spool, ATornTailIsTruncatedAndCounted) {
  testing::FakeTree t;
  {
    auto s = Spool::Open({.dir = t.root()}, HelloOf(7));
    ASSERT_TRUE(s.ok());
    for (uint64_t seq = 1; seq <= 5; ++seq) ASSERT_TRUE((*s)->Append(BatchOf(seq)).ok());
  }
  const std::string seg = Segments(InstanceDir(t.root(), 7)).at(0);
  const uintmax_t size = fs::file_size(seg);
  fs::resize_file(seg, size - 30);  // into record 5
  auto s = Spool::Open({.dir = t.root()}, HelloOf(8));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->stats().dropped_corrupt, 1u);
  auto batches = Spool::ReadSegment(seg);
  ASSERT_TRUE(batches.ok());
  EXPECT_EQ(SeqsOf(*batches), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_LT(fs::file_size(seg), size - 30);  // truncated to record 4's end
}

// A flipped bit in a record's payload fails its CRC32C: the segment ends there.
TEST(Spool, ACorruptRecordEndsItsSegment) {
  testing::FakeTree t;
  {
    auto s = Spool::Open({.dir = t.root()}, HelloOf(7));
    ASSERT_TRUE(s.ok());
    for (uint64_t seq = 1; seq <= 5; ++seq) ASSERT_TRUE((*s)->Append(BatchOf(seq)).ok());
  }
  const std::string seg = Segments(InstanceDir(t.root(), 7)).at(0);
  const uintmax_t record = fs::file_size(seg) / 5;
  {
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(2 * record + 40));  // inside record 3's payload
    f.put('Z');
  }
  auto s = Spool::Open({.dir = t.root()}, HelloOf(8));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->stats().dropped_corrupt, 1u);
  auto batches = Spool::ReadSegment(seg);
  ASSERT_TRUE(batches.ok());
  EXPECT_EQ(SeqsOf(*batches), (std::vector<uint64_t>{1, 2}));
}

TEST(Spool, PastMaxBytesTheOldestSegmentsGoFirst) {
  testing::FakeTree t;
  auto s = Spool::Open({.dir = t.root(), .max_bytes = 2000, .segment_bytes = 400}, HelloOf(7));
  ASSERT_TRUE(s.ok());
  for (uint64_t seq = 1; seq <= 60; ++seq) ASSERT_TRUE((*s)->Append(BatchOf(seq)).ok());
  const Spool::Stats st = (*s)->stats();
  EXPECT_LE(st.bytes, 2000u);
  EXPECT_GT(st.dropped_full, 0u);
  EXPECT_EQ(st.batches + st.dropped_full, 60u);  // every batch: kept or counted
  EXPECT_TRUE((*s)->Holds(60));
  EXPECT_FALSE((*s)->Holds(1));
  EXPECT_EQ((*s)->FirstSeq(), 60 - st.batches + 1);
}

TEST(Spool, OldSegmentsExpireAndAnInstanceWithoutItsHelloIsDropped) {
  testing::FakeTree t;
  for (uint64_t instance : {7u, 9u}) {
    auto s = Spool::Open({.dir = t.root()}, HelloOf(instance));
    ASSERT_TRUE(s.ok());
    for (uint64_t seq = 1; seq <= 3; ++seq) ASSERT_TRUE((*s)->Append(BatchOf(seq)).ok());
  }
  // Instance 7's segment is two days old; instance 9 lost its hello.pb.
  const std::string old = Segments(InstanceDir(t.root(), 7)).at(0);
  const struct utimbuf two_days_ago = {time(nullptr) - 2 * 86400, time(nullptr) - 2 * 86400};
  ASSERT_EQ(utime(old.c_str(), &two_days_ago), 0);
  fs::remove(InstanceDir(t.root(), 9) + "/hello.pb");
  auto s = Spool::Open({.dir = t.root()}, HelloOf(8));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->stats().dropped_expired, 3u);
  EXPECT_EQ((*s)->stats().dropped_corrupt, 3u);
  EXPECT_TRUE((*s)->Leftovers().empty());
  EXPECT_FALSE(fs::exists(InstanceDir(t.root(), 7)));
  EXPECT_FALSE(fs::exists(InstanceDir(t.root(), 9)));
}

TEST(Spool, GarbageInTheDirectoryIsLeftAloneAndAnEmptyDirIsAnError) {
  testing::FakeTree t;
  t.Write("README", "not a spool\n");
  t.Write("0000000000000007/notes.txt", "not a segment\n");
  auto s = Spool::Open({.dir = t.root()}, HelloOf(8));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->Leftovers().empty());
  EXPECT_TRUE(fs::exists(t.Path("README")));
  EXPECT_EQ(Spool::Open({.dir = ""}, HelloOf(8)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A full file system (ENOSPC, here a 64 KiB tmpfs): the oldest segment makes room, and a batch
// that still does not fit is counted, never a crash or a stall. Needs CAP_SYS_ADMIN (CI: root).
TEST(Spool, AFullDiskDropsTheOldestAndCountsIt) {
  testing::FakeTree t;
  const std::string mnt = t.Path("small");
  fs::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << strerror(errno) << ")";
  }
  {
    auto s = Spool::Open({.dir = mnt + "/spool", .segment_bytes = 4096}, HelloOf(7));
    ASSERT_TRUE(s.ok()) << s.status();
    uint64_t stored = 0;
    for (uint64_t seq = 1; seq <= 200; ++seq) {
      if ((*s)->Append(BatchOf(seq, 1000)).ok()) ++stored;
    }
    const Spool::Stats st = (*s)->stats();
    EXPECT_GT(st.dropped_full, 0u);
    EXPECT_GT(stored, 100u);  // room was made again and again
    EXPECT_TRUE((*s)->Holds(200) || st.dropped_full > 0);
    EXPECT_LE(st.bytes, 64u * 1024);
  }
  umount2(mnt.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace fabricscope::uplink
