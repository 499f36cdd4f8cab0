// Loads an injection library the way the CUDA driver does (dlopen, then InitializeInjection),
// twice as a driver that re-initializes would, then exits normally so that atexit handlers run.
// Usage: cupti_injection_probe LIBRARY. Prints "InitializeInjection returned N" per call.
// With PROBE_DESTROY_CONTEXT=1 it then calls the stand-in libcupti's cuptiFakeDestroyContext (as
// the driver announces a context's destruction) and leaves with _exit(0), so that no atexit
// handler runs: what reaches the agent then came through the context-destroy path alone.

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

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
  if (const char* destroy = std::getenv("PROBE_DESTROY_CONTEXT");
      destroy != nullptr && destroy[0] == '1') {
    void* cupti = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    auto fake_destroy = cupti != nullptr
                            ? reinterpret_cast<void (*)()>(dlsym(cupti, "cuptiFakeDestroyContext"))
                            : nullptr;
    if (fake_destroy == nullptr) {
      std::printf("no cuptiFakeDestroyContext in the loaded libcupti.so.13\n");
      return 5;
    }
    fake_destroy();
    std::fflush(stdout);
    _exit(0);
  }
  return 0;  // the library stays loaded: its atexit handler runs after this
}
