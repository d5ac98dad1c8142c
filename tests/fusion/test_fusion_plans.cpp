// The fusion acceptance table: each expression's kernel count (from explain()) and its result
// against the fp64 reference evaluator.
#include <kfuse/explain.hpp>
#include <kfuse/index_ops.hpp>
#include <kfuse/quantize.hpp>

#include <algorithm>
#include <limits>
#include <map>

#include "backend/backend.hpp"

#include "test_util.hpp"

namespace kfuse::test {
namespace {

Tensor rnd(Shape s, uint64_t seed, double lo = -2, double hi = 2) {
  return make_tensor(random_values(static_cast<size_t>(count_of(s)), seed, lo, hi), s);
}

// Plans, evaluates and checks `y`; returns the kernel count.
size_t check_plan(const Tensor& y, size_t expected_kernels, double rtol = 2e-5, double atol = 2e-6) {
  Explanation ex = explain(y);
  EXPECT_EQ(ex.kernel_count(), expected_kernels) << ex.text();
  EXPECT_TRUE(all_close(values(y), reference_values(y), rtol, atol)) << ex.text();
  return ex.kernel_count();
}

TEST(FusionPlans, SoftmaxFamilyIsOneKernel) {
  for (Shape s : {Shape{4096, 10}, Shape{64, 5000}}) {
    Tensor x = rnd(s, 1);
    check_plan(log_softmax(x, -1), 1);
    check_plan(softmax(x, -1), 1);
    check_plan(logsumexp(x, -1), 1);
  }
}

// A mask from positions (two aranges compared) is index arithmetic inside the row kernel: the
// causal softmax of attention scores reads nothing but the scores.
TEST(FusionPlans, CausalSoftmaxIsOneKernel) {
  const int64_t n = 37;
  Tensor i = reshape(arange(n), {n, 1}), j = reshape(arange(n), {1, n});
  Tensor masked = where(j <= i, rnd({n, n}, 2), full({}, -std::numeric_limits<double>::infinity(), DType::F32));
  check_plan(softmax(masked, -1), 1);
  EXPECT_EQ(explain(softmax(masked, -1)).kernels[0].inputs.size(), 1u);
}

TEST(FusionPlans, NormsAreOneKernel) {
  Tensor x = rnd({4096, 1024}, 2), w = rnd({1024}, 3), b = rnd({1024}, 4);
  check_plan(layer_norm(x, {1024}, w, b), 1, 1e-4, 1e-5);
  check_plan(rms_norm(x, w), 1, 1e-4, 1e-5);
}

TEST(FusionPlans, ElementwiseChainsAreOneKernel) {
  Tensor a = rnd({1000, 37}, 5), b = rnd({1000, 37}, 6), c = rnd({1000, 37}, 7);
  check_plan(relu(a * b + c), 1);
  check_plan(tanh(a * 0.5 + b) * sigmoid(c) - exp(-a * a), 1);
}

TEST(FusionPlans, ReductionsWithProducersAreOneKernel) {
  Tensor a = rnd({513, 77}, 8), b = rnd({513, 77}, 9);
  check_plan(sum(a * b), 1, 1e-4, 1e-4);
  check_plan(sum(a * a, 1), 1);
  check_plan(mean(a, 0), 1);
}

TEST(FusionPlans, ViewsFoldIntoIndexArithmetic) {
  Tensor x = rnd({33, 17}, 10), y = rnd({17, 33}, 11), bias = rnd({17}, 12), big = rnd({66, 51}, 13);
  Explanation e1 = explain(transpose(x) + y);
  check_plan(transpose(x) + y, 1);
  EXPECT_EQ(e1.kernels[0].kind, "pointwise");
  check_plan(relu(x + expand(bias.reshape({1, 17}), {33, 17})), 1);
  Tensor s1 = big.slice({Range{0, 66, 2}, Range{1, 52, 3}});
  Tensor s2 = big.slice({Range{1, 66, 2}, Range{0, 51, 3}});
  check_plan(s1 + s2, 1);
  // No copy: the only kernel reads the big input once per slice and writes one output.
  Explanation e2 = explain(s1 + s2);
  ASSERT_EQ(e2.kernels.size(), 1u);
  EXPECT_EQ(e2.kernels[0].outputs.size(), 1u);
}

// A normalisation over the last axis of a transposed kernel input would read and store every
// row across memory: the transpose is materialised first (a tiled copy on LLVM), then the
// contiguous normalisation (partition.cpp rule 9). A plain reduction over that axis stays one
// kernel (the LLVM column tiles read it contiguously), and so does a normalisation over a
// permute that keeps the innermost axis.
TEST(FusionPlans, NormalisationOfATransposedInputMaterialisesTheTranspose) {
  Tensor x = rnd({300, 77}, 40), w = rnd({300}, 41);
  Explanation e = explain(layer_norm(transpose(x), {300}, w, {}));
  check_plan(layer_norm(transpose(x), {300}, w, {}), 2, 1e-4, 1e-5);
  ASSERT_EQ(e.kernels.size(), 2u);
  EXPECT_EQ(e.kernels[0].kind, "pointwise");
  EXPECT_NE(e.text().find("rows across memory"), std::string::npos) << e.text();
  check_plan(softmax(transpose(x), -1), 2);
  check_plan(sum(transpose(x), 1), 1);
  Tensor y = rnd({5, 30, 7}, 42);
  check_plan(softmax(permute(y, {1, 0, 2}), -1), 1);
}

// Transcendental math over a transposed kernel input: the LLVM tile walk computed such points one
// by one, each math call a whole vector call (tanh(transpose(x) * y) over [1024, 4096]: 117 ms),
// so the transpose is materialised first and the math runs on contiguous vectors (partition.cpp
// rule 10). Cheap arithmetic over the transposed read stays one kernel, and so does math over a
// permute that keeps the innermost axis or a transpose whose moved axis has size 1.
TEST(FusionPlans, MathOverATransposedInputMaterialisesTheTranspose) {
  Tensor x = rnd({61, 37}, 43), y = rnd({37, 61}, 44);
  Explanation e = explain(tanh(transpose(x) * y));
  ASSERT_EQ(e.kernels.size(), 2u) << e.text();
  EXPECT_NE(e.text().find("transposed read under transcendental math"), std::string::npos) << e.text();
  check_plan(tanh(transpose(x) * y), 2, 1e-5, 1e-6);
  check_plan(exp(transpose(x)) + sigmoid(y), 2, 1e-5, 1e-6);
  check_plan(transpose(x) * y + 1.0, 1);
  Tensor z = rnd({5, 30, 7}, 45);
  check_plan(exp(permute(z, {1, 0, 2})), 1, 1e-5, 1e-6);
  Tensor c = rnd({37, 1}, 46);
  check_plan(exp(transpose(c)), 1, 1e-5, 1e-6);
}

TEST(FusionPlans, ColumnNormalisationIsAtMostTwoKernels) {
  // Documented: x - mean(x, 0, keepdim) is ONE column kernel (outer = columns, reduce = rows).
  Tensor x = rnd({257, 65}, 14);
  EXPECT_LE(check_plan(x - mean(x, 0, true), 1), 2u);
}

TEST(FusionPlans, CrossEntropyIsAtMostTwoKernels) {
  Tensor logits = rnd({64, 10}, 15);
  Tensor labels = make_tensor(random_ints(64, 16, 0, 9), {64}, DType::I64);
  EXPECT_LE(check_plan(cross_entropy(logits, labels), 2, 1e-5, 1e-5), 2u);
}

TEST(FusionPlans, SeveralOutputsShareOneKernel) {
  Tensor x = rnd({100, 31}, 17);
  Tensor e = exp(x);
  Tensor s = sum(e, 1, true);
  Tensor y = e / s;
  Explanation ex = explain({e, s, y});
  EXPECT_EQ(ex.kernel_count(), 1u) << ex.text();
  EXPECT_EQ(ex.kernels[0].outputs.size(), 3u) << ex.text();
  eval({e, s, y});
  auto ref = reference_values({e, s, y});
  EXPECT_TRUE(all_close(values(e), ref[0], 1e-6, 1e-6));
  EXPECT_TRUE(all_close(values(s), ref[1], 1e-5, 1e-5));
  EXPECT_TRUE(all_close(values(y), ref[2], 1e-5, 1e-6));
}

TEST(FusionPlans, BoundariesCarryReasons) {
  Tensor a = rnd({64, 48}, 18), b = rnd({48, 32}, 19);
  // A reduction never fuses into a contraction's epilogue (relu(matmul + 1) alone is one kernel).
  Explanation ex = explain(sum(relu(matmul(a, b) + 1.0), 1, true));
  ASSERT_EQ(ex.kernel_count(), 2u) << ex.text();
  ASSERT_FALSE(ex.boundaries.empty());
  EXPECT_NE(ex.boundaries[0].reason.find("cannot share a kernel"), std::string::npos) << ex.text();
  // Row and column reductions of one tensor cannot share a kernel.
  Tensor x = rnd({40, 30}, 20);
  Explanation ex2 = explain(sum(x, 0, true) + sum(sum(x, 1, true), 0, true));
  EXPECT_GE(ex2.kernel_count(), 2u);
  bool found = false;
  for (const auto& bd : ex2.boundaries) found |= bd.reason.find("reduction domains differ") != std::string::npos;
  EXPECT_TRUE(found) << ex2.text();
  EXPECT_TRUE(all_close(values(sum(x, 0, true) + sum(sum(x, 1, true), 0, true)),
                        reference_values(sum(x, 0, true) + sum(sum(x, 1, true), 0, true)), 1e-5, 1e-4));
}

TEST(FusionPlans, ExplainTextAndDot) {
  Tensor x = rnd({4096, 10}, 21);
  Explanation ex = explain(log_softmax(x, -1));
  std::string t = ex.text();
  EXPECT_NE(t.find("plan: 1 kernel (an op-by-op library would launch"), std::string::npos) << t;
  EXPECT_GE(ex.unfused_kernels, 3);
  // Before any evaluation of a structure no backend is known; afterwards explain() reports the
  // one that ran it. (A shape no other test uses, so the result does not depend on test order.)
  Tensor u = rnd({4093, 11}, 22);
  EXPECT_EQ(explain(log_softmax(u, -1)).kernels[0].backend, "");
  log_softmax(u, -1).eval();
  std::string ran = explain(log_softmax(u, -1)).kernels[0].backend;
  auto names = detail::builtin_backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), ran), names.end()) << "backend '" << ran << "'";
  std::string dot = to_dot({log_softmax(x, -1)});
  EXPECT_NE(dot.find("digraph kfuse"), std::string::npos);
  EXPECT_NE(dot.find("subgraph cluster_0"), std::string::npos);
}

