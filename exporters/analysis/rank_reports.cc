#include "exporters/analysis/rank_reports.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "collectors/common/port_activity.h"

namespace fabricscope::exporters {

using common::LossEvents;
using common::SaturatedShare;

class ReportBuilder::FuncNames {
 public:
  explicit FuncNames(NameTable& names) : names_(names) {}
  std::optional<Name> Of(const std::string& f) {
    for (const auto& [text, name] : seen_) {
      if (text == f) return name;
    }
    const std::optional<Name> name = names_.Intern(f);
    if (name && seen_.size() < seen_.capacity()) seen_.emplace_back(f, *name);
    return name;
  }

 private:
  NameTable& names_;
  absl::InlinedVector<std::pair<absl::string_view, Name>, 8> seen_;
};

bool ReportBuilder::Add(Name node, const v1::Collective& c, int64_t unix_offset_ns,
                        std::optional<Name> port, const v1::FlightRecording* recording,
                        const v1::FabricLossEvidence& fabric_loss, FuncNames& funcs,
                        std::string* details, std::vector<RankReport>* reports) {
  const v1::CollectiveAnalysis& a = c.analysis();
  // A rank count no communicator has, or a rank outside it: dropped and counted before it can
  // cost anything (issue 13: 200,000 ranks claimed for one instance froze ingest for 20 s).
  if (c.nranks() < 1 || c.nranks() > kMaxRanksPerInstance || c.rank() < 0 ||
      c.rank() >= c.nranks()) {
    return false;
  }
  const std::optional<Name> func = funcs.Of(c.func());
  if (!func) return false;  // a new function name with the name table full
  const double dur = static_cast<double>(c.end_ns() - c.start_ns()) / 1e9;
  RankReport& r = reports->emplace_back();
  r.key = InstanceKey{c.comm_hash(), *func, c.seq()};
  r.nranks = c.nranks();
  RankEntry& e = r.entry;
  e.node = node;
  e.rank = c.rank();
  e.start_unix_ns = c.start_ns() + unix_offset_ns;
  e.end_unix_ns = c.end_ns() + unix_offset_ns;
  e.cause = a.cause();
  e.detail_begin = static_cast<uint32_t>(details->size());
  e.detail_size = static_cast<uint32_t>(a.detail().size());
  details->append(a.detail());
  e.slow = a.slow();
  e.lossy_by_tail = a.lossy_by_tail();
  e.bytes = c.bytes();
  e.bus_bytes = c.busbw_bytes_per_second() * c.duration_seconds();
  PortFigures& f = e;
  f.own_bytes = a.own_bytes();
  // The two largest whatever order an agent sent them in, and the total of all of them (at
  // least the ones listed, should an agent say less).
  uint64_t listed = 0;
  for (const v1::SharerBytes& s : a.sharers()) {
    listed = s.bytes() > UINT64_MAX - listed ? UINT64_MAX : listed + s.bytes();
    const Sharer x{s.comm_hash(), s.bytes()};
    std::array<Sharer, 2>& top = f.sharers.top;
    if (x.bytes > top[0].bytes) {
      top[1] = top[0];
      top[0] = x;
    } else if (x.bytes > top[1].bytes) {
      top[1] = x;
    }
  }
  f.sharers.total = std::max(a.sharers_bytes_total(), listed);
  // The two peers it sent the most to.
  uint64_t sent[2] = {0, 0};
  for (const v1::ProxyPeer& p : c.proxy_peers()) {
    if (p.bytes_sent() > sent[0]) {
      sent[1] = sent[0];
      f.send_peers[1] = f.send_peers[0];
      sent[0] = p.bytes_sent();
      f.send_peers[0] = p.peer();
    } else if (p.bytes_sent() > sent[1]) {
      sent[1] = p.bytes_sent();
      f.send_peers[1] = p.peer();
    }
  }
  for (const v1::PortActivity& p : a.ports())
    f.port_bytes += p.transmit_bytes() + p.receive_bytes();
  if (port) {
    e.port = *port;
    if (a.ports_from_qps() && a.ports_size() == 1) f.sharers.port = *port;
    for (const v1::PortActivity& p : a.ports()) {
      if (static_cast<int32_t>(p.port_index()) != a.port_index()) continue;
      e.saturated_ratio = SaturatedShare(p, dur);
      e.events = LossEvents(p);
      f.line_rate = p.line_rate_bytes_per_second();
      f.tx_busy = static_cast<float>(p.transmit_busy_utilization());
      f.samples = p.samples();
      f.loss_events = static_cast<uint32_t>(std::min<uint64_t>(e.events, UINT32_MAX));
    }
    f.window_events = static_cast<uint32_t>(std::min<uint64_t>(fabric_loss.events(), UINT32_MAX));
    f.window_rate = static_cast<float>(fabric_loss.rate());
    f.fabric_median = static_cast<float>(fabric_loss.fabric_median());
    f.fabric_ports = fabric_loss.ports();
  }
  if (e.slow && recording != nullptr) {
    e.recording = std::make_shared<const v1::FlightRecording>(*recording);
    e.recording_offset_ns = unix_offset_ns;
  }
  return true;
}

namespace {

// The batch's slow_collective recording covering c, or null.
const v1::FlightRecording* RecordingOf(const v1::Batch& batch, const v1::Collective& c) {
  if (!c.analysis().slow()) return nullptr;
  for (const v1::FlightRecording& fr : batch.flight_recordings()) {
    if (fr.reason() == "slow_collective" && fr.from_ns() <= c.start_ns() &&
        fr.to_ns() >= c.end_ns()) {
      return &fr;
    }
  }
  return nullptr;
}

}  // namespace

void ReportBuilder::FromBatch(Name node, const v1::Batch& batch, const NodePorts& ports,
                              const PeerRing* ring, std::vector<v1::ForwardedAnalysis>* forward,
                              std::vector<RankReport>* reports, uint64_t* dropped) {
  std::string details;
  size_t detail_bytes = 0;
  for (const v1::Collective& c : batch.collectives()) detail_bytes += c.analysis().detail().size();
  details.reserve(detail_bytes);
  const size_t first = reports->size();
  FuncNames funcs(names_);
  // Each port's loss against the fabric, taken once per batch (a batch's collectives share a
  // few ports). A reference it returns is used before the next call.
  const v1::FabricLossEvidence none;
  absl::InlinedVector<std::pair<int32_t, v1::FabricLossEvidence>, 8> losses;
  auto LossOf = [&](int32_t pi) -> const v1::FabricLossEvidence& {
    for (const auto& [index, e] : losses) {
      if (index == pi) return e;
    }
    return losses.emplace_back(pi, fabric_loss_.Of(node, static_cast<uint32_t>(pi))).second;
  };
  for (const v1::Collective& c : batch.collectives()) {
    if (!c.has_analysis()) continue;
    const int32_t pi = c.analysis().port_index();
    const bool port_known = pi >= 0 && static_cast<size_t>(pi) < ports.info.size();
    const v1::FlightRecording* recording = RecordingOf(batch, c);
    const v1::FabricLossEvidence& loss = port_known ? LossOf(pi) : none;
    if (ring != nullptr && forward != nullptr && !ring->Owns(c.comm_hash())) {
      v1::ForwardedAnalysis& f = forward->emplace_back();
      f.set_node(node.str());
      f.set_unix_offset_ns(batch.unix_offset_ns());
      if (port_known) f.set_port(ports.labels[static_cast<size_t>(pi)].str());
      *f.mutable_collective() = c;
      if (recording != nullptr) *f.mutable_recording() = *recording;
      if (port_known) *f.mutable_fabric_loss() = loss;
      continue;
    }
    const std::optional<Name> port =
        port_known ? std::optional<Name>(ports.labels[static_cast<size_t>(pi)]) : std::nullopt;
    if (!Add(node, c, batch.unix_offset_ns(), port, recording, loss, funcs, &details, reports)) {
      ++*dropped;
    }
  }
  auto text = std::make_shared<const std::string>(std::move(details));
  for (size_t i = first; i < reports->size(); ++i) (*reports)[i].entry.detail_text = text;
}

void ReportBuilder::FromForwarded(const v1::Batch& batch, std::vector<RankReport>* reports,
                                  uint64_t* dropped) {
  std::string details;
  FuncNames funcs(names_);
  const size_t first = reports->size();
  for (const v1::ForwardedAnalysis& f : batch.forwarded()) {
    const std::optional<Name> node = names_.Intern(f.node());
    if (!node || node->empty() || !f.collective().has_analysis()) {
      ++*dropped;
      continue;
    }
    // A label the table has no room for is shown as none, as in CrossRankAnalysis::OnHello.
    const std::optional<Name> port =
        f.port().empty() ? std::nullopt
                         : std::optional<Name>(names_.Intern(f.port()).value_or(Name()));
    const v1::FlightRecording* recording = f.has_recording() ? &f.recording() : nullptr;
    if (!Add(*node, f.collective(), f.unix_offset_ns(), port, recording, f.fabric_loss(), funcs,
             &details, reports)) {
      ++*dropped;
    }
  }
  auto text = std::make_shared<const std::string>(std::move(details));
  for (size_t i = first; i < reports->size(); ++i) (*reports)[i].entry.detail_text = text;
}

}  // namespace fabricscope::exporters
