#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectors/pcap/analysis.h"
#include "collectors/pcap/capture.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// The agent's packet capture: a thread that reads a live libpcap source and runs the RoCEv2
// and TCP analyzers, and hands one CaptureWindow per summary window to the pipeline thread.
//
// Threading: Start/Stop from the control thread; TakeWindow from the pipeline thread. The
// capture thread waits for packets in poll(2) without the lock and holds it only while it
// analyzes what one non-blocking pcap_dispatch delivered. It shares nothing with the sampler
// threads, so a busy capture cannot delay a counter tick.
class CaptureRunner {
 public:
  // Opens the interface and starts the thread.
  // Errors: those of PacketSource::OpenLive (NotFound, PermissionDenied, InvalidArgument...).
  static absl::StatusOr<std::unique_ptr<CaptureRunner>> Start(
      const collectors::pcap::LiveCaptureOptions& options,
      collectors::pcap::CaptureAnalysis::Options analysis = {});
  ~CaptureRunner();

  // The summary since the last call (cumulative counts, this window's flows and events).
  // fresh (may be null): the window's loss events NewLossEvents has not returned.
  v1::CaptureWindow TakeWindow(std::vector<v1::PacketLossEvent>* fresh = nullptr);
  // The loss events found since the last call, before the window closes (they stay in it).
  std::vector<v1::PacketLossEvent> NewLossEvents();
  void Stop();
  const std::string& interface() const { return interface_; }

 private:
  CaptureRunner() = default;
  void Run(std::stop_token stop);

  std::unique_ptr<collectors::pcap::PacketSource> source_;
  std::string interface_;
  int fd_ = -1;
  absl::Mutex mu_;
  std::unique_ptr<collectors::pcap::CaptureAnalysis> analysis_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::jthread thread_;
};

}  // namespace fabricscope::agent
