/** \file print_graph.hpp
 * Canonical text of a graph: one node per line in topological order, for golden tests of
 * passes, pass dumps (KFUSE_LOG=passes) and fusion explanations.
 *
 *   %0 = buffer f32[4, 3] in0
 *   %1 = const f32[4, 3] 1.5
 *   %2 = mul f32[4, 3] %0, %1
 *   %3 = sum f32[4, 1] %2 axes=[1]
 *   roots: %3
 *
 * Nodes are numbered in the order a depth-first walk from the roots (in order, inputs in order)
 * finishes them, so the text depends only on the graph's structure. Buffers are named in0, in1,
 * ... by first appearance, never by their process-wide ids. Realized nodes are leaves, printed
 * as `realized <dtype>[<shape>] (<op>)`.
 */
#pragma once
#include <string>
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// The canonical text of the graph under `roots` (see the file comment).
std::string print_graph(const std::vector<NodeRef>& roots);

/// One node without its operands: `sum f32[4, 1] axes=[1]`, `const f32[] 1.5`, `buffer f32[8]`.
std::string node_label(const Node& n);

/// "f32[4, 3]"
std::string type_str(const Node& n);

}  // namespace kfuse::detail
