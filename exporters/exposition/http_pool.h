#pragma once

#include <cstddef>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace httplib {
class TaskQueue;
}

namespace fabricscope::exporters {

// The task queue of the daemons' HTTP servers (httplib::Server::new_task_queue): `core`
// threads always, plus one more for each connection that finds them all busy, up to `max`; an
// extra thread exits after `linger` without work.
//
// Why: httplib serves each connection (its keep-alive requests included) on one pool thread
// and blocks that thread in read() until the client sends or the read timeout passes. With its
// fixed pool (8 threads here) a few idle or slow clients kept /metrics waiting: 500 idle
// connections held for 10 s made every scrape time out. Here each such connection costs one
// thread for at most the read timeout while /metrics gets its own. Past `max` busy
// connections, new ones wait in the queue in arrival order (httplib has no way to refuse an
// accepted socket from here), so the bound is stated, not enforced by dropping.
//
// Threading: enqueue from httplib's accept thread; shutdown once, from Server::stop's caller.
class ElasticTaskQueue {
 public:
  ElasticTaskQueue(size_t core, size_t max, absl::Duration linger);
  ~ElasticTaskQueue();
  void Enqueue(std::function<void()> fn);
  // Runs what is queued, then waits for every thread to exit.
  void Shutdown();
  // For tests and /metrics: threads alive now, and the most there ever were.
  size_t threads() const;
  size_t peak_threads() const;

  // An httplib::TaskQueue that forwards to a new ElasticTaskQueue; httplib owns (deletes) it.
  static httplib::TaskQueue* NewHttplibQueue(size_t core, size_t max, absl::Duration linger);

 private:
  void Spawn() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Work(bool extra);

  const size_t core_, max_;
  const absl::Duration linger_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  size_t threads_ ABSL_GUARDED_BY(mu_) = 0;
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  size_t peak_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fabricscope::exporters
