// Creation: full/zeros/ones/scalar in every dtype, arange, linspace, and the counter-based
// rand/randn (deterministic per seed, in range, plausible moments, independent of the shape
// the same elements are viewed through).
#include <cmath>

#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

TEST(Creation, FullZerosOnesScalar) {
  for (DType dt : all_dtypes()) {
    SCOPED_TRACE(dtype_name(dt));
    expect_tensor(zeros({2, 3}, dt), {2, 3}, dt, std::vector<double>(6, 0.0));
    expect_tensor(ones({3}, dt), {3}, dt, {1, 1, 1});
    expect_tensor(full({1, 2}, 3.0, dt), {1, 2}, dt, std::vector<double>(2, stored_as(3.0, dt)));
    expect_tensor(full({0, 4}, 3.0, dt), {0, 4}, dt, {});
    expect_tensor(scalar(-2.0, dt), {}, dt, {stored_as(-2.0, dt)});
  }
  // the value is converted like a cast: truncation for integers, != 0 for bool
  expect_tensor(full({2}, -2.7, DType::I32), {2}, DType::I32, {-2, -2});
  expect_tensor(full({2}, 0.5, DType::Bool), {2}, DType::Bool, {1, 1});
  expect_tensor(full({2}, 0.1), {2}, DType::F32, {static_cast<double>(0.1f), static_cast<double>(0.1f)});
  expect_tensor(full({2}, kNaN, DType::F64), {2}, DType::F64, {kNaN, kNaN});
  expect_tensor(full({1}, -kInf), {1}, DType::F32, {-kInf});
  expect_tensor(scalar(2.5), {}, DType::F32, {2.5});
  EXPECT_EQ(zeros({3}).dtype(), DType::F32);  // the default dtype
}

TEST(Creation, Arange) {
  expect_tensor(arange(5), {5}, DType::I64, {0, 1, 2, 3, 4});
  expect_tensor(arange(2, 7), {5}, DType::I64, {2, 3, 4, 5, 6});
  expect_tensor(arange(1, 2, 0.25, DType::F32), {4}, DType::F32, {1, 1.25, 1.5, 1.75});
  expect_tensor(arange(5, 0, -2), {3}, DType::I64, {5, 3, 1});
  expect_tensor(arange(-1.5, 1.5, 1, DType::F64), {3}, DType::F64, {-1.5, -0.5, 0.5});
  expect_tensor(arange(0, 7, 3, DType::I32), {3}, DType::I32, {0, 3, 6});
  expect_tensor(arange(0), {0}, DType::I64, {});
  expect_tensor(arange(3, 1), {0}, DType::I64, {});
  expect_tensor(arange(0, 1, -1), {0}, DType::I64, {});
  // an odd length that is not a multiple of 8 or 16, used in arithmetic
  Tensor a = arange(0, 37, 1, DType::F32);
  auto e = generate({37}, [](const std::vector<int64_t>& i) { return static_cast<double>(i[0]) * 2 + 1; });
  expect_tensor(a * 2.0 + 1.0, {37}, DType::F32, e);
}

TEST(Creation, Linspace) {
  expect_tensor(linspace(0, 1, 5), {5}, DType::F32, {0, 0.25, 0.5, 0.75, 1});
  expect_tensor(linspace(-1, 1, 3, DType::F64), {3}, DType::F64, {-1, 0, 1});
  expect_tensor(linspace(2, 2, 1), {1}, DType::F32, {2});
  expect_tensor(linspace(5, 7, 1), {1}, DType::F32, {5});
  expect_tensor(linspace(0, 1, 0), {0}, DType::F32, {});
  expect_tensor(linspace(10, 0, 6, DType::I32), {6}, DType::I32, {10, 8, 6, 4, 2, 0});
  auto e = generate({11}, [](const std::vector<int64_t>& i) { return 3.0 * static_cast<double>(i[0]) / 10.0; });
  expect_tensor(linspace(0, 3, 11, DType::F64), {11}, DType::F64, e, 1e-15, 1e-15);
}

struct Moments {
  double mean, var, lo, hi;
};
Moments moments(const std::vector<double>& v) {
  Moments m{0, 0, v[0], v[0]};
  for (double x : v) m.mean += x, m.lo = std::min(m.lo, x), m.hi = std::max(m.hi, x);
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size() - 1);
  return m;
}

