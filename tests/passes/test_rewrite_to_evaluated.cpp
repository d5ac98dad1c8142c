// A graph pass may rewrite part of an expression into a node that was evaluated before but is
// not in the recorded graph (exp(x + 0) -> exp(x) after exp(x).eval()). The program must take
// that node's value as an input, and must not be cached for other instances of the structure
// (for them the rewritten node is not evaluated).
#include "test_util.hpp"

namespace kfuse::test {
namespace {

TEST(RewriteToEvaluated, RootAndInteriorNode) {
  std::vector<double> v = random_values(37, 1);
  Tensor x = make_tensor(v, {37});
  Tensor y = exp(x);
  y.eval();
  std::vector<double> want(v.size()), want2(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    want[i] = std::exp(static_cast<double>(static_cast<float>(v[i])));
    want2[i] = want[i] * 2.0 - 1.0;
  }
  EXPECT_TRUE(all_close(values(exp(x + 0.0)), want, 1e-6, 0));                  // the root itself
  EXPECT_TRUE(all_close(values(exp(x + 0.0) * 2.0 - 1.0), want2, 1e-6, 1e-6));  // an interior node
  // The same structure on a tensor whose exp was never evaluated: its own values, computed.
  std::vector<double> w = random_values(37, 2);
  Tensor x2 = make_tensor(w, {37});
  std::vector<double> want3(w.size());
  for (size_t i = 0; i < w.size(); ++i) want3[i] = std::exp(static_cast<double>(static_cast<float>(w[i]))) * 2.0 - 1.0;
  EXPECT_TRUE(all_close(values(exp(x2 + 0.0) * 2.0 - 1.0), want3, 1e-6, 1e-6));
  // and the first graph again (after the second structure ran)
  EXPECT_TRUE(all_close(values(exp(x + 0.0) * 2.0 - 1.0), want2, 1e-6, 1e-6));
}

}  // namespace
}  // namespace kfuse::test
