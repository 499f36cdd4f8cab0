#include "agent/lldp_neighbors.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/run_program.h"
#include "glog/logging.h"
#include "simdjson.h"

namespace fabricscope::agent {

namespace {

// LLDP's string TLVs hold at most 255 bytes (IEEE 802.1AB 8.5: a 9-bit length, of which the
// chassis and port ID take one for their subtype); anything from a switch is printable ASCII
// here, so that a label value or a log line never carries a control byte or broken UTF-8.
std::string CleanText(std::string_view v) {
  std::string out(v.substr(0, 255));
  for (char& c : out) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return out;
}

// json0's {"key": [{"value": "..."}]}: the first element's "value", "" when absent.
std::string FirstValue(simdjson::dom::object o, const char* key) {
  simdjson::dom::array list;
  simdjson::dom::object first;
  std::string_view v;
  if (o[key].get_array().get(list) != simdjson::SUCCESS || list.size() == 0 ||
      list.at(0).get_object().get(first) != simdjson::SUCCESS ||
      first["value"].get_string().get(v) != simdjson::SUCCESS) {
    return "";
  }
  return CleanText(v);
}

// json0's {"key": [{...}]}: the first element as an object; false when absent.
bool FirstObject(simdjson::dom::object o, const char* key, simdjson::dom::object* out) {
  simdjson::dom::array list;
  return o[key].get_array().get(list) == simdjson::SUCCESS && list.size() > 0 &&
         list.at(0).get_object().get(*out) == simdjson::SUCCESS;
}

// One json0 interface entry into *n; false without a name.
bool ParseInterface(simdjson::dom::object iface, std::string* name, v1::PortNeighbor* n) {
  std::string_view v;
  if (iface["name"].get_string().get(v) != simdjson::SUCCESS || v.empty()) return false;
  *name = CleanText(v);
  // "via": the protocol lldpd heard it by (LLDP, or CDPv1/CDPv2/EDP/FDP/SONMP when enabled).
  std::string via = "LLDP";
  if (std::string_view p; iface["via"].get_string().get(p) == simdjson::SUCCESS && !p.empty()) {
    via = CleanText(p.substr(0, 16));
  }
  for (char& c : via) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  n->set_source(via);
  simdjson::dom::object chassis, port;
  if (FirstObject(iface, "chassis", &chassis)) {
    n->set_chassis_id(FirstValue(chassis, "id"));
    n->set_chassis_name(FirstValue(chassis, "name"));
    n->set_management_address(FirstValue(chassis, "mgmt-ip"));
  }
  if (FirstObject(iface, "port", &port)) {
    n->set_port_id(FirstValue(port, "id"));
    n->set_port_description(FirstValue(port, "descr"));
  }
  return true;
}

bool SameNeighbor(const v1::PortNeighbor& a, const v1::PortNeighbor& b) {
  return a.chassis_id() == b.chassis_id() && a.chassis_name() == b.chassis_name() &&
         a.port_id() == b.port_id() && a.port_description() == b.port_description() &&
         a.management_address() == b.management_address();
}

}  // namespace

absl::StatusOr<NeighborMap> ParseLldpcliJson0(absl::string_view json) {
  if (json.empty()) return absl::InvalidArgumentError("lldpcli: no output");
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  simdjson::dom::array lldp;
  if (parser.parse(json.data(), json.size()).get_object().get(root) != simdjson::SUCCESS ||
      root["lldp"].get_array().get(lldp) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        "lldpcli: not lldpd's json0 output (an object with an \"lldp\" list)");
  }
  NeighborMap out;
  for (simdjson::dom::element section : lldp) {
    simdjson::dom::object s;
    simdjson::dom::array ifaces;
    if (section.get_object().get(s) != simdjson::SUCCESS ||
        s["interface"].get_array().get(ifaces) != simdjson::SUCCESS) {
      continue;  // {} when there is no neighbour
    }
    for (simdjson::dom::element e : ifaces) {
      simdjson::dom::object iface;
      std::string name;
      v1::PortNeighbor n;
      if (e.get_object().get(iface) != simdjson::SUCCESS || !ParseInterface(iface, &name, &n)) {
        continue;
      }
      if (out.size() >= kMaxNeighborInterfaces && !out.contains(name)) continue;
      out.emplace(std::move(name), std::move(n));  // the first neighbour of an interface stays
    }
  }
  return out;
}

