// The GPU ingest endpoint with real unix sockets and real producer processes.
#include "agent/gpu_ingest.h"

#include <grp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "collectors/gpu/producer.h"
#include "collectors/gpu/wire.h"
#include "gtest/gtest.h"
#include "tests/agent/gpu_ingest_util.h"
#include "tests/common/fake_tree.h"
#include "tests/common/unix_socket.h"
#include "tests/common/wait.h"

namespace fabricscope::agent {
namespace {

namespace gpu = collectors::gpu;
using fabricscope::testing::WaitFor;
// A temporary directory for the socket, removed with everything in it.
using TempDir = fabricscope::testing::FakeTree;
using namespace std::chrono_literals;

gpu::CollectiveRecord MakeCollective(uint64_t comm, int32_t rank, uint64_t seq) {
  gpu::CollectiveRecord r{};
  r.comm_hash = comm;
  r.seq = seq;
  r.count = seq * 2;
  r.bytes = seq * 8;
  r.start_ns = 1000 + static_cast<int64_t>(seq);
  r.end_ns = 2000 + static_cast<int64_t>(seq);
  r.rank = rank;
  r.nranks = 8;
  r.root = -1;
  r.peer = -1;
  r.timing_source = static_cast<uint8_t>(gpu::TimingSource::kKernelChannel);
  gpu::CopyFixed(r.func, "AllReduce");
  gpu::CopyFixed(r.datatype, "ncclFloat32");
  return r;
}

gpu::CommRecord MakeComm(uint64_t comm, int32_t rank, int32_t device) {
  gpu::CommRecord c{};
  c.comm_hash = comm;
  c.rank = rank;
  c.nranks = 8;
  c.nnodes = 1;
  c.cuda_device = device;
  gpu::CopyFixed(c.name, "test");
  return c;
}

// Sends `records` collectives (plus one CommRecord first) over a blocking connection, as many
// per datagram as fit. Returns the number of records sent, or -1.
// pause: between datagrams (0 = as fast as the socket takes them).
int64_t Produce(const std::string& path, uint64_t comm, int32_t rank, int32_t device,
                int64_t records, std::chrono::microseconds pause = {}) {
  const int fd = Connect(path);
  if (fd < 0) return -1;
  alignas(8) static thread_local unsigned char buf[gpu::kMaxDatagramBytes];
  gpu::DatagramWriter w(buf, sizeof(buf), gpu::Source::kNcclProfiler, getpid());
  uint64_t seq = 0;
  int64_t sent = 0;
  w.Append(MakeComm(comm, rank, device));
  int64_t next = 0;
  while (next < records || !w.empty()) {
    while (next < records && w.Append(MakeCollective(comm, rank, static_cast<uint64_t>(next)))) {
      ++next;
    }
    const size_t n = w.Finish(++seq, 0, 1);
    if (send(fd, buf, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) {
      close(fd);
      return -1;
    }
    sent = next;
    w.Reset();
    if (next >= records) break;
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  close(fd);
  return sent;
}

struct Drained {
  std::vector<GpuEvent> comms, collectives, proxies, kernels, channels;
  size_t total() const {
    return comms.size() + collectives.size() + proxies.size() + kernels.size() + channels.size();
  }
};

// Moves up to `max` queued events into `d`. A bound matters when a producer never stops: the
// queue is then never empty and an unbounded drain would never return.
void DrainInto(GpuIngest& ingest, Drained* d, size_t max = SIZE_MAX) {
  for (size_t n = 0; n < max; ++n) {
    const GpuEvent* e = ingest.Peek();
    if (e == nullptr) break;
    switch (e->type) {
      case gpu::RecordType::kComm:
        d->comms.push_back(*e);
        break;
      case gpu::RecordType::kCollective:
        d->collectives.push_back(*e);
        break;
      case gpu::RecordType::kProxyOp:
        d->proxies.push_back(*e);
        break;
      case gpu::RecordType::kKernel:
        d->kernels.push_back(*e);
        break;
      case gpu::RecordType::kChannels:
        d->channels.push_back(*e);
        break;
      case gpu::RecordType::kJob:  // never queued (GpuIngest keeps it per connection)
        ADD_FAILURE() << "a JobRecord reached the queue";
        break;
    }
    ingest.Release();
  }
}

TEST(GpuIngest, CreatesTheDirectorySetsTheModeAndRemovesTheSocketAtStop) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("run/fabricscope/gpu.sock");
  o.socket_mode = 0660;
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  struct stat st;
  ASSERT_EQ(stat(dir.Path("run/fabricscope").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  ASSERT_EQ(stat(o.socket_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ingest.Stop();
  EXPECT_NE(stat(o.socket_path.c_str(), &st), 0);
}

// The socket's group is the one training users belong to (0660 by default); a group that does
// not exist leaves the agent's own and the socket still serves.
TEST(GpuIngest, TheSocketTakesItsGroupAndAMissingGroupIsNotFatal) {
  if (geteuid() != 0) GTEST_SKIP() << "chown to another group needs root";
  const struct group* adm = getgrnam("adm");  // in every Debian base system (gid 4)
  ASSERT_NE(adm, nullptr);
  const gid_t adm_gid = adm->gr_gid;
  TempDir dir;
  GpuIngestOptions o;
  EXPECT_EQ(o.socket_mode, 0660u);
  o.socket_path = dir.Path("gpu.sock");
  o.socket_group = "adm";
  struct stat st;
  {
    GpuIngest ingest(o);
    ASSERT_TRUE(ingest.Start().ok());
    ASSERT_EQ(stat(o.socket_path.c_str(), &st), 0);
    EXPECT_EQ(st.st_gid, adm_gid);
    EXPECT_EQ(st.st_mode & 0777, 0660u);
  }
  o.socket_group = "fabricscope-test-no-such-group";
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  ASSERT_EQ(stat(o.socket_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, getegid());
}

TEST(GpuIngest, RefusesAPathSomeoneListensOnAndReplacesAStaleOne) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  GpuIngest first(o);
  ASSERT_TRUE(first.Start().ok());
  GpuIngest second(o);
  absl::Status s = second.Start();
  EXPECT_TRUE(absl::IsAlreadyExists(s)) << s;
  // The first still serves.
  EXPECT_GE(Produce(o.socket_path, 1, 0, 0, 10), 10);
  first.Stop();

  // A socket file left by a dead process: nobody listens, so it is replaced.
  const int stale = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, o.socket_path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(stale, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(stale);
  GpuIngest third(o);
  ASSERT_TRUE(third.Start().ok());
  EXPECT_EQ(Produce(o.socket_path, 1, 0, 0, 10), 10);
}

TEST(GpuIngest, NeverRemovesAFileThatIsNotASocket) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  std::ofstream(o.socket_path) << "precious\n";
  GpuIngest ingest(o);
  absl::Status s = ingest.Start();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  std::ifstream in(o.socket_path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "precious");
}

// Many producer processes at once, each sending thousands of records; the queue to the
// consumer is small, so some records are dropped by the agent: every record is either received
// with the right fields and origin, or counted.
TEST(GpuIngest, ManyProducerProcessesEveryRecordReceivedOrCounted) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  o.queue_slots = 512;
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());

  constexpr int kProducers = 8;
  constexpr int64_t kRecords = 5000;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProducers; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int64_t sent = Produce(o.socket_path, 0xc0ffee00ull + p, p, p % 4, kRecords);
      _exit(sent == kRecords ? 0 : 1);
    }
    pids.push_back(pid);
  }
  // Consume concurrently, like the pipeline thread.
  Drained d;
  int exited = 0;
  while (exited < kProducers) {
    DrainInto(ingest, &d);
    for (pid_t& pid : pids) {
      int status = 0;
      if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        pid = -pid;
        ++exited;
      }
    }
    std::this_thread::sleep_for(100us);
  }
  const uint64_t sent = kProducers * (kRecords + 1);  // + one CommRecord each
  ASSERT_TRUE(WaitFor([&] {
    DrainInto(ingest, &d);
    const v1::GpuIngestStats s = StatsOf(ingest);
    return s.connections() == 0 && d.total() + MapValue(s.dropped_records_total(), "agent") == sent;
  })) << d.total()
      << " received";
  const v1::GpuIngestStats s = StatsOf(ingest);
  EXPECT_EQ(s.records_total(), d.total());
  EXPECT_EQ(s.connections_total(), static_cast<uint64_t>(kProducers));
  EXPECT_EQ(s.dropped_datagrams_total_size(), 0);

  // Fields and origin: each producer's pid (SO_PEERCRED), its GPU from its CommRecord, and
  // per producer strictly increasing sequence numbers with consistent payloads.
  std::map<uint64_t, pid_t> pid_of;
  for (int p = 0; p < kProducers; ++p) pid_of[0xc0ffee00ull + p] = -pids[p];
  std::map<uint64_t, int64_t> last_seq;
  for (const GpuEvent& e : d.collectives) {
    const gpu::CollectiveRecord& r = e.collective;
    ASSERT_EQ(pid_of.count(r.comm_hash), 1u);
    const int p = static_cast<int>(r.comm_hash - 0xc0ffee00ull);
    EXPECT_EQ(e.pid, pid_of[r.comm_hash]);
    EXPECT_EQ(e.uid, getuid());
    EXPECT_EQ(e.source, gpu::Source::kNcclProfiler);
    EXPECT_EQ(r.rank, p);
    EXPECT_EQ(r.bytes, r.seq * 8);
    EXPECT_EQ(r.count, r.seq * 2);
    EXPECT_STREQ(r.func, "AllReduce");
    auto it = last_seq.find(r.comm_hash);
    EXPECT_TRUE(it == last_seq.end() || static_cast<int64_t>(r.seq) > it->second);
    last_seq[r.comm_hash] = static_cast<int64_t>(r.seq);
  }
  // A CommRecord that got through attaches its device to that producer's later records.
  for (const GpuEvent& c : d.comms) {
    const int p = static_cast<int>(c.comm.comm_hash - 0xc0ffee00ull);
    EXPECT_EQ(c.gpu, p % 4);
    for (const GpuEvent& e : d.collectives) {
      if (e.collective.comm_hash == c.comm.comm_hash) {
        ASSERT_EQ(e.gpu, p % 4);
      }
    }
  }
}

// Every kind of malformed datagram is counted by reason; the connection keeps working.
TEST(GpuIngest, MalformedDatagramsAreCountedAndTheConnectionKeepsWorking) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  const int fd = Connect(o.socket_path);
  ASSERT_GE(fd, 0);

