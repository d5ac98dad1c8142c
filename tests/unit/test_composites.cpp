// Composite ops (softmax, log_softmax, layer_norm, rms_norm, cross_entropy, normalize) and
// matmul (2-D, batched, broadcast batch, 1-D operands, integers, non-contiguous operands)
// against closed forms written here in double.
//
// Tolerances: composites chain a handful of rounded f32 ops (a reduction, exp/rsqrt, a
// division): 1e-5 relative plus 1e-6 absolute. matmul: the worst-case bound of an f32 dot
// product, 4 * eps * K * max|a| * max|b| absolute. f64: 1e-12 relative.
#include <cmath>

#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

constexpr double kRtol = 1e-5, kAtol = 1e-6;

// Row-wise helpers over the last axis of a row-major [rows, n] block.
template <typename F>
std::vector<double> per_row(const std::vector<double>& v, int64_t n, F&& f) {
  std::vector<double> out;
  for (size_t r = 0; r * n < v.size(); ++r) {
    std::vector<double> row(v.begin() + r * n, v.begin() + (r + 1) * n);
    for (double y : f(row)) out.push_back(y);
  }
  return out;
}
std::vector<double> softmax_row(const std::vector<double>& row) {
  double m = -kInf, s = 0;
  for (double x : row) m = std::max(m, x);
  std::vector<double> e;
  for (double x : row) e.push_back(std::exp(x - m)), s += e.back();
  for (double& x : e) x /= s;
  return e;
}
std::vector<double> log_softmax_row(const std::vector<double>& row) {
  auto p = softmax_row(row);
  for (double& x : p) x = std::log(x);
  return p;
}

TEST(Composites, SoftmaxAndLogSoftmax) {
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    double rtol = dt == DType::F32 ? kRtol : 1e-12, atol = dt == DType::F32 ? kAtol : 1e-14;
    auto v = stored_values(random_values(28, 91, -4, 4), dt);
    Tensor x = make_tensor(v, {4, 7}, dt);
    expect_tensor(softmax(x), {4, 7}, dt, per_row(v, 7, softmax_row), rtol, atol);
    expect_tensor(log_softmax(x, -1), {4, 7}, dt, per_row(v, 7, log_softmax_row), rtol, atol);
    // axis 0 is the last axis of the transpose
    auto t = transposed(v, 4, 7);
    expect_tensor(softmax(x, 0), {4, 7}, dt, transposed(per_row(t, 4, softmax_row), 7, 4), rtol, atol);
    expect_tensor(log_softmax(x.transpose(), 1), {7, 4}, dt, per_row(t, 4, log_softmax_row), rtol, atol);
  }
  // stable for large logits; -inf logits get probability 0; integer input computes in f32
  expect_tensor(softmax(make_tensor({1000, 1001, 1002}, {3})), {3}, DType::F32, softmax_row({0, 1, 2}), kRtol, kAtol);
  expect_tensor(softmax(make_tensor({-kInf, 0, -kInf, 0}, {4})), {4}, DType::F32, {0, 0.5, 0, 0.5});
  expect_tensor(log_softmax(make_tensor({1, 2, 3}, {3}, DType::I32)), {3}, DType::F32, log_softmax_row({1, 2, 3}),
                kRtol, kAtol);
  expect_tensor(softmax(make_tensor({kNaN, 1}, {2})), {2}, DType::F32, {kNaN, kNaN});
  // size-1 axis: probability 1; scalar input; empty rows
  expect_tensor(softmax(make_tensor({3, -2}, {2, 1})), {2, 1}, DType::F32, {1, 1});
  expect_tensor(softmax(make_tensor({3}, {})), {}, DType::F32, {1});
  expect_tensor(log_softmax(make_tensor({}, {0, 3})), {0, 3}, DType::F32, {});
}

std::vector<double> layer_norm_ref(const std::vector<double>& v, int64_t n, const std::vector<double>* w,
                                   const std::vector<double>* b, double eps) {
  return per_row(v, n, [&](const std::vector<double>& row) {
    double m = 0, var = 0;
    for (double x : row) m += x;
    m /= static_cast<double>(n);
    for (double x : row) var += (x - m) * (x - m);
    var /= static_cast<double>(n);  // population variance
    std::vector<double> out;
    for (int64_t i = 0; i < n; ++i)
      out.push_back((row[i] - m) / std::sqrt(var + eps) * (w ? (*w)[i] : 1.0) + (b ? (*b)[i] : 0.0));
    return out;
  });
}

