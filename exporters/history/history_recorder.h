#pragma once

// What goes into the event history (exporters/history/history_store.h), and when: the cluster
// state's listener (exporters/state/state_observer.h) turns what the state is told into events,
// each with its node, communicator and, where one is known, job. Kinds and their `detail`
// fields (exporters/README.md "History" has the schema):
//   collective       a rank's analysed collective that its agent flagged slow (above the p99 of
//                    its kind) or named a network cause (network_saturated, network_lossy):
//                    cause, detail, port, busBw, bytes, its p99, own and sharers' bytes. Not
//                    waiting_on_peers alone: the instance event holds every rank's times;
//   instance         a cross-rank instance whose cause is not normal: the straggler or bottleneck
//                    rank, node and port, skew, busBw, evidence, and every rank's start and end
//                    (at most kMaxInstanceRanks);
//                    both kept at most one per second per (node, communicator, cause), resp.
//                    (communicator, cause): the longest of that second, with `similar_in_second`
//                    counting the others (a persistent straggler at 10 all-reduces a second
//                    would otherwise write 10 instances and 70 rank analyses a second per 8
//                    nodes; tests/bench/bench_history.cc measures both);
//   diagnosis_began / diagnosis_ended
//                    a communicator's diagnosis (Diagnosis::Snapshot) took a cause, or lost it:
//                    the sentence, the rank, node and port, and the cost (p90 over the baseline
//                    p90, minus 1); read every Tick();
//   microburst       the agents' microbursts: the largest (bytes) of each port and direction in a
//                    second, the others counted in similar_in_second;
//   loss             a loss episode of one port: consecutive windows whose loss counters rose
//                    (LossEventsInWindow), with their sum and the captured PSN/TCP losses, ended by
//                    a window without loss or by kMaxLossEpisodeNs;
//   link_state       the agents' LinkEvent (state, phys_state, rate) with old and new values;
//   node_joined / node_expired
//                    a new agent instance, a node forgotten after --node-expiry;
//   utilization      a node's ports over kHistoryUtilizationPeriodNs: mean and peak utilization
//                    per direction and the largest PFC pause share (the timeline's counter tracks
//                    for ranges older than the link analysis holds), only the ports whose figures
//                    moved (kUtilizationStep) or were last written a minute ago.
//
// Thread-safe: the state calls it from every ingest thread; Tick() from the aggregator's own.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "exporters/history/history_store.h"
#include "exporters/state/cluster_state.h"
#include "exporters/state/state_observer.h"

namespace fabricscope::exporters {

class HistoryRecorder : public StateObserver {
 public:
  static constexpr int64_t kMaxLossEpisodeNs = 60'000'000'000;
  static constexpr size_t kMaxJobsPerBatch = 64;  // GpuWindow.jobs read per batch
  static constexpr size_t kMaxJobIdBytes = 128;
  static constexpr int64_t kJobNoteNs = 10'000'000'000;
  static constexpr size_t kMaxLinkEventsPerBatch = 16;
  // A port's utilization entry is written when one of its figures moved by more than this since
  // its last entry, or its last entry is this old.
  static constexpr double kUtilizationStep = 0.05;
  static constexpr int64_t kUtilizationKeyframeNs = 60'000'000'000;
  // A second's pick is written this long after the second (by the aggregator's clock): a
  // collective reaches the aggregator up to a few seconds after it ended (the agent's analysis
  // waits for its port samples, then for its window's batch).
  static constexpr int64_t kPickGraceSeconds = 10;
  // Events timed outside [now - kMaxPastNs, now + kMaxFutureNs] (a hostile or broken clock) are
  // not kept, and the picks held at once are bounded; both counted as refused by the store.
  static constexpr int64_t kMaxPastNs = 3'600'000'000'000;
  static constexpr int64_t kMaxFutureNs = 60'000'000'000;
  static constexpr size_t kMaxPicks = 100'000;

  // `state` is read back for communicators' jobs and diagnoses; both must outlive this.
  // now_unix_ns: the aggregator's clock (tests move it); null = absl::Now.
  HistoryRecorder(const ClusterState& state, HistoryStore& store,
                  int64_t (*now_unix_ns)() = nullptr)
      : state_(state), store_(store), now_(now_unix_ns) {}

