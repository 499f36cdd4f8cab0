#include "collectors/sysfs_ports.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "collectors/counter_meaning.h"
#include "collectors/ib_port_counters.h"

namespace fabricscope::collectors {
namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": ", strerror(err));
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
    if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
    return absl::UnavailableError(msg);
  }
  std::string out;
  char buf[4096];
  while (out.size() < max_bytes) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat(path, ": ", strerror(err)));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(std::min<size_t>(n, max_bytes - out.size())));
  }
  close(fd);
  return out;
}

absl::StatusOr<uint64_t> ParseIbRate(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  const size_t space = t.find(' ');
  if (space == absl::string_view::npos || !absl::StartsWith(t.substr(space + 1), "Gb/sec")) {
    return absl::InvalidArgumentError(absl::StrCat("not an IB rate: \"", text, "\""));
  }
  double gbps = 0;
  if (!absl::SimpleAtod(t.substr(0, space), &gbps) || !(gbps >= 0) || gbps > 1e6) {
    return absl::InvalidArgumentError(absl::StrCat("not an IB rate: \"", text, "\""));
  }
  return static_cast<uint64_t>(std::llround(gbps * 125'000'000.0));
}

uint32_t ParseIbLanes(absl::string_view text) {
  const size_t open = text.find('(');
  if (open == absl::string_view::npos) return 0;
  const size_t x = text.find('X', open);
  uint32_t lanes = 0;
  if (x == absl::string_view::npos ||
      !absl::SimpleAtoi(text.substr(open + 1, x - open - 1), &lanes) || lanes == 0 || lanes > 32) {
    return 0;
  }
  return lanes;
}

absl::StatusOr<uint64_t> ParseNodeGuid(absl::string_view text) {
  const absl::string_view t = absl::StripAsciiWhitespace(text);
  const std::vector<absl::string_view> groups = absl::StrSplit(t, ':');
  uint64_t guid = 0;
  for (absl::string_view g : groups) {
    uint32_t v = 0;
    if (groups.size() != 4 || g.size() != 4 ||
        !std::all_of(g.begin(), g.end(), [](char c) { return absl::ascii_isxdigit(c); }) ||
        !absl::SimpleHexAtoi(g, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("not a node GUID: \"", text, "\""));
    }
    guid = guid << 16 | v;
  }
  return guid;
}

absl::StatusOr<uint64_t> ParseNetdevSpeed(absl::string_view text) {
  int64_t mbps = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &mbps)) {
    return absl::InvalidArgumentError(absl::StrCat("not a netdev speed: \"", text, "\""));
  }
  if (mbps <= 0) return uint64_t{0};
  return static_cast<uint64_t>(mbps) * 125'000;
}

