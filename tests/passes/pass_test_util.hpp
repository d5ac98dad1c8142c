// Helpers shared by the golden tests of the graph passes (tests/passes/).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <kfuse/kfuse.hpp>
#include <kfuse/reference.hpp>
#include <vector>

#include "eval/reference_eval.hpp"
#include "graph/print_graph.hpp"

namespace kfuse::passes_test {

inline std::vector<NodeRef> nodes(const std::vector<Tensor>& ts) {
  std::vector<NodeRef> out;
  for (const auto& t : ts) out.push_back(t.node());
  return out;
}

inline std::string text(const std::vector<NodeRef>& roots) { return detail::print_graph(roots); }
inline std::string text(const std::vector<Tensor>& ts) { return detail::print_graph(nodes(ts)); }

/// A buffer of `shape` holding 0.5, -1.25, 2, ... (varied, non-trivial values).
inline Tensor input(Shape shape, DType dt = DType::F32) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1.0 : 1.0) * (0.5 + 0.75 * static_cast<double>(i % 7));
  auto st = detail::double_to_storage(v, dt);
  return Tensor(make_buffer_node(st, std::move(shape)));
}

/// The reference values of `after` equal those of `before` (NaN matches NaN; `rel` is the
/// relative tolerance, 0 for bitwise-equal doubles up to the sign of zero).
inline void expect_same_values(const std::vector<NodeRef>& before, const std::vector<NodeRef>& after, double rel = 0) {
  ASSERT_EQ(before.size(), after.size());
  for (size_t r = 0; r < before.size(); ++r) {
    ASSERT_EQ(before[r]->shape, after[r]->shape) << "root " << r;
    ASSERT_EQ(before[r]->dtype, after[r]->dtype) << "root " << r;
    auto a = reference_values(Tensor(before[r]));
    auto b = reference_values(Tensor(after[r]));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(a[i])) {
        EXPECT_TRUE(std::isnan(b[i])) << "root " << r << " element " << i;
      } else {
        EXPECT_NEAR(a[i], b[i], rel * std::fabs(a[i])) << "root " << r << " element " << i;
      }
    }
  }
}

using PassFn = std::vector<NodeRef> (*)(const std::vector<NodeRef>&);

/// Runs `pass` on `roots`, checks the values are unchanged (within `rel`) and returns the text
/// of the result.
inline std::string run_checked(PassFn pass, const std::vector<Tensor>& roots, double rel = 0) {
  auto before = nodes(roots);
  auto after = pass(before);
  expect_same_values(before, after, rel);
  return text(after);
}

/// `pass` leaves the graph under `roots` alone (returns the same root nodes).
inline void expect_unchanged(PassFn pass, const std::vector<Tensor>& roots) {
  auto before = nodes(roots);
  EXPECT_EQ(pass(before), before) << text(before);
}

/// Node `op` with the given inputs, built directly (the API collapses some views at record time).
inline Tensor raw(Op op, Shape shape, std::vector<Tensor> inputs, std::vector<int64_t> ints = {},
                  std::vector<double> reals = {}) {
  std::vector<NodeRef> ins;
  for (const auto& t : inputs) ins.push_back(t.node());
  DType dt = inputs.empty() ? DType::F32 : inputs[0].dtype();
  return Tensor(make_node(op, dt, std::move(shape), std::move(ins), Attrs{std::move(ints), std::move(reals)}));
}

}  // namespace kfuse::passes_test
