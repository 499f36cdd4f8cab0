#include "agent/gpu_ingest.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/job_identity.h"
#include "collectors/clock.h"
#include "collectors/gpu/wire_decode.h"
#include "collectors/sysfs_ports.h"
#include "glog/logging.h"

namespace fabricscope::agent {

namespace gpu = collectors::gpu;

namespace {

constexpr size_t kMaxCommsPerConnection = 64;
// Datagrams read from one connection per wake-up before the others get their turn.
constexpr int kFairShare = 64;

absl::Status Errno(const std::string& what) {
  const int e = errno;
  std::string msg = absl::StrCat(what, ": ", strerror(e));
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// Gives the socket `group` (GpuIngestOptions::socket_group). Never fails the start: a missing
// group or a chown the agent may not make leaves its own group, with a warning saying how to
// let training users in.
void SetSocketGroup(const std::string& path, const std::string& name) {
  if (name.empty()) return;
  struct group buf {};
  struct group* found = nullptr;
  std::vector<char> names(16384);
  if (getgrnam_r(name.c_str(), &buf, names.data(), names.size(), &found) != 0 || found == nullptr) {
    LOG(WARNING) << "GPU socket " << path << ": group \"" << name
                 << "\" does not exist, so only the agent's own user and group may connect; "
                    "create it (adduser --system --group "
                 << name << ", as the package does) and add the users who run training jobs";
    return;
  }
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && st.st_gid == found->gr_gid) return;  // made with it
  if (chown(path.c_str(), static_cast<uid_t>(-1), found->gr_gid) != 0) {
    LOG(WARNING) << "GPU socket " << path << ": cannot give it group \"" << name << "\" ("
                 << strerror(errno)
                 << "): the agent must run as root or be a member (SupplementaryGroups=)";
  }
}

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.data(), path.size());
  return true;
}

// Classifies a datagram that DecodeDatagram refused, for the drop counter's reason label.
const char* DropReason(const uint8_t* data, size_t n) {
  if (n < sizeof(gpu::DatagramHeader)) return "truncated";
  gpu::DatagramHeader h;
  std::memcpy(&h, data, sizeof(h));
  if (h.magic != gpu::kWireMagic) return "bad_magic";
  if (h.version != gpu::kWireVersion) return "bad_version";
  return "bad_records";
}

// The largest cumulative dropped-record count a producer's datagram is believed (2^53).
constexpr uint64_t kMaxReportedDropped = uint64_t{1} << 53;

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

const char* GpuSourceName(uint16_t source) {
  switch (static_cast<gpu::Source>(source)) {
    case gpu::Source::kNcclProfiler:
      return "nccl";
    case gpu::Source::kCupti:
      return "cupti";
  }
  return "unknown";
}

// Turns decoded records into GpuEvents on the queue. Ingest thread only.
class GpuIngest::Visitor final : public gpu::RecordVisitor {
 public:
  Visitor(GpuIngest& ingest, Connection& c, uint16_t source)
      : ingest_(ingest), c_(c), source_(source), now_(collectors::MonotonicNowNs()) {}

  void OnComm(const gpu::CommRecord& r) override {
    bool found = false;
    for (auto& [hash, dev] : c_.comm_gpu) {
      if (hash == r.comm_hash) {
        dev = r.cuda_device;
        found = true;
      }
    }
    if (!found && c_.comm_gpu.size() < kMaxCommsPerConnection) {
      c_.comm_gpu.emplace_back(r.comm_hash, r.cuda_device);
    }
    if (GpuEvent* e = Begin(gpu::RecordType::kComm, r.cuda_device)) {
      e->comm = r;
      Commit();
    }
  }
  void OnCollective(const gpu::CollectiveRecord& r) override {
    if (GpuEvent* e = Begin(gpu::RecordType::kCollective, GpuOf(r.comm_hash))) {
      e->collective = r;
      Commit();
    }
  }
  void OnProxyOp(const gpu::ProxyOpRecord& r) override {
    if (GpuEvent* e = Begin(gpu::RecordType::kProxyOp, GpuOf(r.comm_hash))) {
      e->proxy_op = r;
      Commit();
    }
  }
  void OnChannels(const gpu::ChannelSpansRecord& r) override {
    if (GpuEvent* e = Begin(gpu::RecordType::kChannels, GpuOf(r.comm_hash))) {
      e->channels = r;
      Commit();
    }
  }
  void OnKernel(const gpu::KernelRecord& r) override {
    if (GpuEvent* e = Begin(gpu::RecordType::kKernel, static_cast<int32_t>(r.device))) {
      e->kernel = r;
      Commit();
    }
  }

