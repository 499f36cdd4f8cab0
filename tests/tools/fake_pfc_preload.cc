// libfabricscope-fake-pfc.so: an LD_PRELOAD test double of a RoCE NIC driver's PFC pause
// statistics on an interface that has none (a veth), for tests/e2e/fault_matrix_test.py.
//
// It wraps ioctl(2) and, for SIOCETHTOOL requests on the interface named by
// FABRICSCOPE_FAKE_PFC_IF, appends the per-priority pause statistics of mlx5 to the driver's
// own ETH_SS_STATS set, after the real kernel answered (net/ethtool/ioctl.c):
//   ETHTOOL_GSSET_INFO (ethtool_get_sset_info): the count of ETH_SS_STATS (data[] holds one
//     count per bit set in the returned sset_mask, lowest bit first) grows by the extras;
//   ETHTOOL_GSTRINGS (ethtool_get_strings): the kernel sets len to the driver's count and
//     copies that many ETH_GSTRING_LEN names; the extras' names follow and len grows;
//   ETHTOOL_GSTATS (ethtool_get_stats): the same for n_stats and the u64 values.
// The extras are rx_prio<P>_pause (pause frames received), rx_prio<P>_pause_duration
// (microseconds paused) and tx_prio<P>_pause, as mlx5 names and counts them
// (Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst, "Physical
// Port Counters": rx_prioX_pause_duration counts in microseconds).
//
// Their values come from the file FABRICSCOPE_FAKE_PFC_FILE, re-read on every GSTATS. It holds
// "priority duty frames_per_second since_unix_ns base_us base_frames": from since_unix_ns on,
// the port is paused `duty` of the time (0..1) and receives frames_per_second pause frames, on
// top of base_us microseconds and base_frames frames before; a missing file reads as no storm.
// A storm that stops is written as duty 0 with the totals so far as its base, so the counters
// never go back.
#include <dlfcn.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sys/ioctl.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace {

constexpr uint32_t kExtra = 3;

struct Storm {
  int priority = 3;
  double duty = 0;
  double frames_per_second = 0;
  int64_t since_unix_ns = 0;
  double base_us = 0;
  double base_frames = 0;
};

Storm ReadStorm() {
  Storm s;
  const char* path = getenv("FABRICSCOPE_FAKE_PFC_FILE");
  if (path == nullptr) return s;
  FILE* f = fopen(path, "r");
  if (f == nullptr) return s;
  long long since = 0;
  if (fscanf(f, "%d %lf %lf %lld %lf %lf", &s.priority, &s.duty, &s.frames_per_second, &since,
             &s.base_us, &s.base_frames) != 6) {
    s = Storm{};
  }
  s.since_unix_ns = since;
  fclose(f);
  if (s.priority < 0 || s.priority > 7) s.priority = 3;
  return s;
}

// rx pause frames, rx microseconds paused, tx pause frames (this end sends none).
void Values(uint64_t out[kExtra]) {
  const Storm s = ReadStorm();
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const int64_t now_ns = int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
  const double secs = now_ns > s.since_unix_ns && s.since_unix_ns > 0
                          ? static_cast<double>(now_ns - s.since_unix_ns) / 1e9
                          : 0.0;
  out[0] = static_cast<uint64_t>(s.base_frames + s.frames_per_second * secs);
  out[1] = static_cast<uint64_t>(s.base_us + s.duty * secs * 1e6);
  out[2] = 0;
}

void Names(char* out) {
  const Storm s = ReadStorm();
  const char* fmt[kExtra] = {"rx_prio%d_pause", "rx_prio%d_pause_duration", "tx_prio%d_pause"};
  for (uint32_t i = 0; i < kExtra; ++i) {
    char* name = out + i * ETH_GSTRING_LEN;
    std::memset(name, 0, ETH_GSTRING_LEN);
    snprintf(name, ETH_GSTRING_LEN, fmt[i], s.priority);
  }
}

using IoctlFn = int (*)(int, unsigned long, ...);

}  // namespace

extern "C" int ioctl(int fd, unsigned long request, ...) {
  static IoctlFn real = reinterpret_cast<IoctlFn>(dlsym(RTLD_NEXT, "ioctl"));
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  const char* target = getenv("FABRICSCOPE_FAKE_PFC_IF");
  auto* ifr = static_cast<ifreq*>(arg);
  if (request != SIOCETHTOOL || target == nullptr || arg == nullptr ||
      strncmp(ifr->ifr_name, target, IFNAMSIZ) != 0) {
    return real(fd, request, arg);
  }
  auto* data = static_cast<unsigned char*>(static_cast<void*>(ifr->ifr_data));
  uint32_t cmd = 0;
  std::memcpy(&cmd, data, sizeof(cmd));
  // Kernels since 7b07be1ff1cb (v6.19) answer a count that is not the driver's with 0 and
  // copy nothing: the driver's part is asked for with the driver's count.
  if (cmd == ETHTOOL_GSTRINGS) {
    auto* g = reinterpret_cast<ethtool_gstrings*>(data);
    if (g->string_set == ETH_SS_STATS && g->len >= kExtra) g->len -= kExtra;
  } else if (cmd == ETHTOOL_GSTATS) {
    auto* st = reinterpret_cast<ethtool_stats*>(data);
    if (st->n_stats >= kExtra) st->n_stats -= kExtra;
  }
  const int rc = real(fd, request, arg);
  if (rc != 0) return rc;
  if (cmd == ETHTOOL_GSSET_INFO) {
    auto* info = reinterpret_cast<ethtool_sset_info*>(data);
    if ((info->sset_mask & (1ULL << ETH_SS_STATS)) == 0) return rc;
    // data[] holds one count per set bit below and at ETH_SS_STATS, lowest first.
    const int index = __builtin_popcountll(info->sset_mask & ((1ULL << ETH_SS_STATS) - 1));
    info->data[index] += kExtra;
  } else if (cmd == ETHTOOL_GSTRINGS) {
    auto* g = reinterpret_cast<ethtool_gstrings*>(data);
    if (g->string_set != ETH_SS_STATS) return rc;
    Names(reinterpret_cast<char*>(g->data) + g->len * ETH_GSTRING_LEN);
    g->len += kExtra;
  } else if (cmd == ETHTOOL_GSTATS) {
    auto* st = reinterpret_cast<ethtool_stats*>(data);
    uint64_t v[kExtra];
    Values(v);
    std::memcpy(st->data + st->n_stats, v, sizeof(v));
    st->n_stats += kExtra;
  }
  return rc;
}
