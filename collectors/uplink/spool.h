#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::uplink {

struct SpoolOptions {
  std::string dir;                             // empty = no spool (batches live in memory only)
  uint64_t max_bytes = uint64_t{256} << 20;    // past it the oldest segments are dropped ("full")
  uint64_t segment_bytes = uint64_t{1} << 20;  // a segment past this is sealed: fdatasync, closed
  int64_t max_age_ns = int64_t{24} * 3600 * 1'000'000'000;  // older segments: "expired"
};

// The agent's crash-safe store of unacknowledged batches (issue 15), behind the uplink's memory
// queue: every numbered batch is appended here before it is sent and removed once acked, so a
// kill -9, a power cut or an aggregator outage longer than the memory queue loses nothing, and
// the next agent process replays what is left under the Hello it was numbered for.
//
// Layout: <dir>/<instance_id as 16 hex digits>/hello.pb (the instance's Hello) and
// <first seq, 20 digits>.seg segment files. A segment is a run of records
//   u32 length (little endian) | u32 CRC32C of the payload (Castagnoli, RFC 3720 §B.4; computed
//   by ISA-L's crc32_iscsi) | payload: one serialized v1::Batch
// appended with write(2).
//
// Durability policy: a record is in the page cache once Append returns, so it survives the
// agent's own crash (kill -9, OOM kill); a segment is fdatasync'ed when it is sealed (every
// segment_bytes) and at shutdown (Sync), so a power cut loses at most the open segment's
// records. Recovery (Open) reads every segment record by record: the first record whose length
// or CRC32C is wrong ends the segment, the file is truncated there, and the loss is counted as
// corrupt (one per torn tail); it never stops start-up.
//
// Thread-safe: all methods may be called from any thread (the uplink calls Append from the
// pipeline thread, Acked from its ack reader and Read from its writer). Append and Acked do
// file I/O under the spool's own lock and never wait for the network.
class Spool {
 public:
  // Opens or creates dir (mode 0700) for the instance `hello` names, writes its hello.pb, and
  // recovers what earlier instances left (Leftovers): torn tails truncated (corrupt), segments
  // older than max_age_ns dropped (expired), an instance without a readable hello.pb dropped
  // (corrupt), and the oldest dropped while more than max_bytes remain (full).
  // Errors: InvalidArgument for an empty dir; the errno of mkdir, open or write otherwise.
  static absl::StatusOr<std::unique_ptr<Spool>> Open(const SpoolOptions& options,
                                                     const v1::Hello& hello);
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // Appends one numbered batch of this instance, dropping the oldest segments first while the
  // spool would pass max_bytes (counted full), and once more when the disk is full (ENOSPC).
  // Errors: the write's errno when the batch could not be stored (counted full).
  absl::Status Append(const v1::Batch& batch);
  // Every batch of this instance up to `seq` is acked: their segments are deleted.
  void Acked(uint64_t seq);
  // A batch of this instance still spooled, read back; nullopt when it is gone (acked, dropped
  // full) or no longer reads back (corrupt).
  std::optional<v1::Batch> Read(uint64_t seq);
  // The lowest sequence number of this instance still spooled; 0 when none.
  uint64_t FirstSeq() const;
  bool Holds(uint64_t seq) const;
  // fdatasync of the open segment (shutdown).
  void Sync();

  // What earlier agent processes left: their Hello and segment files, oldest instance first.
  struct Leftover {
    v1::Hello hello;
    std::vector<std::string> segments;  // sorted by first seq
  };
  std::vector<Leftover> Leftovers() const;
  // Every record of one segment file that reads back, in file order. Errors: the open's errno.
  static absl::StatusOr<std::vector<v1::Batch>> ReadSegment(const std::string& path);
  // A leftover segment whose batches were acked (or that is given up): deleted; the instance's
  // directory goes with its last segment. `replayed` batches are counted as replayed.
  void RemoveLeftoverSegment(const std::string& path, uint64_t replayed);

  struct Stats {
    uint64_t bytes = 0, batches = 0;  // on disk now
    uint64_t replayed = 0;
    uint64_t dropped_full = 0, dropped_corrupt = 0, dropped_expired = 0;
  };
  Stats stats() const;

 private:
  struct Segment {
    std::string path;
    uint64_t first_seq = 0, last_seq = 0;
    uint64_t bytes = 0, records = 0;
    uint64_t instance = 0;
  };
  struct Loc {
    uint64_t segment;  // its first seq (this instance's segments_ key)
    uint64_t offset;   // of the record header
    uint32_t size;     // payload bytes
  };

  Spool(SpoolOptions options, uint64_t instance)
      : options_(std::move(options)), instance_(instance) {}
  absl::Status Recover() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RecoverInstance(const std::string& dir, uint64_t instance)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the oldest segment (leftovers first), counted full. False when there is none but the
  // open one.
  bool EvictOldest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveSegmentLocked(std::map<uint64_t, Segment>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Earlier instances: instance -> (hello, segments by first seq).
  using LeftoverMap = std::map<uint64_t, std::pair<v1::Hello, std::map<uint64_t, Segment>>>;
  // Deletes one segment of an earlier instance, and the instance's directory with its last.
  void RemoveLeftoverLocked(LeftoverMap::iterator inst, std::map<uint64_t, Segment>::iterator seg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OpenSegment(uint64_t first_seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SealOpen() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string InstanceDir(uint64_t instance) const;

  const SpoolOptions options_;
  const uint64_t instance_;
  mutable absl::Mutex mu_;
  std::map<uint64_t, Segment> segments_ ABSL_GUARDED_BY(mu_);  // this instance, by first seq
  std::map<uint64_t, Loc> index_ ABSL_GUARDED_BY(mu_);         // this instance, by seq
  int open_fd_ ABSL_GUARDED_BY(mu_) = -1;                      // segments_.rbegin() when >= 0
  LeftoverMap leftovers_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

// CRC32C (Castagnoli) of `data`, as the spool's records carry it: ISA-L crc32_iscsi with the
// initial value and the final inversion of RFC 3720 §B.4 (CRC32C("123456789") = 0xE3069283).
uint32_t Crc32c(const void* data, size_t size);

}  // namespace fabricscope::uplink
