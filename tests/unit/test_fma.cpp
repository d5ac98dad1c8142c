// fma(a, b, c): recording (broadcast, promotion, errors) and the one rounding that makes it differ
// from a * b + c, bit for bit on every CPU backend. Expectations are computed here (std::fma,
// integer arithmetic), not by kfuse's reference evaluator. (The differential suite compares it
// with the reference on random inputs; the random DAGs include it.)
#include <kfuse/stats.hpp>

#include <cmath>
#include <cstring>

#include "forced_backend.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

// Inputs whose product needs more bits than the dtype has: with x = 1 + e (e = 2^-12 in f32,
// 2^-27 in f64), x * x = 1 + 2e + e^2 rounds to 1 + 2e, so x * x - (1 + 2e) is 0 when the
// product is rounded first and exactly e^2 in one rounding.
template <typename T>
struct Tie {
  static constexpr T e = sizeof(T) == 4 ? T(0x1p-12) : T(0x1p-27);
  std::vector<T> a, c;
  explicit Tie(size_t n) : a(n, T(1) + e), c(n, -(T(1) + 2 * e)) {}
};

template <typename T>
std::vector<T> read(const Tensor& t) {
  return t.to_vector<T>();
}

using FmaBackend = ForcedBackend;

// 37 elements: whole vectors and a tail on every vector width.
TEST_P(FmaBackend, RoundsOnceInF32AndF64) {
  Tie<float> f(37);
  Tie<double> d(37);
  Tensor af = Tensor::borrow(f.a.data(), {37}), cf = Tensor::borrow(f.c.data(), {37});
  Tensor ad = Tensor::borrow(d.a.data(), {37}), cd = Tensor::borrow(d.c.data(), {37});
  reset_counters();
  Tensor yf = fma(af, af, cf), zf = af * af + cf;
  eval({yf, zf});
  EXPECT_EQ(counters().fallbacks, 0u) << GetParam() << " declined an f32 kernel";
  Tensor yd = fma(ad, ad, cd);  // (xbyak takes f32 only: f64 goes to the next backend)
  for (float v : read<float>(yf)) ASSERT_EQ(v, 0x1p-24f);
  for (double v : read<double>(yd)) ASSERT_EQ(v, 0x1p-54);
  for (float v : read<float>(zf)) ASSERT_EQ(v, 0.0f) << "a * b + c must not be contracted";
}

// Random values, broadcast and transposed operands: bitwise std::fmaf of the stored operands.
TEST_P(FmaBackend, MatchesStdFmaBitwiseWithBroadcastAndViews) {
  std::vector<float> a(33 * 17), b(17), c(17 * 33);
  std::vector<double> ra = random_values(a.size(), 81), rb = random_values(b.size(), 82),
                      rc = random_values(c.size(), 83);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(ra[i]);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rb[i]);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(rc[i]);
  Tensor A = Tensor::borrow(a.data(), {33, 17}), B = Tensor::borrow(b.data(), {17});
  Tensor C = transpose(Tensor::borrow(c.data(), {17, 33}));
  reset_counters();
  std::vector<float> y = read<float>(fma(A, B, C));
  // (xbyak declines the transposed operand: a stride that is a launch parameter)
  if (GetParam() != "xbyak") { EXPECT_EQ(counters().fallbacks, 0u) << GetParam() << " declined the kernel"; }
  ASSERT_EQ(y.size(), a.size());
  for (int64_t i = 0; i < 33; ++i)
    for (int64_t j = 0; j < 17; ++j) {
      const float want = std::fma(a[i * 17 + j], b[j], c[j * 33 + i]);
      ASSERT_EQ(std::memcmp(&y[i * 17 + j], &want, 4), 0)
          << "(" << i << ", " << j << "): " << y[i * 17 + j] << " vs " << want;
    }
}

// The same value in several operand positions: the register allocator may give the result the
// register of any operand (xbyak picks vfmadd231 or vfmadd213 by which one).
TEST_P(FmaBackend, RepeatedOperands) {
  std::vector<double> ra = random_values(41, 87), rb = random_values(41, 88);
  std::vector<float> a(ra.begin(), ra.end()), b(rb.begin(), rb.end());
  Tensor A = Tensor::borrow(a.data(), {41}), B = Tensor::borrow(b.data(), {41});
  // (the last three: an operand computed just before, whose register the result may reuse)
  const std::vector<Tensor> ys = {fma(A, A, A),           fma(A, B, A),      fma(A, B, B),         fma(B, A, A),
                                  fma(exp(A), B, exp(A)), fma(A, exp(B), A), fma(B, exp(A), A) * A};
  eval(ys);
  const std::vector<float> ex = read<float>(exp(A)), ey = read<float>(exp(B));
  for (size_t i = 0; i < 41; ++i) {
    const float x = a[i], y = b[i], e = ex[i], f = ey[i];
    const float want[] = {std::fma(x, x, x), std::fma(x, y, x), std::fma(x, y, y),    std::fma(y, x, x),
                          std::fma(e, y, e), std::fma(x, f, x), std::fma(y, e, x) * x};
    for (size_t k = 0; k < ys.size(); ++k)
      ASSERT_EQ(read<float>(ys[k])[i], want[k]) << "form " << k << ", element " << i;
  }
}

