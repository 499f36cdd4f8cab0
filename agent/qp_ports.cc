#include "agent/qp_ports.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/run_program.h"
#include "glog/logging.h"
#include "simdjson.h"

namespace fabricscope::agent {

namespace {

// A JSON number as an unsigned 32-bit value; false when absent, not an integer or out of range.
bool U32Field(simdjson::dom::object o, const char* key, uint32_t* out) {
  uint64_t v = 0;
  if (o[key].get_uint64().get(v) != simdjson::SUCCESS || v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

std::string StringField(simdjson::dom::object o, const char* key) {
  std::string_view v;
  if (o[key].get_string().get(v) != simdjson::SUCCESS) return "";
  return std::string(v);
}

}  // namespace

absl::StatusOr<RdmaQpList> ParseRdmaResQp(absl::string_view json) {
  // simdjson copies the text into a padded buffer: an empty view's null data() is undefined
  // behaviour there (found by tests/fuzz/rdma_res_qp_fuzz.cc under UBSan).
  if (json.empty()) {
    return absl::InvalidArgumentError("rdma res show qp: not a JSON array: no output");
  }
  simdjson::dom::parser parser;
  simdjson::dom::array list;
  const auto err = parser.parse(json.data(), json.size()).get_array().get(list);
  if (err != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("rdma res show qp: not a JSON array: ", simdjson::error_message(err)));
  }
  RdmaQpList out;
  out.qps.reserve(list.size());
  for (simdjson::dom::element v : list) {
    simdjson::dom::object o;
    RdmaQp q;
    if (v.get_object().get(o) != simdjson::SUCCESS ||
        (q.device = StringField(o, "ifname")).empty() || !U32Field(o, "lqpn", &q.lqpn)) {
      ++out.skipped;
      continue;
    }
    U32Field(o, "port", &q.port);  // absent while the QP is bound to no port (print_link)
    q.type = StringField(o, "type");
    q.state = StringField(o, "state");
    uint32_t pid = 0;
    if (U32Field(o, "pid", &pid) && pid <= 0x7fffffffu) q.pid = static_cast<int32_t>(pid);
    out.qps.push_back(std::move(q));
  }
  return out;
}

ProcessPorts PortsOfProcesses(const std::vector<RdmaQp>& qps,
                              const std::vector<collectors::PortDescriptor>& ports,
                              size_t* unmatched) {
  ProcessPorts out;
  size_t misses = 0;
  for (const RdmaQp& q : qps) {
    if (q.pid <= 0 || q.port == 0 || q.state == "RESET" || q.state == "ERR") continue;
    uint32_t found = UINT32_MAX;
    for (uint32_t i = 0; i < ports.size(); ++i) {
      const collectors::PortDescriptor& p = ports[i];
      if (p.rdma && p.device == q.device && p.port == q.port) {
        found = i;
        break;
      }
    }
    if (found == UINT32_MAX) {
      ++misses;
      continue;
    }
    std::vector<uint32_t>& v = out[q.pid];
    auto at = std::lower_bound(v.begin(), v.end(), found);
    if (at == v.end() || *at != found) v.insert(at, found);
  }
  if (unmatched != nullptr) *unmatched = misses;
  return out;
}

void AttachRdmaPorts(const ProcessPorts& map, const std::vector<collectors::PortDescriptor>& ports,
                     v1::GpuWindow* w) {
  for (v1::GpuProducer& p : *w->mutable_ingest()->mutable_producers()) {
    p.clear_rdma_ports();
    auto it = map.find(p.pid());
    if (it == map.end()) continue;
    for (uint32_t i : it->second) {
      if (static_cast<size_t>(p.rdma_ports_size()) >= kMaxProducerPorts) break;
      if (i < ports.size()) p.add_rdma_ports(ports[i].Key());
    }
  }
}

QpPortWatcher::QpPortWatcher(Options options, std::vector<collectors::PortDescriptor> ports)
    : options_(std::move(options)),
      ports_(std::move(ports)),
      latest_(std::make_shared<const ProcessPorts>()) {
  thread_ =
      std::make_unique<RefreshThread>("fs-qp-ports", options_.period_ns, [this] { RefreshNow(); });
}

QpPortWatcher::~QpPortWatcher() { thread_.reset(); }

std::shared_ptr<const ProcessPorts> QpPortWatcher::Latest() const {
  std::lock_guard<std::mutex> l(mu_);
  return latest_;
}

QpPortWatcher::Stats QpPortWatcher::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void QpPortWatcher::RefreshNow() {
  absl::StatusOr<std::string> text = RunForOutput({options_.tool, "-j", "res", "show", "qp"},
                                                  options_.timeout_ns, options_.max_bytes);
  absl::StatusOr<RdmaQpList> list =
      text.ok() ? ParseRdmaResQp(*text) : absl::StatusOr<RdmaQpList>(text.status());
  std::lock_guard<std::mutex> l(mu_);
  if (!list.ok()) {
    // Once per outage, not every period.
    if (stats_.failures == 0 || stats_.last_error.empty()) {
      LOG(WARNING) << "per-port attribution is off until '" << options_.tool
                   << " -j res show qp' works (collectives are judged on every candidate port, "
                      "their sharers node-wide): "
                   << list.status().message();
    }
    ++stats_.failures;
    stats_.last_error = std::string(list.status().message());
    // A map kept through a long outage would give a reused pid another process's ports.
    if (++failures_in_a_row_ == kStaleAfterFailures) {
      latest_ = std::make_shared<const ProcessPorts>();
    }
    return;
  }
  failures_in_a_row_ = 0;
  if (!stats_.last_error.empty() || stats_.refreshes == 0) {
    LOG(INFO) << "per-port attribution on: " << list->qps.size() << " queue pairs from '"
              << options_.tool << "'";
  }
  size_t unmatched = 0;
  auto map = std::make_shared<const ProcessPorts>(PortsOfProcesses(list->qps, ports_, &unmatched));
  ++stats_.refreshes;
  stats_.qps = list->qps.size();
  stats_.unmatched = unmatched;
  stats_.processes = map->size();
  stats_.last_error.clear();
  latest_ = std::move(map);
}

}  // namespace fabricscope::agent
