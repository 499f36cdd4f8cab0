#pragma once

// The input format of packet_fuzz: a sequence of records, each [link-type index][length, 2
// bytes big-endian][frame bytes]; a length past the end of the input takes what is left.

#include <cstddef>
#include <cstdint>

#include "collectors/pcap/packet.h"

namespace fabricscope::testing {

inline constexpr int kFuzzLinkTypes[] = {
    collectors::pcap::kLinkEthernet, collectors::pcap::kLinkRaw, collectors::pcap::kLinkRawAlt,
    collectors::pcap::kLinkLinuxSll, collectors::pcap::kLinkLinuxSll2};
inline constexpr size_t kFuzzLinkTypeCount = sizeof(kFuzzLinkTypes) / sizeof(kFuzzLinkTypes[0]);

}  // namespace fabricscope::testing
