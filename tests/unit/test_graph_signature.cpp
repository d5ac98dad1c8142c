// The plan-cache key (lib/runtime/graph_signature.hpp) and the intern table behind it. A
// signature must match exactly when two graphs differ only in their leaves' data, and differ
// whenever the structure does (ops, shapes, dtypes, attributes down to the bits of a constant,
// sharing, which nodes are already computed); a wrong match would run another graph's program.
// The intern table must keep finding every live node through growth, shrinking and erasure.
#include <algorithm>
#include <random>

#include "runtime/graph_signature.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

using detail::GraphSignature;

GraphSignature sig_of(const std::vector<Tensor>& ts) {
  std::vector<NodeRef> roots;
  for (const auto& t : ts) roots.push_back(t.node());
  return detail::graph_signature(roots);
}

bool same_sig(const GraphSignature& a, const GraphSignature& b) {
  return a.words == b.words && a.hash == b.hash && a.leaves.size() == b.leaves.size();
}

TEST(GraphSignature, EqualStructuresOnDifferentDataMatch) {
  Tensor x1 = make_tensor(random_values(6, 1), {2, 3}), y1 = make_tensor(random_values(3, 2), {3});
  Tensor x2 = make_tensor(random_values(6, 3), {2, 3}), y2 = make_tensor(random_values(3, 4), {3});
  auto f = [](const Tensor& x, const Tensor& y) { return log_softmax(exp(x) * y + 1.5, -1) - sum(x, 1, true); };
  GraphSignature a = sig_of({f(x1, y1)}), b = sig_of({f(x2, y2)});
  EXPECT_TRUE(same_sig(a, b));
  ASSERT_EQ(a.leaves.size(), 2u);
  // leaves in corresponding positions (the program binds its inputs by position)
  EXPECT_EQ(a.leaves[0], x1.node().get());
  EXPECT_EQ(b.leaves[0], x2.node().get());
  EXPECT_EQ(a.leaves[1], y1.node().get());
  EXPECT_EQ(b.leaves[1], y2.node().get());
  EXPECT_TRUE(a.cacheable);
  // the same graph twice (recorded again: the same nodes) matches itself
  EXPECT_TRUE(same_sig(a, sig_of({f(x1, y1)})));
}

TEST(GraphSignature, StructuralDifferencesDiffer) {
  Tensor x = make_tensor(random_values(6, 5), {2, 3}), y = make_tensor(random_values(6, 6), {2, 3});
  Tensor x64 = make_tensor(random_values(6, 7), {2, 3}, DType::F64);
  Tensor y64 = make_tensor(random_values(6, 17), {2, 3}, DType::F64);
  Tensor x6 = make_tensor(random_values(6, 8), {6});
  const GraphSignature base = sig_of({x + y});
  std::vector<std::pair<const char*, GraphSignature>> others = {
      {"op", sig_of({x - y})},
      {"another op", sig_of({x * y})},
      {"sharing (x + x)", sig_of({x + x})},
      {"dtype", sig_of({x64 + y64})},
      {"shape", sig_of({x6 + x6})},
      {"constant value", sig_of({x + 1.0})},
      {"one more op", sig_of({exp(x + y)})},
      {"two roots", sig_of({x + y, x})},
  };
  for (const auto& [what, s] : others) EXPECT_FALSE(same_sig(base, s)) << what;
  // constants compare by bit pattern: +0 and -0 are different programs
  EXPECT_FALSE(same_sig(sig_of({x * 0.0}), sig_of({x * -0.0})));
  EXPECT_TRUE(same_sig(sig_of({x * 2.5}), sig_of({y * 2.5})));
  // attributes: the reduced axis
  EXPECT_FALSE(same_sig(sig_of({sum(x, 0)}), sig_of({sum(x, 1)})));
  // root order is part of the key (the program returns values by position)
  EXPECT_FALSE(same_sig(sig_of({exp(x), sqrt(y)}), sig_of({sqrt(y), exp(x)})));
}

TEST(GraphSignature, RealizedNodesBecomeLeaves) {
  Tensor x = make_tensor(random_values(8, 9), {8});
  Tensor inner = exp(x) * 2.0;
  Tensor outer = inner + 1.0;
  GraphSignature before = sig_of({outer});
  EXPECT_EQ(before.leaves.size(), 1u);
  inner.eval();
  GraphSignature after = sig_of({outer});
  EXPECT_FALSE(same_sig(before, after));
  ASSERT_EQ(after.leaves.size(), 1u);
  EXPECT_EQ(after.leaves[0], inner.node().get());
  // ... and match a graph whose leaf is a buffer of that type
  Tensor b = make_tensor(random_values(8, 10), {8});
  EXPECT_TRUE(same_sig(after, sig_of({b + 1.0})));
}

