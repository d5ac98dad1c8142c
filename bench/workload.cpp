#include "workload.hpp"

#include "bag_problem.hpp"

#include <kfuse/half.hpp>

#include <algorithm>
#include <cmath>

namespace kbench {

int num_inputs(Kind k) {
  switch (k) {
    case Kind::LayerNorm:
    case Kind::ReluFma:
    case Kind::Chain3: return 3;
    case Kind::Mlp:
    case Kind::Attention: return 3;
    case Kind::Add:
    case Kind::AddRelu:
    case Kind::Matmul: return 2;
    default: return 1;
  }
}

void make_inputs(Workload& w, uint64_t seed) {
  if (w.kind == Kind::EmbeddingBag) {  // its own ids; no float inputs
    w.inputs.clear();
    w.bag = shared_bag_problem(w.rows, w.cols, w.bags, w.zipf);
    const BagProblem& p = *w.bag;
    // What a bag must read: each distinct row once in its storage format, the ids and the offsets.
    w.read_bytes = static_cast<double>(p.distinct) * bag_row_bytes(w.table, w.cols) +
                   8.0 * static_cast<double>(p.ids.size() + p.offsets.size());
    w.out_numel = w.bags * w.cols;
    w.write_bytes = 4.0 * static_cast<double>(w.out_numel);
    w.compulsory_bytes = w.read_bytes + w.write_bytes;
    w.flops = 0;
    return;
  }
  SplitMix rng{seed * 0x2545F4914F6CDD1DULL + 17};
  const int64_t n = w.numel();
  w.inputs.clear();
  auto fill = [&](int64_t count, float lo, float hi) {
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& x : v) x = rng.uniform(lo, hi);
    w.inputs.push_back(std::move(v));
  };
  switch (w.kind) {
    case Kind::LayerNorm:
      fill(n, -3, 3);
      fill(w.cols, 0.5f, 1.5f);   // weight
      fill(w.cols, -0.5f, 0.5f);  // bias
      break;
    case Kind::SumAxis0:
    case Kind::SumAxis1:
    case Kind::SumAll: fill(n, 0, 1); break;  // positive: relative error is meaningful
    case Kind::Matmul:
      fill(w.rows * w.inner, -1, 1);
      fill(w.inner * w.cols, -1, 1);
      // Every implementation reads the same stored values, and the reference their values.
      w.inputs_stored.clear();
      for (size_t i = 0; i < w.inputs.size() && w.stored_narrow(); ++i) {
        auto& st = w.inputs_stored.emplace_back();
        for (float& x : w.inputs[i]) {
          if (w.bf16) {
            const uint16_t h = kfuse::float_to_bf16_bits(x);
            st.insert(st.end(), {static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8)});
            x = kfuse::bf16_bits_to_float(h);
          } else {  // A: u8 over [0, 255], B: i8 over [-128, 127]
            const int v = i == 0 ? static_cast<int>((x + 1) * 127.99f) : static_cast<int>(std::floor(x * 128));
            st.push_back(static_cast<uint8_t>(v));
            x = static_cast<float>(v);
          }
        }
      }
      break;
    case Kind::Mlp: {  // weights scaled by 1/sqrt(K) as initialised in a model: pre-activations ~ unit range
      const float s = 1.0f / std::sqrt(static_cast<float>(w.inner));
      fill(w.rows * w.inner, -1, 1);
      fill(w.inner * w.cols, -s, s);
      fill(w.cols, -0.5f, 0.5f);
      break;
    }
    case Kind::Attention:
      for (int i = 0; i < 3; ++i) fill(w.batch * n, -1, 1);  // q, k, v
      break;
    case Kind::Stack:
      for (int64_t i = 0; i < w.inner; ++i) fill(n, -3, 3);
      break;
    default:
      for (int i = 0; i < num_inputs(w.kind); ++i) fill(n, -3, 3);
  }
  switch (w.kind) {
    case Kind::Attention: w.out_numel = w.batch * n; break;
    case Kind::Stack: w.out_numel = w.inner * n; break;
    case Kind::SumAxis0: w.out_numel = w.cols; break;
    case Kind::SumAxis1: w.out_numel = w.rows; break;
    case Kind::SumAll: w.out_numel = 1; break;
    default: w.out_numel = n;
  }
  double in_bytes = 0;
  const double es = w.bf16 ? 2.0 : w.u8s8 ? 1.0 : 4.0;  // (u8s8: i32 results)
  for (auto& v : w.inputs) in_bytes += es * static_cast<double>(v.size());
  w.read_bytes = in_bytes;
  w.write_bytes = (w.bf16 ? 2.0 : 4.0) * static_cast<double>(w.out_numel);
  w.compulsory_bytes = w.read_bytes + w.write_bytes;
  w.flops =
      w.gemm() ? 2.0 * static_cast<double>(w.rows) * static_cast<double>(w.cols) * static_cast<double>(w.inner) : 0;
  // Attention: two products of batch x T x T x D each (the softmax's exps not counted).
  if (w.kind == Kind::Attention) w.flops = 4.0 * static_cast<double>(w.batch) * static_cast<double>(n * w.rows);
}

