// The executor entry points used by the Tensor API.
#pragma once
#include <vector>

#include "kfuse/tensor.hpp"

namespace kfuse::detail {

/// Computes every root of roots[0, n) and stores its value as the node's realized storage.
void execute(const NodeRef* roots, size_t n);
inline void execute(const std::vector<NodeRef>& roots) { execute(roots.data(), roots.size()); }

/// Copies a tensor's value to another device (evaluating it first).
Tensor transfer(const Tensor& t, Device to);

}  // namespace kfuse::detail