TEST(Composites, LayerNorm) {
  auto v = stored_values(random_values(60, 92, -3, 3), DType::F32);
  auto w = stored_values(random_values(5, 93, 0.5, 2), DType::F32), b = stored_values(random_values(5, 94), DType::F32);
  Tensor x = make_tensor(v, {3, 4, 5});
  Tensor tw = make_tensor(w, {5}), tb = make_tensor(b, {5});
  expect_tensor(layer_norm(x, {5}), {3, 4, 5}, DType::F32, layer_norm_ref(v, 5, nullptr, nullptr, 1e-5), kRtol, kAtol);
  expect_tensor(layer_norm(x, {5}, tw, tb), {3, 4, 5}, DType::F32, layer_norm_ref(v, 5, &w, &b, 1e-5), kRtol, kAtol);
  expect_tensor(layer_norm(x, {5}, tw), {3, 4, 5}, DType::F32, layer_norm_ref(v, 5, &w, nullptr, 1e-5), kRtol, kAtol);
  expect_tensor(layer_norm(x, {5}, {}, tb, 0.1), {3, 4, 5}, DType::F32, layer_norm_ref(v, 5, nullptr, &b, 0.1), kRtol,
                kAtol);
  // normalising over the two trailing dims with [4, 5] weights
  auto w2 = stored_values(random_values(20, 95), DType::F32);
  expect_tensor(layer_norm(x, {4, 5}, make_tensor(w2, {4, 5})), {3, 4, 5}, DType::F32,
                layer_norm_ref(v, 20, &w2, nullptr, 1e-5), kRtol, kAtol);
  // a non-contiguous input, and f64
  auto t = transposed(v, 12, 5);  // [5, 12]
  expect_tensor(layer_norm(make_tensor(v, {12, 5}).transpose(), {12}), {5, 12}, DType::F32,
                layer_norm_ref(t, 12, nullptr, nullptr, 1e-5), kRtol, kAtol);
  expect_tensor(layer_norm(make_tensor(v, {12, 5}, DType::F64), {5}), {12, 5}, DType::F64,
                layer_norm_ref(v, 5, nullptr, nullptr, 1e-5), 1e-12, 1e-14);
}

TEST(Composites, RmsNorm) {
  auto v = stored_values(random_values(21, 96, -3, 3), DType::F32);
  auto w = stored_values(random_values(7, 97), DType::F32);
  auto ref = [&](const std::vector<double>* wt, double eps) {
    return per_row(v, 7, [&](const std::vector<double>& row) {
      double ms = 0;
      for (double x : row) ms += x * x;
      ms /= 7;
      std::vector<double> out;
      for (int i = 0; i < 7; ++i) out.push_back(row[i] / std::sqrt(ms + eps) * (wt ? (*wt)[i] : 1.0));
      return out;
    });
  };
  Tensor x = make_tensor(v, {3, 7});
  expect_tensor(rms_norm(x), {3, 7}, DType::F32, ref(nullptr, 1e-6), kRtol, kAtol);
  expect_tensor(rms_norm(x, make_tensor(w, {7})), {3, 7}, DType::F32, ref(&w, 1e-6), kRtol, kAtol);
  expect_tensor(rms_norm(x, {}, 0.5), {3, 7}, DType::F32, ref(nullptr, 0.5), kRtol, kAtol);
}

TEST(Composites, CrossEntropy) {
  auto v = stored_values(random_values(35, 98, -3, 3), DType::F32);
  std::vector<double> labels = {6, 0, 3, 3, 1};
  double loss = 0;
  for (int r = 0; r < 5; ++r) {
    std::vector<double> row(v.begin() + r * 7, v.begin() + (r + 1) * 7);
    loss -= log_softmax_row(row)[static_cast<size_t>(labels[r])];
  }
  loss /= 5;
  for (DType lt : {DType::I64, DType::I32}) {
    SCOPED_TRACE(dtype_name(lt));
    expect_tensor(cross_entropy(make_tensor(v, {5, 7}), make_tensor(labels, {5}, lt)), {}, DType::F32, {loss}, kRtol,
                  kAtol);
  }
  // f64 logits stay f64; one class gives zero loss
  expect_tensor(cross_entropy(make_tensor(v, {5, 7}, DType::F64), make_tensor(labels, {5}, DType::I64)), {}, DType::F64,
                {loss}, 1e-12);
  expect_tensor(cross_entropy(make_tensor({2, -1}, {2, 1}), make_tensor({0, 0}, {2}, DType::I64)), {}, DType::F32, {0});
}

