#pragma once

// A thread that runs one refresh at start and then one every period until it is destroyed: the
// loop of the agent's watchers of outside programs (agent/qp_ports.h QpPortWatcher,
// agent/lldp_neighbors.h LldpWatcher). The destructor wakes the wait and joins, after a refresh
// in progress returns.

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace fabricscope::agent {

class RefreshThread {
 public:
  // `name`: the thread's name as ps and top show it (at most 15 characters).
  RefreshThread(std::string name, int64_t period_ns, std::function<void()> refresh)
      : name_(std::move(name)), period_ns_(period_ns), refresh_(std::move(refresh)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~RefreshThread() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  RefreshThread(const RefreshThread&) = delete;
  RefreshThread& operator=(const RefreshThread&) = delete;

 private:
  void Loop() {
    pthread_setname_np(pthread_self(), name_.c_str());
    while (true) {
      refresh_();
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_for(l, std::chrono::nanoseconds(period_ns_), [this] { return stop_; })) return;
    }
  }

  const std::string name_;
  const int64_t period_ns_;
  const std::function<void()> refresh_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace fabricscope::agent