TEST_P(FmaBackend, NanInfAndSignedZero) {
  const float inf = INFINITY, nan = NAN;
  std::vector<float> a{inf, inf, 1, 2, -0.0f, 0, 3}, b{0, 1, nan, 3, 1, -1, 1}, c{1, -inf, 1, nan, -0.0f, 0, -3};
  Tensor y = fma(Tensor::borrow(a.data(), {7}), Tensor::borrow(b.data(), {7}), Tensor::borrow(c.data(), {7}));
  std::vector<float> v = read<float>(y);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(v[i])) << i;
  EXPECT_TRUE(v[4] == 0 && std::signbit(v[4])) << "-0 * 1 + -0 is -0";
  EXPECT_TRUE(v[5] == 0 && !std::signbit(v[5])) << "0 * -1 + 0 is +0";
  EXPECT_TRUE(v[6] == 0 && !std::signbit(v[6]));
}

// Integers wrap as * and + do; u8 and i8 compute in i32 and wrap on the store.
TEST_P(FmaBackend, IntegersWrap) {
  std::vector<int32_t> a{70000, -3, 5}, b{70000, 7, -9}, c{1, 100, 2};
  std::vector<int32_t> y =
      read<int32_t>(fma(Tensor::borrow(a.data(), {3}), Tensor::borrow(b.data(), {3}), Tensor::borrow(c.data(), {3})));
  for (int i = 0; i < 3; ++i) {
    const auto want =
        static_cast<int32_t>(static_cast<uint32_t>(a[i]) * static_cast<uint32_t>(b[i]) + static_cast<uint32_t>(c[i]));
    EXPECT_EQ(y[i], want) << i;
  }
  std::vector<uint8_t> u{200, 17, 255}, v{3, 15, 255}, w{100, 1, 255};
  std::vector<uint8_t> z =
      read<uint8_t>(fma(Tensor::borrow(u.data(), {3}), Tensor::borrow(v.data(), {3}), Tensor::borrow(w.data(), {3})));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(z[i], static_cast<uint8_t>(u[i] * v[i] + w[i])) << i;
}

// f16 and bf16 compute in f32 and round once more to their dtype (README "Dtypes").
TEST_P(FmaBackend, NarrowFloatsComputeInF32) {
  std::vector<double> ra = random_values(19, 84, -4, 4), rb = random_values(19, 85, -4, 4), rc = random_values(19, 86);
  for (DType dt : {DType::F16, DType::BF16}) {
    Tensor y = fma(make_tensor(ra, {19}, dt), make_tensor(rb, {19}, dt), make_tensor(rc, {19}, dt));
    ASSERT_EQ(y.dtype(), dt);
    std::vector<double> got = values(y);
    for (size_t i = 0; i < 19; ++i) {
      const float want = std::fma(static_cast<float>(stored_as(ra[i], dt)), static_cast<float>(stored_as(rb[i], dt)),
                                  static_cast<float>(stored_as(rc[i], dt)));
      EXPECT_EQ(got[i], stored_as(want, dt)) << dtype_name(dt) << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, FmaBackend, ::testing::Values("reference", "llvm", "xbyak"),
                         [](const auto& info) { return info.param; });

TEST(Fma, BroadcastsAndPromotesLikeArithmetic) {
  Tensor a = make_tensor({1, 2, 3, 4}, {2, 2}, DType::F32);
  Tensor b = make_tensor({10, 20}, {2}, DType::F64);
  Tensor c = make_tensor({1, 2}, {2, 1}, DType::I32);
  expect_tensor(fma(a, b, c), {2, 2}, DType::F64, {11, 41, 32, 82});
  Tensor s = fma(make_tensor({2}, {}, DType::I32), make_tensor({3}, {}, DType::I64), make_tensor({1, 2, 3}, {3}));
  expect_tensor(s, {3}, DType::F32, {7, 8, 9});
  expect_tensor(fma(zeros({0, 3}), ones({3}), ones({1, 3})), {0, 3}, DType::F32, {});
}

TEST(Fma, BoolAndShapeErrorsNameTheCall) {
  Tensor t = make_tensor({1, 0}, {2}, DType::Bool);
  try {
    (void)fma(t, t, t);
    FAIL() << "no error";
  } catch (const UserError& e) { EXPECT_NE(std::string(e.what()).find("fma("), std::string::npos) << e.what(); }
  EXPECT_THROW((void)fma(ones({2, 3}), ones({3}), ones({4})), UserError);
  EXPECT_THROW((void)fma(ones({2}), ones({3}), ones({2})), UserError);
}

}  // namespace