// ignore_index (PyTorch's, default -100): ignored rows leave the mean; every row ignored is NaN.
// Labels computed lazily take the same path through a CheckLabels step.
TEST(Composites, CrossEntropyIgnoreIndex) {
  auto v = stored_values(random_values(15, 97, -3, 3), DType::F32);
  auto nll = [&](int r, int label) {
    std::vector<double> row(v.begin() + r * 5, v.begin() + (r + 1) * 5);
    return -log_softmax_row(row)[static_cast<size_t>(label)];
  };
  Tensor logits = make_tensor(v, {3, 5});
  const double rows02 = (nll(0, 1) + nll(2, 4)) / 2;
  expect_tensor(cross_entropy(logits, make_tensor({1, -100, 4}, {3}, DType::I64)), {}, DType::F32, {rows02}, kRtol,
                kAtol);
  Tensor lazy = make_tensor({1, 0, 4}, {3}, DType::I32) - make_tensor({0, 100, 0}, {3}, DType::I32);
  expect_tensor(cross_entropy(logits, lazy), {}, DType::F32, {rows02}, kRtol, kAtol);
  // An ignore_index inside [0, C) masks that class's rows.
  expect_tensor(cross_entropy(logits, make_tensor({1, 3, 3}, {3}, DType::I64), 3), {}, DType::F32, {nll(0, 1)}, kRtol,
                kAtol);
  expect_tensor(cross_entropy(logits, make_tensor({-100, -100, -100}, {3}, DType::I64)), {}, DType::F32, {kNaN});
}

TEST(Composites, Normalize) {
  auto v = stored_values(random_values(12, 99), DType::F32);
  Tensor x = make_tensor(v, {3, 4});
  auto unit_rows = [](const std::vector<double>& m, int64_t n) {
    return per_row(m, n, [](const std::vector<double>& row) {
      double s = 0;
      for (double y : row) s += y * y;
      std::vector<double> out;
      for (double y : row) out.push_back(y / std::max(std::sqrt(s), 1e-12));
      return out;
    });
  };
  expect_tensor(normalize(x), {3, 4}, DType::F32, unit_rows(v, 4), kRtol, kAtol);
  expect_tensor(normalize(x, 0), {3, 4}, DType::F32, transposed(unit_rows(transposed(v, 3, 4), 3), 4, 3), kRtol, kAtol);
  // a zero row stays zero (divided by eps, not by 0)
  expect_tensor(normalize(make_tensor({0, 0, 3, 4}, {2, 2})), {2, 2}, DType::F32, {0, 0, 0.6, 0.8}, kRtol, kAtol);
}

// ---- matmul ----
// C[b] = A[b] @ B[b] for row-major batches already broadcast.
std::vector<double> matmul_ref(const std::vector<double>& a, const std::vector<double>& b, int64_t batch, int64_t m,
                               int64_t k, int64_t n, bool bcast_a = false, bool bcast_b = false) {
  std::vector<double> c(static_cast<size_t>(batch * m * n), 0.0);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a[(bcast_a ? 0 : t) * m * k + i * k + p] * b[(bcast_b ? 0 : t) * k * n + p * n + j];
        c[t * m * n + i * n + j] = s;
      }
  return c;
}

double mm_atol(int64_t k) { return 4 * kF32Eps * static_cast<double>(k) * 2 * 2; }

TEST(Matmul, TwoDimensionalAndNonContiguous) {
  auto a = stored_values(random_values(35, 101), DType::F32), b = stored_values(random_values(21, 102), DType::F32);
  expect_tensor(matmul(make_tensor(a, {5, 7}), make_tensor(b, {7, 3})), {5, 3}, DType::F32,
                matmul_ref(a, b, 1, 5, 7, 3), 0, mm_atol(7));
  // A^T @ B with A stored [7, 5]; B given as a transposed [3, 7]
  expect_tensor(matmul(make_tensor(transposed(a, 5, 7), {7, 5}).transpose(),
                       make_tensor(transposed(b, 7, 3), {3, 7}).transpose()),
                {5, 3}, DType::F32, matmul_ref(a, b, 1, 5, 7, 3), 0, mm_atol(7));
  // size-1 and empty dimensions: K = 0 gives zeros
  expect_tensor(matmul(make_tensor({2}, {1, 1}), make_tensor({3}, {1, 1})), {1, 1}, DType::F32, {6});
  expect_tensor(matmul(make_tensor({}, {2, 0}), make_tensor({}, {0, 3})), {2, 3}, DType::F32,
                std::vector<double>(6, 0.0));
  expect_tensor(matmul(make_tensor({}, {0, 4}), make_tensor(std::vector<double>(12, 1.0), {4, 3})), {0, 3}, DType::F32,
                {});
  // f64 and integers (exact), mixed dtypes promote
  auto ia = random_ints(12, 103, -9, 9), ib = random_ints(8, 104, -9, 9);
  expect_tensor(matmul(make_tensor(ia, {3, 4}, DType::I32), make_tensor(ib, {4, 2}, DType::I32)), {3, 2}, DType::I32,
                matmul_ref(ia, ib, 1, 3, 4, 2));
  expect_tensor(matmul(make_tensor(ia, {3, 4}, DType::I64), make_tensor(ib, {4, 2}, DType::F64)), {3, 2}, DType::F64,
                matmul_ref(ia, ib, 1, 3, 4, 2), 1e-12);
  expect_tensor(matmul(make_tensor(a, {5, 7}, DType::F64), make_tensor(b, {7, 3}, DType::F64)), {5, 3}, DType::F64,
                matmul_ref(a, b, 1, 5, 7, 3), 1e-12, 1e-14);
}

