// Interning from borrowed parts: the recording hot path (lib/api) looks a node up without first
// building the Shape, inputs and Attrs vectors that make_node takes by value. They are
// allocated only when the node is new, so recording a constant or a subexpression that already
// exists allocates nothing.
#pragma once
#include <span>

#include "kfuse/node.hpp"

namespace kfuse::detail {

struct NodeKey {
  Op op;
  DType dtype;
  Device device;
  std::span<const int64_t> shape;
  std::span<const NodeRef> inputs;
  std::span<const int64_t> ints;
  std::span<const double> reals;
};

/// make_node(key...) without taking ownership of the parts (copied when the node is created).
NodeRef intern_node(const NodeKey& key);
/// The same, moving the references out of `inputs` (the array key.inputs views) when the node
/// is created: the caller's copies become the node's, without touching reference counts again.
NodeRef intern_node(const NodeKey& key, NodeRef* inputs);

}  // namespace kfuse::detail
