// The minimum traffic of a fused group: every output written once (no write-allocate) and every
// input read once, as far as the group can reach it. explain() reports it and the profiler divides
// by it: one definition.
//
// "As far as the group can reach it": an input read through a gather (an embedding table, the
// rows of an index_select) is not read whole. The element count read of each input is bounded by
// walking the group back from its outputs with a box of reachable extents per axis (a gather keeps
// at most as many positions per fibre as its index has; a broadcast axis reaches 1; a reduction its
// whole extent), summed over the paths to the input and capped at its size. Ops the walk does not
// model reach their operands whole, which gives the plain "every input once".
#pragma once
#include <cstdint>

#include "fusion/partition.hpp"

namespace kfuse::detail {

struct Traffic {
  int64_t read_bytes = 0, write_bytes = 0;
  int64_t total() const { return read_bytes + write_bytes; }
};

Traffic min_traffic(const FusionGroup& g);

}  // namespace kfuse::detail
