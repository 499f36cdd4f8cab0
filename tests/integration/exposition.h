#pragma once
// Helpers of the process-level tests: a parser for the Prometheus text exposition format
// (0.0.4), HTTP GET on loopback, and the agent run standalone on a fake tree.

#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/common/subprocess.h"

namespace fabricscope::testing {

// One sample line of an exposition: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// "name{a=\"1\",b=\"2\"}" with labels sorted by name, for messages.
inline std::string SeriesString(const std::string& name,
                                const std::map<std::string, std::string>& labels) {
  if (labels.empty()) return name;
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(absl::StrCat(k, "=\"", v, "\""));
  return absl::StrCat(name, "{", absl::StrJoin(parts, ","), "}");
}

// Parses the sample lines of a text exposition. Comment and blank lines are skipped; label
// values are unescaped (\\, \", \n). A line that does not parse is returned in *bad.
inline std::vector<Sample> ParseExposition(const std::string& body,
                                           std::vector<std::string>* bad = nullptr) {
  std::vector<Sample> out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    bool ok = !s.name.empty();
    if (ok && i < line.size() && line[i] == '{') {
      ++i;
      while (ok && i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          ok = false;
          break;
        }
        const std::string key = line.substr(i, eq - i);
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            ++j;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        if (j >= line.size()) {
          ok = false;
          break;
        }
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (ok && (i >= line.size() || line[i] != '}')) ok = false;
      ++i;
    }
    while (ok && i < line.size() && line[i] == ' ') ++i;
    if (ok) {
      const size_t end = line.find(' ', i);
      const std::string text =
          line.substr(i, end == std::string::npos ? std::string::npos : end - i);
      char* stop = nullptr;
      s.value = std::strtod(text.c_str(), &stop);
      ok = !text.empty() && stop != nullptr && *stop == '\0';
    }
    if (ok) {
      out.push_back(std::move(s));
    } else if (bad) {
      bad->push_back(line);
    }
  }
  return out;
}

// The samples of `name` whose labels include every one of `labels`.
inline std::vector<const Sample*> Select(const std::vector<Sample>& samples,
                                         const std::string& name,
                                         const std::map<std::string, std::string>& labels = {}) {
  std::vector<const Sample*> out;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) {
        match = false;
        break;
      }
    }
    if (match) out.push_back(&s);
  }
  return out;
}

// The value of the single sample of `name` with exactly `labels` (ignoring "node"), or nullopt.
inline std::optional<double> Value(const std::vector<Sample>& samples, const std::string& name,
                                   std::map<std::string, std::string> labels = {}) {
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    std::map<std::string, std::string> l = s.labels;
    l.erase("node");
    if (l == labels) return s.value;
  }
  return std::nullopt;
}

inline std::string HttpGet(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2);
  c.set_read_timeout(5);
  auto r = c.Get(path);
  return r && r->status == 200 ? r->body : "";
}

// The first executable found among `names` in $PATH (or the absolute path given), or "".
inline std::string FindProgram(const std::vector<std::string>& names) {
  const char* env_path = std::getenv("PATH");
  std::string path = env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
  path += ":/usr/sbin:/sbin";
  for (const std::string& n : names) {
    if (n.empty()) continue;
    if (n[0] == '/') {
      if (access(n.c_str(), X_OK) == 0) return n;
      continue;
    }
    std::istringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
      const std::string p = dir + "/" + n;
      struct stat st;
      if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0) {
        return p;
      }
    }
  }
  return "";
}

// fabricscope-agent in standalone mode on a tree: /metrics on a loopback port picked by the
// kernel. `prefix` runs the agent under another program (setpriv ...).
class StandaloneAgent {
 public:
  StandaloneAgent(const std::string& config, const std::string& sysfs_root,
                  const std::string& procfs_root, std::vector<std::string> extra = {},
                  std::vector<std::string> prefix = {}, std::string binary = FABRICSCOPE_AGENT_BIN)
      : proc_(Argv(config, sysfs_root, procfs_root, std::move(extra), std::move(prefix),
                   std::move(binary))) {}

  // Starts the agent and waits for its "serving" line.
  bool Start(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    if (!proc_.Start()) return false;
    auto m =
        proc_.WaitForLine(std::regex("serving http://127\\.0\\.0\\.1:(\\d+)/metrics"), timeout);
    if (!m) return false;
    port_ = std::stoi((*m)[1]);
    return true;
  }
  std::string Metrics() { return HttpGet(port_, "/metrics"); }
  std::vector<Sample> Samples() { return ParseExposition(Metrics()); }
  std::string Output() {
    proc_.Drain();
    return proc_.Output();
  }
  Subprocess& proc() { return proc_; }
  int port() const { return port_; }

 private:
  static std::vector<std::string> Argv(const std::string& config, const std::string& sysfs_root,
                                       const std::string& procfs_root,
                                       std::vector<std::string> extra,
                                       std::vector<std::string> prefix, std::string binary) {
    std::vector<std::string> argv = std::move(prefix);
    for (std::string a :
         {binary, "--config=" + config, "--sysfs-root=" + sysfs_root,
          "--procfs-root=" + procfs_root, std::string("--http-listen=127.0.0.1:0"),
          std::string("--status=off"), std::string("--window=100ms"), std::string("--ethtool=off"),
          // Never the system's /run/fabricscope/gpu.sock (a later --gpu-socket
          // in `extra` wins).
          std::string("--gpu-socket=off")}) {
      argv.push_back(std::move(a));
    }
    for (std::string& a : extra) argv.push_back(std::move(a));
    return argv;
  }

  Subprocess proc_;
  int port_ = 0;
};

}  // namespace fabricscope::testing
