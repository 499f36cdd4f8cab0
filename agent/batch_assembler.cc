#include "agent/batch_assembler.h"

#include <utility>

namespace fabricscope::agent {

v1::Batch AssembleBatch(BatchParts parts) {
  v1::Batch b = std::move(parts.window);
  b.set_unix_offset_ns(parts.unix_offset_ns);
  if (parts.early) b.set_early(true);
  if (parts.agent) *b.mutable_agent() = std::move(*parts.agent);
  if (parts.capture) *b.mutable_capture() = std::move(*parts.capture);
  if (parts.gpu) parts.gpu->MoveInto(&b);
  parts.analysed.MoveInto(&b);
  return b;
}

}  // namespace fabricscope::agent