TEST(GraphSignature, RandomAndMatmulGraphsAreCached) {
  Tensor x = make_tensor(random_values(4, 11), {2, 2});
  // rand is a generator kernel (no host step); its seed is an attribute, so it is in the signature
  EXPECT_TRUE(sig_of({rand({2, 2}, 3) + x}).cacheable);
  EXPECT_FALSE(same_sig(sig_of({rand({2, 2}, 3) + x}), sig_of({rand({2, 2}, 4) + x})));
  EXPECT_FALSE(same_sig(sig_of({rand({2, 2}, 3) + x}), sig_of({randn({2, 2}, 3) + x})));
  EXPECT_TRUE(sig_of({matmul(x, x)}).cacheable);  // a contraction kernel, no host step
  EXPECT_TRUE(sig_of({arange(4) + 1.0}).cacheable);
}

// Graphs that share a signature-shaped prefix but not the structure must each get their own
// program: evaluate them interleaved and check every value.
TEST(GraphSignature, ProgramCacheNeverConfusesStructures) {
  auto xv = random_values(6, 12), yv = random_values(6, 13);
  for (int round = 0; round < 3; ++round) {
    Tensor x = make_tensor(xv, {6}), y = make_tensor(yv, {6});
    std::vector<double> add_xy(6), add_xx(6), mul_xy(6);
    for (int i = 0; i < 6; ++i) {
      double a = stored_as(xv[i], DType::F32), b = stored_as(yv[i], DType::F32);
      add_xy[i] = a + b;
      add_xx[i] = a + a;
      mul_xy[i] = a * b;
    }
    EXPECT_TRUE(all_close(values(x + y), add_xy, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(values(x + x), add_xx, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(values(y + x), add_xy, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(values(x * y), mul_xy, 1e-6, 1e-6));
  }
}

// Enough nodes to grow every intern shard several times, released in a random order (erasure
// with backward shifts, then shrinking): every survivor must still be found, and the count must
// return to where it started.
TEST(InternTable, GrowthEraseAndShrinkKeepEveryLiveNodeFindable) {
  const size_t base = interned_node_count();
  {
    Tensor x = make_tensor(random_values(4, 14), {4});
    constexpr int kNodes = 20000;
    std::vector<Tensor> ts;
    ts.reserve(kNodes);
    for (int i = 0; i < kNodes; ++i) ts.push_back(x + static_cast<double>(i) * 0.25);
    EXPECT_GE(interned_node_count(), base + 2 * kNodes);
    std::vector<size_t> order(kNodes);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937_64(15));
    for (size_t k = 0; k < order.size(); ++k) {
      if (k % 3 == 0) continue;  // keep a third alive
      ts[order[k]] = Tensor();
    }
    for (size_t k = 0; k < order.size(); ++k) {
      size_t i = order[k];
      Tensor again = x + static_cast<double>(i) * 0.25;
      if (k % 3 == 0) {
        EXPECT_EQ(again.node(), ts[i].node()) << "node " << i << " lost";
      } else {
        EXPECT_EQ(again.node().use_count(), 1) << "node " << i << " revived or leaked";
      }
    }
  }
  EXPECT_EQ(interned_node_count(), base);
}

// A long chain released at once: each node releases the next (the table erases thousands of
// entries while nodes are being destroyed).
TEST(InternTable, LongChainsRelease) {
  const size_t base = interned_node_count();
  {
    Tensor t = make_tensor(random_values(3, 16), {3});
    for (int i = 0; i < 1000; ++i) t = kfuse::abs(t) + 1.0;
    EXPECT_GE(interned_node_count(), base + 2000);
  }
  EXPECT_EQ(interned_node_count(), base);
}

// KFUSE_LOG=fusion prints the plan's report when a graph is planned, from that plan: a graph
// whose program is cached is neither planned again nor logged (the log used to plan every
// evaluated graph a second time, just to print it).
TEST(GraphSignature, FusionLogComesFromTheOnePlan) {
  const Options saved = options();
  Options o = saved;
  o.log = {"fusion"};
  set_options(o);
  auto run = [] {
    Tensor x = make_tensor(random_values(12, 1), {3, 4});
    softmax(x * 2.0, -1).eval();
  };
  testing::internal::CaptureStderr();
  run();
  const std::string first = testing::internal::GetCapturedStderr();
  testing::internal::CaptureStderr();
  run();
  const std::string second = testing::internal::GetCapturedStderr();
  set_options(saved);
  EXPECT_NE(first.find("[kfuse:fusion]"), std::string::npos) << first;
  EXPECT_EQ(second.find("[kfuse:fusion]"), std::string::npos) << "a cached program was logged again:\n" << second;
}

}  // namespace
}  // namespace kfuse::test
