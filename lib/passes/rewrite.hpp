/** \file rewrite.hpp
 * The machinery every graph pass shares: a memoised bottom-up rewrite of a hash-consed DAG and
 * small queries on nodes. A pass is one local rule (or a table of them) handed to
 * rewrite_bottom_up; it never walks the graph itself.
 */
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// A local rewrite: given a node whose inputs are already rewritten, returns an equivalent node
/// (same dtype, shape and values) or null when no rule applies.
using LocalRewrite = std::function<NodeRef(const NodeRef&)>;

/// Rewrites the graph under `roots` bottom-up and returns the new roots (same order). Each node
/// is visited once (memoised), so shared subgraphs stay shared; realized nodes are leaves and
/// are returned unchanged. `rule` is reapplied to its own result until it returns null or the
/// same node (at most 16 times per node).
std::vector<NodeRef> rewrite_bottom_up(const std::vector<NodeRef>& roots, const LocalRewrite& rule);

/// `n` with other inputs (n itself when they are the same nodes).
NodeRef with_inputs(const NodeRef& n, std::vector<NodeRef> inputs);

/// A pass may look at the inputs of `n` (it is not realized: realized nodes act as leaves).
inline bool is_open(const Node& n) { return !n.realized(); }

/// The value of every element of `n` when `n` is a Const, or a chain of views (reshape,
/// permute, expand, slice) over one.
std::optional<double> const_value(const Node& n);

/// A Const of `like`'s dtype, shape and device holding `value` stored in that dtype.
NodeRef make_const_like(const Node& like, double value);

/// Number of nodes under `roots` (realized nodes count as leaves).
size_t graph_size(const std::vector<NodeRef>& roots);

}  // namespace kfuse::detail
