#include "exporters/history/history_jsonl.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "collectors/common/collective_vocabulary.h"
#include "collectors/common/json_text.h"

namespace fabricscope::exporters {

using common::AppendJsonString;

std::string HistoryEventJson(const HistoryEvent& e) {
  std::string out;
  out.reserve(160 + e.detail_json.size());
  absl::StrAppend(&out, "{\"id\":", e.id, ",\"time\":");
  AppendJsonString(&out, absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromUnixNanos(e.unix_ns),
                                          absl::UTCTimeZone()));
  absl::StrAppend(&out, ",\"unix_ns\":", e.unix_ns, ",\"end_unix_ns\":", e.end_unix_ns,
                  ",\"kind\":");
  AppendJsonString(&out, e.kind);
  out += ",\"node\":";
  AppendJsonString(&out, e.node);
  out += ",\"comm\":";
  AppendJsonString(&out, e.comm != 0 ? common::CommLabel(e.comm) : std::string());
  out += ",\"comm_hash\":";
  AppendJsonString(&out, e.comm != 0 ? absl::StrFormat("%016x", e.comm) : std::string());
  out += ",\"job\":";
  AppendJsonString(&out, e.job);
  // The detail is the store's own JSON object (built by the recorder), never a producer's text.
  absl::StrAppend(&out, ",\"detail\":", e.detail_json.empty() ? "{}" : e.detail_json, "}");
  return out;
}

absl::Status HistoryJsonl::Check(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("history: cannot append to --history-jsonl ", path, ": ", strerror(errno)));
  }
  ::close(fd);
  return absl::OkStatus();
}

HistoryJsonl::HistoryJsonl(std::string path, int64_t max_bytes)
    : path_(std::move(path)), max_bytes_(max_bytes) {}

HistoryJsonl::~HistoryJsonl() {
  if (fd_ >= 0) ::close(fd_);
}

bool HistoryJsonl::Reopen(std::string* error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (fd_ < 0) {
    *error = absl::StrCat(path_, ": ", strerror(errno));
    return false;
  }
  struct stat st {};
  size_ = ::fstat(fd_, &st) == 0 ? st.st_size : 0;
  return true;
}

void HistoryJsonl::Rotate() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  for (int i = kRotations; i >= 1; --i) {
    const std::string from = i == 1 ? path_ : absl::StrCat(path_, ".", i - 1);
    std::rename(from.c_str(), absl::StrCat(path_, ".", i).c_str());
  }
  ++rotations_;
}

size_t HistoryJsonl::Write(const std::vector<HistoryEvent>& events, std::string* error) {
  size_t written = 0;
  for (const HistoryEvent& e : events) {
    std::string line = HistoryEventJson(e);
    line.push_back('\n');
    if (fd_ >= 0 && size_ > 0 && size_ + static_cast<int64_t>(line.size()) > max_bytes_) {
      Rotate();
    }
    if (fd_ < 0 && !Reopen(error)) continue;
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    size_ += static_cast<int64_t>(done);
    if (done == line.size()) {
      ++written;
      continue;
    }
    *error = absl::StrCat(path_, ": ", strerror(errno));
    // A partial line is ended so that the next one starts on its own line (a reader skips the
    // broken one); on a full disk this fails too, and the next line follows it.
    if (done > 0 && ::write(fd_, "\n", 1) == 1) ++size_;
  }
  return written;
}

}  // namespace fabricscope::exporters