absl::StatusOr<NeighborMap> ReadLldpNeighbors(const std::string& lldpcli, const std::string& socket,
                                              int64_t timeout_ns) {
  // Not `details`: the fields read here are in the default view, and the VLAN, LLDP-MED and
  // unknown-TLV dumps that `details` adds only grow the output. 4 MiB: json0 takes about 2 KiB
  // per neighbour, and lldpd keeps at most 32 per port by default (lldpcli(8) max-neighbors).
  absl::StatusOr<std::string> text = RunForOutput(
      {lldpcli, "-u", socket, "-f", "json0", "show", "neighbors"}, timeout_ns, 4u << 20);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("lldpd at ", socket, " (", lldpcli, "): ", text.status().message(),
                     " -- is lldpd installed and running with that control socket (lldpd -u, "
                     "or the agent's --lldpd-socket), and may this user run lldpcli and read it "
                     "(groups adm and _lldpd: deploy/systemd/lldp.conf)?"));
  }
  return ParseLldpcliJson0(*text);
}

void AttachNeighbors(const NeighborMap& map, const std::vector<collectors::PortDescriptor>& ports,
                     v1::Batch* batch) {
  if (map.empty()) return;
  for (v1::PortWindow& w : *batch->mutable_ports()) {
    if (w.port_index() >= ports.size()) continue;
    const collectors::PortDescriptor& p = ports[w.port_index()];
    if (p.node_level) continue;
    auto it = map.find(p.rdma ? p.netdev : p.device);
    if (it != map.end()) *w.mutable_neighbor() = it->second;
  }
}

std::string DescribeNeighbor(const v1::PortNeighbor& n) {
  std::string out = !n.chassis_name().empty() ? n.chassis_name() : n.chassis_id();
  absl::StrAppend(&out, " ", n.port_id());
  if (!n.port_description().empty() && n.port_description() != n.port_id()) {
    absl::StrAppend(&out, " (", n.port_description(), ")");
  }
  return out;
}

LldpWatcher::LldpWatcher(Options options)
    : options_(std::move(options)), latest_(std::make_shared<const NeighborMap>()) {
  thread_ =
      std::make_unique<RefreshThread>("fs-lldp", options_.period_ns, [this] { RefreshNow(); });
}

LldpWatcher::~LldpWatcher() { thread_.reset(); }

std::shared_ptr<const NeighborMap> LldpWatcher::Latest() const {
  std::lock_guard<std::mutex> l(mu_);
  return latest_;
}

LldpWatcher::Stats LldpWatcher::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void LldpWatcher::LogChanges(const NeighborMap& before, const NeighborMap& after) const {
  for (const auto& [name, n] : after) {
    auto it = before.find(name);
    if (it == before.end()) {
      LOG(INFO) << "LLDP: " << name << " is cabled to " << DescribeNeighbor(n);
    } else if (!SameNeighbor(it->second, n)) {
      LOG(INFO) << "LLDP: " << name << " is now cabled to " << DescribeNeighbor(n) << " (was "
                << DescribeNeighbor(it->second) << ")";
    }
  }
  for (const auto& [name, n] : before) {
    if (!after.contains(name)) {
      LOG(INFO) << "LLDP: " << name << " no longer hears " << DescribeNeighbor(n);
    }
  }
}

void LldpWatcher::RefreshNow() {
  absl::StatusOr<NeighborMap> map =
      ReadLldpNeighbors(options_.lldpcli, options_.socket, options_.timeout_ns);
  std::shared_ptr<const NeighborMap> before, after;
  bool first_failure = false, recovered = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    before = latest_;
    if (!map.ok()) {
      first_failure = stats_.last_error.empty();  // once per outage, not every period
      ++stats_.failures;
      stats_.last_error = std::string(map.status().message());
      if (++failures_in_a_row_ == kStaleAfterFailures) {
        latest_ = std::make_shared<const NeighborMap>();
      }
    } else {
      recovered = !stats_.last_error.empty();
      failures_in_a_row_ = 0;
      ++stats_.refreshes;
      stats_.interfaces = map->size();
      stats_.last_error.clear();
      latest_ = std::make_shared<const NeighborMap>(std::move(*map));
    }
    after = latest_;
  }
  // Logged outside the lock: the pipeline thread's Latest() never waits on log lines.
  if (first_failure) {
    LOG(WARNING) << "LLDP neighbours unknown, topology is host-only until this works (the last "
                    "ones known are kept through two more failed looks): "
                 << map.status().message();
  }
  if (recovered) LOG(INFO) << "LLDP neighbours readable again from lldpd";
  if (before != after) LogChanges(*before, *after);
}

}  // namespace fabricscope::agent
