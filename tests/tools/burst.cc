// fabricscope-burst: sends one burst of exactly N bytes over a real TCP connection, or receives
// one. Used by the end-to-end tests (tests/e2e) to put a known number of bytes on a shaped link.
//
// Every wait is bounded by --timeout: the tool never hangs. Results are printed on stdout as one
// line of key=value pairs; errors go to stderr with a non-zero exit code.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/tcp.h>  // struct tcp_info with the segment counters (glibc's is older)
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr char kUsage[] =
    "fabricscope-burst: one TCP burst of a known size, for end-to-end tests.\n"
    "\n"
    "Usage:\n"
    "  fabricscope-burst receive --listen=ADDR:PORT [--timeout=SECONDS]\n"
    "  fabricscope-burst send --connect=ADDR:PORT --bytes=N [--timeout=SECONDS]\n"
    "                         [--congestion=NAME]\n"
    "\n"
    "receive  Listens on ADDR:PORT (port 0 picks a free one) and prints\n"
    "           listening=ADDR:PORT\n"
    "         once it accepts connections. Takes ONE connection, reads everything until the\n"
    "         sender closes, answers \"OK <bytes>\\n\", and prints\n"
    "           received_bytes=N elapsed_seconds=S\n"
    "send     Connects to ADDR:PORT (retrying while the port refuses, until the timeout),\n"
    "         sends exactly N bytes, closes its sending side, waits for the receiver's\n"
    "         answer, and prints\n"
    "           sent_bytes=N elapsed_seconds=S peer_received_bytes=N mss=M segs_out=K\n"
    "           data_segs_out=D retrans=R tcp_bytes_sent=B tcp_bytes_retrans=BR\n"
    "           timestamps=0|1 congestion=NAME busy_us=U rwnd_limited_us=U\n"
    "           sndbuf_limited_us=U snd_cwnd=C pacing_rate=B/s start_unix_seconds=T\n"
    "           end_unix_seconds=T\n"
    "         elapsed: first byte sent to answer received (start/end_unix_seconds: the\n"
    "         same instants in Unix time). From TCP_INFO: segs_out and\n"
    "         data_segs_out count every segment sent (SYN/ACK/FIN included in the first),\n"
    "         retransmissions included; tcp_bytes_sent is payload bytes sent, retransmissions\n"
    "         included. On the wire each data segment carries Ethernet+IP+TCP headers on top.\n"
    "\n"
    "Options:\n"
    "  --listen=ADDR:PORT    receive: address to listen on, IPv4 or [IPv6].\n"
    "  --connect=ADDR:PORT   send: address to connect to.\n"
    "  --bytes=N             send: payload bytes; suffixes k, m, g are powers of 1024.\n"
    "  --timeout=SECONDS     bound on the whole run (default 30). Exceeding it is an error.\n"
    "  --congestion=NAME     send: TCP congestion control for the socket (e.g. cubic);\n"
    "                        default: the system's. Setting one not in\n"
    "                        net.ipv4.tcp_allowed_congestion_control needs CAP_NET_ADMIN.\n"
    "  --help                this text.\n"
    "\n"
    "Exit codes: 0 success, 1 runtime failure (timeout, refused, short transfer), 2 usage.\n";

constexpr size_t kBufferBytes = 256 * 1024;  // receive buffer
// The sender hands the kernel up to this much per send() call: one call for a whole burst of
// up to 64 MiB, so that the socket is fed without returning to user space (where a busy host
// could deschedule the sender between calls and leave the link idle).
constexpr size_t kMaxSendChunk = 64 * 1024 * 1024;

int Usage(const std::string& msg) {
  fprintf(stderr, "fabricscope-burst: %s\nRun with --help for usage.\n", msg.c_str());
  return 2;
}

int Fail(const std::string& msg) {
  fprintf(stderr, "fabricscope-burst: %s\n", msg.c_str());
  return 1;
}

std::string Errno(const char* what) { return std::string(what) + ": " + strerror(errno); }

