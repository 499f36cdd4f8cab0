// fabricscope-ring-allreduce: one rank of a ring all-reduce over real TCP sockets, as NCCL's
// socket transport runs it (reduce-scatter then all-gather, n-1 steps each, every step sending
// one chunk to the right neighbour while receiving one from the left), on real float32 data
// that is checked at the end. Each collective is reported through the NCCL profiler plugin
// (libnccl-profiler-fabricscope.so) driven by the test harness (tests/common/nccl_harness.h) in
// NCCL's own order: the Coll starts and stops when the all-reduce is enqueued, just before the
// transfer (src/enqueue.cc hostStreamPlanTask), and the harness's proxy thread emits the ProxyOps
// when it picks them up, the KernelCh start once the transfer began and its stop, the steps and
// the ProxyOp stops once it ended (a GpuGate carries the measured times, as the GPU's counters
// do for NCCL's proxy). Used by the cluster-in-a-box test (tests/e2e).
//
// Every wait is bounded by --timeout. Prints one line per collective on stdout
// ("collective seq=S start_ns=T0 end_ns=T1") and "ok iterations=N" at the end; errors go to
// stderr with exit status 1 (2 for bad arguments).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/nccl_harness.h"

namespace {

using fabricscope::testing::FakeNccl;
using fabricscope::testing::HarnessNowNs;

constexpr char kUsage[] =
    "fabricscope-ring-allreduce --rank=R --nranks=N --listen=IP:PORT --right=IP:PORT\n"
    "    --plugin=PATH [--bytes=262144] [--iterations=10] [--compute-ms=50] [--delay-ms=0]\n"
    "    [--delay-file=PATH] [--comm-hash=HEX] [--timeout=60]\n"
    "One rank of a ring all-reduce over TCP; reports each collective through the NCCL\n"
    "profiler plugin at PATH (FABRICSCOPE_GPU_SOCKET says where it sends). --delay-ms is extra\n"
    "compute before every collective on this rank (a compute straggler); with --delay-file,\n"
    "the integer in PATH replaces it before each iteration once the file exists (a straggler\n"
    "that begins mid-run). --bytes=A,B,... cycles through the sizes, one per iteration (a job\n"
    "whose collectives vary in size from step to step).\n";

struct Args {
  int rank = -1, nranks = 0;
  std::string listen, right, plugin;
  std::vector<size_t> bytes = {262144};  // per iteration, cycled
  int iterations = 10;
  int compute_ms = 50, delay_ms = 0;
  std::string delay_file;  // when it exists: its integer replaces delay_ms from then on
  uint64_t comm_hash = 0x5eed0000cafe0001ULL;
  int timeout_s = 60;
};

bool ParseAddr(const std::string& s, sockaddr_in* out) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  std::memset(out, 0, sizeof(*out));
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(std::atoi(s.c_str() + colon + 1)));
  return inet_pton(AF_INET, s.substr(0, colon).c_str(), &out->sin_addr) == 1;
}

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "fabricscope-ring-allreduce: %s\n", msg.c_str());
  std::exit(1);
}

// Waits for fd to be ready for `events` until the deadline; dies on timeout.
void WaitFd(int fd, short events, int64_t deadline_ns, const char* what) {
  for (;;) {
    const int64_t left_ms = (deadline_ns - HarnessNowNs()) / 1'000'000;
    if (left_ms <= 0) Die(std::string("timed out: ") + what);
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (r > 0) return;
    if (r < 0 && errno != EINTR) Die(std::string("poll: ") + std::strerror(errno));
  }
}

