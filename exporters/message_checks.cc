#include "exporters/message_checks.h"

#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace fabricscope::exporters {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Whether messages of type `d` can hold a Histogram, cached per type.
bool MayHoldHistogram(const Descriptor* d, std::set<const Descriptor*>& visiting) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new std::map<const Descriptor*, bool>();
  {
    absl::MutexLock lock(&mu);
    auto it = cache->find(d);
    if (it != cache->end()) return it->second;
  }
  bool holds = d == v1::Histogram::descriptor();
  if (!holds && visiting.insert(d).second) {
    for (int i = 0; i < d->field_count() && !holds; ++i) {
      const FieldDescriptor* f = d->field(i);
      if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || f->is_map()) continue;
      holds = MayHoldHistogram(f->message_type(), visiting);
    }
    visiting.erase(d);
  }
  absl::MutexLock lock(&mu);
  (*cache)[d] = holds;
  return holds;
}

absl::Status CheckOne(const v1::Histogram& h, const std::string& at) {
  auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(at + ": " + why); };
  for (int i = 0; i < h.upper_bounds_size(); ++i) {
    if (!std::isfinite(h.upper_bounds(i)))
      return bad(absl::StrCat("upper bound ", i, " not finite"));
    if (i > 0 && !(h.upper_bounds(i) > h.upper_bounds(i - 1))) {
      return bad(absl::StrCat("upper_bounds not increasing at ", i));
    }
  }
  if (h.bucket_counts_size() > h.upper_bounds_size() + 1 ||
      (h.bucket_counts_size() > 0 && h.bucket_counts_size() < h.upper_bounds_size())) {
    return bad(absl::StrCat(h.bucket_counts_size(), " bucket counts for ", h.upper_bounds_size(),
                            " bounds"));
  }
  uint64_t total = 0;
  for (uint64_t c : h.bucket_counts()) {
    if (c > h.count() || total > h.count() - c) return bad("bucket counts exceed count");
    total += c;
  }
  if (!std::isfinite(h.sum())) return bad("sum not finite");
  return absl::OkStatus();
}

absl::Status Walk(const Message& m, const std::string& at) {
  if (m.GetDescriptor() == v1::Histogram::descriptor()) {
    return CheckOne(static_cast<const v1::Histogram&>(m), at);
  }
  const Reflection* r = m.GetReflection();
  const Descriptor* d = m.GetDescriptor();
  std::set<const Descriptor*> visiting;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || f->is_map() ||
        !MayHoldHistogram(f->message_type(), visiting)) {
      continue;
    }
    const std::string name = at.empty() ? f->name() : absl::StrCat(at, ".", f->name());
    if (f->is_repeated()) {
      for (int k = 0; k < r->FieldSize(m, f); ++k) {
        absl::Status s = Walk(r->GetRepeatedMessage(m, f, k), absl::StrCat(name, "[", k, "]"));
        if (!s.ok()) return s;
      }
    } else if (r->HasField(m, f)) {
      absl::Status s = Walk(r->GetMessage(m, f), name);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckHistograms(const Message& message) { return Walk(message, ""); }

}  // namespace fabricscope::exporters