// "0.5 s", "30 s": a timeout as the user wrote it.
std::string Seconds(double s) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t UnixNowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Milliseconds left until deadline_ns for poll(): at least 0, rounded up.
int MsLeft(int64_t deadline_ns) {
  const int64_t left = deadline_ns - NowNs();
  if (left <= 0) return 0;
  return static_cast<int>((left + 999'999) / 1'000'000);
}

bool ParseBytes(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || text[0] == '-') return false;
  uint64_t mult = 1;
  const std::string suffix(end);
  if (suffix == "k" || suffix == "K") {
    mult = 1024;
  } else if (suffix == "m" || suffix == "M") {
    mult = 1024 * 1024;
  } else if (suffix == "g" || suffix == "G") {
    mult = 1024ull * 1024 * 1024;
  } else if (!suffix.empty()) {
    return false;
  }
  if (v > UINT64_MAX / mult) return false;
  *out = v * mult;
  return true;
}

bool ParseSeconds(const std::string& text, double* out) {
  char* end = nullptr;
  errno = 0;
  const double v = strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0 ||
      v > 3600) {
    return false;
  }
  *out = v;
  return true;
}

// Resolves "1.2.3.4:5", "[::1]:5" (numeric hosts only: no DNS in a test).
bool ResolveHostPort(const std::string& text, sockaddr_storage* addr, socklen_t* len,
                     std::string* error) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    *error = "\"" + text + "\" is not ADDR:PORT (e.g. 10.213.0.2:5201 or [::1]:5201)";
    return false;
  }
  std::string host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  char* end = nullptr;
  const long p = strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 0 || p > 65535) {
    *error = "\"" + text + "\" has a bad port";
    return false;
  }
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    *error = "\"" + host + "\" is not a numeric IPv4 or IPv6 address (" + gai_strerror(rc) + ")";
    return false;
  }
  memcpy(addr, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

std::string FormatAddress(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
  inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
  port = ntohs(a->sin_port);
  return std::string(host) + ":" + std::to_string(port);
}

bool SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Waits until fd is ready for `events` or the deadline passes. Returns false on timeout (errno
// ETIMEDOUT) or poll error.
bool WaitFor(int fd, short events, int64_t deadline_ns) {
  while (true) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, MsLeft(deadline_ns));
    if (rc > 0) return true;
    if (rc == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    if (errno != EINTR) return false;
  }
}

int Receive(const std::string& listen_at, double timeout_s) {
  const int64_t deadline = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string error;
  if (!ResolveHostPort(listen_at, &addr, &len, &error)) return Usage("--listen: " + error);
  Fd s(socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.fd < 0) return Fail(Errno("socket"));
  const int one = 1;
  setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Fail(Errno(("cannot listen on " + listen_at).c_str()));
  }
  if (listen(s.fd, 1) != 0) return Fail(Errno("listen"));
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  getsockname(s.fd, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  if (!SetNonBlocking(s.fd)) return Fail(Errno("fcntl"));
  printf("listening=%s\n", FormatAddress(bound).c_str());
  fflush(stdout);

  if (!WaitFor(s.fd, POLLIN, deadline)) {
    return Fail(Errno(
        ("no connection on " + FormatAddress(bound) + " within " + Seconds(timeout_s)).c_str()));
  }
  Fd c(accept4(s.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (c.fd < 0) return Fail(Errno("accept"));

  std::vector<char> buf(kBufferBytes);
  uint64_t total = 0;
  int64_t first_ns = 0;
  while (true) {
    const ssize_t n = read(c.fd, buf.data(), buf.size());
    if (n > 0) {
      if (first_ns == 0) first_ns = NowNs();
      total += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) break;  // the sender closed its side: everything arrived
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Fail(Errno(("read failed after " + std::to_string(total) + " bytes").c_str()));
    }
    if (!WaitFor(c.fd, POLLIN, deadline)) {
      return Fail("timed out after " + Seconds(timeout_s) + " with " + std::to_string(total) +
                  " bytes received and the sender not done");
    }
  }
  const int64_t end_ns = NowNs();
  const std::string answer = "OK " + std::to_string(total) + "\n";
  // A few bytes into an empty send buffer: this does not block.
  if (send(c.fd, answer.data(), answer.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(answer.size())) {
    fprintf(stderr, "fabricscope-burst: warning: could not answer the sender: %s\n",
            strerror(errno));
  }
  printf("received_bytes=%llu elapsed_seconds=%.6f\n", static_cast<unsigned long long>(total),
         first_ns ? static_cast<double>(end_ns - first_ns) / 1e9 : 0.0);
  fflush(stdout);
  return 0;
}

// Connect, retrying while nobody listens yet (the receiver may still be starting). On success
// stores the connected descriptor in *fd_out and returns 0; otherwise returns the exit status.
int Connect(const sockaddr_storage& addr, socklen_t len, const std::string& connect_to,
            const std::string& congestion, double timeout_s, int64_t deadline, int* fd_out) {
  int fd = -1;
  while (true) {
    fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Fail(Errno("socket"));
    if (!congestion.empty() && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, congestion.data(),
                                          static_cast<socklen_t>(congestion.size())) != 0) {
      const std::string msg =
          Errno(("cannot use congestion control \"" + congestion + "\"").c_str()) +
          " (see /proc/sys/net/ipv4/tcp_available_congestion_control)";
      close(fd);
      return Fail(msg);
    }
    int rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!WaitFor(fd, POLLOUT, deadline)) {
        close(fd);
        return Fail(Errno(("cannot connect to " + connect_to).c_str()));
      }
      int so_error = 0;
      socklen_t sl = sizeof(so_error);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &sl);
      errno = so_error;
      rc = so_error == 0 ? 0 : -1;
    }
    if (rc == 0) break;
    const int err = errno;
    close(fd);
    if (err != ECONNREFUSED || MsLeft(deadline) == 0) {
      errno = err;
      return Fail(
          Errno(("cannot connect to " + connect_to + " within " + Seconds(timeout_s)).c_str()));
    }
    timespec pause{0, 20'000'000};
    nanosleep(&pause, nullptr);
  }
  *fd_out = fd;
  return 0;
}

