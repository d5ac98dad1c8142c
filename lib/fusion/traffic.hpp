// The minimum traffic of a fused group: every input read once and every output written once
// (no write-allocate). explain() reports it and the profiler divides by it: one definition.
#pragma once
#include <cstdint>

#include "fusion/partition.hpp"

namespace kfuse::detail {

struct Traffic {
  int64_t read_bytes = 0, write_bytes = 0;
  int64_t total() const { return read_bytes + write_bytes; }
};

inline Traffic min_traffic(const FusionGroup& g) {
  Traffic t;
  for (const Node* n : g.inputs) t.read_bytes += static_cast<int64_t>(n->numel() * dtype_size(n->dtype));
  for (const Node* n : g.outputs) t.write_bytes += static_cast<int64_t>(n->numel() * dtype_size(n->dtype));
  return t;
}

}  // namespace kfuse::detail
