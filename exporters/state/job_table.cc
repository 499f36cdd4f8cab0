#include "exporters/state/job_table.h"

#include <algorithm>
#include <utility>

#include "collectors/common/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace fabricscope::exporters {

int JobTable::Trust(const std::string& source) {
  if (source == "cgroup+environment") return 3;
  if (source == "cgroup") return 2;
  return source == "environment" ? 1 : 0;
}

void JobTable::ForgetComms(const std::string& id, const Entry& e) {
  for (uint64_t c : e.comms) {
    // Only where it still points here: a communicator may have moved to another job since.
    if (auto cj = comm_job_.find(c); cj != comm_job_.end() && cj->second == id) comm_job_.erase(cj);
  }
}

std::string JobTable::Cap(const std::string& s) {
  if (s.size() <= kMaxFieldBytes) return s;
  ++truncated_;
  return s.substr(0, common::Utf8Prefix(s, kMaxFieldBytes));
}

JobTable::Entry* JobTable::Touch(const v1::Job& job, absl::Time now) {
  const std::string id = Cap(job.id());
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    if (jobs_.size() >= options_.max_jobs) {
      if (options_.max_jobs == 0) return nullptr;
      auto oldest = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
        return a.second.last_seen < b.second.last_seen;
      });
      ForgetComms(oldest->first, oldest->second);
      jobs_.erase(oldest);
      ++evicted_;
    }
    it = jobs_.emplace(id, Entry{}).first;
    it->second.first_seen = now;
  }
  Entry& e = it->second;
  e.last_seen = now;
  // A less trusted report (a claim without a cgroup, from any node) does not overwrite what a
  // more trusted one said of the same id.
  if (Trust(job.source()) < Trust(e.job.source())) return &e;
  // Every field is a string (gpu.proto): a node that knows less does not erase what one knew.
  const google::protobuf::Descriptor* d = v1::Job::descriptor();
  const google::protobuf::Reflection* r = v1::Job::GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->number() == v1::Job::kIdFieldNumber) continue;
    const std::string v = r->GetString(job, f);
    if (!v.empty()) r->SetString(&e.job, f, Cap(v));
  }
  e.job.set_id(id);
  return &e;
}

void JobTable::OnWindow(const std::string& node, const v1::GpuWindow& w, absl::Time now) {
  std::set<std::string>
      listed;  // the jobs this window named: its communicators may join only those
  for (const v1::Job& job : w.jobs()) {
    if (job.id().empty()) continue;
    if (listed.size() == kMaxJobsPerBatch) {
      ++dropped_;
      continue;
    }
    Entry* e = Touch(job, now);
    if (e == nullptr) continue;
    listed.insert(e->job.id());
    if (e->nodes.size() < kMaxNodesPerJob) e->nodes.insert(node);
  }
  for (const v1::Communicator& c : w.communicators()) {
    if (c.job_id().empty()) continue;
    const std::string id =
        c.job_id().size() > kMaxFieldBytes
            ? c.job_id().substr(0, common::Utf8Prefix(c.job_id(), kMaxFieldBytes))
            : c.job_id();
    auto it = listed.contains(id) ? jobs_.find(id) : jobs_.end();
    if (it == jobs_.end()) continue;  // only jobs this window listed (bounded above)
    Entry& e = it->second;
    if (e.comms.size() >= kMaxCommsPerJob && !e.comms.contains(c.comm_hash())) continue;
    // A communicator has one job. Another job that names it (a producer can send any hash)
    // takes it only when its report is more trusted; then it leaves the old job's list.
    if (auto held = comm_job_.find(c.comm_hash()); held != comm_job_.end() && held->second != id) {
      auto old = jobs_.find(held->second);
      if (old != jobs_.end()) {
        if (Trust(e.job.source()) <= Trust(old->second.job.source())) {
          ++comm_conflicts_;
          continue;
        }
        old->second.comms.erase(c.comm_hash());
        std::erase_if(old->second.ranks, [&](const auto& r) { return r.first == c.comm_hash(); });
      }
    }
    e.comms.insert(c.comm_hash());
    comm_job_[c.comm_hash()] = id;
    // Rank -1: the job of a communicator without one of its ranks (ForwardedAnalysis.jobs).
    if (c.rank() >= 0 && e.ranks.size() < kMaxRanksPerJob) e.ranks.emplace(c.comm_hash(), c.rank());
  }
}

size_t JobTable::Expire(absl::Time now) {
  size_t n = 0;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second.last_seen < now - options_.expiry) {
      ForgetComms(it->first, it->second);
      it = jobs_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

std::vector<JobView> JobTable::Jobs() const {
  std::vector<JobView> out;
  out.reserve(jobs_.size());
  for (const auto& [id, e] : jobs_) {
    JobView v;
    v.job = e.job;
    v.nodes.assign(e.nodes.begin(), e.nodes.end());
    v.comms.assign(e.comms.begin(), e.comms.end());
    v.ranks = e.ranks.size();
    v.first_seen = e.first_seen;
    v.last_seen = e.last_seen;
    out.push_back(std::move(v));
  }
  return out;
}

v1::Job JobTable::JobOf(uint64_t comm_hash) const {
  auto it = comm_job_.find(comm_hash);
  if (it == comm_job_.end()) return {};
  auto job = jobs_.find(it->second);
  return job == jobs_.end() ? v1::Job{} : job->second.job;
}

std::set<uint64_t> JobTable::CommsOf(const std::string& job_id) const {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? std::set<uint64_t>{} : it->second.comms;
}

}  // namespace fabricscope::exporters