// What a send run measured: the bytes sent, when the first one was, and the receiver's answer.
struct Transfer {
  uint64_t sent = 0;
  int64_t start_ns = 0, start_unix_ns = 0, end_ns = 0;
  std::string answer;
};

// Sends exactly `bytes` bytes on fd, noting in *t when it started and how much was sent. Returns
// 0, or the exit status on failure.
int SendPayload(int fd, uint64_t bytes, double timeout_s, int64_t deadline, Transfer* t) {
  std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(kMaxSendChunk, bytes)) + 1);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>('a' + i % 26);
  t->start_ns = NowNs();
  t->start_unix_ns = UnixNowNs();
  while (t->sent < bytes) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - t->sent));
    const ssize_t n = send(fd, buf.data(), chunk, MSG_NOSIGNAL);
    if (n > 0) {
      t->sent += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Fail(Errno(("send failed after " + std::to_string(t->sent) + " bytes").c_str()));
    }
    if (!WaitFor(fd, POLLOUT, deadline)) {
      return Fail("timed out after " + Seconds(timeout_s) + " with " + std::to_string(t->sent) +
                  " of " + std::to_string(bytes) + " bytes sent");
    }
  }
  return 0;
}

// The receiver answers "OK <bytes>" once it has read everything, then closes. Reads that answer
// into t->answer; returns 0, or the exit status on failure.
int ReadAnswer(int fd, double timeout_s, int64_t deadline, Transfer* t) {
  while (true) {
    char tmp[64];
    const ssize_t n = read(fd, tmp, sizeof(tmp));
    if (n > 0) {
      t->answer.append(tmp, static_cast<size_t>(n));
      if (t->answer.size() > 256) return Fail("the receiver answered garbage: " + t->answer);
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Fail(Errno("reading the receiver's answer"));
    }
    if (!WaitFor(fd, POLLIN, deadline)) {
      return Fail("timed out after " + Seconds(timeout_s) +
                  " s waiting for the receiver to confirm " + std::to_string(t->sent) + " bytes");
    }
  }
  return 0;
}

