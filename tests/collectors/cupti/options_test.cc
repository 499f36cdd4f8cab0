#include "collectors/cupti/options.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace fabricscope::collectors::cupti {
namespace {

using Env = std::map<std::string, std::string>;

const char* Lookup(const char* name, void* context) {
  const auto& env = *static_cast<const Env*>(context);
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

InjectionOptions Parse(Env env, std::string* warning) {
  return ParseInjectionOptions(&Lookup, &env, warning);
}

TEST(InjectionOptionsTest, Defaults) {
  std::string warning;
  const InjectionOptions o = Parse({}, &warning);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(o.socket_path, "/run/fabricscope/gpu.sock");
  EXPECT_FALSE(o.memcpy);
  EXPECT_FALSE(o.verbose);
  EXPECT_EQ(o.flush_period_ms, 100u);
  EXPECT_EQ(o.buffers, 8u);
  EXPECT_EQ(o.buffer_bytes, 1u << 20);
}

TEST(InjectionOptionsTest, ReadsEveryVariable) {
  std::string warning;
  const InjectionOptions o = Parse({{"FABRICSCOPE_GPU_SOCKET", "/tmp/x/gpu.sock"},
                                    {"FABRICSCOPE_CUPTI_MEMCPY", "1"},
                                    {"FABRICSCOPE_CUPTI_VERBOSE", "true"},
                                    {"FABRICSCOPE_CUPTI_FLUSH_MS", "0"},
                                    {"FABRICSCOPE_CUPTI_BUFFERS", "64"},
                                    {"FABRICSCOPE_CUPTI_BUFFER_KB", "256"}},
                                   &warning);
  EXPECT_EQ(warning, "");
  EXPECT_EQ(o.socket_path, "/tmp/x/gpu.sock");
  EXPECT_TRUE(o.memcpy);
  EXPECT_TRUE(o.verbose);
  EXPECT_EQ(o.flush_period_ms, 0u);
  EXPECT_EQ(o.buffers, 64u);
  EXPECT_EQ(o.buffer_bytes, 256u * 1024);
}

TEST(InjectionOptionsTest, BadValuesKeepDefaultsAndSaySo) {
  std::string warning;
  const InjectionOptions o = Parse({{"FABRICSCOPE_CUPTI_MEMCPY", "0"},
                                    {"FABRICSCOPE_CUPTI_BUFFERS", "65"},
                                    {"FABRICSCOPE_CUPTI_BUFFER_KB", "-4"},
                                    {"FABRICSCOPE_CUPTI_FLUSH_MS", "10ms"},
                                    {"FABRICSCOPE_GPU_SOCKET", ""}},
                                   &warning);
  EXPECT_FALSE(o.memcpy);
  EXPECT_EQ(o.buffers, 8u);
  EXPECT_EQ(o.buffer_bytes, 1u << 20);
  EXPECT_EQ(o.flush_period_ms, 100u);
  EXPECT_EQ(o.socket_path, "/run/fabricscope/gpu.sock");
  EXPECT_NE(warning.find("FABRICSCOPE_CUPTI_BUFFERS=65 is not a number in [1, 64]"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("FABRICSCOPE_CUPTI_BUFFER_KB=-4"), std::string::npos) << warning;
  EXPECT_NE(warning.find("FABRICSCOPE_CUPTI_FLUSH_MS=10ms"), std::string::npos) << warning;
}

}  // namespace
}  // namespace fabricscope::collectors::cupti