namespace {

struct CounterTemplate {
  const char* name;
  uint8_t width;
  CounterBehavior behavior;
  uint32_t scale;
  CounterRole role;
};

constexpr CounterBehavior kWrap = CounterBehavior::kWrapping;

// include/uapi/linux/if_link.h struct rtnl_link_stats64: all 64-bit.
constexpr CounterTemplate kNetdevCounters[] = {
    {"tx_bytes", 64, kWrap, 1, CounterRole::kTransmitBytes},
    {"rx_bytes", 64, kWrap, 1, CounterRole::kReceiveBytes},
    {"tx_packets", 64, kWrap, 1, CounterRole::kTransmitPackets},
    {"rx_packets", 64, kWrap, 1, CounterRole::kReceivePackets},
    {"rx_errors", 64, kWrap, 1, CounterRole::kError},
    {"tx_errors", 64, kWrap, 1, CounterRole::kError},
    {"rx_dropped", 64, kWrap, 1, CounterRole::kError},
    {"tx_dropped", 64, kWrap, 1, CounterRole::kError},
    {"rx_crc_errors", 64, kWrap, 1, CounterRole::kError},
    {"rx_missed_errors", 64, kWrap, 1, CounterRole::kError},
    {"rx_fifo_errors", 64, kWrap, 1, CounterRole::kError},
    {"tx_fifo_errors", 64, kWrap, 1, CounterRole::kError},
    {"tx_carrier_errors", 64, kWrap, 1, CounterRole::kError},
};

std::vector<CounterDescriptor> BuildCounterSet(absl::Span<const CounterTemplate> templates,
                                               const std::string& dir, const char* group,
                                               uint32_t error_tick_divisor) {
  std::vector<CounterDescriptor> out;
  for (const CounterTemplate& t : templates) {
    const std::string path = absl::StrCat(dir, "/", t.name);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    CounterDescriptor d;
    d.name = t.name;
    d.path = path;
    d.group = group;
    d.spec = CounterSpec{t.width, t.behavior, t.scale};
    d.role = t.role;
    d.meaning = MeaningOf(group, t.name).meaning;
    d.tick_divisor = t.role == CounterRole::kError ? std::max<uint32_t>(1, error_tick_divisor) : 1;
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<std::string> SortedEntries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Moves counters that read "N/A" out of the port, noting them once.
void DropUnavailableCounters(PortDescriptor& port, std::vector<std::string>& notes) {
  std::vector<std::string> na;
  std::erase_if(port.counters, [&](const CounterDescriptor& c) {
    auto text = ReadSmallFile(c.path, 256);
    uint64_t v = 0;
    if (text.ok() && ParseCounterText(*text, &v) == ReadStatus::kUnavailable) {
      na.push_back(c.name);
      return true;
    }
    return false;
  });
  if (!na.empty()) {
    notes.push_back(absl::StrCat(
        port.Key(), ": ", na.size(),
        " counters read N/A (driver has no PMA) and are not sampled: ", absl::StrJoin(na, ", ")));
  }
}

// The legacy mlx4 layout (gpud#943): counters/port_{xmit,rcv}_{data,packets} are the 32-bit
// PortCounters values, which stop at 2^32 - 1 (IBTA vol. 1 16.1.3.5), and the 64-bit ones
// (PortCountersExtended) sit in counters_ext/<name>_64. Each of the four that has a readable
// counters_ext/<name>_64 is read from there instead (group "counters_ext"), and the choice is
// noted once. Those left in counters/ are marked stuck_at_32_bits_saturates: where the kernel
// serves the 64-bit values there (every mlx4/mlx5 since 4.5) nothing changes, and a 32-bit one
// stuck at its maximum is flagged saturated instead of reading as an idle link.
void PreferExtendedCounters(const std::string& port_dir, PortDescriptor& port,
                            std::vector<std::string>& notes) {
  std::vector<std::string> moved;
  for (CounterDescriptor& c : port.counters) {
    if (!IsTrafficRole(c.role)) continue;
    const std::string ext = absl::StrCat(port_dir, "/counters_ext/", c.name, "_64");
    uint64_t v = 0;
    auto text = ReadSmallFile(ext, 256);
    if (text.ok() && ParseCounterText(*text, &v) == ReadStatus::kOk) {
      c.path = ext;
      c.group = "counters_ext";
      c.spec = CounterSpec{64, CounterBehavior::kWrapping, c.spec.scale};
      moved.push_back(c.name);
    } else {
      c.spec.stuck_at_32_bits_saturates = true;
    }
  }
  if (!moved.empty()) {
    notes.push_back(absl::StrCat(port.Key(), ": ", absl::StrJoin(moved, ", "),
                                 " read from counters_ext/*_64 (64-bit), not the 32-bit "
                                 "counters/ files next to them"));
  }
}

// The role of a driver counter that the meaning table calls bytes or packets.
std::optional<CounterRole> TrafficRole(Meaning m) {
  switch (m) {
    case Meaning::kTransmitBytes:
      return CounterRole::kTransmitBytes;
    case Meaning::kReceiveBytes:
      return CounterRole::kReceiveBytes;
    case Meaning::kTransmitPackets:
      return CounterRole::kTransmitPackets;
    case Meaning::kReceivePackets:
      return CounterRole::kReceivePackets;
    default:
      return std::nullopt;
  }
}

}  // namespace

std::vector<CounterDescriptor> RdmaCounterSet(const std::string& counters_dir,
                                              uint32_t error_tick_divisor) {
  // Data and packet counters are 64-bit when the kernel serves PortCountersExtended (every
  // mlx4/mlx5/hfi1 since kernel 4.5) and wrap there; a 32-bit one that really stops at 2^32 - 1
  // is caught by PreferExtendedCounters (stuck_at_32_bits_saturates).
  std::vector<CounterTemplate> templates;
  for (const IbPortCounter& c : kIbPortCounters) {
    const CounterSpec spec = IbCounterSpec(c, /*extended=*/true);
    templates.push_back(CounterTemplate{c.name, spec.width_bits, spec.behavior, c.scale, c.role});
  }
  return BuildCounterSet(templates, counters_dir, "counters", error_tick_divisor);
}

std::vector<CounterDescriptor> NetdevCounterSet(const std::string& statistics_dir,
                                                uint32_t error_tick_divisor) {
  return BuildCounterSet(kNetdevCounters, statistics_dir, "statistics", error_tick_divisor);
}

std::vector<CounterDescriptor> RdmaHwCounterSet(const std::string& hw_counters_dir,
                                                uint32_t tick_divisor) {
  std::vector<CounterDescriptor> out;
  // The driver's traffic counters, by role, each possibly split in parts (irdma: IPv4 + IPv6).
  std::map<CounterRole, CounterDescriptor> traffic;
  for (const std::string& name : SortedEntries(hw_counters_dir)) {
    if (name == "lifespan") continue;
    const std::string path = absl::StrCat(hw_counters_dir, "/", name);
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) continue;
    const CounterMeaning meaning = MeaningOf("hw_counters", name);  // width_bits always set
    const uint8_t width = meaning.width_bits;
    const std::optional<CounterRole> role = TrafficRole(meaning.meaning);
    if (role) {
      auto [it, fresh] = traffic.try_emplace(*role);
      CounterDescriptor& d = it->second;
      if (fresh) {
        d.name = name;
        d.path = path;
        d.group = "hw_counters";
        d.role = *role;
        d.meaning = meaning.meaning;
        d.spec = CounterSpec{width, CounterBehavior::kWrapping, 1};
        d.tick_divisor = 1;
      } else {
        d.name = absl::StrCat(d.name, "+", name);
        d.part_paths.push_back(path);
      }
      continue;
    }
    CounterDescriptor d;
    d.name = name;
    d.path = path;
    d.group = "hw_counters";
    d.role = CounterRole::kOther;
    d.meaning = meaning.meaning;
    d.spec = CounterSpec{width, CounterBehavior::kWrapping, 1};
    d.tick_divisor = std::max<uint32_t>(1, tick_divisor);
    out.push_back(std::move(d));
  }
  for (auto& [role, d] : traffic) out.push_back(std::move(d));
  return out;
}

absl::StatusOr<DiscoveryResult> DiscoverRdmaPorts(const std::string& sysfs_root,
                                                  uint32_t error_tick_divisor) {
  std::error_code ec;
  if (!fs::is_directory(sysfs_root, ec)) {
    return absl::NotFoundError(absl::StrCat("sysfs root ", sysfs_root, " is not a directory"));
  }
  DiscoveryResult result;
  const std::string class_dir = sysfs_root + "/class/infiniband";
  for (const std::string& dev : SortedEntries(class_dir)) {
    const std::string ports_dir = absl::StrCat(class_dir, "/", dev, "/ports");
    // The device's node GUID: what ibnetdiscover names its HCA by ("H-<guid>"), for the
    // aggregator's IB fabric file. 0 when unreadable.
    uint64_t node_guid = 0;
    if (auto g = ReadSmallFile(absl::StrCat(class_dir, "/", dev, "/node_guid"), 64); g.ok()) {
      if (auto v = ParseNodeGuid(*g); v.ok()) node_guid = *v;
    }
    for (const std::string& port_name : SortedEntries(ports_dir)) {
      uint32_t port_num = 0;
      if (!absl::SimpleAtoi(port_name, &port_num)) continue;
      const std::string dir = absl::StrCat(ports_dir, "/", port_name);
      PortDescriptor p;
      p.device = dev;
      p.port = port_num;
      p.rdma = true;
      p.node_guid = node_guid;
      if (auto ll = ReadSmallFile(dir + "/link_layer", 64); ll.ok()) {
        const absl::string_view v = absl::StripAsciiWhitespace(*ll);
        p.link_layer = v == "InfiniBand" ? LinkLayer::kInfiniBand
                       : v == "Ethernet" ? LinkLayer::kEthernet
                                         : LinkLayer::kUnspecified;
      }
      if (auto rate = ReadSmallFile(dir + "/rate", 128); rate.ok()) {
        p.lanes = ParseIbLanes(*rate);
        if (auto bps = ParseIbRate(*rate); bps.ok() && *bps > 0) {
          p.line_rate_bytes_per_second = *bps;
          p.line_rate_source = LineRateSource::kSysfs;
        } else {
          result.notes.push_back(absl::StrCat(p.Key(), ": unreadable rate \"",
                                              absl::StripAsciiWhitespace(*rate), "\""));
        }
      }
      p.counters = RdmaCounterSet(dir + "/counters", error_tick_divisor);
      PreferExtendedCounters(dir, p, result.notes);
      if (auto life = ReadSmallFile(dir + "/hw_counters/lifespan", 64); life.ok()) {
        uint32_t ms = 0;
        if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*life), &ms)) p.hw_lifespan_ms = ms;
      }
      std::vector<CounterDescriptor> hw = RdmaHwCounterSet(dir + "/hw_counters", 1);
      // The driver's own byte and packet counters stand in only where counters/ has none.
      const bool has_traffic = std::any_of(p.counters.begin(), p.counters.end(),
                                           [](const auto& c) { return IsTrafficRole(c.role); });
      if (has_traffic) {
        std::erase_if(hw, [](const CounterDescriptor& c) { return IsTrafficRole(c.role); });
      } else if (std::any_of(hw.begin(), hw.end(),
                             [](const auto& c) { return IsTrafficRole(c.role); })) {
        std::vector<std::string> names;
        for (const CounterDescriptor& c : hw) {
          if (IsTrafficRole(c.role)) names.push_back(c.name);
        }
        result.notes.push_back(absl::StrCat(p.Key(), ": bytes and packets from the driver's ",
                                            "hw_counters (", absl::StrJoin(names, ", "), ")"));
      }
      p.counters.insert(p.counters.end(), std::make_move_iterator(hw.begin()),
                        std::make_move_iterator(hw.end()));
      DropUnavailableCounters(p, result.notes);
      // A port without counters (iWARP/i40iw: every one reads "N/A (no PMA)") is still watched:
      // its state, physical state, rate and link events come from the state files, and the
      // agent takes its bytes from its netdev when one is linked (agent/agent.cc).
      if (p.counters.empty()) {
        result.notes.push_back(
            absl::StrCat(p.Key(),
                         ": no readable traffic counters; its state, rate and link events are "
                         "watched, and its bytes come from its netdev when one is linked"));
      }
      result.ports.push_back(std::move(p));
    }
  }
  return result;
}

