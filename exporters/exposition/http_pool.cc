#include "exporters/exposition/http_pool.h"

#include <httplib.h>
#include <pthread.h>

#include <memory>
#include <thread>

namespace fabricscope::exporters {

ElasticTaskQueue::ElasticTaskQueue(size_t core, size_t max, absl::Duration linger)
    : core_(core), max_(std::max(core, max)), linger_(linger) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < core_; ++i) Spawn();
}

ElasticTaskQueue::~ElasticTaskQueue() { Shutdown(); }

void ElasticTaskQueue::Spawn() {
  const bool extra = threads_ >= core_;
  ++threads_;
  peak_ = std::max(peak_, threads_);
  // Detached: an extra thread ends on its own; Shutdown waits for the count to reach 0.
  std::thread([this, extra] { Work(extra); }).detach();
}

void ElasticTaskQueue::Enqueue(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(std::move(fn));
  // Every thread is busy (or already claimed by a job queued before this one): one more.
  if (idle_ < jobs_.size() && threads_ < max_ && !shutdown_) Spawn();
}

void ElasticTaskQueue::Work(bool extra) {
  pthread_setname_np(pthread_self(), "fs-http");
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      ++idle_;
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !jobs_.empty() || shutdown_; };
      const bool woke = extra ? mu_.AwaitWithTimeout(absl::Condition(&ready), linger_)
                              : (mu_.Await(absl::Condition(&ready)), true);
      --idle_;
      if (jobs_.empty() && (shutdown_ || !woke)) {
        --threads_;
        return;
      }
      fn = std::move(jobs_.front());
      jobs_.pop_front();
    }
    fn();
  }
}

void ElasticTaskQueue::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return threads_ == 0; };
  mu_.Await(absl::Condition(&done));
}

size_t ElasticTaskQueue::threads() const {
  absl::MutexLock lock(&mu_);
  return threads_;
}

size_t ElasticTaskQueue::peak_threads() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

namespace {

class HttplibQueue final : public httplib::TaskQueue {
 public:
  HttplibQueue(size_t core, size_t max, absl::Duration linger) : q_(core, max, linger) {}
  void enqueue(std::function<void()> fn) override { q_.Enqueue(std::move(fn)); }
  void shutdown() override { q_.Shutdown(); }

 private:
  ElasticTaskQueue q_;
};

}  // namespace

httplib::TaskQueue* ElasticTaskQueue::NewHttplibQueue(size_t core, size_t max,
                                                      absl::Duration linger) {
  return new HttplibQueue(core, max, linger);
}

}  // namespace fabricscope::exporters