  void OnJob(const gpu::JobRecord& r) override {
    bool contradicted = false;
    c_.job = MergeClaim(c_.cgroup_job, r, &contradicted);
    if (contradicted && !c_.contradicted) {
      c_.contradicted = true;
      ++ingest_.job_claims_contradicted_;
      LOG_EVERY_N(WARNING, 100) << "GPU ingest: pid " << c_.pid << " claims job \""
                                << gpu::FixedString(r.id) << "\", its cgroup says \""
                                << c_.cgroup_job.id() << "\"; the cgroup's job is kept";
    }
  }

  uint64_t queued() const { return queued_; }

 private:
  int32_t GpuOf(uint64_t comm_hash) const {
    for (const auto& [hash, dev] : c_.comm_gpu) {
      if (hash == comm_hash) return dev;
    }
    return -1;
  }
  GpuEvent* Begin(gpu::RecordType type, int32_t gpu_index) {
    void* slot = ingest_.queue_.BeginWrite();  // a full queue counts the drop
    if (slot == nullptr) return nullptr;
    auto* e = static_cast<GpuEvent*>(slot);
    e->type = type;
    e->source = static_cast<gpu::Source>(source_);
    e->pid = static_cast<int32_t>(c_.pid);
    e->uid = static_cast<uint32_t>(c_.uid);
    e->gpu = gpu_index;
    e->received_ns = now_;
    return e;
  }
  void Commit() {
    ingest_.queue_.CommitWrite();
    ++queued_;
  }

  GpuIngest& ingest_;
  Connection& c_;
  uint16_t source_;
  int64_t now_;
  uint64_t queued_ = 0;
};

GpuIngest::GpuIngest(GpuIngestOptions options)
    : options_(std::move(options)),
      queue_(options_.queue_slots, sizeof(GpuEvent)),
      buffer_(new uint8_t[gpu::kMaxDatagramBytes]) {}

GpuIngest::~GpuIngest() { Stop(); }

absl::Status GpuIngest::Start() {
  const std::string& path = options_.socket_path;
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) {
    return absl::InvalidArgumentError(absl::StrCat("GPU socket path \"", path,
                                                   "\" is empty or longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    if (!std::filesystem::exists(parent, ec)) {
      std::filesystem::create_directories(parent, ec);
      if (ec) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create ", parent.string(), ": ", ec.message()));
      }
      chmod(parent.c_str(), 0755);
    }
  }
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " exists and is not a socket; not removing it"));
    }
    // Someone listening there (another agent) answers; a stale file from a dead one refuses.
    const int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (probe < 0) return Errno("socket");
    const int rc = connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    const int err = errno;
    close(probe);
    if (rc == 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("another process listens on ", path, " (a second agent?)"));
    }
    if (err != ECONNREFUSED && err != ENOENT) {
      errno = err;
      return Errno(absl::StrCat("probing ", path));
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("removing stale " + path);
    LOG(INFO) << "removed stale GPU socket " << path;
  }
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Errno("socket");
  auto fail = [this](absl::Status s) {
    if (listen_fd_ >= 0) close(listen_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
    if (stop_fd_ >= 0) close(stop_fd_);
    listen_fd_ = epoll_fd_ = stop_fd_ = -1;
    return s;
  };
  if (bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return fail(Errno("bind " + path));
  }
  if (chmod(path.c_str(), options_.socket_mode) != 0) {
    absl::Status s = Errno("chmod " + path);
    unlink(path.c_str());
    return fail(s);
  }
  SetSocketGroup(path, options_.socket_group);
  if (stat(path.c_str(), &st) == 0) socket_inode_ = st.st_ino;
  if (listen(listen_fd_, 128) != 0) {
    absl::Status s = Errno("listen " + path);
    unlink(path.c_str());
    return fail(s);
  }
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || stop_fd_ < 0) {
    absl::Status s = Errno("epoll/eventfd");
    unlink(path.c_str());
    return fail(s);
  }
  for (int fd : {listen_fd_, stop_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void GpuIngest::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!write(stop_fd_, &one, sizeof(one));
  thread_.join();
  std::vector<int> fds;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [fd, c] : connections_) fds.push_back(fd);
  }
  for (int fd : fds) Close(fd);
  struct stat st;
  if (stat(options_.socket_path.c_str(), &st) == 0 && st.st_ino == socket_inode_) {
    unlink(options_.socket_path.c_str());
  }
  close(listen_fd_);
  close(epoll_fd_);
  close(stop_fd_);
  listen_fd_ = epoll_fd_ = stop_fd_ = -1;
}

