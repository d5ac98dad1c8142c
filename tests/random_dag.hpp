// Seeded random DAGs for property tests: element-wise ops (bitwise ones on integer values, fma),
// broadcasts, views, reductions over random axes, softmax, matmul, gathers, rand/randn
// generators, shapes with 1 and odd sizes, several outputs.
#pragma once
#include <functional>
#include <random>

#include "test_util.hpp"

namespace kfuse::test {

struct Dag {
  std::vector<Tensor> roots;
};

// Inputs take dtypes from `input_dtypes` (one entry: no draw, so the DAG of a seed is the same
// as with the default); integer inputs hold small integers. With a GPU `device`, every leaf (the
// inputs, generated values, gather indices) is moved there first, so the whole DAG runs on it.
inline Dag random_dag(uint64_t seed, const std::vector<DType>& input_dtypes = {DType::F32},
                      Device device = Device::cpu()) {
  auto on = [&](const Tensor& t) { return device == Device::cpu() ? t : t.to(device); };
  std::mt19937_64 g(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(g() % n); };
  // Bitwise ops replace a binary op of two integer values one time in two, drawn from their own
  // generator: the draws from g, and so the DAGs of float inputs, are unchanged.
  std::mt19937_64 gb(seed ^ 0xb17b17);
  std::mt19937_64 gf(seed ^ 0xf3a);
  const int64_t sizes[] = {1, 2, 3, 5, 7, 16, 17};
  Shape base = {sizes[pick(7)], sizes[pick(7)]};
  std::vector<Tensor> pool;
  int n_inputs = 1 + static_cast<int>(pick(3));
  for (int i = 0; i < n_inputs; ++i) {
    const DType dt = input_dtypes.size() == 1 ? input_dtypes[0] : input_dtypes[pick(input_dtypes.size())];
    const auto n = static_cast<size_t>(count_of(base));
    pool.push_back(on(is_float(dt)
                          ? make_tensor(random_values(n, seed * 31 + i, -1.5, 1.5), base, dt)
                          : make_tensor(random_ints(n, seed * 31 + i, dt == DType::U8 ? 0 : -9, 9), base, dt)));
  }
  // One DAG in four generates its first input (rand or randn, a kernel that fuses with its
  // consumers); decided from the seed, so the draws from g (the rest of the DAG) are unchanged.
  if (seed % 4 == 1) pool[0] = on(rand(base, seed)) * 3.0 - 1.5;
  if (seed % 4 == 3) pool[0] = on(randn(base, seed));
  int n_ops = 3 + static_cast<int>(pick(10));
  for (int k = 0; k < n_ops; ++k) {
    const Tensor& a = pool[pick(pool.size())];
    Tensor r;
    switch (pick(8)) {
      case 0: {
        // sin reads a bounded argument: its condition number is |x cot x|, so after a few matmuls
        // (values of 10^4) one f32 rounding of the argument, which every backend makes, moves
        // sin by more than any fixed tolerance (seed 4058 did). Range reduction of large
        // arguments is the math tests' subject (test_llvm_math: |x| up to 1e4).
        static const std::function<Tensor(const Tensor&)> un[] = {
            [](const Tensor& x) { return neg(x); },        [](const Tensor& x) { return tanh(x); },
            [](const Tensor& x) { return sigmoid(x); },    [](const Tensor& x) { return relu(x); },
            [](const Tensor& x) { return abs(x); },        [](const Tensor& x) { return sin(tanh(x) * 3.0); },
            [](const Tensor& x) { return x * 0.5 + 0.25; }};
        r = un[pick(7)](a);
        break;
      }
      case 1:
      case 2: {
        // A binary op with another value of a broadcast-compatible shape.
        std::vector<Tensor> ok;
        for (const auto& b : pool)
          if (numpy_broadcast(a.shape(), b.shape())) ok.push_back(b);
        const Tensor& b = ok[pick(ok.size())];
        switch (pick(4)) {
          case 0: r = a + b; break;
          case 1: r = a * b; break;
          case 2: r = maximum(a, b); break;
          default: r = a - b; break;
        }
        // One float binary op in four becomes an fma with a third value (its own generator, so
        // the other DAGs are unchanged).
        if (is_float(a.dtype()) && is_float(b.dtype()) && gf() % 4 == 0) {
          std::vector<Tensor> third;
          for (const auto& c : pool)
            if (is_float(c.dtype()) && numpy_broadcast(r.shape(), c.shape())) third.push_back(c);
          r = fma(a, b, third[gf() % third.size()]);
        }
        if (is_integer(a.dtype()) && is_integer(b.dtype()) && gb() % 2) {
          // (the counts are small integers, negative ones and ones past a u8's width included)
          switch (gb() % 6) {
            case 0: r = a & b; break;
            case 1: r = a | b; break;
            case 2: r = a ^ b; break;
            case 3: r = ~a; break;
            case 4: r = a << b; break;
            default: r = a >> b; break;
          }
        }
        break;
      }
      case 3:
        // a transpose, or (one time in four: each new matmul kernel is an LLVM compile) a matmul
        // of it, a contraction kernel with its operand transposed
        if (a.ndim() == 2) r = pick(4) ? transpose(a) : matmul(a, transpose(a));
        break;
      case 4:
        if (a.ndim() >= 1) r = sum(a, static_cast<int64_t>(pick(a.ndim())), true);
        break;
      case 5:
        if (a.ndim() >= 1) r = max(a, static_cast<int64_t>(pick(a.ndim())), true);
        break;
      case 6:
        // A strided slice, or (no draw from g: the other DAGs stay the same) for seeds 2 mod 5 a
        // gather: columns picked by an index tensor, reversed and repeated; for seeds 3 mod 5 a
        // concat along the last axis of a and a strided slice of it; for seeds 4 mod 5 a pad of
        // the last axis (both: kernels whose rows the LLVM backend cuts into pieces); for seeds
        // 1 mod 5 and an even row, the second half of each row as a slice of a split reshape
        // (which passes/slice_before_split.cpp turns into a slice of a).
        if (a.ndim() == 2 && a.shape()[1] > 1) {
          const Tensor strided = a.slice({Range::all(), Range{0, std::nullopt, 2}});
          const int64_t rows = a.shape()[0], half = a.shape()[1] / 2;
          switch (seed % 5) {
            case 1:
              r = a.shape()[1] % 2
                      ? strided
                      : a.reshape({rows, 2, half}).slice({Range::all(), Range{1, 2}}).reshape({rows, half});
              break;
            case 2: r = index_select(a, 1, on(Tensor::from_vector<int64_t>({a.shape()[1] - 1, 0, 0}, {3}))); break;
            case 3: r = concat({a, strided}, 1); break;
            case 4: r = pad(a, {{0, 0}, {1, 2}}, 1); break;
            default: r = strided; break;
          }
        }
        break;
      default:
        if (a.ndim() == 2 && a.shape()[1] > 0) r = softmax(a, -1);
        break;
    }
    if (r.defined() && r.numel() > 0) pool.push_back(r);
  }
  Dag d;
  size_t n_out = 1 + pick(3);
  for (size_t i = 0; i < n_out && i < pool.size(); ++i)
    d.roots.push_back(pool[pool.size() - 1 - pick(std::min<size_t>(pool.size(), 4))]);
  return d;
}

}  // namespace kfuse::test
