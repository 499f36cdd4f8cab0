// A main() for the fuzz targets where libFuzzer is not linked (any compiler, the plain and the
// ASan builds that ctest runs): every seed of the target (FuzzSeeds) and every file of the
// directories given runs once, then random mutations of them run for --seconds. A crash, an
// ASan/UBSan report or an abort() in the target fails the run; the input that did it is written
// to crash-<target>-<pid> in the working directory, to be added to tests/fuzz/regressions.
// Coverage-guided runs use the same target files with libFuzzer (tests/fuzz/run.sh).
//
// Usage: <target> [--seconds=N] [--seed=S] [--write-seeds=DIR] [DIR|FILE]...

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The input about to run, for the crash file: written only when a run does not come back.
std::string* g_current = nullptr;
std::string* g_name = nullptr;

void Run(const std::string& input) {
  *g_current = input;
  // A heap copy of exactly the input's size, so that ASan sees a read past its end.
  std::vector<uint8_t> buf(input.begin(), input.end());
  LLVMFuzzerTestOneInput(buf.empty() ? nullptr : buf.data(), buf.size());
}

char g_crash_path[512];

// Writes the input that did not come back; async-signal-safe (open, write, close).
void SaveOnCrash() {
  const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const ssize_t n = write(fd, g_current->data(), g_current->size());
  (void)n;
  close(fd);
  static const char kMsg[] = "fuzz: the input that crashed is in ";
  ssize_t w = write(2, kMsg, sizeof(kMsg) - 1);
  w = write(2, g_crash_path, strlen(g_crash_path));
  w = write(2, "\n", 1);
  (void)w;
}

void OnSignal(int sig) {
  SaveOnCrash();
  signal(sig, SIG_DFL);
  raise(sig);
}

// A few of libFuzzer's mutations: flip a bit, set a byte, insert, erase, copy a range, splice
// with another seed, write a value that parsers treat specially.
std::string Mutate(std::string s, const std::vector<std::string>& pool, std::mt19937_64& rng) {
  static const char* kTokens[] = {"-1", "N/A", "0", "18446744073709551616", "\n",
                                  ":",  "{",   "}", "\xff\xff\xff\xff",     "\x00\x00\x00\x00",
                                  "%",  "&",   "=", "99999999999999999999"};
  const int n = 1 + static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[at % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s[at % s.size()] = static_cast<char>(rng());
        break;
      case 2:
        s.insert(at, 1 + rng() % 4, static_cast<char>(rng()));
        break;
      case 3:
        if (!s.empty()) s.erase(at % s.size(), 1 + rng() % 8);
        break;
      case 4:
        if (!s.empty()) {
          const size_t from = rng() % s.size();
          s.insert(at, s.substr(from, 1 + rng() % 16));
        }
        break;
      case 5: {
        const std::string& o = pool[rng() % pool.size()];
        if (!o.empty()) s = s.substr(0, at) + o.substr(rng() % o.size());
        break;
      }
      default: {
        const char* t = kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))];
        s.insert(at, std::string(t, t[0] == '\0' ? 4 : std::strlen(t)));
        break;
      }
    }
    if (s.size() > 1 << 16) s.resize(1 << 16);
  }
  return s;
}

}  // namespace

// The sanitizers' hook for their own reports (ASan/UBSan end with _exit, not a signal); absent
// from builds without them.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

int main(int argc, char** argv) {
  std::string name = fs::path(argv[0]).filename().string();
  g_name = &name;
  double seconds = 0;
  uint64_t seed = 1;
  std::vector<std::string> pool = fabricscope::testing::FuzzSeeds();
  pool.push_back("");
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seconds=", 0) == 0) {
      seconds = std::stod(a.substr(10));
    } else if (a.rfind("--seed=", 0) == 0) {
      seed = std::stoull(a.substr(7));
    } else if (a.rfind("--write-seeds=", 0) == 0) {
      const fs::path dir = a.substr(14);
      fs::create_directories(dir);
      size_t k = 0;
      for (const std::string& s : fabricscope::testing::FuzzSeeds()) {
        std::ofstream(dir / ("seed-" + std::to_string(k++)), std::ios::binary) << s;
      }
      return 0;
    } else if (fs::is_directory(a)) {
      for (const auto& e : fs::directory_iterator(a)) {
        if (e.is_regular_file()) pool.push_back(ReadAll(e.path()));
      }
    } else if (fs::is_regular_file(a)) {
      pool.push_back(ReadAll(a));
    } else {
      std::fprintf(stderr, "%s: no such file or directory: %s\n", g_name->c_str(), a.c_str());
      return 2;
    }
  }
  std::string current;
  g_current = &current;
  std::snprintf(g_crash_path, sizeof(g_crash_path), "crash-%s-%d", g_name->c_str(),
                static_cast<int>(getpid()));
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) signal(sig, OnSignal);
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(SaveOnCrash);
  for (const std::string& s : pool) Run(s);
  std::mt19937_64 rng(seed);
  uint64_t runs = pool.size();
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 64; ++i) Run(Mutate(pool[rng() % pool.size()], pool, rng));
    runs += 64;
  }
  std::printf("%s: %llu runs (%zu seeds, %.0f s, seed %llu), no crash\n", g_name->c_str(),
              static_cast<unsigned long long>(runs), pool.size(), seconds,
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  _exit(0);
}
