#pragma once

// A test-side stand-in for the agent's GPU ingest endpoint (collectors/gpu/wire.h): a listening
// SOCK_SEQPACKET socket in a temporary directory, a thread that accepts producers, receives their
// datagrams, decodes them with DecodeDatagram and keeps every record. Header-only.

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectors/gpu/wire.h"
#include "collectors/gpu/wire_decode.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::testing {

class GpuReceiver : public collectors::gpu::RecordVisitor {
 public:
  GpuReceiver() : path_(dir_.Path("gpu.sock")) {}
  ~GpuReceiver() override { Stop(); }  // then dir_ goes, with the socket file

  const std::string& path() const { return path_; }

  // Binds, listens and starts the receive thread. Returns false when the socket cannot be made.
  bool Start() {
    listener_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (listener_ < 0) return false;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    unlink(path_.c_str());
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(listener_, 16) != 0) {
      close(listener_);
      listener_ = -1;
      return false;
    }
    stop_.store(false);
    thread_ = std::thread([this] { Loop(); });
    return true;
  }

  // Stops like an agent that goes away without losing what it accepted: no new connections,
  // each connection is shut down for reading (the producer's next send fails with EPIPE),
  // what is queued is read, then everything is closed and the socket file removed.
  void Stop() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    thread_.join();
  }

  void OnComm(const collectors::gpu::CommRecord& r) override { comms.push_back(r); }
  void OnCollective(const collectors::gpu::CollectiveRecord& r) override {
    collectives.push_back(r);
  }
  void OnProxyOp(const collectors::gpu::ProxyOpRecord& r) override { proxy_ops.push_back(r); }
  void OnKernel(const collectors::gpu::KernelRecord& r) override { kernels.push_back(r); }
  void OnChannels(const collectors::gpu::ChannelSpansRecord& r) override { channels.push_back(r); }

  // Records received so far (Collective + ProxyOp), thread-safe.
  size_t event_records() {
    std::lock_guard<std::mutex> lock(mu_);
    return collectives.size() + proxy_ops.size();
  }
  // ChannelSpansRecords received so far (not in event_records()), thread-safe.
  size_t channel_records() {
    std::lock_guard<std::mutex> lock(mu_);
    return channels.size();
  }
  size_t comm_records() {
    std::lock_guard<std::mutex> lock(mu_);
    return comms.size();
  }
  uint64_t max_dropped() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_dropped_;
  }
  int decode_errors() {
    std::lock_guard<std::mutex> lock(mu_);
    return decode_errors_;
  }
  int connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return connections_;
  }

  // Read these only after Stop() (or under external synchronization).
  std::vector<collectors::gpu::CommRecord> comms;
  std::vector<collectors::gpu::CollectiveRecord> collectives;
  std::vector<collectors::gpu::ProxyOpRecord> proxy_ops;
  std::vector<collectors::gpu::KernelRecord> kernels;
  std::vector<collectors::gpu::ChannelSpansRecord> channels;
  std::vector<collectors::gpu::DatagramHeader> headers;

 private:
  void Receive(int fd, std::vector<uint8_t>& buf, bool* closed) {
    const ssize_t n = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n == 0) {
      *closed = true;
      return;
    }
    if (n < 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    collectors::gpu::DecodeResult result;
    const absl::Status s = collectors::gpu::DecodeDatagram(
        absl::MakeConstSpan(buf.data(), static_cast<size_t>(n)), *this, &result);
    if (!s.ok()) {
      ++decode_errors_;
      return;
    }
    headers.push_back(result.header);
    if (result.header.dropped_records_total > max_dropped_) {
      max_dropped_ = result.header.dropped_records_total;
    }
  }

  void Loop() {
    std::vector<int> conns;
    std::vector<uint8_t> buf(collectors::gpu::kMaxDatagramBytes);
    while (!stop_.load()) {
      std::vector<pollfd> fds;
      fds.push_back({listener_, POLLIN, 0});
      for (int c : conns) fds.push_back({c, POLLIN, 0});
      if (poll(fds.data(), fds.size(), 10) <= 0) continue;
      std::vector<int> alive;
      if ((fds[0].revents & POLLIN) != 0) {
        const int c = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          alive.push_back(c);
          std::lock_guard<std::mutex> lock(mu_);
          ++connections_;
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        bool closed = false;
        if ((fds[i].revents & (POLLIN | POLLHUP)) != 0) Receive(fds[i].fd, buf, &closed);
        if (closed) {
          close(fds[i].fd);
        } else {
          alive.push_back(fds[i].fd);
        }
      }
      conns = alive;
    }
    close(listener_);
    listener_ = -1;
    unlink(path_.c_str());
    for (int c : conns) {
      shutdown(c, SHUT_RD);
      bool closed = false;
      for (int i = 0; i < 100000 && !closed; ++i) {
        const ssize_t before = static_cast<ssize_t>(headers.size());
        Receive(c, buf, &closed);
        if (static_cast<ssize_t>(headers.size()) == before && !closed) {
          // EAGAIN (queue empty) or a decode error; one more poll round settles it.
          pollfd p{c, POLLIN, 0};
          if (poll(&p, 1, 0) <= 0) break;
        }
      }
      close(c);
    }
  }

  FakeTree dir_;  // declared before path_, which is made from it
  std::string path_;
  int listener_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  uint64_t max_dropped_ = 0;
  int decode_errors_ = 0;
  int connections_ = 0;
};

}  // namespace fabricscope::testing
