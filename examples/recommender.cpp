// A DLRM-style recommendation model as users write it, at a realistic size by default (batch
// 2048, 8 tables of 500,000 rows x 64 stored in 8 bits per value):
//   x = bottom MLP(dense features [B, 13]): 13 -> 512 -> 256 -> 64, relu
//   e_t = embedding_bag(dequantize_rowwise(table_t), ids_t, offsets_t), t = 0..7 (bags of 1-40 ids)
//   T = stack(x, e_0..e_7) [B, 9, 64]; z = the lower triangle of T @ T^T (the pairwise dot products)
//   p = sigmoid(top MLP(concat(x, z))): 100 -> 512 -> 256 -> 1
// Each bag dequantises its rows as it sums them (one kernel per table, reading the fused 8-bit
// rows in place); the stack is one kernel storing every part once; the triangle is a gather fused
// into the top MLP's input concat. Prints the kernels of the plan and the time of an evaluation,
// and checks the first rows against the fp64 reference.
// Usage: kfuse_recommender [batch] [rows per table] [repetitions]
#include <kfuse/index_ops.hpp>
#include <kfuse/kfuse.hpp>
#include <kfuse/quantize.hpp>
#include <kfuse/reference.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "plan_and_time.hpp"

int main(int argc, char** argv) {
  using namespace kfuse;
  const int64_t B = argc > 1 ? std::max(1LL, std::atoll(argv[1])) : 2048;
  const int64_t R = argc > 2 ? std::max(1LL, std::atoll(argv[2])) : 500000;
  const int reps = argc > 3 ? std::max(1, std::atoi(argv[3])) : 11;
  const int64_t D = 64, tables = 8, dense = 13, feats = tables + 1, pairs = feats * (feats - 1) / 2;

  std::mt19937 gen(5);
  std::normal_distribution<float> n01(0.f, 1.f);
  auto host = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = n01(gen) * scale;
    return v;
  };
  auto weight = [&](int64_t in, int64_t out) {
    return Tensor::from_vector(host(in * out, 1.f / std::sqrt(static_cast<float>(in))), {in, out});
  };
  auto bias = [&](int64_t n) { return Tensor::from_vector(host(n, 0.02f), {n}); };

  // The tables, quantised once and kept in PyTorch's fused 8-bit layout (codes, scale, bias per row).
  std::vector<QuantizedTable> table;
  for (int64_t t = 0; t < tables; ++t) {
    QuantizedTable q = quantize_rowwise(Tensor::from_vector(host(R * D, 0.1f), {R, D}), 8);
    table.push_back(fused_rowwise_table(pack_fused_rowwise(q), 8, D));
  }
  const Tensor w1 = weight(dense, 512), w2 = weight(512, 256), w3 = weight(256, D);
  const Tensor v1 = weight(D + pairs, 512), v2 = weight(512, 256), v3 = weight(256, 1);
  const Tensor b1 = bias(512), b2 = bias(256), b3 = bias(D), c1 = bias(512), c2 = bias(256), c3 = bias(1);
  std::vector<int64_t> lower;  // positions (i, j < i) of the [feats, feats] products, row-major
  for (int64_t i = 0; i < feats; ++i)
    for (int64_t j = 0; j < i; ++j) lower.push_back(i * feats + j);
  const Tensor triangle = Tensor::from_vector(lower, {pairs});

  auto model = [&](const Tensor& x0, const std::vector<Tensor>& ids, const std::vector<Tensor>& offsets) {
    const int64_t b = x0.shape()[0];
    Tensor x = relu(matmul(relu(matmul(relu(matmul(x0, w1) + b1), w2) + b2), w3) + b3);  // [b, D]
    std::vector<Tensor> f = {reshape(x, {b, 1, D})};
    for (int64_t t = 0; t < tables; ++t)
      f.push_back(reshape(embedding_bag(dequantize_rowwise(table[t]), ids[t], offsets[t]), {b, 1, D}));
    Tensor T = concat(f, 1);  // [b, feats, D]
    Tensor z = index_select(reshape(matmul(T, transpose(T)), {b, feats * feats}), 1, triangle);
    Tensor top = concat({x, z}, 1);  // [b, D + pairs]
    return sigmoid(matmul(relu(matmul(relu(matmul(top, v1) + c1), v2) + c2), v3) + c3);
  };

  // One batch: dense features, and per table bags of 1-40 ids.
  std::mt19937_64 draw(7);
  const std::vector<float> x_host = host(B * dense, 1.f);
  std::vector<std::vector<int64_t>> ids(tables), offsets(tables);
  for (int64_t t = 0; t < tables; ++t)
    for (int64_t i = 0; i < B; ++i) {
      offsets[t].push_back(static_cast<int64_t>(ids[t].size()));
      for (uint64_t k = 1 + draw() % 40; k-- > 0;) ids[t].push_back(static_cast<int64_t>(draw() % R));
    }
  struct Batch {
    Tensor dense;
    std::vector<Tensor> ids, offsets;
  };
  auto batch = [&](int64_t rows) {  // the batch's first `rows` samples, as new tensors
    Batch b;
    for (int64_t t = 0; t < tables; ++t) {
      const auto end = rows < B ? offsets[t][rows] : static_cast<int64_t>(ids[t].size());
      b.ids.push_back(Tensor::from_vector(std::vector<int64_t>(ids[t].begin(), ids[t].begin() + end), {end}));
      b.offsets.push_back(
          Tensor::from_vector(std::vector<int64_t>(offsets[t].begin(), offsets[t].begin() + rows), {rows}));
    }
    b.dense = Tensor::from_vector(std::vector<float>(x_host.begin(), x_host.begin() + rows * dense), {rows, dense});
    return b;
  };
  auto run = [&](const Batch& b) { return model(b.dense, b.ids, b.offsets); };

  Tensor y = run(batch(B));
  kfuse_example::print_plan(y);
  std::vector<Batch> next;  // the same samples as new tensors per timed evaluation
  for (int r = 0; r < reps; ++r) next.push_back(batch(B));
  const kfuse_example::Timing tm = kfuse_example::time_evals(y, reps, [&](int r) { return run(next[r]); });
  std::printf("time: first eval %.2f ms (plan + compile), then median of %d evals %.2f ms (min %.2f) on %d thread(s)\n",
              tm.first * 1e3, reps, tm.median() * 1e3, tm.times.front() * 1e3, tm.threads);

  // The first samples against the fp64 reference of the model on those samples alone.
  const int64_t rows = std::min<int64_t>(B, 16);
  const std::vector<double> ref = reference_values(run(batch(rows)));
  const std::vector<float> got = y.to_vector<float>();
  double max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) max_err = std::fmax(max_err, std::fabs(got[i] - ref[i]));
  const bool ok = max_err < 1e-4;
  std::printf("recommender [%lld samples, %lld tables of %lld x %lld, 8-bit]: max |error| %.2e on %lld samples: %s\n",
              static_cast<long long>(B), static_cast<long long>(tables), static_cast<long long>(R),
              static_cast<long long>(D), max_err, static_cast<long long>(rows), ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
