#include "agent/capture_runner.h"

#include <poll.h>
#include <pthread.h>

#include <cerrno>
#include <cstring>

#include "glog/logging.h"

namespace fabricscope::agent {

absl::StatusOr<std::unique_ptr<CaptureRunner>> CaptureRunner::Start(
    const collectors::pcap::LiveCaptureOptions& options,
    collectors::pcap::CaptureAnalysis::Options analysis) {
  auto source = collectors::pcap::PacketSource::OpenLive(options);
  if (!source.ok()) return source.status();
  std::unique_ptr<CaptureRunner> r(new CaptureRunner());
  r->source_ = std::move(*source);
  r->interface_ = options.interface;
  auto fd = r->source_->NonBlockingFd();
  if (!fd.ok()) return fd.status();
  r->fd_ = *fd;
  {
    absl::MutexLock lock(&r->mu_);
    r->analysis_ = std::make_unique<collectors::pcap::CaptureAnalysis>(analysis);
  }
  r->thread_ = std::jthread([p = r.get()](std::stop_token st) { p->Run(st); });
  return r;
}

CaptureRunner::~CaptureRunner() { Stop(); }

void CaptureRunner::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();  // the thread polls with a short timeout and sees it
  thread_.join();
}

void CaptureRunner::Run(std::stop_token stop) {
  pthread_setname_np(pthread_self(), "fs-capture");
  const collectors::pcap::PacketSource::Callback cb =
      [this](collectors::pcap::ParseResult r, const collectors::pcap::ParsedPacket& p)
          ABSL_NO_THREAD_SAFETY_ANALYSIS { analysis_->Add(r, p); };
  while (!stop.stop_requested()) {
    // Wait for packets without the lock; then analyze what is ready under it.
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, 100) < 0 && errno != EINTR) {
      LOG(ERROR) << "packet capture stopped: poll: " << strerror(errno);
      return;
    }
    absl::StatusOr<int> n;
    {
      absl::MutexLock lock(&mu_);
      n = source_->Dispatch(4096, cb);
    }
    if (!n.ok()) {
      LOG(ERROR) << "packet capture stopped: " << n.status().message();
      absl::MutexLock lock(&mu_);
      error_ = std::string(n.status().message());
      return;
    }
    if (*n < 0) return;  // Break()
  }
}

v1::CaptureWindow CaptureRunner::TakeWindow(std::vector<v1::PacketLossEvent>* fresh) {
  v1::CaptureWindow w;
  absl::MutexLock lock(&mu_);  // the pcap handle is used by one thread at a time
  analysis_->FillWindow(interface_, source_->counters(), &w, fresh);
  return w;
}

std::vector<v1::PacketLossEvent> CaptureRunner::NewLossEvents() {
  absl::MutexLock lock(&mu_);
  return analysis_->TakeNewLossEvents();
}

}  // namespace fabricscope::agent
