#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "fabricscope/v1/gpu.pb.h"

namespace fabricscope::exporters {

// One job as the aggregator knows it (/api/jobs, fabricscope_job_info).
struct JobView {
  v1::Job job;                     // as the latest batch that named it said (strings capped)
  std::vector<std::string> nodes;  // sorted, at most JobTable::kMaxNodesPerJob
  std::vector<uint64_t> comms;     // communicator hashes, sorted, at most kMaxCommsPerJob
  size_t ranks = 0;                // distinct (communicator, rank) pairs its nodes reported
  absl::Time first_seen, last_seen;
};

// The jobs the agents name (GpuWindow.jobs, and Communicator.job_id for which communicators and
// ranks each one has), bounded and expired like nodes: at most max_jobs entries (one more
// evicts the one seen longest ago, counted), and a job no batch has named for `expiry` leaves at
// Expire(). Agents are not trusted: a batch contributes at most kMaxJobsPerBatch jobs (the rest
// counted), its communicators join only the jobs it listed, a report less trusted than the one
// held (Job.source: a claim without a cgroup) does not overwrite it, a communicator stays with the
// job that named it first unless a more trusted report names another (then it moves, and leaves
// the first job's lists), and every string keeps at
// most kMaxFieldBytes bytes, cut at a UTF-8 boundary.
//
// Memory: per job about 600 bytes of strings plus 40 bytes per node and 24 per (comm, rank).
// Not thread-safe: ClusterState calls it under its GPU lock.
class JobTable {
 public:
  static constexpr size_t kMaxJobsPerBatch = 64;
  static constexpr size_t kMaxFieldBytes = 128;
  static constexpr size_t kMaxNodesPerJob = 4096;
  static constexpr size_t kMaxCommsPerJob = 256;
  static constexpr size_t kMaxRanksPerJob = 65536;

  struct Options {
    size_t max_jobs = 1024;
    absl::Duration expiry = absl::Minutes(10);
  };
  JobTable() : JobTable(Options{}) {}
  explicit JobTable(Options options) : options_(options) {}

  // Records what one node's GPU window says about jobs at `now`.
  void OnWindow(const std::string& node, const v1::GpuWindow& w, absl::Time now);
  // Drops the jobs last named before now - expiry; returns how many.
  size_t Expire(absl::Time now);

  // Every job, by id.
  std::vector<JobView> Jobs() const;
  // The job of a communicator, as held (an empty Job, id "", when none is known).
  v1::Job JobOf(uint64_t comm_hash) const;
  // The communicators of a job (empty when unknown).
  std::set<uint64_t> CommsOf(const std::string& job_id) const;

  size_t size() const { return jobs_.size(); }
  uint64_t evicted_total() const { return evicted_; }
  uint64_t dropped_total() const { return dropped_; }  // jobs beyond kMaxJobsPerBatch
  // Communicators a report named for another job than the one holding them, refused (not more
  // trusted than the holder's).
  uint64_t comm_conflicts_total() const { return comm_conflicts_; }
  uint64_t truncated_fields_total() const { return truncated_; }

 private:
  struct Entry {
    v1::Job job;
    std::set<std::string> nodes;
    std::set<uint64_t> comms;
    std::set<std::pair<uint64_t, int32_t>> ranks;
    absl::Time first_seen, last_seen;
  };
  Entry* Touch(const v1::Job& job, absl::Time now);
  // How far a report is believed, by its source: cgroup+environment > cgroup > environment.
  static int Trust(const std::string& source);
  // Drops the communicator -> job entries of job `id` that still point at it.
  void ForgetComms(const std::string& id, const Entry& e);
  std::string Cap(const std::string& s);

  Options options_;
  std::map<std::string, Entry> jobs_;
  std::map<uint64_t, std::string> comm_job_;  // communicator -> job id
  uint64_t evicted_ = 0;
  uint64_t dropped_ = 0;
  uint64_t comm_conflicts_ = 0;
  uint64_t truncated_ = 0;
};

}  // namespace fabricscope::exporters