TEST(Matmul, BatchedAndBroadcastBatch) {
  auto a = stored_values(random_values(2 * 5 * 6, 105), DType::F32),
       b = stored_values(random_values(2 * 6 * 3, 106), DType::F32);
  expect_tensor(matmul(make_tensor(a, {2, 5, 6}), make_tensor(b, {2, 6, 3})), {2, 5, 3}, DType::F32,
                matmul_ref(a, b, 2, 5, 6, 3), 0, mm_atol(6));
  // a [5, 6] matrix against a batch [2, 6, 3]: the matrix broadcasts
  std::vector<double> a0(a.begin(), a.begin() + 30);
  expect_tensor(matmul(make_tensor(a0, {5, 6}), make_tensor(b, {2, 6, 3})), {2, 5, 3}, DType::F32,
                matmul_ref(a0, b, 2, 5, 6, 3, true, false), 0, mm_atol(6));
  // [3, 1, 4, 5] @ [2, 5, 6] -> [3, 2, 4, 6]
  auto c = stored_values(random_values(3 * 4 * 5, 107), DType::F32),
       d = stored_values(random_values(2 * 5 * 6, 108), DType::F32);
  auto e = generate({3, 2, 4, 6}, [&](const std::vector<int64_t>& i) {
    double s = 0;
    for (int64_t p = 0; p < 5; ++p) s += c[i[0] * 20 + i[2] * 5 + p] * d[i[1] * 30 + p * 6 + i[3]];
    return s;
  });
  expect_tensor(matmul(make_tensor(c, {3, 1, 4, 5}), make_tensor(d, {2, 5, 6})), {3, 2, 4, 6}, DType::F32, e, 0,
                mm_atol(5));
}

// A host step reads a constant operand from a kernel that materialises it (it used to find no
// producer: "program: value of const has no producer").
TEST(Matmul, ConstantOperand) {
  Tensor x = make_tensor({1, 2, 3, 4}, {2, 2});
  expect_tensor(matmul(full({2, 2}, 2.0), x), {2, 2}, DType::F32, {8, 12, 8, 12});
}

TEST(Matmul, OneDimensionalOperands) {
  auto a = stored_values(random_values(7, 109), DType::F32), m = stored_values(random_values(21, 110), DType::F32);
  // [7] @ [7, 3] -> [3]
  expect_tensor(matmul(make_tensor(a, {7}), make_tensor(m, {7, 3})), {3}, DType::F32, matmul_ref(a, m, 1, 1, 7, 3), 0,
                mm_atol(7));
  // [3, 7] @ [7] -> [3]
  expect_tensor(matmul(make_tensor(m, {3, 7}), make_tensor(a, {7})), {3}, DType::F32, matmul_ref(m, a, 1, 3, 7, 1), 0,
                mm_atol(7));
  // [7] @ [7] -> [] (dot product)
  expect_tensor(matmul(make_tensor(a, {7}), make_tensor(a, {7})), {}, DType::F32, matmul_ref(a, a, 1, 1, 7, 1), 0,
                mm_atol(7));
  // [7] @ [2, 7, 3] -> [2, 3]
  auto bm = stored_values(random_values(42, 111), DType::F32);
  expect_tensor(matmul(make_tensor(a, {7}), make_tensor(bm, {2, 7, 3})), {2, 3}, DType::F32,
                matmul_ref(a, bm, 2, 1, 7, 3, true, false), 0, mm_atol(7));
}

TEST(Matmul, NanAndInfPropagate) {
  expect_tensor(matmul(make_tensor({1, kNaN}, {1, 2}), make_tensor({1, 1}, {2, 1})), {1, 1}, DType::F32, {kNaN});
  expect_tensor(matmul(make_tensor({1, kInf}, {1, 2}), make_tensor({1, 1}, {2, 1})), {1, 1}, DType::F32, {kInf});
  expect_tensor(matmul(make_tensor({kInf, 1}, {1, 2}), make_tensor({0, 1}, {2, 1})), {1, 1}, DType::F32, {kNaN});
}

}  // namespace