// Prints the send result line (with the socket's TCP_INFO) and checks the receiver's answer;
// returns the exit status.
int Report(int fd, const Transfer& t) {
  tcp_info info{};
  socklen_t info_len = sizeof(info);
  const bool have_info = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) == 0;
  char cc[32] = {};
  socklen_t cc_len = sizeof(cc) - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &cc_len) != 0) strcpy(cc, "unknown");

  unsigned long long peer = 0;
  const bool answered = sscanf(t.answer.c_str(), "OK %llu", &peer) == 1;
  auto u = [&](uint64_t v) { return static_cast<unsigned long long>(have_info ? v : 0); };
  printf(
      "sent_bytes=%llu elapsed_seconds=%.6f peer_received_bytes=%s mss=%llu segs_out=%llu "
      "data_segs_out=%llu retrans=%llu tcp_bytes_sent=%llu tcp_bytes_retrans=%llu "
      "timestamps=%d congestion=%s busy_us=%llu rwnd_limited_us=%llu sndbuf_limited_us=%llu "
      "snd_cwnd=%llu pacing_rate=%llu start_unix_seconds=%.6f end_unix_seconds=%.6f\n",
      static_cast<unsigned long long>(t.sent), static_cast<double>(t.end_ns - t.start_ns) / 1e9,
      answered ? std::to_string(peer).c_str() : "unknown", u(info.tcpi_snd_mss),
      u(info.tcpi_segs_out), u(info.tcpi_data_segs_out), u(info.tcpi_total_retrans),
      u(info.tcpi_bytes_sent), u(info.tcpi_bytes_retrans),
      have_info && (info.tcpi_options & TCPI_OPT_TIMESTAMPS) ? 1 : 0, cc, u(info.tcpi_busy_time),
      u(info.tcpi_rwnd_limited), u(info.tcpi_sndbuf_limited), u(info.tcpi_snd_cwnd),
      u(info.tcpi_pacing_rate), static_cast<double>(t.start_unix_ns) / 1e9,
      static_cast<double>(t.start_unix_ns + (t.end_ns - t.start_ns)) / 1e9);
  fflush(stdout);
  if (!answered)
    return Fail("the receiver did not confirm the transfer (answer: \"" + t.answer + "\")");
  if (peer != t.sent) {
    return Fail("the receiver got " + std::to_string(peer) + " bytes, " + std::to_string(t.sent) +
                " were sent");
  }
  return 0;
}

int Send(const std::string& connect_to, uint64_t bytes, double timeout_s,
         const std::string& congestion) {
  const int64_t deadline = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string error;
  if (!ResolveHostPort(connect_to, &addr, &len, &error)) return Usage("--connect: " + error);
  int fd = -1;
  if (const int rc = Connect(addr, len, connect_to, congestion, timeout_s, deadline, &fd)) {
    return rc;
  }
  Fd s(fd);

  Transfer t;
  if (const int rc = SendPayload(s.fd, bytes, timeout_s, deadline, &t)) return rc;
  if (shutdown(s.fd, SHUT_WR) != 0) return Fail(Errno("shutdown"));
  if (const int rc = ReadAnswer(s.fd, timeout_s, deadline, &t)) return rc;
  t.end_ns = NowNs();
  return Report(s.fd, t);
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h" || a == "help") {
      fputs(kUsage, stdout);
      return 0;
    }
  }
  if (args.empty()) return Usage("missing mode: send or receive");
  const std::string mode = args[0];
  if (mode != "send" && mode != "receive") {
    return Usage("unknown mode \"" + mode + "\": expected send or receive");
  }
  const std::map<std::string, bool> known = {{"listen", mode == "receive"},
                                             {"connect", mode == "send"},
                                             {"bytes", mode == "send"},
                                             {"timeout", true},
                                             {"congestion", mode == "send"}};
  std::map<std::string, std::string> flags;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) return Usage("unexpected argument \"" + a + "\"");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Usage("--" + name + " needs a value");
    }
    auto it = known.find(name);
    if (it == known.end()) return Usage("unknown flag --" + name);
    if (!it->second) return Usage("--" + name + " does not apply to " + mode);
    flags[name] = value;
  }
  double timeout_s = 30;
  if (flags.count("timeout") && !ParseSeconds(flags["timeout"], &timeout_s)) {
    return Usage("--timeout: \"" + flags["timeout"] + "\" is not a number of seconds in (0, 3600]");
  }
  if (mode == "receive") {
    if (!flags.count("listen")) return Usage("receive needs --listen=ADDR:PORT");
    return Receive(flags["listen"], timeout_s);
  }
  if (!flags.count("connect")) return Usage("send needs --connect=ADDR:PORT");
  if (!flags.count("bytes")) return Usage("send needs --bytes=N");
  uint64_t bytes = 0;
  if (!ParseBytes(flags["bytes"], &bytes)) {
    return Usage("--bytes: \"" + flags["bytes"] + "\" is not a byte count (e.g. 4194304 or 4m)");
  }
  return Send(flags["connect"], bytes, timeout_s, flags["congestion"]);
}
