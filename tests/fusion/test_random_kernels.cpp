// rand / randn as generator kernels (lib/ir/random.hpp): values equal the counter-based
// reference of lib/core/random.hpp on every CPU backend, thread count and kernel boundary
// (uniform bit for bit; normal within the documented few ulp), they fuse with their consumers,
// and graphs holding them are plan-cached, the seed being a run-time kernel parameter.
#include <kfuse/cache.hpp>
#include <kfuse/explain.hpp>
#include <kfuse/options.hpp>
#include <kfuse/stats.hpp>

#include <cmath>

#include "forced_backend.hpp"
#include "core/random.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

// The reference stream, as stored in `dt` (f32 rounds the fp64 value once).
std::vector<double> expected(int64_t n, uint64_t seed, DType dt, bool normal, int64_t first = 0) {
  std::vector<double> v;
  for (int64_t i = first; i < first + n; ++i) {
    auto u = static_cast<uint64_t>(i);
    double x = normal ? detail::counter_normal(seed, u) : detail::counter_uniform(seed, u, dt);
    v.push_back(dt == DType::F32 ? static_cast<double>(static_cast<float>(x)) : x);
  }
  return v;
}

// randn's documented tolerance (README "Random numbers"): 4 ulp of the value in its dtype, at
// least 4 ulp of 1.0 in f64 (the product with cos near its zeros).
::testing::AssertionResult normal_close(const std::vector<double>& got, const std::vector<double>& want, DType dt) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    double w = want[i];
    double ulp = dt == DType::F32 ? std::ldexp(1.0, std::ilogb(static_cast<float>(w)) - 23)
                                  : std::ldexp(1.0, std::max(std::ilogb(w), 0) - 52);
    if (!(std::fabs(got[i] - w) <= 4 * ulp))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << " vs " << w << " (" << std::fabs(got[i] - w) / ulp << " ulp)";
  }
  return ::testing::AssertionSuccess();
}

using OnBackend = ForcedBackend;

TEST_P(OnBackend, UniformIsTheReferenceBitForBit) {
  for (DType dt : {DType::F32, DType::F64})
    for (Shape s : {Shape{}, Shape{1}, Shape{0}, Shape{7}, Shape{5, 7}, Shape{3, 0, 2}, Shape{1031}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + shape_str(s));
      for (uint64_t seed : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}}) {  // ~0: the top bit set
        reset_counters();
        Tensor r = rand(s, seed, dt);
        EXPECT_EQ(values(r), expected(count_of(s), seed, dt, false));
        if (GetParam() != "xbyak") { EXPECT_EQ(counters().fallbacks, 0u) << "another backend computed it"; }
      }
    }
}

TEST_P(OnBackend, NormalIsTheReferenceWithinFourUlp) {
  for (DType dt : {DType::F32, DType::F64})
    for (Shape s : {Shape{1}, Shape{0}, Shape{9, 13}, Shape{4099}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + shape_str(s));
      EXPECT_TRUE(normal_close(values(randn(s, 2024, dt)), expected(count_of(s), 2024, dt, true), dt));
    }
}

TEST_P(OnBackend, FusedConsumersNonContiguousViewsAndReductions) {
  const auto flat = expected(35, 99, DType::F64, false);
  // transposed, sliced and broadcast reads of the generated values, fused into the consumer
  expect_tensor(rand({5, 7}, 99, DType::F64).transpose() + 1.0, {7, 5}, DType::F64, [&] {
    auto t = transposed(flat, 5, 7);
    for (auto& x : t) x += 1.0;
    return t;
  }());
  auto sl = generate({2, 3}, [&](const std::vector<int64_t>& i) { return flat[(1 + 2 * i[0]) * 7 + 4 + i[1]] * 2; });
  expect_tensor(rand({5, 7}, 99, DType::F64).slice({Range{1, 4, 2}, Range{4}}) * 2.0, {2, 3}, DType::F64, sl);
  auto row = expected(7, 99, DType::F64, false);
  expect_tensor(rand({1, 7}, 99, DType::F64).expand({3, 7}) - 0.0, {3, 7}, DType::F64,
                generate({3, 7}, [&](const std::vector<int64_t>& i) { return row[i[1]]; }));
  // a row reduction over generated values (counter = o0 * 7 + r0)
  std::vector<double> sums(5, 0.0);
  for (int i = 0; i < 35; ++i) sums[i / 7] += flat[i];
  EXPECT_TRUE(all_close(values(sum(rand({5, 7}, 99, DType::F64), 1)), sums, 1e-15, 1e-15));
}

