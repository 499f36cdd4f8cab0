#include "collectors/priority_stat.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fabricscope::collectors {
namespace {

using ::testing::Optional;

EthtoolStatName Prio(StatDirection d, uint8_t p, std::string kind) {
  return EthtoolStatName{d, p, std::move(kind)};
}

TEST(ParsePriorityStat, SplitsMlx5PerPriorityNames) {
  EXPECT_THAT(ParsePriorityStat("rx_prio3_pause_duration"),
              Optional(Prio(StatDirection::kRx, 3, "pause_duration")));
  EXPECT_THAT(ParsePriorityStat("tx_prio0_bytes"), Optional(Prio(StatDirection::kTx, 0, "bytes")));
  EXPECT_THAT(ParsePriorityStat("rx_prio7_buf_discard"),
              Optional(Prio(StatDirection::kRx, 7, "buf_discard")));
  EXPECT_THAT(ParsePriorityStat("rx_prio5_pause_transition"),
              Optional(Prio(StatDirection::kRx, 5, "pause_transition")));
  // Kinds outside the default set still parse: selection is a separate question.
  EXPECT_THAT(ParsePriorityStat("tx_prio2_pfc_xoff2"),
              Optional(Prio(StatDirection::kTx, 2, "pfc_xoff2")));
}

TEST(ParsePriorityStat, RejectsEverythingElse) {
  for (const char* name : {"", "rx_prio", "rx_prio3", "rx_prio3_", "rx_prio8_bytes",
                           "rx_prio03_bytes", "rx_prio3bytes", "rx_prioX_bytes", "xx_prio3_bytes",
                           "RX_PRIO3_BYTES", "rx_prio3_Bytes", "rx_prio3_by tes", "rx_bytes_phy",
                           "rx_pause_ctrl_phy", "prio3_rx_bytes", " rx_prio3_bytes"}) {
    EXPECT_EQ(ParsePriorityStat(name), std::nullopt) << '"' << name << '"';
  }
}

}  // namespace
}  // namespace fabricscope::collectors
