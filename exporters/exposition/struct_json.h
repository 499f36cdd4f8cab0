#pragma once

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <string>

namespace fabricscope::exporters {

// `root` as compact JSON (no whitespace), the body of every /api/* reply built from a
// google.protobuf.Struct. MessageToJsonString cannot fail on a Struct (every Value kind has a
// JSON form), so its status is ignored; an empty string is never returned for a valid Struct.
inline std::string StructToJson(const google::protobuf::Struct& root) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = false;
  (void)google::protobuf::util::MessageToJsonString(root, &out, opts);
  return out;
}

}  // namespace fabricscope::exporters
