#include "collectors/cli.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fabricscope::collectors {
namespace {

std::vector<std::string> Normalize(std::vector<std::string> in,
                                   const std::vector<std::string>& repeatable = {}) {
  std::vector<char*> argv;
  for (std::string& a : in) argv.push_back(a.data());
  std::vector<std::string> storage;
  std::vector<char*> out =
      NormalizeFlagDashes(static_cast<int>(argv.size()), argv.data(), storage, repeatable);
  return std::vector<std::string>(out.begin(), out.end());
}

TEST(NormalizeFlagDashes, DashesInNamesBecomeUnderscoresNotInValues) {
  EXPECT_EQ(
      Normalize({"agent", "--sample-period=100us", "--line-rate=eth-0=100G", "-v"}),
      (std::vector<std::string>{"agent", "--sample_period=100us", "--line_rate=eth-0=100G", "-v"}));
}

// A list flag given more than once keeps every value (Abseil alone keeps only the last), in
// order, whatever its spelling: --a-b=V, --a_b=V, --a-b V, -a-b=V.
TEST(NormalizeFlagDashes, ARepeatedListFlagJoinsItsValues) {
  const std::vector<std::string> rep = {"remote_write_url", "peers"};
  EXPECT_EQ(Normalize({"agg", "--remote-write-url=http://a/w", "--peers=x:1", "--remote_write_url",
                       "http://b/w", "--status=off", "-remote-write-url=http://c/w"},
                      rep),
            (std::vector<std::string>{"agg", "--remote_write_url=http://a/w,http://b/w,http://c/w",
                                      "--peers=x:1", "--status=off"}));
  // Given once: unchanged but for the spelling; comma lists pass through.
  EXPECT_EQ(Normalize({"agg", "--remote-write-url=http://a/w,http://b/w"}, rep),
            (std::vector<std::string>{"agg", "--remote_write_url=http://a/w,http://b/w"}));
  // An empty occurrence adds nothing; the flag as the last word keeps an empty value.
  EXPECT_EQ(Normalize({"agg", "--remote-write-url=", "--remote-write-url=http://b/w"}, rep),
            (std::vector<std::string>{"agg", "--remote_write_url=http://b/w"}));
  EXPECT_EQ(Normalize({"agg", "--remote-write-url"}, rep),
            (std::vector<std::string>{"agg", "--remote_write_url="}));
  // A flag of another name that only starts like it is left alone.
  EXPECT_EQ(Normalize({"agg", "--remote-write-url-x=1", "--remote-write-url=u"}, rep),
            (std::vector<std::string>{"agg", "--remote_write_url_x=1", "--remote_write_url=u"}));
}

TEST(NormalizeFlagDashes, NothingAfterTheEndOfFlagsChanges) {
  EXPECT_EQ(Normalize({"agg", "--peers=a:1", "--", "--peers=b:2", "--x-y"}, {"peers"}),
            (std::vector<std::string>{"agg", "--peers=a:1", "--", "--peers=b:2", "--x-y"}));
}

}  // namespace
}  // namespace fabricscope::collectors