INSTANTIATE_TEST_SUITE_P(CpuBackends, OnBackend, ::testing::Values("reference", "llvm", "xbyak"),
                         [](const auto& info) { return info.param; });

TEST(RandKernels, FusesWithItsConsumersIntoOneKernel) {
  Tensor x = make_tensor(random_values(33 * 17, 1), {33, 17});
  Tensor y = relu(randn({33, 17}, 7) * 2.0 + x);
  Explanation e = explain(y);
  ASSERT_EQ(e.kernel_count(), 1u) << e.text();
  EXPECT_NE(e.kernels[0].ops.front().find("rand"), std::string::npos) << e.text();
  auto xv = values(x), n = expected(33 * 17, 7, DType::F64, true);
  std::vector<double> want(xv.size());
  for (size_t i = 0; i < xv.size(); ++i)
    want[i] = std::max(static_cast<double>(static_cast<float>(n[i])) * 2 + xv[i], 0.0);
  EXPECT_TRUE(all_close(values(y), want, 4e-7, 1e-6));
  // a row kernel generates its input in each of its row loops
  Explanation sm = explain(softmax(rand({4, 50}, 3), -1));
  EXPECT_EQ(sm.kernel_count(), 1u) << sm.text();
  // a matmul operand would be regenerated for every output column (rule 8): materialised
  Tensor w = make_tensor(random_values(16 * 5, 4), {16, 5});
  Explanation mm = explain(matmul(randn({8, 16}, 1), w));
  EXPECT_EQ(mm.kernel_count(), 2u) << mm.text();
  EXPECT_TRUE(
      all_close(values(matmul(randn({8, 16}, 1), w)), reference_values(matmul(randn({8, 16}, 1), w)), 1e-5, 1e-5));
}

TEST(RandKernels, AGraphWithRandIsPlannedOnceAndTheSeedIsAParameter) {
  Tensor x1 = make_tensor(random_values(60, 2), {6, 10}), x2 = make_tensor(random_values(60, 3), {6, 10});
  auto make = [](const Tensor& x, uint64_t seed) {
    return relu(randn({6, 10}, seed) * 2.0 + x) + rand({6, 10}, seed + 1);
  };
  Tensor y1 = make(x1, 7);
  eval({y1});
  // another seed: planned again (the seed is an attribute of the graph), but the same kernel code
  reset_counters();
  Tensor y3 = make(x1, 8);
  eval({y3});
  EXPECT_EQ(counters().kernels_compiled, 0u);
  EXPECT_EQ(counters().cache_hits, 1u);
  EXPECT_NE(values(y3), values(y1));
  // the same structure and seeds on other data: the cached program, no plan and no kernel lookup
  clear_memory_cache();
  reset_counters();
  Tensor y2 = make(x2, 7);
  eval({y2});
  Counters c = counters();
  EXPECT_EQ(c.kernels_compiled, 0u);
  EXPECT_EQ(c.cache_misses, 0u);
  EXPECT_EQ(c.disk_loads, 0u);
  EXPECT_EQ(c.kernels_launched, 1u);
  for (const Tensor& y : {y1, y2, y3}) EXPECT_TRUE(all_close(values(y), reference_values(y), 4e-7, 1e-6));
}

TEST(RandKernels, SameValuesAcrossKernelBoundariesAndThreadCounts) {
  const int64_t n = 20011;  // odd, and long enough to be split across threads
  const auto want = expected(n, 5, DType::F32, false);
  Options saved = options();
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE(threads);
    Options o = saved;
    o.num_threads = threads;
    set_options(o);
    Tensor r = rand({n}, 5);
    // r feeds a row reduction and a pointwise kernel: computed in each (or once and stored)
    Tensor s = sum(r.reshape({n, 1}), 1), d = r * 2.0;
    eval({s, d, r});
    EXPECT_EQ(values(r), want);
    EXPECT_EQ(values(s), want);
    auto dv = values(d);
    for (auto& v : dv) v /= 2;
    EXPECT_EQ(dv, want);
    // the tail of a longer stream is the shorter stream's continuation (counter = index)
    EXPECT_EQ(values(rand({n + 3}, 5).slice({Range{n, n + 3}})), expected(3, 5, DType::F32, false, n));
  }
  set_options(saved);
}

}  // namespace
}  // namespace kfuse::test
