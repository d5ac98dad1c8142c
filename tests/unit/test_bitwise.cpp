// bitwise_and/or/xor/not and shift_left/right on every integer dtype and on bool, on each CPU
// backend (xbyak declines integer kernels: what it hands back must still be right), against the
// C++ semantics written out here per dtype: two's complement wrap, arithmetic right shift
// (logical for u8), and ops.def's rule for counts outside [0, bits): 0 for a left shift, the
// sign fill for a right one. Also broadcasting, views, scalar operands and operators, promotion,
// and the shift counts 0, 1, bits - 1, bits and beyond, negative ones included.
#include <kfuse/explain.hpp>

#include <limits>
#include <type_traits>

#include "forced_backend.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

template <typename T>
int64_t shift_oracle(Op op, T x, T count) {
  using U = std::make_unsigned_t<T>;
  constexpr int64_t bits = 8 * sizeof(T);
  const auto c = static_cast<int64_t>(count);
  if (op == Op::Shl) return c < 0 || c >= bits ? 0 : static_cast<T>(static_cast<U>(static_cast<U>(x) << c));
  if (c < 0 || c >= bits) return x < 0 ? -1 : 0;
  return static_cast<T>(x >> c);
}

// op(a, b) in T (b unused for bitwise_not).
template <typename T>
int64_t oracle(Op op, int64_t a, int64_t b) {
  const auto x = static_cast<T>(a), y = static_cast<T>(b);
  switch (op) {
    case Op::BitAnd: return static_cast<T>(x & y);
    case Op::BitOr: return static_cast<T>(x | y);
    case Op::BitXor: return static_cast<T>(x ^ y);
    case Op::BitNot: return static_cast<T>(~x);
    default: return shift_oracle<T>(op, x, y);
  }
}

int64_t oracle(Op op, DType dt, int64_t a, int64_t b) {
  switch (dt) {
    case DType::U8: return oracle<uint8_t>(op, a, b);
    case DType::I8: return oracle<int8_t>(op, a, b);
    case DType::I32: return oracle<int32_t>(op, a, b);
    default: return oracle<int64_t>(op, a, b);
  }
}

Tensor apply(Op op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case Op::BitAnd: return a & b;
    case Op::BitOr: return a | b;
    case Op::BitXor: return a ^ b;
    case Op::BitNot: return ~a;
    case Op::Shl: return a << b;
    default: return a >> b;
  }
}

const Op kOps[] = {Op::BitAnd, Op::BitOr, Op::BitXor, Op::BitNot, Op::Shl, Op::Shr};

// Values of `dt` as int64: the extremes, -1, 0, 1, then small and full-range random ones.
std::vector<int64_t> operands(DType dt, size_t n, uint64_t seed) {
  int64_t lo = 0, hi = 255;
  if (dt == DType::I8) lo = -128, hi = 127;
  if (dt == DType::I32) lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  if (dt == DType::I64) lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> v = {lo, hi, lo + 1, hi - 1, 0, 1, dt == DType::U8 ? 128 : -1};
  std::mt19937_64 g(seed);
  while (v.size() < n) {
    const auto r = static_cast<int64_t>(g());
    // Full-range draws for i64 (|v| > 2^53 too: exact on every path), the dtype's range otherwise.
    v.push_back(dt == DType::I64
                    ? r
                    : lo + static_cast<int64_t>(static_cast<uint64_t>(r) % static_cast<uint64_t>(hi - lo + 1)));
  }
  v.resize(n);
  return v;
}

// Shift counts of `dt`: 0, 1, bits - 1, bits, bits + 1, then out-of-range ones (as unsigned too).
std::vector<int64_t> counts(DType dt, size_t n) {
  const int64_t bits = dt == DType::I32 ? 32 : dt == DType::I64 ? 64 : 8;
  std::vector<int64_t> v = {0, 1, bits - 1, bits, bits + 1, 2, 3, bits / 2};
  if (dt == DType::U8) v.insert(v.end(), {255, 128, 200});
  else v.insert(v.end(), {-1, -bits, dt == DType::I8 ? -128 : 100});
  for (size_t i = 0; v.size() < n; ++i) v.push_back(static_cast<int64_t>(i % static_cast<size_t>(bits)));
  v.resize(n);
  return v;
}

// A tensor stored in `dt` (so kernels load that dtype).
template <typename T>
Tensor stored(const std::vector<int64_t>& v, Shape s) {
  std::vector<T> t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = static_cast<T>(v[i]);
  return Tensor::from_vector(t, std::move(s));
}
Tensor of(const std::vector<int64_t>& v, Shape s, DType dt) {
  switch (dt) {
    case DType::U8: return stored<uint8_t>(v, std::move(s));
    case DType::I8: return stored<int8_t>(v, std::move(s));
    case DType::I32: return stored<int32_t>(v, std::move(s));
    default: return stored<int64_t>(v, std::move(s));
  }
}

class Bitwise : public ForcedBackend {};

TEST_P(Bitwise, EveryOpOnEveryIntegerDtypeMatchesCSemantics) {
  const size_t n = 203;  // odd and past several vector widths: vector body and tail
  for (DType dt : {DType::U8, DType::I8, DType::I32, DType::I64}) {
    const auto av = operands(dt, n, 1), bv = operands(dt, n, 2), cv = counts(dt, n);
    const Tensor a = of(av, {static_cast<int64_t>(n)}, dt);
    for (Op op : kOps) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + op_name(op));
      const bool shift = op == Op::Shl || op == Op::Shr;
      // Shifts of every operand by the special counts, and by full-range values (mostly far out).
      for (const auto* second : {&cv, &bv}) {
        if (!shift && second == &cv) continue;
        Tensor y = apply(op, a, of(*second, {static_cast<int64_t>(n)}, dt));
        ASSERT_EQ(y.dtype(), dt);
        const auto got = y.to_vector<int64_t>();
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], oracle(op, dt, av[i], (*second)[i])) << "a " << av[i] << ", b " << (*second)[i];
      }
    }
  }
}

