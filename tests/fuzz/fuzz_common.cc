#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/fuzz_target.h"

namespace fabricscope::testing {

void FuzzCheck(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace fabricscope::testing