// A DLRM-style recommender (examples/recommender.cpp), small: the bottom MLP's three layers,
// one kernel per 8-bit bag (dequantisation fused), the features stacked by one kernel that stores
// each once (the bottom MLP's output written once, read there through its reshape), the pairwise
// products, their lower triangle gathered into the top MLP's input concat, two top layers.
TEST(FusionPlans, RecommenderIsOneKernelPerLayerBagAndJoin) {
  const int64_t B = 5, R = 40, D = 8, tables = 3, feats = tables + 1;
  Tensor x =
      relu(matmul(relu(matmul(relu(matmul(rnd({B, 13}, 30), rnd({13, 16}, 31)) + rnd({16}, 32)), rnd({16, 12}, 33))),
                  rnd({12, D}, 34)) +
           rnd({D}, 35));
  std::vector<Tensor> f = {reshape(x, {B, 1, D})};
  for (int64_t t = 0; t < tables; ++t) {
    QuantizedTable q = quantize_rowwise(rnd({R, D}, 40 + static_cast<uint64_t>(t)), 8);
    QuantizedTable fused = fused_rowwise_table(pack_fused_rowwise(q), 8, D);
    std::vector<double> ids, offsets;
    for (int64_t b = 0; b < B; ++b) {
      offsets.push_back(static_cast<double>(ids.size()));
      for (int64_t k = 0; k < (b + t) % 4; ++k) ids.push_back(static_cast<double>((b * 7 + k * 13 + t) % R));
    }
    f.push_back(reshape(
        embedding_bag(dequantize_rowwise(fused), make_tensor(ids, {static_cast<int64_t>(ids.size())}, DType::I64),
                      make_tensor(offsets, {B}, DType::I64)),
        {B, 1, D}));
  }
  Tensor T = concat(f, 1);
  std::vector<double> lower;
  for (int64_t i = 0; i < feats; ++i)
    for (int64_t j = 0; j < i; ++j) lower.push_back(static_cast<double>(i * feats + j));
  Tensor z = index_select(reshape(matmul(T, transpose(T)), {B, feats * feats}), 1,
                          make_tensor(lower, {static_cast<int64_t>(lower.size())}, DType::I64));
  Tensor top = concat({x, z}, 1);
  Tensor y = sigmoid(matmul(relu(matmul(top, rnd({D + 6, 9}, 50)) + rnd({9}, 51)), rnd({9, 1}, 52)));
  Explanation ex = explain(y);
  std::map<std::string, int> kinds;
  for (const auto& k : ex.kernels) {
    ++kinds[k.kind];
    EXPECT_EQ(k.outputs.size(), 1u) << ex.text();
  }
  EXPECT_EQ(ex.kernel_count(), 11u) << ex.text();
  EXPECT_EQ(kinds["contraction"], 6) << ex.text();  // 3 + 2 layers, the pairwise products
  EXPECT_EQ(kinds["segment"], 3) << ex.text();
  EXPECT_EQ(kinds["pointwise"], 2) << ex.text();  // the stack, the top input
  EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-5, 1e-6));
}

TEST(FusionPlans, EmptyAndSizeOneShapes) {
  for (Shape s : {Shape{0, 7}, Shape{1, 1}, Shape{1, 9}, Shape{5, 1}, Shape{3, 0}}) {
    Tensor x = rnd(s, 22);
    Tensor y = exp(x) * 2.0 + 1.0;
    EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-6, 1e-6));
    Tensor z = sum(x * x, -1);
    EXPECT_TRUE(all_close(values(z), reference_values(z), 1e-6, 1e-6));
    if (s[1] > 0) {
      Tensor w = log_softmax(x, -1);
      EXPECT_TRUE(all_close(values(w), reference_values(w), 1e-6, 1e-6));
    }
  }
}

}  // namespace
}  // namespace kfuse::test
