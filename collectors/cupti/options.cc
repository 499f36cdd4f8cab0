#include "collectors/cupti/options.h"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "collectors/gpu/wire.h"

namespace fabricscope::collectors::cupti {
namespace {

// Parses a whole decimal number in [min, max]; false for anything else.
bool ParseNumber(const char* text, uint64_t min, uint64_t max, uint64_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return false;
  *out = value;
  return true;
}

bool IsTrue(const char* text) {
  return text != nullptr && (std::string(text) == "1" || std::string(text) == "true" ||
                             std::string(text) == "yes" || std::string(text) == "on");
}

}  // namespace

InjectionOptions ParseInjectionOptions(EnvLookup lookup, void* context, std::string* warning) {
  InjectionOptions options;
  warning->clear();
  const auto number = [&](const char* name, uint64_t min, uint64_t max, auto* field) {
    const char* text = lookup(name, context);
    if (text == nullptr || *text == '\0') return;
    uint64_t value = 0;
    if (ParseNumber(text, min, max, &value)) {
      *field = static_cast<std::remove_pointer_t<decltype(field)>>(value);
    } else {
      if (!warning->empty()) warning->append("; ");
      warning->append(name).append("=").append(text).append(" is not a number in [");
      warning->append(std::to_string(min)).append(", ").append(std::to_string(max));
      warning->append("], using the default");
    }
  };

  const char* socket = lookup(gpu::kSocketPathEnv, context);
  options.socket_path = socket != nullptr && *socket != '\0' ? socket : gpu::kDefaultSocketPath;
  options.memcpy = IsTrue(lookup("FABRICSCOPE_CUPTI_MEMCPY", context));
  options.verbose = IsTrue(lookup("FABRICSCOPE_CUPTI_VERBOSE", context));
  number("FABRICSCOPE_CUPTI_FLUSH_MS", 0, 60000, &options.flush_period_ms);
  number("FABRICSCOPE_CUPTI_BUFFERS", 1, 64, &options.buffers);
  size_t buffer_kb = options.buffer_bytes / 1024;
  number("FABRICSCOPE_CUPTI_BUFFER_KB", 4, 65536, &buffer_kb);
  options.buffer_bytes = buffer_kb * 1024;
  return options;
}

}  // namespace fabricscope::collectors::cupti