  alignas(8) unsigned char buf[1024];
  gpu::DatagramWriter w(buf, sizeof(buf), gpu::Source::kNcclProfiler, getpid());
  auto good = [&](uint64_t seq) {
    w.Reset();
    w.Append(MakeCollective(7, 0, seq));
    return std::vector<unsigned char>(buf, buf + w.Finish(seq, 0, 1));
  };
  auto sendv = [&](const std::vector<unsigned char>& v) {
    ASSERT_EQ(send(fd, v.data(), v.size(), MSG_NOSIGNAL), static_cast<ssize_t>(v.size()));
  };
  std::map<std::string, uint64_t> expect;
  sendv({});  // empty
  ++expect["empty"];
  // Read alone, with nothing queued behind it: an empty datagram, not a hang-up (it used to
  // disconnect the producer whenever the next datagram had not arrived yet).
  ASSERT_TRUE(
      WaitFor([&] { return MapValue(StatsOf(ingest).dropped_datagrams_total(), "empty") == 1; }));
  ASSERT_EQ(StatsOf(ingest).connections(), 1u);
  sendv(std::vector<unsigned char>(10, 0x46));  // shorter than the header
  ++expect["truncated"];
  std::vector<unsigned char> v = good(1);
  v[0] ^= 0xff;  // bad magic
  sendv(v);
  ++expect["bad_magic"];
  v = good(2);
  v[4] = 99;  // version 99
  sendv(v);
  ++expect["bad_version"];
  v = good(3);
  v.resize(v.size() - 5);  // payload cut short: record claims more than remains
  sendv(v);
  ++expect["bad_records"];
  v = good(4);
  v[12] = 3;  // header lies: 3 records, 1 present
  sendv(v);
  ++expect["bad_records"];
  v = good(5);
  gpu::RecordHeader rh;
  std::memcpy(&rh, v.data() + sizeof(gpu::DatagramHeader), sizeof(rh));
  rh.size = 20;  // a known type shorter than its struct
  std::memcpy(v.data() + sizeof(gpu::DatagramHeader), &rh, sizeof(rh));
  v.resize(sizeof(gpu::DatagramHeader) + sizeof(rh) + 20);
  sendv(v);
  ++expect["bad_records"];
  v = good(6);
  v.push_back(0);  // a trailing byte
  sendv(v);
  ++expect["bad_records"];
  // Garbage: a deterministic pseudo-random fill, starting with the right magic so it reaches
  // the record framing.
  std::vector<unsigned char> garbage(3000);
  uint32_t x = 12345;
  for (unsigned char& b : garbage)
    b = static_cast<unsigned char>((x = x * 1103515245 + 12345) >> 16);
  std::memcpy(garbage.data(), v.data(), 8);
  sendv(garbage);
  ++expect["bad_records"];
  std::vector<unsigned char> huge(gpu::kMaxDatagramBytes + 4000, 0);
  std::memcpy(huge.data(), v.data(), 8);
  sendv(huge);
  ++expect["oversize"];
  sendv(good(7));  // the connection still works

