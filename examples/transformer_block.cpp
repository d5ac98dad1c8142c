// A pre-norm decoder block (GPT-style) as users write it, at a realistic size by default (batch
// 8, sequence 256, model 512, 8 heads of 64):
//   h = layer_norm(x); q, k, v = views of h @ Wqkv + bqkv; a = softmax(causal(q @ k^T / sqrt(D))) @ v
//   x1 = x + a @ Wo + bo;  y = x1 + gelu(layer_norm(x1) @ W1 + b1) @ W2 + b2
// q, k and v are slices and permutes of one projection (read in place by the matmuls that use
// them); the causal mask is index arithmetic on two aranges (no mask tensor is read). Prints the
// kernels of the plan and the time of an evaluation beside it, and checks the first rows of the
// last sequence against the fp64 reference: with a causal mask, rows 0..t of a sequence depend
// only on its rows 0..t, so the block on those rows alone must give them.
// Usage: kfuse_transformer_block [batch] [seq] [model] [heads] [repetitions]
#include <kfuse/kfuse.hpp>
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
  const int64_t B = argc > 1 ? std::atoll(argv[1]) : 8;
  const int64_t T = argc > 2 ? std::atoll(argv[2]) : 256;
  const int64_t C = argc > 3 ? std::atoll(argv[3]) : 512;
  const int64_t H = argc > 4 ? std::atoll(argv[4]) : 8;
  const int reps = argc > 5 ? std::max(1, std::atoi(argv[5])) : 5;
  if (B < 1 || T < 1 || H < 1 || C % H != 0) {
    std::fprintf(stderr, "kfuse_transformer_block: model (%lld) must be a multiple of heads (%lld)\n",
                 static_cast<long long>(C), static_cast<long long>(H));
    return 2;
  }
  const int64_t D = C / H;

  std::mt19937 gen(11);
  std::normal_distribution<float> n01(0.f, 1.f);
  auto host = [&](int64_t count, float scale) {
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& e : v) e = n01(gen) * scale;
    return v;
  };
  auto weight = [&](int64_t in, int64_t out) {
    return Tensor::from_vector(host(in * out, 1.f / std::sqrt(static_cast<float>(in))), {in, out});
  };
  auto vec = [&](int64_t n, float scale, float shift = 0.f) {
    std::vector<float> v = host(n, scale);
    for (auto& e : v) e += shift;
    return Tensor::from_vector(v, {n});
  };
  const std::vector<float> x_host = host(B * T * C, 1.f);
  Tensor wqkv = weight(C, 3 * C), wo = weight(C, C), w1 = weight(C, 4 * C), w2 = weight(4 * C, C);
  Tensor bqkv = vec(3 * C, 0.02f), bo = vec(C, 0.02f), b1 = vec(4 * C, 0.02f), b2 = vec(C, 0.02f);
  Tensor g1 = vec(C, 0.1f, 1.f), be1 = vec(C, 0.1f), g2 = vec(C, 0.1f, 1.f), be2 = vec(C, 0.1f);

  auto block = [&](const Tensor& x) {
    const int64_t b = x.shape()[0], t = x.shape()[1];
    Tensor qkv = reshape(matmul(layer_norm(x, {C}, g1, be1), wqkv) + bqkv, {b, t, 3, H, D});
    auto head = [&](int64_t which) {  // [b, t, H, D] -> [b, H, t, D], a view of qkv
      return permute(squeeze(slice(qkv, {Range::all(), Range::all(), Range{which, which + 1}}), 2), {0, 2, 1, 3});
    };
    Tensor q = head(0), k = head(1), v = head(2);
    Tensor i = reshape(arange(t), {t, 1}), j = reshape(arange(t), {1, t});
    Tensor s = matmul(q, transpose(k)) * (1.0 / std::sqrt(static_cast<double>(D)));
    Tensor a = matmul(softmax(where(le(j, i), s, full({1}, -INFINITY)), -1), v);  // [b, H, t, D]
    Tensor x1 = x + matmul(reshape(permute(a, {0, 2, 1, 3}), {b, t, C}), wo) + bo;
    return x1 + matmul(gelu(matmul(layer_norm(x1, {C}, g2, be2), w1) + b1, /*approximate_tanh=*/true), w2) + b2;
  };

  Tensor x = Tensor::from_vector(x_host, {B, T, C});
  Tensor y = block(x);
  kfuse_example::print_plan(y);
  std::vector<Tensor> next;  // a new input tensor per timed evaluation
  for (int r = 0; r < reps; ++r) next.push_back(Tensor::from_vector(x_host, {B, T, C}));
  const kfuse_example::Timing tm = kfuse_example::time_evals(y, reps, [&](int r) { return block(next[r]); });
  const double first = tm.first, med = tm.median();
  // Multiply-adds of the five products: qkv 3C^2, out C^2, MLP 8C^2 per token; scores and P @ V
  // T D per head and token each.
  const double gflop = 2.0 * static_cast<double>(B * T) * (12.0 * C * C + 2.0 * T * C) * 1e-9;
  const int threads = tm.threads;
  std::printf(
      "time: first eval %.2f ms (plan + compile), then median of %d evals %.2f ms (min %.2f) = %.1f GFLOP/s "
      "on %d thread(s)\n",
      first * 1e3, reps, med * 1e3, tm.times.front() * 1e3, gflop / med, threads);

  // The first rows of the last sequence against the fp64 reference of the block on those rows.
  const int64_t rows = std::min<int64_t>(T, 8);
  std::vector<double> ref = reference_values(block(x.slice({Range{B - 1}, Range{0, rows}, Range::all()})));
  std::vector<float> got = y.to_vector<float>();
  const size_t off = static_cast<size_t>((B - 1) * T * C);
  double max_err = 0;
  for (size_t e = 0; e < ref.size(); ++e) max_err = std::fmax(max_err, std::fabs(got[off + e] - ref[e]));
  const bool ok = max_err < 2e-3;
  std::printf("transformer block [%lld x %lld x %lld], %lld heads: max |error| %.2e on %lld rows: %s\n",
              static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(C),
              static_cast<long long>(H), max_err, static_cast<long long>(rows), ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