  void OnNodeJoined(const v1::Hello& hello) override;
  void OnBatch(const std::string& node, const v1::Batch& batch) override;
  void OnNodeExpired(const std::string& node, absl::Time now) override;
  // Counts the instance in its (communicator, cause, second) and keeps a copy when it is the
  // longest of them so far (under the matcher's shard lock: inst_mu_ only, nothing else).
  void OnInstance(const CollectiveInstance& instance) override;
  // Reads the diagnoses for changes, writes the picks of the seconds kPickGraceSeconds before
  // `now`, and ends the loss episodes and utilization periods of nodes that sent nothing for
  // kHistoryUtilizationPeriodNs. Call about once a second; `now` is Unix ns (the aggregator's).
  void Tick(int64_t now_unix_ns);
  // Writes everything held back (picks, open loss episodes and utilization periods) at its own
  // times: before the store closes.
  void Drain();

 private:
  struct LossEpisode {
    int64_t start = 0, last = 0;  // Unix ns: the first window's start, the last's end
    uint64_t events = 0, captured = 0;
  };
  struct Accumulated {
    double mean_sum = 0, peak = 0;
    uint32_t windows = 0;
  };
  struct PortTrack {
    std::string label;
    LossEpisode loss;  // start 0: none open
    Accumulated tx, rx;
    double pause_ratio = 0;
    std::array<double, 5> written{};  // the figures of its last entry
    int64_t written_ns = 0;           // when; 0 never
  };
  struct NodeTrack {
    std::vector<PortTrack> ports;
    int64_t period_start = 0;                   // Unix ns of the open utilization period; 0 none
    int64_t last_end = 0;                       // the agent's clock: its last window's end
    int64_t last_seen = 0;                      // the aggregator's clock: its last batch
    std::map<std::string, int64_t> jobs_noted;  // job -> when last told to the store
  };
  struct DiagnosisKey {
    int cause = 0;
    std::string node, port;
    int32_t rank = -1;
    bool operator==(const DiagnosisKey& o) const {
      return cause == o.cause && node == o.node && port == o.port && rank == o.rank;
    }
  };
  // The longest event of one key in one second (collectives, microbursts), and how many.
  struct Pick {
    int64_t duration = 0;
    uint32_t count = 0;
    HistoryEvent event;
  };
  struct InstancePick {
    int64_t duration = 0;
    uint32_t count = 0;
    std::optional<CollectiveInstance> instance;
  };
  int64_t Now() const;
  // Whether an event of that time is kept (counted as refused when not).
  bool InBounds(int64_t unix_ns);
  // Offers an event of `key` starting at start_ns and lasting `duration`: counted in its second,
  // and built by `make` when it is the first or the longest so far.
  template <typename Make>
  void Offer(const std::string& key, int64_t start_ns, int64_t duration, Make make);
  void RecordCollectives(const std::string& node, const v1::Batch& batch);
  void RecordWindow(const std::string& node, const v1::Batch& batch, NodeTrack& t)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLoss(const std::string& node, PortTrack& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndPeriod(const std::string& node, NodeTrack& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndNode(const std::string& node, NodeTrack& t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the picks of the seconds before `before_second` (Unix seconds).
  void WritePicks(int64_t before_second);
  void WriteInstance(const CollectiveInstance& inst, uint32_t count);
  void TrackDiagnoses(int64_t now_unix_ns);
  std::string JobOf(uint64_t comm) const { return state_.JobOfComm(comm).id(); }

  const ClusterState& state_;
  HistoryStore& store_;
  int64_t (*const now_)();
  absl::Mutex mu_;
  std::map<std::string, NodeTrack> nodes_ ABSL_GUARDED_BY(mu_);
  absl::Mutex inst_mu_;  // taken under a matcher shard's lock (OnInstance): nothing inside
  // (communicator, cause, second) -> its pick
  absl::flat_hash_map<std::tuple<uint64_t, int, int64_t>, InstancePick> inst_picks_
      ABSL_GUARDED_BY(inst_mu_);
  absl::Mutex pick_mu_;
  std::map<std::pair<std::string, int64_t>, Pick> picks_ ABSL_GUARDED_BY(pick_mu_);
  absl::Mutex diag_mu_;
  std::map<uint64_t, std::pair<DiagnosisKey, CommDiagnosis>> diagnoses_ ABSL_GUARDED_BY(diag_mu_);
};

}  // namespace fabricscope::exporters