  Drained d;
  ASSERT_TRUE(WaitFor([&] {
    DrainInto(ingest, &d);
    return !d.collectives.empty();
  }));
  ASSERT_EQ(d.collectives.size(), 1u);
  EXPECT_EQ(d.collectives[0].collective.seq, 7u);
  const v1::GpuIngestStats s = StatsOf(ingest);
  for (const auto& [reason, n] : expect) {
    EXPECT_EQ(MapValue(s.dropped_datagrams_total(), reason), n) << reason;
  }
  EXPECT_EQ(s.dropped_datagrams_total_size(), static_cast<int>(expect.size()));
  EXPECT_EQ(s.datagrams_total(), 1u);
  EXPECT_EQ(s.connections(), 1u);
  close(fd);
  EXPECT_TRUE(WaitFor([&] { return StatsOf(ingest).connections() == 0; }));
}

// A producer killed mid-stream is a closed connection: what it sent is kept, others go on.
TEST(GpuIngest, AProducerKilledMidStreamLeavesTheOthersAlone) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  o.queue_slots = 1 << 16;
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  const pid_t victim = fork();
  ASSERT_GE(victim, 0);
  if (victim == 0) {
    // Runs until killed, at a full datagram (~250 records) per millisecond: far above what a
    // rank's profiler sends, yet a rate, as a real producer has. Unpaced, the flood filled the
    // queue on a loaded machine (the drain stores every event) and the survivor's records were
    // dropped with it: 2,593 of 20,000 arrived in one run, 4.6 M records dropped.
    Produce(o.socket_path, 0xdead, 1, 0, int64_t{1} << 40, std::chrono::milliseconds(1));
    _exit(0);
  }
  // One thread drains the queue the whole time, as the agent's pipeline does: with the drain
  // in the waits only, the victim's flood filled the queue while the survivor started and the
  // victim was killed (a loaded CI machine dropped 260 of the survivor's records).
  Drained d;
  absl::Mutex dm;
  std::atomic<bool> stop_drain{false};
  std::thread drainer([&] {
    while (!stop_drain.load()) {
      absl::MutexLock lock(&dm);
      DrainInto(ingest, &d, 4096);
    }
  });
  auto collectives = [&] {
    absl::MutexLock lock(&dm);
    return d.collectives.size();
  };
  const bool victim_streamed = WaitFor([&] { return collectives() > 2000; });
  std::atomic<int64_t> sent{-1};
  std::atomic<bool> finished{false};
  std::thread survivor([&] {
    sent = Produce(o.socket_path, 0xa11e, 2, 1, 20000);
    finished = true;
  });
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  const bool survivor_done = WaitFor([&] { return finished.load(); }, 60s);
  survivor.join();
  stop_drain = true;
  drainer.join();
  ASSERT_TRUE(victim_streamed);
  ASSERT_TRUE(survivor_done);
  ASSERT_EQ(sent.load(), 20000);
  ASSERT_TRUE(WaitFor([&] {
    DrainInto(ingest, &d);
    return StatsOf(ingest).connections() == 0 && ingest.Peek() == nullptr;
  }));
  size_t survivor_records = 0, victim_records = 0;
  for (const GpuEvent& e : d.collectives) {
    (e.collective.comm_hash == 0xa11e ? survivor_records : victim_records)++;
  }
  EXPECT_EQ(survivor_records, 20000u);
  EXPECT_GT(victim_records, 2000u);
  const v1::GpuIngestStats s = StatsOf(ingest);
  EXPECT_EQ(s.records_total(), d.total());
  EXPECT_EQ(MapValue(s.dropped_records_total(), "agent"), 0u);
  EXPECT_EQ(s.dropped_datagrams_total_size(), 0);
}