// Broadcasting ([7, 5] transposed, op [5] expanded) and strided slices, with the counts
// broadcast along rows: each row shifts by another count.
TEST_P(Bitwise, BroadcastAndNonContiguousOperands) {
  for (DType dt : {DType::U8, DType::I8, DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(dt));
    const auto av = operands(dt, 35, 3), bv = operands(dt, 5, 4), cv = counts(dt, 5);
    const Tensor at = of(av, {7, 5}, dt).transpose();  // [5, 7]: at[i][j] = av[j * 5 + i]
    const Tensor b = of(bv, {5, 1}, dt), c = of(cv, {5, 1}, dt);
    for (Op op : kOps) {
      SCOPED_TRACE(op_name(op));
      const bool shift = op == Op::Shl || op == Op::Shr;
      const auto& second = shift ? cv : bv;
      const auto got = apply(op, at, shift ? c : b).to_vector<int64_t>();
      ASSERT_EQ(got.size(), 35u);
      for (size_t i = 0; i < 5; ++i)
        for (size_t j = 0; j < 7; ++j) ASSERT_EQ(got[i * 7 + j], oracle(op, dt, av[j * 5 + i], second[i]));
      // every other column of the transposed view, against the first row broadcast down
      Tensor s = at.slice({Range::all(), Range{0, 7, 2}});
      Tensor row = at.slice({Range{0, 1}, Range{1, 5}});
      const auto got2 = apply(op, s, row).to_vector<int64_t>();
      for (size_t i = 0; i < 5; ++i)
        for (size_t j = 0; j < 4; ++j) ASSERT_EQ(got2[i * 4 + j], oracle(op, dt, av[2 * j * 5 + i], av[(j + 1) * 5]));
    }
  }
}

// On bools, and/or/xor/not are the logical ops (result bool); scalars take the tensor's dtype.
TEST_P(Bitwise, BoolOperandsScalarsAndPromotion) {
  const Tensor p = make_tensor({0, 0, 1, 1}, {4}, DType::Bool), q = make_tensor({0, 1, 0, 1}, {4}, DType::Bool);
  expect_tensor(p & q, {4}, DType::Bool, {0, 0, 0, 1});
  expect_tensor(p | q, {4}, DType::Bool, {0, 1, 1, 1});
  expect_tensor(p ^ q, {4}, DType::Bool, {0, 1, 1, 0});
  expect_tensor(~p, {4}, DType::Bool, {1, 1, 0, 0});
  expect_tensor(bitwise_not(q), {4}, DType::Bool, {1, 0, 1, 0});
  // bool with an integer scalar: i64 (the scalar's kind), as arithmetic would promote
  expect_tensor(p | 2, {4}, DType::I64, {2, 2, 3, 3});

  const Tensor u = make_tensor({0, 7, 200, 255}, {4}, DType::U8);
  expect_tensor(u & 15, {4}, DType::U8, {0, 7, 8, 15});
  expect_tensor(240 | u, {4}, DType::U8, {240, 247, 248, 255});
  expect_tensor(5 ^ u, {4}, DType::U8, {5, 2, 205, 250});
  expect_tensor(u << 4, {4}, DType::U8, {0, 112, 128, 240});  // wraps at 256
  expect_tensor(u >> 4, {4}, DType::U8, {0, 0, 12, 15});      // logical: u8 is unsigned
  expect_tensor(shift_right(u, 8), {4}, DType::U8, {0, 0, 0, 0});
  const Tensor i = make_tensor({-128, -1, 5, 127}, {4}, DType::I8);
  expect_tensor(i >> 1, {4}, DType::I8, {-64, -1, 2, 63});  // arithmetic
  expect_tensor(i >> 7, {4}, DType::I8, {-1, -1, 0, 0});
  expect_tensor(i << 1, {4}, DType::I8, {0, -2, 10, -2});
  // u8 with i8 promotes to i32 (the byte's value, not its bits); with i32 the result is i32
  expect_tensor(u & i, {4}, DType::I32, {0, 7, 0, 127});
  expect_tensor(u >> make_tensor({1, 2, 3, 4}, {4}, DType::I32), {4}, DType::I32, {0, 1, 25, 15});
  expect_tensor(~make_tensor({0, -1, 41}, {3}, DType::I32), {3}, DType::I32, {-1, 0, -42});
}

// A nibble pick fused with float arithmetic is one kernel on every backend (xbyak hands it to
// the next one, or the interpreter here), with the value right.
TEST_P(Bitwise, FusesWithFloatArithmetic) {
  const std::vector<double> bytes = random_ints(64, 9, 0, 255);
  const Tensor b = make_tensor(bytes, {8, 8}, DType::U8);
  const Tensor sh = (arange(0, 8, 1, DType::I32) & 1) << 2;
  Tensor y = ((b >> sh) & 15).cast(DType::F32) * 0.5 + 1.0;
  EXPECT_EQ(explain(y).kernel_count(), 1u) << explain(y).text();
  std::vector<double> want(64);
  for (size_t k = 0; k < 64; ++k) want[k] = ((static_cast<int>(bytes[k]) >> (k % 2 ? 4 : 0)) & 15) * 0.5 + 1.0;
  expect_tensor(y, {8, 8}, DType::F32, want);
}

INSTANTIATE_TEST_SUITE_P(Backends, Bitwise, ::testing::Values("reference", "llvm", "xbyak"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kfuse::test