absl::StatusOr<DiscoveryResult> DiscoverNetdevs(const std::string& sysfs_root,
                                                uint32_t error_tick_divisor) {
  std::error_code ec;
  if (!fs::is_directory(sysfs_root, ec)) {
    return absl::NotFoundError(absl::StrCat("sysfs root ", sysfs_root, " is not a directory"));
  }
  DiscoveryResult result;
  const std::string class_dir = sysfs_root + "/class/net";
  for (const std::string& ifname : SortedEntries(class_dir)) {
    const std::string dir = absl::StrCat(class_dir, "/", ifname);
    if (!fs::is_directory(dir, ec)) continue;  // bonding_masters and other plain files
    PortDescriptor p;
    p.device = ifname;
    p.rdma = false;
    if (fs::is_symlink(dir, ec)) {
      const std::string target = fs::read_symlink(dir, ec).string();
      p.is_virtual = target.find("/devices/virtual/") != std::string::npos;
    }
    if (auto dp = ReadSmallFile(dir + "/dev_port", 64); dp.ok()) {
      uint32_t v = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*dp), &v)) p.port = v;
    }
    if (auto type = ReadSmallFile(dir + "/type", 64); type.ok()) {
      const absl::string_view v = absl::StripAsciiWhitespace(*type);
      // include/uapi/linux/if_arp.h: ARPHRD_ETHER 1, ARPHRD_INFINIBAND 32 (IPoIB).
      p.link_layer = v == "1"    ? LinkLayer::kEthernet
                     : v == "32" ? LinkLayer::kInfiniBand
                                 : LinkLayer::kUnspecified;
    }
    if (auto speed = ReadSmallFile(dir + "/speed", 64); speed.ok()) {
      if (auto bps = ParseNetdevSpeed(*speed); bps.ok() && *bps > 0) {
        p.line_rate_bytes_per_second = *bps;
        p.line_rate_source = LineRateSource::kSysfs;
      }
    }
    p.counters = NetdevCounterSet(dir + "/statistics", error_tick_divisor);
    DropUnavailableCounters(p, result.notes);
    if (p.counters.empty()) {
      result.notes.push_back(absl::StrCat(ifname, ": no statistics/ counters, interface skipped"));
      continue;
    }
    result.ports.push_back(std::move(p));
  }
  return result;
}