void GpuIngest::Loop() {
  pthread_setname_np(pthread_self(), "fs-gpu-ingest");
  epoll_event events[64];
  while (true) {
    const int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      PLOG(ERROR) << "GPU ingest: epoll_wait";
      return;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == stop_fd_) return;
      if (fd == listen_fd_) {
        Accept();
        continue;
      }
      // The connection map changes on this thread only, so the element stays valid.
      Connection* c = nullptr;
      {
        absl::MutexLock lock(&mu_);
        auto it = connections_.find(fd);
        if (it != connections_.end()) c = &it->second;
      }
      if (c != nullptr && !Serve(*c)) Close(fd);
    }
  }
}

void GpuIngest::Accept() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        PLOG_EVERY_N(WARNING, 100) << "GPU ingest: accept";
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      cred.pid = 0;
      cred.uid = static_cast<uid_t>(-1);
      cred.gid = static_cast<gid_t>(-1);
    }
    absl::MutexLock lock(&mu_);
    if (!options_.allowed_uids.empty()) {
      bool ok = false;
      for (uint32_t u : options_.allowed_uids) ok = ok || u == cred.uid;
      if (!ok) {
        ++rejected_["uid"];
        LOG_EVERY_N(WARNING, 100) << "GPU ingest: refused pid " << cred.pid << " (uid " << cred.uid
                                  << " not in --gpu-allowed-uids)";
        close(fd);
        continue;
      }
    }
    const int64_t now = collectors::MonotonicNowNs();
    if (connections_.size() >= options_.max_connections && !EvictSilentLocked(now)) {
      ++rejected_["limit"];
      LOG_EVERY_N(WARNING, 100) << "GPU ingest: refused pid " << cred.pid << " ("
                                << options_.max_connections << " connections open)";
      close(fd);
      continue;
    }
    Connection c;
    c.fd = fd;
    c.pid = cred.pid;
    c.uid = cred.uid;
    c.gid = cred.gid;
    c.connected_ns = now;
    auto comm = collectors::ReadSmallFile(absl::StrCat("/proc/", cred.pid, "/comm"), 64);
    if (comm.ok()) c.process = std::string(absl::StripAsciiWhitespace(*comm));
    c.cgroup_job = JobFromCgroupOf(options_.procfs_root, cred.pid);
    c.job = c.cgroup_job;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      continue;
    }
    connections_[fd] = std::move(c);
    ++connections_total_;
  }
}

bool GpuIngest::EvictSilentLocked(int64_t now_ns) {
  const int64_t silent_ns = absl::ToInt64Nanoseconds(options_.silent_evict_after);
  auto oldest = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    const Connection& c = it->second;
    if (c.datagrams > 0 || now_ns - c.connected_ns < silent_ns) continue;
    if (oldest == connections_.end() || c.connected_ns < oldest->second.connected_ns) oldest = it;
  }
  if (oldest == connections_.end()) return false;
  LOG_EVERY_N(WARNING, 100) << "GPU ingest: closed pid " << oldest->second.pid
                            << ", connected without sending, to admit a new producer ("
                            << options_.max_connections << " connections open)";
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, oldest->first, nullptr);
  close(oldest->first);
  connections_.erase(oldest);
  ++rejected_["silent"];
  return true;
}

void GpuIngest::Drop(const char* reason) { ++dropped_datagrams_[reason]; }

