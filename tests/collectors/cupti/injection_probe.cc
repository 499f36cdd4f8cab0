// Loads an injection library the way the CUDA driver does (dlopen, then InitializeInjection),
// twice as a driver that re-initializes would, then exits normally so that atexit handlers run.
// Usage: cupti_injection_probe LIBRARY. Prints "InitializeInjection returned N" per call.

#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s LIBRARY\n", argv[0]);
    return 2;
  }
  void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::printf("dlopen failed: %s\n", dlerror());
    return 3;
  }
  using InitializeFn = int (*)();
  auto initialize = reinterpret_cast<InitializeFn>(dlsym(library, "InitializeInjection"));
  if (initialize == nullptr) {
    std::printf("InitializeInjection not exported\n");
    return 4;
  }
  for (int i = 0; i < 2; ++i) std::printf("InitializeInjection returned %d\n", initialize());
  std::fflush(stdout);
  return 0;  // the library stays loaded: its atexit handler runs after this
}