// Producers' own drop counts are cumulative per producer; the agent sums them per source and
// keeps them after a producer exits.
TEST(GpuIngest, ProducerDropsAreSummedPerSourceAndStayAfterExit) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  alignas(8) unsigned char buf[1024];
  auto send_drops = [&](int fd, gpu::Source source, uint64_t seq, uint64_t dropped) {
    gpu::DatagramWriter w(buf, sizeof(buf), source, getpid());
    const size_t n = w.Finish(seq, dropped, 1);  // no records, only the count
    return send(fd, buf, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
  };
  const int a = Connect(o.socket_path), b = Connect(o.socket_path), c = Connect(o.socket_path);
  ASSERT_TRUE(send_drops(a, gpu::Source::kNcclProfiler, 1, 5));
  ASSERT_TRUE(send_drops(a, gpu::Source::kNcclProfiler, 2, 12));
  ASSERT_TRUE(send_drops(b, gpu::Source::kNcclProfiler, 1, 4));
  ASSERT_TRUE(send_drops(c, gpu::Source::kCupti, 1, 3));
  auto dropped = [&](const std::string& source) {
    return MapValue(StatsOf(ingest).dropped_records_total(), source);
  };
  ASSERT_TRUE(WaitFor([&] { return StatsOf(ingest).datagrams_total() == 4; }));
  EXPECT_EQ(dropped("nccl"), 16u);
  EXPECT_EQ(dropped("cupti"), 3u);
  close(a);
  close(c);
  ASSERT_TRUE(WaitFor([&] { return StatsOf(ingest).connections() == 1; }));
  EXPECT_EQ(dropped("nccl"), 16u);
  EXPECT_EQ(dropped("cupti"), 3u);
  ASSERT_TRUE(send_drops(b, gpu::Source::kNcclProfiler, 2, 9));
  ASSERT_TRUE(WaitFor([&] { return dropped("nccl") == 21u; }));
  const v1::GpuIngestStats s = StatsOf(ingest);
  ASSERT_EQ(s.producers_size(), 1);
  EXPECT_EQ(s.producers(0).pid(), getpid());
  EXPECT_EQ(s.producers(0).source(), "nccl");
  EXPECT_EQ(s.producers(0).dropped_records_total(), 9u);
  // A count past 2^53 is no real one: ignored, the sum neither jumps to 1.8e19 nor wraps.
  ASSERT_TRUE(send_drops(b, gpu::Source::kNcclProfiler, 3, UINT64_MAX - 1));
  ASSERT_TRUE(WaitFor([&] { return StatsOf(ingest).datagrams_total() == 6; }));
  EXPECT_EQ(dropped("nccl"), 21u);
  close(b);
}

