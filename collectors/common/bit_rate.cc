#include "collectors/common/bit_rate.h"

#include <cctype>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace fabricscope::common {

absl::StatusOr<uint64_t> ParseBitRate(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t num_end = 0;
  while (num_end < t.size() && (std::isdigit(static_cast<unsigned char>(t[num_end])) ||
                                t[num_end] == '.' || t[num_end] == 'e' || t[num_end] == '+')) {
    // 'e' only as an exponent: "1e9"; stop if what follows is not a digit or sign.
    if (t[num_end] == 'e' &&
        (num_end + 1 >= t.size() ||
         !(std::isdigit(static_cast<unsigned char>(t[num_end + 1])) || t[num_end + 1] == '+'))) {
      break;
    }
    ++num_end;
  }
  double value = 0;
  if (num_end == 0 || !absl::SimpleAtod(t.substr(0, num_end), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad line rate \"", text, "\": want e.g. 100gbit, 25G, 400Mbit"));
  }
  absl::string_view unit = absl::string_view(t).substr(num_end);
  absl::ConsumeSuffix(&unit, "/s");
  absl::ConsumeSuffix(&unit, "ps");
  double mult = 0;
  if (unit.empty() || unit == "bit" || unit == "b") {
    mult = 1;
  } else if (unit == "k" || unit == "kbit" || unit == "kb") {
    mult = 1e3;
  } else if (unit == "m" || unit == "mbit" || unit == "mb") {
    mult = 1e6;
  } else if (unit == "g" || unit == "gbit" || unit == "gb") {
    mult = 1e9;
  } else if (unit == "t" || unit == "tbit" || unit == "tb") {
    mult = 1e12;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("bad line rate unit in \"", text, "\": use bit, kbit, mbit, gbit or tbit"));
  }
  const double bytes = value * mult / 8.0;
  if (!(bytes >= 1.0) || bytes > 1e15) {
    return absl::InvalidArgumentError(absl::StrCat("line rate out of range: \"", text, "\""));
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

}  // namespace fabricscope::common
