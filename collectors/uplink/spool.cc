#include "collectors/uplink/spool.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"

namespace fabricscope::uplink {
namespace {

namespace fs = std::filesystem;

constexpr size_t kHeaderBytes = 8;
// No batch is this large (the aggregator refuses messages past 64 MiB by default): a length
// past it is a torn or corrupt header, not a record.
constexpr uint32_t kMaxRecordBytes = 256u << 20;

absl::Status ErrnoError(const std::string& what, const std::string& path, int err) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(what, " ", path, ": ", strerror(err)));
}

uint32_t LoadLe32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void StoreLe32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

struct Scan {
  uint64_t records = 0;
  uint64_t good_bytes = 0;  // through the last good record
  bool torn = false;        // bytes after it
  bool readable = true;
};

// Reads a segment record by record; calls fn(offset, payload) for each good one.
Scan ScanSegment(const std::string& path,
                 const std::function<void(uint64_t, const std::string&)>& fn) {
  Scan s;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    s.readable = false;
    return s;
  }
  struct stat st {};
  const uint64_t size = fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  std::string payload;
  while (s.good_bytes + kHeaderBytes <= size) {
    unsigned char h[kHeaderBytes];
    if (pread(fd, h, kHeaderBytes, static_cast<off_t>(s.good_bytes)) !=
        static_cast<ssize_t>(kHeaderBytes)) {
      break;
    }
    const uint32_t len = LoadLe32(h), crc = LoadLe32(h + 4);
    if (len > kMaxRecordBytes || s.good_bytes + kHeaderBytes + len > size) break;
    payload.resize(len);
    if (len > 0 &&
        pread(fd, payload.data(), len, static_cast<off_t>(s.good_bytes + kHeaderBytes)) !=
            static_cast<ssize_t>(len)) {
      break;
    }
    if (Crc32c(payload.data(), payload.size()) != crc) break;
    if (fn) fn(s.good_bytes, payload);
    s.good_bytes += kHeaderBytes + len;
    ++s.records;
  }
  s.torn = s.good_bytes < size;
  close(fd);
  return s;
}

bool ParseInstanceDir(const std::string& name, uint64_t* instance) {
  return name.size() == 16 && absl::SimpleHexAtoi(name, instance);
}

bool ParseSegmentName(const std::string& name, uint64_t* first_seq) {
  return name.size() == 24 && name.substr(20) == ".seg" &&
         absl::SimpleAtoi(name.substr(0, 20), first_seq);
}