namespace {

// Attention's rows (b, i): softmax over j of q_i . k_j / sqrt(D), then the weighted sum of v_j.
Reference attention_reference(const Workload& w) {
  const int64_t T = w.rows, D = w.cols, total = w.batch * T;
  Reference r;
  r.row_len = D;
  const int64_t step = total <= 256 ? 1 : total / 128;
  for (int64_t i = 0; i < total; i += step) r.rows.push_back(i);
  if (r.rows.back() != total - 1) r.rows.push_back(total - 1);
  const float *q = w.inputs[0].data(), *k = w.inputs[1].data(), *v = w.inputs[2].data();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> p(static_cast<size_t>(T)), out(static_cast<size_t>(D));
  for (int64_t row : r.rows) {
    const int64_t b = row / T;
    const float* qi = q + row * D;
    double mx = -1e300, den = 0;
    for (int64_t j = 0; j < T; ++j) {
      const float* kj = k + (b * T + j) * D;
      double s = 0;
      for (int64_t d = 0; d < D; ++d) s += static_cast<double>(qi[d]) * kj[d];
      p[j] = s * scale;
      mx = std::max(mx, p[j]);
    }
    for (double& x : p) den += (x = std::exp(x - mx));
    std::fill(out.begin(), out.end(), 0.0);
    for (int64_t j = 0; j < T; ++j)
      for (int64_t d = 0; d < D; ++d) out[d] += p[j] / den * v[(b * T + j) * D + d];
    r.values.insert(r.values.end(), out.begin(), out.end());
  }
  // |v| <= 1 and the weights sum to 1: f32 errors of the scores (|s| ~ 1, ~sqrt(D) eps) and of
  // the weighted sum (T terms) stay far below 1e-5 absolute.
  r.atol = 1e-5;
  r.rtol = 1e-4;
  return r;
}

}  // namespace

Reference gemm_reference(const Workload& w) {
  if (w.kind == Kind::Attention) return attention_reference(w);
  const int64_t M = w.rows, N = w.cols, K = w.inner;
  Reference r;
  r.row_len = N;
  const int64_t step = M <= 256 ? 1 : M / 128;
  for (int64_t i = 0; i < M; i += step) r.rows.push_back(i);
  if (r.rows.back() != M - 1) r.rows.push_back(M - 1);  // the edge tiles end there
  const float* a = w.inputs[0].data();
  const float* b = w.inputs[1].data();
  std::vector<float> bt;  // W [N, K] as B [K, N]
  if (w.b_t) {
    bt.resize(static_cast<size_t>(K * N));
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) bt[static_cast<size_t>(k * N + j)] = b[j * K + k];
    b = bt.data();
  }
  std::vector<double> acc(static_cast<size_t>(N)), mag(static_cast<size_t>(N));
  for (int64_t i : r.rows) {
    std::fill(acc.begin(), acc.end(), 0.0);
    std::fill(mag.begin(), mag.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {  // k outer, n inner: B is read along its rows
      const double av = a[i * K + k];
      const float* br = b + k * N;  // (b_t: the [K, N] copy of W^T)
      for (int64_t j = 0; j < N; ++j) {
        acc[j] += av * br[j];
        mag[j] += std::fabs(av * br[j]);
      }
    }
    if (w.kind == Kind::Matmul) {
      r.values.insert(r.values.end(), acc.begin(), acc.end());
      // f32 sums in any order: |error| <= K eps sum|a||b| in the worst case, ~sqrt(K) eps in
      // practice; 8 eps sum|a||b| still rejects a lost or doubled term of K >= 64.
      for (double m : mag) r.bound.push_back(8 * 1.1920929e-7 * m);
      if (w.bf16) r.rtol = 0x1p-8;  // the result rounded to bf16 once
      continue;
    }
    // Mlp: + bias, gelu (tanh form), layer_norm without affine.
    const float* bias = w.inputs[2].data();
    double mean = 0, var = 0;
    for (int64_t j = 0; j < N; ++j) {
      const double h = acc[j] + bias[j];
      acc[j] = 0.5 * h * (1.0 + std::tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)));
      mean += acc[j];
    }
    mean /= static_cast<double>(N);
    for (int64_t j = 0; j < N; ++j) var += (acc[j] - mean) * (acc[j] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(N) + kLayerNormEps);
    for (int64_t j = 0; j < N; ++j) r.values.push_back((acc[j] - mean) * inv);
  }
  if (w.kind == Kind::Mlp) r.atol = 2e-4;  // f32 GEMM error divided by the row's deviation
  return r;
}

}  // namespace kbench
