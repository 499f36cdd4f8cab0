// The option table machinery (collectors/common/option_table.h) on a small options struct of
// its own, and SplitHostPort.
#include "collectors/common/option_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collectors/common/host_port.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::common {
namespace {

using ::testing::HasSubstr;

struct Inner {
  std::vector<std::string> names;
  uint64_t max_bytes = 1 << 20;
};

struct Demo {
  int64_t period_ns = 1'000'000;
  size_t slots = 64;
  double ratio = 0.5;
  bool enabled = true;
  std::string listen = "127.0.0.1:1";
  std::string socket = "/run/x.sock";
  Inner inner;
};

const std::vector<OptionSpec<Demo>>& DemoTable() {
  using O = Demo;
  static const auto* table = new std::vector<OptionSpec<O>>{
      WithFlag<O>("period", DurationOption<O>(
                                "period", [](O & o) -> auto& { return o.period_ns; }, 10'000,
                                1'000'000'000, "Sampling period.")),
      WithFlag<O>("slots",
                  IntegerOption<O, size_t>(
                      "slots", [](O & o) -> auto& { return o.slots; }, 16, 1024, "Slots.")),
      WithFlag<O>("ratio",
                  RealOption<O>(
                      "ratio", [](O & o) -> auto& { return o.ratio; }, 0, 1, true, "A share.")),
      WithFlag<O>("enabled", OnOffOption<O>(
                                 "enabled", [](O & o) -> auto& { return o.enabled; }, "On?")),
      WithFlag<O>("listen", HostPortOption<O>(
                                "listen", [](O & o) -> auto& { return o.listen; }, true, "Where.")),
      WithFlag<O>("socket", TextOption<O>(
                                "socket", [](O & o) -> auto& { return o.socket; }, "PATH",
                                "A socket.", "off")),
      WithFlag<O>("names", ListOption<O>(
                               "inner.names", [](O & o) -> auto& { return o.inner.names; },
                               "NAME,...", "Names.")),
      BytesOption<O>(
          "inner.max_bytes", [](O & o) -> auto& { return o.inner.max_bytes; }, 1024,
          uint64_t{1} << 30, "Most bytes."),
  };
  return *table;
}

TEST(OptionTable, ParsersSayTheFormAndTheRange) {
  EXPECT_EQ(*ParseDurationText("100us", 10'000, 1'000'000'000), 100'000);
  EXPECT_THAT(ParseDurationText("1us", 10'000, 1'000'000'000).status().message(),
              HasSubstr("outside 10us"));
  EXPECT_THAT(ParseDurationText("1", 0, 10).status().message(), HasSubstr("not a duration"));
  EXPECT_EQ(*ParseBytesText("256MiB", 0, ~uint64_t{0}), uint64_t{256} << 20);
  EXPECT_EQ(*ParseBytesText("4096", 0, ~uint64_t{0}), 4096u);
  EXPECT_FALSE(ParseBytesText("1PiB", 0, ~uint64_t{0}).ok());
  EXPECT_FALSE(ParseBytesText("2KiB", 4096, 8192).ok());
  EXPECT_FALSE(ParseRealText("0", 0, 1, true).ok());  // (0, 1]
  EXPECT_TRUE(ParseRealText("0", 0, 1, false).ok());  // [0, 1]
  EXPECT_TRUE(*ParseOnOffText("yes"));
  EXPECT_FALSE(*ParseOnOffText("off"));
  EXPECT_FALSE(ParseOnOffText("maybe").ok());
  EXPECT_FALSE(ParseIntegerText("12x", 0, 100).ok());
  EXPECT_EQ(FormatBytes(uint64_t{256} << 20), "256MiB");
  EXPECT_EQ(FormatBytes(1000), "1000");
  EXPECT_EQ(FormatDurationNs(1'500'000), "1.5ms");
}

TEST(OptionTable, FlagsAndTheConfigFileReadTheSameSpec) {
  testing::FakeTree t;
  t.Write("demo.yaml", R"(
period: 250us
slots: 128
enabled: off
socket: "off"
inner:
  names: [a, b]
  max_bytes: 4KiB
)");
  Demo d;
  ASSERT_TRUE(LoadYamlOptions(t.Path("demo.yaml"), DemoTable(), &d).ok());
  EXPECT_EQ(d.period_ns, 250'000);
  EXPECT_EQ(d.slots, 128u);
  EXPECT_FALSE(d.enabled);
  EXPECT_EQ(d.socket, "");
  EXPECT_EQ(d.inner.names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.inner.max_bytes, 4096u);
  // The same values from the command line.
  Demo f;
  ASSERT_TRUE(SetFromFlag(DemoTable(), "period", "250us", &f).ok());
  ASSERT_TRUE(SetFromFlag(DemoTable(), "names", "a,b", &f).ok());
  ASSERT_TRUE(SetFromFlag(DemoTable(), "socket", "off", &f).ok());
  EXPECT_EQ(f.period_ns, d.period_ns);
  EXPECT_EQ(f.inner.names, d.inner.names);
  EXPECT_EQ(f.socket, d.socket);
  EXPECT_THAT(SetFromFlag(DemoTable(), "slots", "8", &f).message(), HasSubstr("--slots: 8"));
  EXPECT_THAT(SetFromFlag(DemoTable(), "listen", "nowhere", &f).message(), HasSubstr("HOST:PORT"));
}

TEST(OptionTable, ConfigErrorsNameTheDottedKey) {
  testing::FakeTree t;
  Demo d;
  t.Write("unknown.yaml", "inner:\n  nmes: [a]\n");
  EXPECT_THAT(LoadYamlOptions(t.Path("unknown.yaml"), DemoTable(), &d).message(),
              HasSubstr("inner.nmes: unknown key"));
  t.Write("range.yaml", "inner:\n  max_bytes: 2GiB\n");
  EXPECT_THAT(LoadYamlOptions(t.Path("range.yaml"), DemoTable(), &d).message(),
              HasSubstr("inner.max_bytes: 2GiB is outside"));
  t.Write("map.yaml", "period: {a: 1}\n");
  EXPECT_THAT(LoadYamlOptions(t.Path("map.yaml"), DemoTable(), &d).message(),
              HasSubstr("period: a value or a list is expected"));
  t.Write("scalar.yaml", "inner: 3\n");
  EXPECT_THAT(LoadYamlOptions(t.Path("scalar.yaml"), DemoTable(), &d).message(),
              HasSubstr("inner: must be a map"));
  t.Write("list.yaml", "- a\n");
  EXPECT_THAT(LoadYamlOptions(t.Path("list.yaml"), DemoTable(), &d).message(),
              HasSubstr("top level must be a map"));
  EXPECT_EQ(LoadYamlOptions(t.Path("none.yaml"), DemoTable(), &d).code(),
            absl::StatusCode::kNotFound);
}

TEST(OptionTable, BoundsHoldForValuesSetInCode) {
  Demo d;
  EXPECT_TRUE(CheckOptionBounds(DemoTable(), d).ok());
  d.slots = 4;
  EXPECT_THAT(CheckOptionBounds(DemoTable(), d).message(), HasSubstr("--slots"));
  d = Demo();
  d.inner.max_bytes = 1;
  EXPECT_THAT(CheckOptionBounds(DemoTable(), d).message(), HasSubstr("inner.max_bytes"));
  d = Demo();
  d.ratio = 0;
  EXPECT_FALSE(CheckOptionBounds(DemoTable(), d).ok());
}

TEST(OptionTable, HelpAndMarkdownShowEachDefaultRangeAndKey) {
  const std::string help = OptionHelp(DemoTable(), Demo{});
  EXPECT_THAT(help, HasSubstr("--period=DURATION"));
  EXPECT_THAT(help, HasSubstr("Default: 1ms. Accepts: 10us..1s. Config file: period."));
  EXPECT_THAT(help, HasSubstr("Default: /run/x.sock. Accepts: \"off\" = none."));
  EXPECT_THAT(help, HasSubstr("inner.max_bytes: BYTES"));  // config-file only
  EXPECT_THAT(help, HasSubstr("Default: 1MiB. Accepts: 1KiB..1GiB."));
  const std::string md = OptionMarkdown(DemoTable(), Demo{});
  EXPECT_THAT(md, HasSubstr("| `--slots` | `slots` | `64` | 16..1024 | Slots. |"));
  EXPECT_THAT(md, HasSubstr("|  | `inner.max_bytes` | `1MiB` | 1KiB..1GiB | Most bytes. |"));
}

TEST(SplitHostPort, Forms) {
  EXPECT_EQ(*SplitHostPort("127.0.0.1:9470"), std::make_pair(std::string("127.0.0.1"), 9470));
  EXPECT_EQ(*SplitHostPort(":9470"), std::make_pair(std::string("0.0.0.0"), 9470));
  EXPECT_EQ(*SplitHostPort("[::1]:0"), std::make_pair(std::string("::1"), 0));
  EXPECT_FALSE(SplitHostPort("localhost").ok());
  EXPECT_FALSE(SplitHostPort("h:99999").ok());
  EXPECT_FALSE(SplitHostPort("h:port").ok());
}

}  // namespace
}  // namespace fabricscope::common
