#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/counter_meaning.h"
#include "collectors/priority_stat.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// True for a counter whose increase means lost, dropped or retransmitted packets or a NAK:
// collectors::IsLoss of the meaning the agent set at discovery (CounterValue.meaning, from the
// counter-meaning table collectors/counter_meaning.cc).
bool IsLossCounter(const v1::CounterValue& c);

// Loss events of one port in one window: the deltas of its error counters plus those of its
// other counters that IsLossCounter accepts, each drop once (collectors::IsLossBreakdown); for
// the node-level TCP port, ΔRetransSegs.
uint64_t LossEventsInWindow(const v1::PortWindow& window);

// Gini index of non-negative values (Gini 1912; the sorted-values form in e.g. Damgaard &
// Weiner, Ecology 81(4), 2000): G = sum_i (2i - n - 1) x_(i) / (n sum x), x_(i) ascending,
// i = 1..n. 0 = spread evenly, (n-1)/n = all in one. 0 for n < 2 or an all-zero input.
double Gini(const std::vector<double>& values);

// Rayleigh test of uniformity of phases theta_i = 2 pi t_i / period (Mardia & Jupp,
// "Directional Statistics", 2000, §6.3.1): mean resultant length R = |mean e^{i theta}| and the
// p-value with Zar's correction (Zar, "Biostatistical Analysis", 4th ed., eq. 27.4):
// p = exp(sqrt(1 + 4n + 4(n^2 - (nR)^2)) - (1 + 2n)). Small p: the events recur at a fixed
// phase of the period. Returns {R, p}; {0, 1} for fewer than 2 events.
struct Rayleigh {
  double resultant = 0;
  double p_value = 1;
};
Rayleigh RayleighTest(const std::vector<int64_t>& times_ns, double period_seconds);

// The rule that tells systematic loss from random loss, on counts per group (per link, per
// peer pair, per priority): the top group is "concentrating" when there are >= 2 groups, at
// least min_events in all, and the top group holds >= 1/2 of them and >= twice an even share
// (2/n). Returns the top group's index, or -1.
struct ConcentrationRule {
  uint64_t min_events = 10;
  double min_share = 0.5;
  double even_share_factor = 2.0;
};
int ConcentratedGroup(const std::vector<uint64_t>& counts, const ConcentrationRule& rule = {});

// PFC priorities (IEEE 802.1Qbb: eight, 0-7).
inline constexpr size_t kPfcPriorities = 8;

// Loss events of a node-level pseudo-port (PortInfo.node_level: the node's `tcp` counters from
// /proc/net/snmp, every interface and loopback together): a node's count, never a link's, so
// it is reported beside the links' concentration and takes no part in it.
struct NodeWideLoss {
  std::string node, device;  // device: the pseudo-port's name, "tcp"
  uint64_t events = 0;       // ΔRetransSegs over the last loss_windows windows
};

// What /api/loss/patterns judges, copied out of LinkAnalysis under its lock: each link's loss
// events over the last loss_windows windows (by PFC priority where the counters say it), and
// each node's captured loss events (peer pair, time) with its step period when one is known.
struct LossPatternInput {
  struct Link {
    std::string node, device;
    uint32_t port = 0;
    uint64_t events = 0;
    std::array<uint64_t, kPfcPriorities> by_priority{};
  };
  struct Node {
    std::string name;
    std::optional<double> period_seconds;
    std::vector<std::pair<std::string, std::string>> peers;  // (src, dst) of each event
    std::vector<int64_t> times_ns;                           // of each event, same order
  };
  std::vector<Link> links;              // links with loss history, in node then port order
  std::vector<Node> nodes;              // every node
  std::vector<NodeWideLoss> node_wide;  // node-level pseudo-ports with loss history
  int loss_windows = 0;
};

// The verdict of /api/loss/patterns (rendered by exporters/exposition/link_render.h): the
// ConcentrationRule over links, PFC priorities and captured peer pairs, and the Rayleigh test of
// each node's captured loss times against its step period. Classification: insufficient_data
// below rule.min_events events, systematic when any reason holds, random otherwise.
struct LossPatterns {
  const char* classification = "insufficient_data";
  std::string rule;                  // the rule in one sentence, with its numbers
  std::vector<std::string> reasons;  // one per concentration or phase found
  uint64_t total = 0;                // loss events over the links
  double gini = 0;                   // of the links' loss events
  struct LinkShare {
    std::string node, device;
    uint32_t port = 0;
    uint64_t events = 0;
    double share = 0;  // of total
  };
  std::vector<LinkShare> links;  // top first, at most 20, none without loss
  uint64_t priority_total = 0;   // priority-tagged loss events
  struct PriorityShare {
    int priority;
    uint64_t events;
    double share;  // of priority_total
  };
  std::vector<PriorityShare> priorities;  // with loss, top first
  struct PeerShare {
    std::string src, dst;
    uint64_t events;
  };
  std::vector<PeerShare> peers;  // captured loss events per peer pair, top first, at most 20
  struct NodePhase {
    std::string node;
    std::optional<double> period_seconds;
    size_t captured_loss_events = 0;
    std::optional<Rayleigh> rayleigh;  // with a period and >= rule.min_events events
  };
  std::vector<NodePhase> nodes;
  std::vector<NodeWideLoss> node_wide;  // with loss, top first, at most 20; not in `total`
};
LossPatterns AnalyzeLossPatterns(const LossPatternInput& in);

}  // namespace fabricscope::exporters
