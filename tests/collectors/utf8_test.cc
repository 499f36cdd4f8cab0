#include "collectors/common/utf8.h"

#include <string>

#include "collectors/gpu/wire.h"
#include "collectors/gpu/wire_decode.h"
#include "gtest/gtest.h"

namespace fabricscope::common {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ValidTextIsKeptByteForByte) {
  // ASCII, 2-, 3- and 4-byte sequences at the edges of their ranges (RFC 3629 §4).
  const std::string s =
      "ncclKernel_\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80"
      "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF \xE2\x86\x92 caf\xC3\xA9";
  size_t repaired = 7;
  EXPECT_EQ(ValidUtf8(s, &repaired), s);
  EXPECT_EQ(repaired, 7u);  // counts up from the caller's value
}

TEST(Utf8, EveryInvalidFormBecomesTheReplacementCharacter) {
  struct Case {
    std::string in, out;
    size_t repaired;
  };
  const Case cases[] = {
      {"a\x80z", "a" + kFffd + "z", 1},                        // stray continuation byte
      {"\xC0\xAF", kFffd + kFffd, 2},                          // overlong '/'
      {"\xE0\x80\xAF", kFffd + kFffd + kFffd, 3},              // overlong 3-byte
      {"\xED\xA0\x80", kFffd + kFffd + kFffd, 3},              // UTF-16 surrogate U+D800
      {"\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd, 4},  // above U+10FFFF
      {"\xFF\xFE", kFffd + kFffd, 2},                          // never in UTF-8
      {"ab\xE2\x86", "ab" + kFffd + kFffd, 2},                 // cut by the end
  };
  for (const Case& c : cases) {
    size_t repaired = 0;
    EXPECT_EQ(ValidUtf8(c.in, &repaired), c.out);
    EXPECT_EQ(repaired, c.repaired);
  }
}

TEST(Utf8, PrefixEndsOnACharacterBoundary) {
  const std::string s = "ab\xE2\x86\x92z";  // a b → z
  EXPECT_EQ(Utf8Prefix(s, 2), 2u);
  EXPECT_EQ(Utf8Prefix(s, 3), 2u);  // inside the arrow: back to its lead byte
  EXPECT_EQ(Utf8Prefix(s, 4), 2u);
  EXPECT_EQ(Utf8Prefix(s, 5), 5u);
  EXPECT_EQ(Utf8Prefix(s, 99), s.size());
}

// The producer's fixed fields: a name cut at the field's size never ends inside a character,
// and the agent's decode makes whatever arrives valid UTF-8, counting the repaired bytes.
TEST(Utf8, FixedFieldsAreCutAtCharacterBoundariesAndRepairedAtDecode) {
  char field[8];
  collectors::gpu::CopyFixed(field, "abcde\xE2\x86\x92");  // the arrow would need bytes 5..7 of 8
  EXPECT_EQ(std::string(field), "abcde");
  collectors::gpu::CopyFixed(field, "abcd\xE2\x86\x92zz");  // fits: 7 bytes + NUL
  EXPECT_EQ(std::string(field), "abcd\xE2\x86\x92");
  collectors::gpu::CopyFixed(field, "abc");
  EXPECT_EQ(std::string(field), "abc");

  char raw[8] = {'k', '\xFF', 'n', '\xC3', 0, 0, 0, 0};
  const uint64_t before = collectors::gpu::RepairedStringBytes().load();
  EXPECT_EQ(collectors::gpu::FixedString(raw), "k" + kFffd + "n" + kFffd);
  EXPECT_EQ(collectors::gpu::RepairedStringBytes().load() - before, 2u);
  char ascii[4] = {'a', 'b', 'c', 'd'};  // no NUL: stops at N
  EXPECT_EQ(collectors::gpu::FixedString(ascii), "abcd");
}

}  // namespace
}  // namespace fabricscope::common
