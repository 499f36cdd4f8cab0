#include "exporters/analysis/names.h"

namespace fabricscope::exporters {

std::optional<Name> NameTable::Intern(absl::string_view s) {
  if (s.empty()) return Name();
  {
    absl::ReaderMutexLock lock(&mu_);
    if (const auto it = names_.find(s); it != names_.end()) return Name(&*it);
  }
  absl::MutexLock lock(&mu_);
  if (const auto it = names_.find(s); it != names_.end()) return Name(&*it);
  if (names_.size() >= max_names_) return std::nullopt;
  const auto it = names_.emplace(s).first;
  // The string's heap buffer (when not held inline) and the set's node for it.
  bytes_ += sizeof(std::string) + 2 * sizeof(void*) + (s.size() >= 16 ? s.size() + 1 : 0);
  return Name(&*it);
}

std::optional<Name> NameTable::Find(absl::string_view s) const {
  if (s.empty()) return Name();
  absl::ReaderMutexLock lock(&mu_);
  if (const auto it = names_.find(s); it != names_.end()) return Name(&*it);
  return std::nullopt;
}

size_t NameTable::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return names_.size();
}

size_t NameTable::memory_bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return bytes_;
}

}  // namespace fabricscope::exporters