// Writes a small file whole: to a temporary name, fsync, rename, fsync of the directory.
absl::Status WriteFileAtomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("open", tmp, errno);
  const bool ok =
      write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  if (!ok) return ErrnoError("write", tmp, err);
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename", tmp, errno);
  const int dfd = open(fs::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace

uint32_t Crc32c(const void* data, size_t size) {
  // ISA-L takes an int length; records are below kMaxRecordBytes.
  return ~crc32_iscsi(static_cast<unsigned char*>(const_cast<void*>(data)), static_cast<int>(size),
                      0xFFFFFFFFu);
}

std::string Spool::InstanceDir(uint64_t instance) const {
  return absl::StrFormat("%s/%016x", options_.dir, instance);
}

absl::StatusOr<std::unique_ptr<Spool>> Spool::Open(const SpoolOptions& options,
                                                   const v1::Hello& hello) {
  if (options.dir.empty()) return absl::InvalidArgumentError("spool: no directory given");
  std::unique_ptr<Spool> s(new Spool(options, hello.instance_id()));
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat("spool ", options.dir, ": ", ec.message()));
  chmod(options.dir.c_str(), 0700);
  const std::string mine = s->InstanceDir(s->instance_);
  if (mkdir(mine.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir", mine, errno);
  if (absl::Status w = WriteFileAtomically(mine + "/hello.pb", hello.SerializeAsString());
      !w.ok()) {
    return w;
  }
  absl::MutexLock lock(&s->mu_);
  if (absl::Status r = s->Recover(); !r.ok()) return r;
  return s;
}

Spool::~Spool() {
  absl::MutexLock lock(&mu_);
  SealOpen();
}

absl::Status Spool::Recover() {
  std::error_code ec;
  std::vector<std::pair<uint64_t, std::string>> dirs;
  for (const auto& e : fs::directory_iterator(options_.dir, ec)) {
    uint64_t instance = 0;
    if (e.is_directory() && ParseInstanceDir(e.path().filename().string(), &instance) &&
        instance != instance_) {
      dirs.emplace_back(instance, e.path().string());
    }
  }
  // Oldest instance first, by the modification time of its Hello.
  auto mtime = [](const std::string& dir) {
    std::error_code e;
    return fs::last_write_time(dir + "/hello.pb", e);
  };
  std::sort(dirs.begin(), dirs.end(),
            [&](const auto& a, const auto& b) { return mtime(a.second) < mtime(b.second); });
  for (const auto& [instance, dir] : dirs) {
    if (absl::Status s = RecoverInstance(dir, instance); !s.ok()) return s;
  }
  while (stats_.bytes > options_.max_bytes && EvictOldest()) {
  }
  return absl::OkStatus();
}

absl::Status Spool::RecoverInstance(const std::string& dir, uint64_t instance) {
  v1::Hello hello;
  std::string text;
  {
    std::ifstream in(dir + "/hello.pb", std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const bool hello_ok =
      !text.empty() && hello.ParseFromString(text) && hello.instance_id() == instance;
  const auto now = fs::file_time_type::clock::now();
  std::map<uint64_t, Segment> segs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    uint64_t first = 0;
    if (!ParseSegmentName(e.path().filename().string(), &first)) continue;
    const std::string path = e.path().string();
    Segment seg{path, first, first, 0, 0, instance};
    const Scan scan = ScanSegment(path, nullptr);
    std::error_code te;
    const auto age = now - fs::last_write_time(path, te);
    const bool expired =
        std::chrono::duration_cast<std::chrono::nanoseconds>(age).count() > options_.max_age_ns;
    if (!hello_ok || expired || !scan.readable) {
      (expired ? stats_.dropped_expired : stats_.dropped_corrupt) += scan.records;
      fs::remove(path, te);
      continue;
    }
    if (scan.torn) {
      ++stats_.dropped_corrupt;
      LOG(WARNING) << "spool: " << path << " ends in a torn or corrupt record after "
                   << scan.records << " good ones; truncated there";
      if (truncate(path.c_str(), static_cast<off_t>(scan.good_bytes)) != 0) {
        LOG(WARNING) << "spool: truncate " << path << ": " << strerror(errno);
      }
    }
    if (scan.records == 0) {
      fs::remove(path, te);
      continue;
    }
    seg.bytes = scan.good_bytes;
    seg.records = scan.records;
    stats_.bytes += seg.bytes;
    stats_.batches += seg.records;
    segs[first] = seg;
  }
  if (segs.empty()) {
    fs::remove_all(dir, ec);
    return absl::OkStatus();
  }
  leftovers_[instance] = {hello, std::move(segs)};
  return absl::OkStatus();
}

absl::Status Spool::OpenSegment(uint64_t first_seq) {
  const std::string path = absl::StrFormat("%s/%020u.seg", InstanceDir(instance_), first_seq);
  open_fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (open_fd_ < 0) return ErrnoError("open", path, errno);
  segments_[first_seq] = Segment{path, first_seq, first_seq, 0, 0, instance_};
  return absl::OkStatus();
}

void Spool::SealOpen() {
  if (open_fd_ < 0) return;
  fdatasync(open_fd_);
  close(open_fd_);
  open_fd_ = -1;
}

absl::Status Spool::Append(const v1::Batch& batch) {
  std::string rec(kHeaderBytes, '\0');
  if (!batch.AppendToString(&rec) || rec.size() - kHeaderBytes > kMaxRecordBytes) {
    absl::MutexLock lock(&mu_);
    ++stats_.dropped_full;
    return absl::ResourceExhaustedError("spool: batch too large to spool");
  }
  const uint32_t len = static_cast<uint32_t>(rec.size() - kHeaderBytes);
  StoreLe32(len, rec.data());
  StoreLe32(Crc32c(rec.data() + kHeaderBytes, len), rec.data() + 4);
  absl::MutexLock lock(&mu_);
  if (open_fd_ < 0 || segments_.rbegin()->second.bytes >= options_.segment_bytes) {
    SealOpen();
    if (absl::Status s = OpenSegment(batch.seq()); !s.ok()) {
      ++stats_.dropped_full;
      return s;
    }
  }
  while (stats_.bytes + rec.size() > options_.max_bytes && EvictOldest()) {
  }
  Segment& seg = segments_.rbegin()->second;
  for (int attempt = 0;; ++attempt) {
    const ssize_t n = write(open_fd_, rec.data(), rec.size());
    if (n == static_cast<ssize_t>(rec.size())) break;
    const int err = n < 0 ? errno : ENOSPC;  // a short write: the disk filled up
    if (ftruncate(open_fd_, static_cast<off_t>(seg.bytes)) != 0) {
      LOG_EVERY_N(WARNING, 100) << "spool: ftruncate " << seg.path << ": " << strerror(errno);
    }
    if (attempt == 0 && err == ENOSPC && EvictOldest()) continue;
    ++stats_.dropped_full;
    return ErrnoError("write", seg.path, err);
  }
  index_[batch.seq()] = Loc{seg.first_seq, seg.bytes, len};
  seg.last_seq = batch.seq();
  seg.bytes += rec.size();
  ++seg.records;
  stats_.bytes += rec.size();
  ++stats_.batches;
  return absl::OkStatus();
}

void Spool::RemoveSegmentLocked(std::map<uint64_t, Segment>::iterator it) {
  const Segment& seg = it->second;
  if (open_fd_ >= 0 && std::next(it) == segments_.end()) {
    close(open_fd_);  // acked or dropped whole: nothing in it to make durable
    open_fd_ = -1;
  }
  index_.erase(index_.lower_bound(seg.first_seq), index_.upper_bound(seg.last_seq));
  stats_.bytes -= seg.bytes;
  stats_.batches -= seg.records;
  std::error_code ec;
  fs::remove(seg.path, ec);
  segments_.erase(it);
}

void Spool::Acked(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  index_.erase(index_.begin(), index_.upper_bound(seq));
  while (!segments_.empty()) {
    auto it = segments_.begin();
    if (it->second.records == 0 || it->second.last_seq > seq) break;
    RemoveSegmentLocked(it);
  }
}

bool Spool::EvictOldest() {
  if (!leftovers_.empty()) {
    auto inst = leftovers_.begin();
    stats_.dropped_full += inst->second.second.begin()->second.records;
    RemoveLeftoverLocked(inst, inst->second.second.begin());
    return true;
  }
  const size_t keep = open_fd_ >= 0 ? 1 : 0;
  if (segments_.size() <= keep) return false;
  stats_.dropped_full += segments_.begin()->second.records;
  RemoveSegmentLocked(segments_.begin());
  return true;
}

std::optional<v1::Batch> Spool::Read(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(seq);
  if (it == index_.end()) return std::nullopt;
  const Loc loc = it->second;
  auto seg = segments_.find(loc.segment);
  if (seg == segments_.end()) return std::nullopt;
  const int fd = open(seg->second.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string rec(kHeaderBytes + loc.size, '\0');
  const bool read_ok = pread(fd, rec.data(), rec.size(), static_cast<off_t>(loc.offset)) ==
                       static_cast<ssize_t>(rec.size());
  close(fd);
  const auto* h = reinterpret_cast<const unsigned char*>(rec.data());
  v1::Batch b;
  if (!read_ok || LoadLe32(h) != loc.size ||
      LoadLe32(h + 4) != Crc32c(rec.data() + kHeaderBytes, loc.size) ||
      !b.ParseFromArray(rec.data() + kHeaderBytes, static_cast<int>(loc.size)) || b.seq() != seq) {
    ++stats_.dropped_corrupt;
    index_.erase(it);
    return std::nullopt;
  }
  return b;
}

uint64_t Spool::FirstSeq() const {
  absl::MutexLock lock(&mu_);
  return index_.empty() ? 0 : index_.begin()->first;
}

bool Spool::Holds(uint64_t seq) const {
  absl::MutexLock lock(&mu_);
  return index_.contains(seq);
}

void Spool::Sync() {
  absl::MutexLock lock(&mu_);
  if (open_fd_ >= 0) fdatasync(open_fd_);
}

std::vector<Spool::Leftover> Spool::Leftovers() const {
  absl::MutexLock lock(&mu_);
  std::vector<Leftover> out;
  for (const auto& [instance, entry] : leftovers_) {
    Leftover l{entry.first, {}};
    for (const auto& [first, seg] : entry.second) l.segments.push_back(seg.path);
    out.push_back(std::move(l));
  }
  return out;
}

absl::StatusOr<std::vector<v1::Batch>> Spool::ReadSegment(const std::string& path) {
  std::vector<v1::Batch> out;
  const Scan scan = ScanSegment(path, [&](uint64_t, const std::string& payload) {
    v1::Batch b;
    if (b.ParseFromString(payload)) out.push_back(std::move(b));
  });
  if (!scan.readable) return ErrnoError("open", path, errno);
  return out;
}

void Spool::RemoveLeftoverLocked(LeftoverMap::iterator inst,
                                 std::map<uint64_t, Segment>::iterator seg) {
  std::error_code ec;
  stats_.bytes -= seg->second.bytes;
  stats_.batches -= seg->second.records;
  fs::remove(seg->second.path, ec);
  inst->second.second.erase(seg);
  if (inst->second.second.empty()) {
    fs::remove_all(InstanceDir(inst->first), ec);
    leftovers_.erase(inst);
  }
}

void Spool::RemoveLeftoverSegment(const std::string& path, uint64_t replayed) {
  absl::MutexLock lock(&mu_);
  stats_.replayed += replayed;
  for (auto inst = leftovers_.begin(); inst != leftovers_.end(); ++inst) {
    auto& segs = inst->second.second;
    for (auto it = segs.begin(); it != segs.end(); ++it) {
      if (it->second.path == path) return RemoveLeftoverLocked(inst, it);
    }
  }
}

Spool::Stats Spool::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace fabricscope::uplink