TEST(GpuIngest, ConnectionsBeyondTheLimitOrFromOtherUidsAreRefusedAndCounted) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  o.max_connections = 2;
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  const int a = Connect(o.socket_path), b = Connect(o.socket_path);
  ASSERT_TRUE(WaitFor([&] { return StatsOf(ingest).connections() == 2; }));
  const int c = Connect(o.socket_path);  // accepted by the kernel, closed by the agent
  ASSERT_TRUE(WaitFor(
      [&] { return MapValue(StatsOf(ingest).rejected_connections_total(), "limit") == 1; }));
  char byte;
  EXPECT_EQ(recv(c, &byte, 1, 0), 0);  // end of stream: the agent closed it
  EXPECT_EQ(StatsOf(ingest).connections(), 2u);
  close(a);
  close(b);
  close(c);

  TempDir dir2;
  GpuIngestOptions u;
  u.socket_path = dir2.Path("gpu.sock");
  u.allowed_uids = {getuid() + 4242};
  GpuIngest strict(u);
  ASSERT_TRUE(strict.Start().ok());
  const int d = Connect(u.socket_path);
  ASSERT_TRUE(
      WaitFor([&] { return MapValue(StatsOf(strict).rejected_connections_total(), "uid") == 1; }));
  EXPECT_EQ(recv(d, &byte, 1, 0), 0);
  EXPECT_EQ(StatsOf(strict).connections(), 0u);
  close(d);
}

