#pragma once
// What each fuzz target (tests/fuzz/*_fuzz.cc) defines besides LLVMFuzzerTestOneInput: seed
// inputs made with the project's own writers (a valid Hello and Batch, a GPU datagram, a spool
// segment, ...). standalone_main.cc runs them and mutates them; tests/fuzz/run.sh writes them
// out (--write-seeds) as libFuzzer's starting corpus.

#include <string>
#include <vector>

namespace fabricscope::testing {

std::vector<std::string> FuzzSeeds();

// Stops the run when an invariant the target checks does not hold (an abort: the standalone
// driver and libFuzzer both keep the input).
void FuzzCheck(bool ok, const char* what);

}  // namespace fabricscope::testing
