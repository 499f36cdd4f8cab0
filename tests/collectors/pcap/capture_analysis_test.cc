// CaptureAnalysis: loss events taken before the window closes (the agent's early batches) are
// the window's own events, each once, in the order a single FillWindow would list them.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectors/pcap/analysis.h"

namespace fabricscope::testing {
namespace {

namespace pcap = collectors::pcap;

const std::string kCapture = std::string(FABRICSCOPE_TESTDATA) + "/pcap/tcp-loss-sender.pcap";

std::string Key(const v1::PacketLossEvent& e) {
  return absl::StrCat(e.kind(), "@", e.time_unix_ns(), ":", e.sport(), ">", e.dport());
}

std::vector<std::string> Keys(const std::vector<v1::PacketLossEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(Key(e));
  return out;
}

// Reads the capture into `a`, `first` packets, then (after `mid`) the rest.
void Play(pcap::CaptureAnalysis& a, int first, const std::function<void()>& mid) {
  auto src = pcap::PacketSource::OpenOffline(kCapture);
  ASSERT_TRUE(src.ok()) << src.status();
  auto cb = [&](pcap::ParseResult r, const pcap::ParsedPacket& p) { a.Add(r, p); };
  ASSERT_TRUE((*src)->Dispatch(first, cb).ok());
  mid();
  ASSERT_TRUE((*src)->Dispatch(0, cb).ok());
}

TEST(CaptureAnalysis, LossEventsTakenEarlyStayInTheirWindowOnce) {
  pcap::CaptureAnalysis whole;
  Play(whole, 0, [] {});
  v1::CaptureWindow reference;
  whole.FillWindow("veth0", {}, &reference);
  std::vector<v1::PacketLossEvent> all(reference.loss_events().begin(),
                                       reference.loss_events().end());
  ASSERT_GE(all.size(), 4u) << "the recorded capture has retransmissions";

  // The same capture with a look in the middle, at every split point of a few.
  for (int split : {1, 100, 300, 500}) {
    pcap::CaptureAnalysis a;
    std::vector<v1::PacketLossEvent> early;
    Play(a, split, [&] { early = a.TakeNewLossEvents(); });
    std::vector<v1::PacketLossEvent> more = a.TakeNewLossEvents();
    EXPECT_TRUE(a.TakeNewLossEvents().empty());
    v1::CaptureWindow w;
    std::vector<v1::PacketLossEvent> fresh;
    a.FillWindow("veth0", {}, &w, &fresh);
    EXPECT_TRUE(fresh.empty()) << split;  // everything was taken before
    std::vector<std::string> taken = Keys(early);
    for (const std::string& k : Keys(more)) taken.push_back(k);
    EXPECT_EQ(taken, Keys(all)) << "split at " << split;
    EXPECT_EQ(Keys({w.loss_events().begin(), w.loss_events().end()}), Keys(all)) << split;
    // A window with nothing new lists none.
    v1::CaptureWindow next;
    a.FillWindow("veth0", {}, &next, &fresh);
    EXPECT_EQ(next.loss_events_size(), 0);
    EXPECT_TRUE(fresh.empty());
  }
  // Without a look before, FillWindow hands every event over as fresh.
  pcap::CaptureAnalysis b;
  Play(b, 0, [] {});
  v1::CaptureWindow w;
  std::vector<v1::PacketLossEvent> fresh;
  b.FillWindow("veth0", {}, &w, &fresh);
  EXPECT_EQ(Keys(fresh), Keys(all));
}

}  // namespace
}  // namespace fabricscope::testing
