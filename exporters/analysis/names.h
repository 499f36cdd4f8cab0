#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace fabricscope::exporters {

// A name held once by a NameTable (a node, a collective function, a port label): a pointer to
// the table's only copy, so two Names are equal exactly when their strings are, and compare and
// hash as one word. The cross-rank matcher keys and copies these per rank report instead of
// strings. Default: no name (str() is "").
class Name {
 public:
  Name() = default;
  const std::string& str() const { return p_ != nullptr ? *p_ : Empty(); }
  bool empty() const { return p_ == nullptr; }
  friend bool operator==(Name a, Name b) { return a.p_ == b.p_; }
  friend bool operator!=(Name a, Name b) { return a.p_ != b.p_; }
  // An order for containers only (by address, not by text).
  friend bool operator<(Name a, Name b) { return a.p_ < b.p_; }
  template <typename H>
  friend H AbslHashValue(H h, Name n) {
    return H::combine(std::move(h), n.p_);
  }

 private:
  friend class NameTable;
  explicit Name(const std::string* p) : p_(p) {}
  static const std::string& Empty() {
    static const std::string* const empty = new std::string();
    return *empty;
  }
  const std::string* p_ = nullptr;
};

// The names one CrossRankAnalysis has seen. A name, once interned, is kept for the table's life
// (its Names may sit in pending and recent instances long after its node is forgotten), so the
// table only grows: by the distinct node names, function names and port labels ever reported,
// at most max_names. Thread-safe: lookups of known names take a shared lock.
class NameTable {
 public:
  explicit NameTable(size_t max_names) : max_names_(max_names) {}
  NameTable(const NameTable&) = delete;
  NameTable& operator=(const NameTable&) = delete;

  // The Name of s: Name() for "", nullopt when s is new and max_names are held already (the
  // caller drops what carries it, and counts it).
  std::optional<Name> Intern(absl::string_view s) ABSL_LOCKS_EXCLUDED(mu_);
  // The Name of s if it was interned; nullopt otherwise.
  std::optional<Name> Find(absl::string_view s) const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes held, approximately (the strings and the set's nodes).
  size_t memory_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(absl::string_view s) const { return absl::Hash<absl::string_view>{}(s); }
  };
  struct Eq {
    using is_transparent = void;
    bool operator()(absl::string_view a, absl::string_view b) const { return a == b; }
  };
  const size_t max_names_;
  mutable absl::Mutex mu_;
  absl::node_hash_set<std::string, Hash, Eq> names_ ABSL_GUARDED_BY(mu_);  // nodes stay put
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fabricscope::exporters