absl::StatusOr<std::string> FindRdmaNetdev(const std::string& sysfs_root, const std::string& device,
                                           uint32_t port) {
  const std::string dev_dir = absl::StrCat(sysfs_root, "/class/infiniband/", device);
  const std::string ndevs_dir = absl::StrCat(dev_dir, "/ports/", port, "/gid_attrs/ndevs");
  std::vector<std::pair<uint32_t, std::string>> gids;
  for (const std::string& entry : SortedEntries(ndevs_dir)) {
    uint32_t index = 0;
    if (absl::SimpleAtoi(entry, &index)) gids.emplace_back(index, entry);
  }
  std::sort(gids.begin(), gids.end());
  for (const auto& [index, entry] : gids) {
    auto text = ReadSmallFile(absl::StrCat(ndevs_dir, "/", entry), 64);
    if (!text.ok()) continue;
    const absl::string_view name = absl::StripAsciiWhitespace(*text);
    if (!name.empty()) return std::string(name);
  }
  const std::string net_dir = dev_dir + "/device/net";
  std::vector<std::string> candidates;
  for (const std::string& ifname : SortedEntries(net_dir)) {
    const std::string dir = absl::StrCat(net_dir, "/", ifname);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    if (auto type = ReadSmallFile(dir + "/type", 64);
        type.ok() && absl::StripAsciiWhitespace(*type) == "32") {
      continue;  // IPoIB (include/uapi/linux/if_arp.h ARPHRD_INFINIBAND)
    }
    if (auto dp = ReadSmallFile(dir + "/dev_port", 64); dp.ok()) {
      uint32_t v = 0;
      if (absl::SimpleAtoi(absl::StripAsciiWhitespace(*dp), &v) && v + 1 == port) return ifname;
    }
    candidates.push_back(ifname);
  }
  if (candidates.size() == 1) return candidates[0];
  return absl::NotFoundError(absl::StrCat(
      device, " port ", port, ": no netdev in ", ndevs_dir, " and ",
      candidates.empty() ? "none"
                         : absl::StrCat("no single one (", absl::StrJoin(candidates, ", "), ")"),
      " under ", net_dir));
}

}  // namespace fabricscope::collectors