bool GpuIngest::Serve(Connection& c) {
  for (int i = 0; i < kFairShare; ++i) {
    iovec iov{buffer_.get(), gpu::kMaxDatagramBytes};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    const ssize_t n = recvmsg(c.fd, &msg, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      return false;  // ECONNRESET and the like: the producer is gone
    }
    if (n == 0) {
      // End of stream, or an empty datagram: SEQPACKET reads 0 for both. The peer has shut
      // down when nothing more is queued and the socket reports RDHUP.
      int queued = 0;
      if (ioctl(c.fd, FIONREAD, &queued) == 0 && queued > 0) {
        absl::MutexLock lock(&mu_);
        Drop("empty");
        continue;
      }
      // poll() 0 (no event) is a live producer that sent an empty datagram last; treating it as
      // a hang-up disconnected it (issue 13), whenever the next datagram was not queued yet.
      pollfd p{c.fd, POLLIN | POLLRDHUP, 0};
      const int ready = poll(&p, 1, 0);
      const bool hup = ready < 0 || (ready == 1 && (p.revents & (POLLRDHUP | POLLHUP)) != 0);
      if (hup) return false;
      absl::MutexLock lock(&mu_);
      Drop("empty");
      continue;
    }
    absl::MutexLock lock(&mu_);
    if ((msg.msg_flags & MSG_TRUNC) != 0) {
      Drop("oversize");
      continue;
    }
    const auto size = static_cast<size_t>(n);
    gpu::DatagramHeader peek{};
    if (size >= sizeof(peek)) std::memcpy(&peek, buffer_.get(), sizeof(peek));
    Visitor visitor(*this, c, peek.source);
    gpu::DecodeResult result;
    absl::Status s =
        gpu::DecodeDatagram(absl::Span<const uint8_t>(buffer_.get(), size), visitor, &result);
    if (!s.ok()) {
      Drop(DropReason(buffer_.get(), size));
      LOG_EVERY_N(WARNING, 1000) << "GPU ingest: pid " << c.pid << ": " << s.message()
                                 << " (datagram dropped, counted)";
      continue;
    }
    ++c.datagrams;
    ++datagrams_total_;
    c.source = result.header.source;
    c.records += visitor.queued();
    records_total_ += visitor.queued();
    unknown_records_total_ += result.unknown_records;
    // Cumulative per producer; a smaller value would be a restarted counter, keep the larger.
    // Past 2^53 (9e15 records: years of dropping at 100 M/s) it is no real count: ignored, so
    // one bogus datagram cannot pin the counter at 1.8e19 or wrap the sum backwards.
    if (result.header.dropped_records_total <= kMaxReportedDropped) {
      c.dropped_reported = std::max(c.dropped_reported, result.header.dropped_records_total);
    } else {
      LOG_EVERY_N(WARNING, 1000) << "GPU ingest: pid " << c.pid << " reports "
                                 << result.header.dropped_records_total
                                 << " dropped records, past any real count; ignored";
    }
  }
  return true;
}

void GpuIngest::Close(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  // Saturating: fabricscope_plugin_dropped_events_total never goes backwards.
  uint64_t& retired = retired_dropped_[GpuSourceName(it->second.source)];
  retired = SaturatingAdd(retired, it->second.dropped_reported);
  if (!it->second.job.id().empty()) {
    closed_jobs_.emplace_back(it->second.pid, std::move(it->second.job));
    if (closed_jobs_.size() > kRecentJobs) closed_jobs_.pop_front();
  }
  connections_.erase(it);
}

void GpuIngest::Stats(v1::GpuIngestStats* out) const {
  absl::MutexLock lock(&mu_);
  out->set_socket_path(options_.socket_path);
  out->set_connections(static_cast<uint32_t>(connections_.size()));
  out->set_connections_total(connections_total_);
  for (const auto& [reason, n] : rejected_)
    (*out->mutable_rejected_connections_total())[reason] = n;
  out->set_datagrams_total(datagrams_total_);
  out->set_records_total(records_total_);
  for (const auto& [reason, n] : dropped_datagrams_) {
    (*out->mutable_dropped_datagrams_total())[reason] = n;
  }
  auto& dropped = *out->mutable_dropped_records_total();
  for (const auto& [source, n] : retired_dropped_) dropped[source] = n;
  for (const auto& [fd, c] : connections_) {
    if (c.source != 0) {
      uint64_t& sum = dropped[GpuSourceName(c.source)];
      sum = SaturatingAdd(sum, c.dropped_reported);
    }
    v1::GpuProducer* p = out->add_producers();
    p->set_pid(c.pid);
    p->set_uid(c.uid);
    p->set_gid(c.gid);
    p->set_source(c.source != 0 ? GpuSourceName(c.source) : "");
    p->set_process(c.process);
    p->set_datagrams_total(c.datagrams);
    p->set_records_total(c.records);
    p->set_dropped_records_total(c.dropped_reported);
    p->set_job_id(c.job.id());
  }
  out->set_job_claims_contradicted_total(job_claims_contradicted_);
  dropped["agent"] = queue_.dropped();
  out->set_unknown_records_total(unknown_records_total_);
  out->set_repaired_string_bytes_total(
      collectors::gpu::RepairedStringBytes().load(std::memory_order_relaxed));
}

std::map<int32_t, v1::Job> GpuIngest::JobsByPid() const {
  absl::MutexLock lock(&mu_);
  std::map<int32_t, v1::Job> out;
  for (const auto& [pid, job] : closed_jobs_) out[pid] = job;  // newer closes overwrite older
  for (const auto& [fd, c] : connections_) {
    if (!c.job.id().empty()) out[static_cast<int32_t>(c.pid)] = c.job;
  }
  return out;
}

std::vector<int32_t> GpuIngest::ConnectedPids() const {
  absl::MutexLock lock(&mu_);
  std::vector<int32_t> out;
  for (const auto& [fd, c] : connections_) out.push_back(c.pid);
  return out;
}

}  // namespace fabricscope::agent