// The agent restarts while a producer is connected: the producer (ProducerChannel, as the
// plugin uses it) loses what it sends meanwhile and reconnects to the new agent by itself.
TEST(GpuIngest, AProducerReconnectsAfterTheAgentRestarts) {
  TempDir dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  auto ingest = std::make_unique<GpuIngest>(o);
  ASSERT_TRUE(ingest->Start().ok());
  gpu::ProducerChannel channel(gpu::Source::kNcclProfiler, o.socket_path);
  alignas(8) unsigned char buf[1024];
  uint64_t seq = 0;
  auto send_one = [&](uint64_t id) {
    gpu::DatagramWriter w(buf, sizeof(buf), gpu::Source::kNcclProfiler, getpid());
    w.Append(MakeCollective(0xfeed, 0, id));
    const size_t n = w.Finish(++seq, 0, 1);
    return channel.Send(buf, n);
  };
  ASSERT_TRUE(send_one(1));
  Drained d;
  ASSERT_TRUE(WaitFor([&] {
    DrainInto(*ingest, &d);
    return d.collectives.size() == 1;
  }));
  ingest->Stop();
  ingest = std::make_unique<GpuIngest>(o);
  ASSERT_TRUE(ingest->Start().ok());
  // Sends fail until the channel notices and reconnects (at most once a second).
  uint64_t id = 2;
  Drained after;
  ASSERT_TRUE(WaitFor(
      [&] {
        send_one(id++);
        DrainInto(*ingest, &after);
        return !after.collectives.empty();
      },
      5s));
  EXPECT_GE(channel.connects(), 2u);
  EXPECT_EQ(after.collectives.back().collective.comm_hash, 0xfeedu);
  EXPECT_EQ(after.collectives.back().pid, getpid());
}

}  // namespace
}  // namespace fabricscope::agent
