#include "collectors/priority_stat.h"

#include "absl/strings/ascii.h"

namespace fabricscope::collectors {

std::optional<EthtoolStatName> ParsePriorityStat(absl::string_view name) {
  // "rx_prio" + digit + '_' + at least one character.
  if (name.size() < 10) return std::nullopt;
  EthtoolStatName out;
  if (name.substr(0, 7) == "rx_prio") {
    out.direction = StatDirection::kRx;
  } else if (name.substr(0, 7) == "tx_prio") {
    out.direction = StatDirection::kTx;
  } else {
    return std::nullopt;
  }
  if (name[7] < '0' || name[7] > '7' || name[8] != '_') return std::nullopt;
  out.priority = static_cast<uint8_t>(name[7] - '0');
  const absl::string_view kind = name.substr(9);
  for (char c : kind) {
    if (!absl::ascii_islower(static_cast<unsigned char>(c)) &&
        !absl::ascii_isdigit(static_cast<unsigned char>(c)) && c != '_') {
      return std::nullopt;
    }
  }
  out.kind = std::string(kind);
  return out;
}

}  // namespace fabricscope::collectors