constexpr int64_t kN = 20000;

TEST(Rand, UniformInUnitIntervalWithPlausibleMoments) {
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    auto v = values(rand({kN}, 42, dt));
    Moments m = moments(v);
    EXPECT_GE(m.lo, 0.0);
    EXPECT_LT(m.hi, 1.0);
    // mean 1/2 and variance 1/12; bounds are about 5 standard errors
    EXPECT_NEAR(m.mean, 0.5, 0.011);
    EXPECT_NEAR(m.var, 1.0 / 12, 0.003);
    // ten equal bins each hold about a tenth (binomial sd ~42)
    std::vector<int> bins(10, 0);
    for (double x : v) ++bins[static_cast<size_t>(x * 10)];
    for (int c : bins) EXPECT_NEAR(c, kN / 10, 220);
    // neighbours are uncorrelated
    double c = 0;
    for (int64_t i = 0; i + 1 < kN; ++i) c += (v[i] - 0.5) * (v[i + 1] - 0.5);
    EXPECT_NEAR(c / static_cast<double>(kN) / (1.0 / 12), 0.0, 0.04);
  }
}

TEST(Rand, DeterministicPerSeed) {
  auto a = values(rand({1000}, 7)), b = values(rand({1000}, 7)), c = values(rand({1000}, 8));
  EXPECT_EQ(a, b);
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  EXPECT_LT(same, 5);
  // randn likewise
  EXPECT_EQ(values(randn({100}, 3)), values(randn({100}, 3)));
  EXPECT_NE(values(randn({100}, 3)), values(randn({100}, 4)));
  // an empty shape gives no values; a scalar one value
  expect_tensor(rand({0, 3}, 1), {0, 3}, DType::F32, {});
  EXPECT_EQ(rand({}, 1).numel(), 1);
}

TEST(Rand, ElementIDependsOnlyOnSeedAndIndex) {
  // rand([n]) and rand([a, b]) hold the same elements in row-major order, whatever the views
  auto flat = values(rand({35}, 99));
  expect_tensor(rand({5, 7}, 99), {5, 7}, DType::F32, flat);
  expect_tensor(rand({35}, 99).reshape({7, 5}), {7, 5}, DType::F32, flat);
  expect_tensor(rand({5, 7}, 99).transpose(), {7, 5}, DType::F32, transposed(flat, 5, 7));
  // a slice holds the same values as the corresponding elements of the whole
  auto e = generate({2, 3}, [&](const std::vector<int64_t>& i) { return flat[(1 + 2 * i[0]) * 7 + 4 + i[1]]; });
  expect_tensor(rand({5, 7}, 99).slice({Range{1, 4, 2}, Range{4}}), {2, 3}, DType::F32, e);
  // a prefix of a longer tensor is the shorter tensor
  auto longer = values(rand({100}, 99));
  EXPECT_EQ(std::vector<double>(longer.begin(), longer.begin() + 35), flat);
  // evaluating inside an expression or alone gives the same numbers
  expect_tensor(rand({35}, 99) * 2.0, {35}, DType::F32, [&] {
    auto d = flat;
    for (auto& x : d) x *= 2;
    return d;
  }());
  auto nflat = values(randn({12}, 5));
  expect_tensor(randn({3, 4}, 5), {3, 4}, DType::F32, nflat);
}

TEST(Randn, StandardNormalMoments) {
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    auto v = values(randn({kN}, 11, dt));
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, 0.0, 0.036);  // 5 standard errors
    EXPECT_NEAR(m.var, 1.0, 0.05);
    // about 68.3% within one sd, 95.4% within two; no NaN or Inf
    int one = 0, two = 0;
    for (double x : v) {
      ASSERT_TRUE(std::isfinite(x));
      one += std::fabs(x) < 1;
      two += std::fabs(x) < 2;
    }
    EXPECT_NEAR(one / static_cast<double>(kN), 0.6827, 0.02);
    EXPECT_NEAR(two / static_cast<double>(kN), 0.9545, 0.01);
  }
}

}  // namespace
