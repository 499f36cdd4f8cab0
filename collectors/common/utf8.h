#pragma once

// UTF-8 repair for strings that come from outside (producer datagrams, interface and device
// names from sysfs, HTTP query parameters) before they go into a protobuf `string` field or a
// JSON text, which must be valid UTF-8 (RFC 8259 §8.1):
// one invalid byte makes the whole message unserializable (protobuf's SerializeToString fails),
// and a batch that cannot be sent would block the agent's uplink queue behind it.
//
// The grammar is RFC 3629 §4 (UTF8-octets): 1-4 byte sequences, no overlong forms, no UTF-16
// surrogates (U+D800..U+DFFF), nothing above U+10FFFF.

#include <cstddef>
#include <string>
#include <string_view>

namespace fabricscope::common {

// Length (1-4) of the valid UTF-8 sequence at s[i], or 0 when the bytes there are not one
// (a stray continuation byte, an overlong or surrogate form, a sequence cut by the end).
inline size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte (RFC 3629 §4)
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong 3-byte forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // no overlong 4-byte forms
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;  // 0x80-0xC1 (continuation or overlong lead), 0xF5-0xFF
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

// `s` with each byte that does not start a valid sequence replaced by U+FFFD (the
// replacement character; Unicode 15 §3.9 "U+FFFD Substitution of Maximal Subparts" is
// approximated per byte). *repaired (optional) counts the replacements.
inline std::string ValidUtf8(std::string_view s, size_t* repaired = nullptr) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      if (repaired != nullptr) ++*repaired;
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

// The longest prefix of s[0, n) that ends on a sequence boundary: where to cut a string that
// must fit n bytes without splitting a character (a cut sequence would be invalid UTF-8).
inline size_t Utf8Prefix(std::string_view s, size_t n) {
  if (n >= s.size()) return s.size();
  size_t end = n;
  // Back off over continuation bytes (at most 3) to the lead byte of the cut sequence.
  while (end > 0 && n - end < 3 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80 ? n : end;
}

}  // namespace fabricscope::common