void SendAll(int fd, const char* p, size_t n, int64_t deadline_ns) {
  while (n > 0) {
    WaitFd(fd, POLLOUT, deadline_ns, "send");
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      Die(std::string("send: ") + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void RecvAll(int fd, char* p, size_t n, int64_t deadline_ns) {
  while (n > 0) {
    WaitFd(fd, POLLIN, deadline_ns, "receive");
    const ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r == 0) Die("the left neighbour closed the connection");
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      Die(std::string("recv: ") + std::strerror(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
}

// Parses the flags into *a; on an unknown one prints it with the usage and returns false.
bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto val = [&](const char* name) -> const char* {
      const size_t n = std::strlen(name);
      return s.compare(0, n, name) == 0 ? s.c_str() + n : nullptr;
    };
    if (const char* v = val("--rank=")) {
      a->rank = std::atoi(v);
    } else if (const char* v = val("--nranks=")) {
      a->nranks = std::atoi(v);
    } else if (const char* v = val("--listen=")) {
      a->listen = v;
    } else if (const char* v = val("--right=")) {
      a->right = v;
    } else if (const char* v = val("--plugin=")) {
      a->plugin = v;
    } else if (const char* v = val("--bytes=")) {
      a->bytes.clear();
      for (const char* p = v; *p != '\0';) {
        char* end = nullptr;
        a->bytes.push_back(std::strtoull(p, &end, 10));
        if (end == p || (*end != ',' && *end != '\0')) {
          std::fprintf(stderr, "bad --bytes=%s: a comma-separated list of sizes\n%s", v, kUsage);
          return false;
        }
        p = *end == ',' ? end + 1 : end;
      }
    } else if (const char* v = val("--iterations=")) {
      a->iterations = std::atoi(v);
    } else if (const char* v = val("--compute-ms=")) {
      a->compute_ms = std::atoi(v);
    } else if (const char* v = val("--delay-ms=")) {
      a->delay_ms = std::atoi(v);
    } else if (const char* v = val("--delay-file=")) {
      a->delay_file = v;
    } else if (const char* v = val("--comm-hash=")) {
      a->comm_hash = std::strtoull(v, nullptr, 16);
    } else if (const char* v = val("--timeout=")) {
      a->timeout_s = std::atoi(v);
    } else {
      std::fprintf(stderr, "unknown argument %s\n%s", s.c_str(), kUsage);
      return false;
    }
  }
  return true;
}

// The connected ring: the listening socket, the left neighbour's connection and the right one's.
struct Ring {
  int lfd = -1, left = -1, right = -1;
};

// Connect the ring: listen for the left neighbour, connect to the right one (retrying while
// it is not listening yet).
Ring ConnectRing(const Args& a, const sockaddr_in& listen_addr, const sockaddr_in& right_addr,
                 int64_t deadline) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(lfd, reinterpret_cast<const sockaddr*>(&listen_addr), sizeof(listen_addr)) != 0 ||
      listen(lfd, 1) != 0) {
    Die("cannot listen on " + a.listen + ": " + std::strerror(errno));
  }
  int right = -1;
  while (right < 0) {
    right = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(right, reinterpret_cast<const sockaddr*>(&right_addr), sizeof(right_addr)) == 0) {
      break;
    }
    close(right);
    right = -1;
    if (HarnessNowNs() > deadline) Die("cannot connect to " + a.right);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  WaitFd(lfd, POLLIN, deadline, "accept");
  const int left = accept(lfd, nullptr, nullptr);
  if (left < 0) Die(std::string("accept: ") + std::strerror(errno));
  setsockopt(right, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return Ring{lfd, left, right};
}

// Loads the profiler plugin and initializes it for this rank's communicator; dies on failure.
std::unique_ptr<FakeNccl> LoadPlugin(const Args& a, FakeNccl::Comm* comm) {
  std::string error;
  std::unique_ptr<FakeNccl> nccl = FakeNccl::Load(a.plugin, &error);
  if (!nccl) Die("cannot load the plugin: " + error);
  comm->hash = a.comm_hash;
  comm->rank = a.rank;
  comm->nranks = a.nranks;
  comm->nnodes = a.nranks;
  comm->name = "ring";
  if (nccl->Init(*comm) != 0) Die("plugin init failed");
  return nccl;
}

// With --delay-file, the integer in the file replaces --delay-ms once the file exists.
void ReadDelayFile(Args* a) {
  if (a->delay_file.empty()) return;
  if (FILE* f = std::fopen(a->delay_file.c_str(), "r")) {  // a fault injected mid-run
    int ms = 0;
    if (std::fscanf(f, "%d", &ms) == 1 && ms >= 0) a->delay_ms = ms;
    std::fclose(f);
  }
}

// The all-reduce itself over `data` (n chunks of `chunk` floats), `incoming` a chunk's buffer.
void RingTransfer(const Ring& ring, int rank, int n, size_t chunk, std::vector<float>* data,
                  std::vector<float>* incoming, int64_t deadline) {
  auto chunk_ptr = [&](int c) {
    return data->data() + static_cast<size_t>((c % n + n) % n) * chunk;
  };
  // Reduce-scatter: step s sends chunk (rank - s), receives chunk (rank - s - 1) and adds it.
  for (int s = 0; s < n - 1; ++s) {
    float* out = chunk_ptr(rank - s);
    std::thread sender(
        [&] { SendAll(ring.right, reinterpret_cast<const char*>(out), chunk * 4, deadline); });
    RecvAll(ring.left, reinterpret_cast<char*>(incoming->data()), chunk * 4, deadline);
    sender.join();
    float* in = chunk_ptr(rank - s - 1);
    for (size_t i = 0; i < chunk; ++i) in[i] += (*incoming)[i];
  }
  // All-gather: step s sends chunk (rank + 1 - s), receives chunk (rank - s).
  for (int s = 0; s < n - 1; ++s) {
    float* out = chunk_ptr(rank + 1 - s);
    std::thread sender(
        [&] { SendAll(ring.right, reinterpret_cast<const char*>(out), chunk * 4, deadline); });
    RecvAll(ring.left, reinterpret_cast<char*>(chunk_ptr(rank - s)), chunk * 4, deadline);
    sender.join();
  }
}

// Every element is the sum over ranks of (r + 1) + i % 7.
void CheckResult(const std::vector<float>& data, int n) {
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < data.size(); ++i) {
    const float want = ranks_sum + static_cast<float>(n) * static_cast<float>(i % 7);
    if (std::fabs(data[i] - want) > 1e-3f) {
      Die("wrong all-reduce result at element " + std::to_string(i) + ": " +
          std::to_string(data[i]) + " != " + std::to_string(want));
    }
  }
}

// One collective (iteration `it`): compute, enqueue it through the plugin, run the transfer,
// check the result and print its line.
void RunIteration(Args* a, int it, const Ring& ring, FakeNccl* nccl, FakeNccl::Comm* comm,
                  size_t chunk, std::vector<float>* data, std::vector<float>* incoming,
                  int64_t deadline) {
  const int n = a->nranks;
  for (size_t i = 0; i < data->size(); ++i) {
    (*data)[i] = static_cast<float>(a->rank + 1) + static_cast<float>(i % 7);
  }
  ReadDelayFile(a);
  std::this_thread::sleep_for(std::chrono::milliseconds(a->compute_ms + a->delay_ms));
  // Enqueue (ncclAllReduce): Coll start, proxy ops posted, Coll stop; nothing waits.
  FakeNccl::CollSpec spec = FakeNccl::AllReduceSpec(chunk * 4 * static_cast<size_t>(n), a->rank, n,
                                                    /*channels=*/1, /*chunk=*/chunk * 4);
  auto gate = std::make_shared<fabricscope::testing::GpuGate>();
  spec.gate = gate;
  nccl->Run(*comm, spec);
  const int64_t t0 = HarnessNowNs();
  gate->started_ns.store(t0);  // the "kernel" runs: the proxy may start the KernelCh
  nccl->Notify();
  RingTransfer(ring, a->rank, n, chunk, data, incoming, deadline);
  const int64_t t1 = HarnessNowNs();
  gate->ended_ns.store(t1);  // done: steps, KernelCh stop and ProxyOp stops follow
  nccl->Notify();
  CheckResult(*data, n);
  std::printf("collective seq=%d start_ns=%lld end_ns=%lld\n", it, static_cast<long long>(t0),
              static_cast<long long>(t1));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!ParseArgs(argc, argv, &a)) return 2;
  sockaddr_in listen_addr{}, right_addr{};
  if (a.nranks < 2 || a.rank < 0 || a.rank >= a.nranks || !ParseAddr(a.listen, &listen_addr) ||
      !ParseAddr(a.right, &right_addr) || a.plugin.empty() || a.iterations < 1 || a.bytes.empty() ||
      *std::min_element(a.bytes.begin(), a.bytes.end()) < 4 * static_cast<size_t>(a.nranks)) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  const int64_t deadline = HarnessNowNs() + static_cast<int64_t>(a.timeout_s) * 1'000'000'000;
  const Ring ring = ConnectRing(a, listen_addr, right_addr, deadline);
  FakeNccl::Comm comm;
  std::unique_ptr<FakeNccl> nccl = LoadPlugin(a, &comm);

  const int n = a.nranks;
  std::vector<float> data, incoming;
  for (int it = 0; it < a.iterations; ++it) {
    const size_t count = a.bytes[static_cast<size_t>(it) % a.bytes.size()] / 4;
    const size_t chunk = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
    data.assign(chunk * static_cast<size_t>(n), 0.0f);
    incoming.assign(chunk, 0.0f);
    RunIteration(&a, it, ring, nccl.get(), &comm, chunk, &data, &incoming, deadline);
  }
  nccl->Drain();
  nccl->Finalize(comm);
  close(ring.left);
  close(ring.right);
  close(ring.lfd);
  std::printf("ok iterations=%d\n", a.iterations);
  return 0;
}
