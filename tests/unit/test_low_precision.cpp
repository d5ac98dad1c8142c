// The 8- and 16-bit storage dtypes u8, i8, f16, bf16 (README "Dtypes"): the software f16/bf16
// conversions exhaustively against a straightforward reference (and F16C where the CPU has it),
// promotion, creation and printing, then casts both ways with every dtype, element-wise ops and
// reductions on every CPU backend built in (and OpenCL where present), compared bit for bit with
// the host conversions or with the fp64 reference.
#include <cstdlib>
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <kfuse/options.hpp>
#include <kfuse/stats.hpp>

#include "backend/backend.hpp"
#include "forced_backend.hpp"
#include "random_dag.hpp"
#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

constexpr DType kNarrow[] = {DType::U8, DType::I8, DType::F16, DType::BF16};
const std::vector<DType> kEvery = {DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64,
                                   DType::U8,   DType::I8,  DType::F16, DType::BF16};

// ---- the software conversions ----

// Straightforward decoders: sign * mantissa * 2^exponent in double.
double ref_f16(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double s = (h & 0x8000) ? -1 : 1;
  if (e == 0x1f) return m ? std::nan("") : s * INFINITY;
  return e ? s * std::ldexp(1024 + m, e - 25) : s * std::ldexp(m, -24);
}
double ref_bf16(uint16_t h) {
  int e = (h >> 7) & 0xff, m = h & 0x7f;
  double s = (h & 0x8000) ? -1 : 1;
  if (e == 0xff) return m ? std::nan("") : s * INFINITY;
  return e ? s * std::ldexp(128 + m, e - 134) : s * std::ldexp(m, -133);
}

// Every finite positive value of a 16-bit format as (bits, value), ascending; then the rounding of
// floats just below, at and above each midpoint between neighbours (the ties go to the even
// mantissa; past the largest finite value the neighbour is infinity).
template <class Decode, class Round>
void check_rounding(Decode decode, Round round, uint16_t inf_bits) {
  for (uint32_t lo = 0; lo < inf_bits; ++lo) {
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const double a = decode(static_cast<uint16_t>(lo));
    const double b = hi == inf_bits ? 2 * a - decode(static_cast<uint16_t>(lo - 1)) : decode(hi);  // the next step
    const float mid = static_cast<float>((a + b) / 2);
    ASSERT_EQ(static_cast<double>(mid), (a + b) / 2) << lo;  // exact in f32
    const uint16_t even = (lo & 1) ? hi : static_cast<uint16_t>(lo);
    for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
      const float sg = sign ? -1.0f : 1.0f;
      ASSERT_EQ(round(sg * mid), even | sign) << "tie at bits " << lo;
      ASSERT_EQ(round(sg * std::nextafter(mid, 0.0f)), lo | sign) << "below the tie at bits " << lo;
      ASSERT_EQ(round(sg * std::nextafter(mid, INFINITY)), hi | sign) << "above the tie at bits " << lo;
      ASSERT_EQ(round(sg * static_cast<float>(a)), lo | sign) << "exact value at bits " << lo;
    }
  }
}

TEST(HalfConversion, EveryF16BitPatternDecodesExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const float f = f16_bits_to_float(b);
    const double r = ref_f16(b);
    if (std::isnan(r)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      const uint32_t x = std::bit_cast<uint32_t>(f);
      EXPECT_EQ(x >> 31, h >> 15u) << "NaN sign " << h;
      EXPECT_EQ((x >> 13) & 0x3ff, (h & 0x3ff) | 0x200) << "quiet NaN keeping its payload " << h;
      EXPECT_EQ(float_to_f16_bits(f), b | 0x200) << "NaN round trip " << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), r) << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
    ASSERT_EQ(float_to_f16_bits(f), b) << "round trip " << h;
  }
}

TEST(HalfConversion, F16RoundsToNearestEvenAtEveryTie) {
  check_rounding(ref_f16, float_to_f16_bits, 0x7c00);
  EXPECT_EQ(float_to_f16_bits(65519.996f), 0x7bff);  // just below the overflow tie
  EXPECT_EQ(float_to_f16_bits(1e30f), 0x7c00);
  EXPECT_EQ(float_to_f16_bits(0x1p-25f), 0x0000);  // the tie between 0 and the smallest subnormal
  EXPECT_EQ(float_to_f16_bits(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_f16_bits(1e-45f), 0x0000);  // an f32 subnormal
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000);
}

TEST(HalfConversion, EveryBf16BitPatternDecodesExactlyAndRoundsToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const float f = bf16_bits_to_float(b);
    const double r = ref_bf16(b);
    if (std::isnan(r)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      EXPECT_EQ(float_to_bf16_bits(f), b | 0x40) << "NaN comes back quiet with its payload " << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), r) << h;
    ASSERT_EQ(float_to_bf16_bits(f), b) << "round trip " << h;
  }
  check_rounding(ref_bf16, float_to_bf16_bits, 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x7f7f8000u)), 0x7f80);  // tie above the max: even is inf
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x00008000u)), 0x0000);  // a subnormal tie
  EXPECT_EQ(float_to_bf16_bits(std::bit_cast<float>(0x00018000u)), 0x0002);
}

// The software conversion agrees with the hardware (F16C) on every tie, near-tie and on random
// bit patterns including NaNs, so compiled code using vcvtps2ph matches the host bit for bit.
__attribute__((target("f16c"))) uint16_t hw_f16(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float hw_f32(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

TEST(HalfConversion, MatchesF16cOnEveryPatternAndRandomFloats) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float sw = f16_bits_to_float(static_cast<uint16_t>(h)), hw = hw_f32(static_cast<uint16_t>(h));
    ASSERT_EQ(std::bit_cast<uint32_t>(sw), std::bit_cast<uint32_t>(hw)) << h;
  }
  std::mt19937 g(7);
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(g()));
    ASSERT_EQ(float_to_f16_bits(f), hw_f16(f)) << std::bit_cast<uint32_t>(f);
  }
}

TEST(HalfConversion, DoubleGoesThroughF32) {
  // 1 + 2^-11 + 2^-40 is above the f16 tie, but rounds to the tie 1 + 2^-11 in f32 first and
  // from there to the even 1.0 (PyTorch's rule; documented in kfuse/half.hpp).
  EXPECT_EQ(half(1.0 + 0x1p-11 + 0x1p-40).bits, 0x3c00);
  EXPECT_EQ(half(1.0 + 0x1p-11 + 0x1p-20).bits, 0x3c01);
}

// ---- promotion, creation, printing ----

TEST(LowPrecision, PromotionFollowsTorchWithI32ForU8WithI8) {
  constexpr DType B = DType::Bool, I32 = DType::I32, I64 = DType::I64, F32 = DType::F32, F64 = DType::F64,
                  U8 = DType::U8, I8 = DType::I8, F16 = DType::F16, BF16 = DType::BF16;
  // rows u8, i8, f16, bf16; columns bool i32 i64 f32 f64 u8 i8 f16 bf16
  const DType want[4][9] = {
      {U8, I32, I64, F32, F64, U8, I32, F16, BF16},
      {I8, I32, I64, F32, F64, I32, I8, F16, BF16},
      {F16, F16, F16, F32, F64, F16, F16, F16, F32},
      {BF16, BF16, BF16, F32, F64, BF16, BF16, F32, BF16},
  };
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 9; ++c) {
      SCOPED_TRACE(std::string(dtype_name(kNarrow[r])) + " with " + dtype_name(kEvery[c]));
      EXPECT_EQ(promote_types(kNarrow[r], kEvery[c]), want[r][c]);
      EXPECT_EQ(promote_types(kEvery[c], kNarrow[r]), want[r][c]);
      EXPECT_EQ((ones({2}, kNarrow[r]) + ones({2}, kEvery[c])).dtype(), want[r][c]);
    }
  // Weak scalars keep the tensor's type; a float scalar makes an integer tensor f32; an integral
  // scalar outside u8/i8 counts as a float (as for i32), not as a wrapped constant.
  EXPECT_EQ((ones({2}, F16) * 3.7).dtype(), F16);
  EXPECT_EQ((ones({2}, U8) + 2).dtype(), U8);
  EXPECT_EQ((ones({2}, U8) * 0.5).dtype(), F32);
  EXPECT_EQ((ones({2}, U8) + 300).dtype(), F32);
  EXPECT_EQ((ones({2}, I8) - 129).dtype(), F32);
  EXPECT_EQ(exp(ones({2}, F16)).dtype(), F16);
  EXPECT_EQ(exp(ones({2}, U8)).dtype(), F32);
  EXPECT_EQ(sum(ones({2}, U8)).dtype(), I64);
  EXPECT_EQ(sum(ones({2}, BF16)).dtype(), BF16);
  EXPECT_EQ(B, promote_types(B, B));
}

TEST(LowPrecision, CreationAccessAndPrinting) {
  Tensor h = Tensor::from_vector<half>({half(1.5f), half(-0.0f), half(65504.0f)}, {3});
  EXPECT_EQ(h.dtype(), DType::F16);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1.5f, -0.0f, 65504.0f}));
  EXPECT_EQ(h.to_vector<half>()[2].bits, 0x7bff);
  EXPECT_EQ(h.to_string(), "tensor([1.5, -0, 65504], shape=[3], dtype=f16)");
  Tensor u = Tensor::from_vector<uint8_t>({0, 7, 255}, {3});
  EXPECT_EQ(u.to_string(), "tensor([0, 7, 255], shape=[3], dtype=u8)");
  EXPECT_EQ(Tensor::from_vector<int8_t>({-128, 5}, {2}).to_vector<int64_t>(), (std::vector<int64_t>{-128, 5}));
  EXPECT_EQ(full({2}, 0.1, DType::BF16).to_vector<bfloat16>()[0].bits, float_to_bf16_bits(0.1f));
  EXPECT_EQ(full({2}, 300, DType::U8).to_vector<int>(), (std::vector<int>{44, 44}));  // wraps like a cast
  EXPECT_EQ(arange(250, 260, 3, DType::U8).to_vector<int>(), (std::vector<int>{250, 253, 0, 3}));
  EXPECT_EQ(zeros({0}, DType::I8).numel(), 0);
  EXPECT_EQ(scalar(2.5, DType::F16).item<double>(), 2.5);
}

// rand in f16/bf16 draws as many bits as the type has, so rounding never reaches 1 (with 53 bits,
// about one value in 4096 rounded up to 1.0 in f16).
TEST(LowPrecision, RandStaysBelowOne) {
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<float> v = rand({65536}, 3, t).to_vector<float>();
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0f) << dtype_name(t);
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0f) << dtype_name(t);
  }
}

// ---- every backend ----

// The backend forced as in tests/forced_backend.hpp; every test must also run kernels there.
class LowPrecisionOn : public ForcedBackend {
 protected:
  void SetUp() override {
    ForcedBackend::SetUp();
    reset_counters();
  }
  void TearDown() override {
    if (detail::find_backend(GetParam())) {
      // reference, llvm and the GPU run every kernel themselves; xbyak declines integer
      // arithmetic (tests/backends/test_xbyak_narrow.cpp checks what it takes).
      if (GetParam() != "xbyak") { EXPECT_EQ(counters().fallbacks, 0u) << "a kernel fell back from " << GetParam(); }
      if (expect_kernels_) { EXPECT_GT(counters().kernels_launched, 0u) << "nothing ran on " << GetParam(); }
    }
    ForcedBackend::TearDown();
  }
  bool expect_kernels_ = true;  // (a single random DAG may need none: all its roots views of inputs)
};

// Source values with NaN, infinities, f16 and bf16 ties, f16 subnormals and overflow, and
// integers beyond u8/i8.
const std::vector<double> kSpecial = {
    0,          -0.0,           1,    -1,   2.5,   -3.5,          255,  256,     300.75,      -129.5,
    65504,      65520,          1e5,  3e-5, 1e-7,  -6e-8,         0.1,  1.0 / 3, 1 + 0x1p-11, 1 + 3 * 0x1p-11,
    1 + 0x1p-8, 1 + 3 * 0x1p-8, kNaN, kInf, -kInf, -2147483649.0, 1e10, 127.5,   -128.75};

TEST_P(LowPrecisionOn, CastsBothWaysWithEveryDtypeMatchTheHostConversion) {
  const auto n = static_cast<int64_t>(kSpecial.size());
  for (DType from : kEvery) {
    // The source holds kSpecial as converted by the host (the one software conversion); the casts
    // from it are one fused kernel of the backend under test.
    std::vector<uint8_t> src_bytes(kSpecial.size() * dtype_size(from));
    detail::convert_to(kSpecial.data(), DType::F64, src_bytes.data(), from, n);
    Tensor src = Tensor::from_bytes(src_bytes.data(), from, {n});
    std::vector<DType> tos;
    std::vector<Tensor> ys;
    for (DType to : kEvery)
      if (to != from && (is_narrow(from) || is_narrow(to))) {
        tos.push_back(to);
        ys.push_back(src.cast(to));
      }
    eval(ys);
    for (size_t i = 0; i < ys.size(); ++i) {
      std::vector<uint8_t> want_bytes(kSpecial.size() * dtype_size(tos[i]));
      detail::convert_to(src_bytes.data(), from, want_bytes.data(), tos[i], n);
      std::vector<double> want(kSpecial.size());
      detail::convert_to(want_bytes.data(), tos[i], want.data(), DType::F64, n);
      EXPECT_TRUE(same_bits(values(ys[i]), want)) << dtype_name(from) << " -> " << dtype_name(tos[i]);
    }
  }
}

TEST_P(LowPrecisionOn, HalfTiesNanInfAndSubnormalsThroughKernels) {
  // f32 -> f16/bf16 -> f32 in one fused kernel, on values built to hit every rounding case.
  std::vector<double> v;
  for (double base : {1.0, 0x1p-14, 0x1p-20, 1024.0, 0x1p-126, 3.0}) {
    for (double frac : {0.5, 1.5, 2.5, 0.499, 0.501}) {
      v.push_back(base * (1 + frac * 0x1p-10));  // f16 ties and near-ties
      v.push_back(base * (1 + frac * 0x1p-7));   // bf16
      v.push_back(-base * (1 + frac * 0x1p-7));
    }
  }
  for (double s : kSpecial) v.push_back(s);
  const auto n = static_cast<int64_t>(v.size());
  Tensor x = make_tensor(v, {n}, DType::F32);
  for (DType t : {DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<double> want(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float f = static_cast<float>(v[i]);
      want[i] = t == DType::F16 ? f16_bits_to_float(float_to_f16_bits(f)) : bf16_bits_to_float(float_to_bf16_bits(f));
    }
    EXPECT_TRUE(same_bits(values((x * 1.0).cast(t).cast(DType::F32) + 0.0), want));
    EXPECT_TRUE(same_bits(values((x * 1.0).cast(t)), want));  // stored as t
  }
}

// Element-wise arithmetic rounds every op's result to the storage type, also inside a fused kernel
// (PyTorch eager semantics), and integers wrap.
TEST_P(LowPrecisionOn, ArithmeticRoundsEveryOpAndIntegersWrap) {
  Tensor one = full({5}, 1, DType::F16), tiny = full({5}, 0.0004, DType::F16);
  // 1 + 0.0004 rounds to 1 in f16 (half an ulp is 0.000488), so (1 + tiny) - 1 is exactly 0.
  EXPECT_EQ(values((one + tiny) - one), std::vector<double>(5, 0.0));
  Tensor bone = full({3}, 1, DType::BF16), btiny = full({3}, 0.003, DType::BF16);
  EXPECT_EQ(values((bone + btiny) - bone), std::vector<double>(3, 0.0));
  Tensor a = make_tensor({200, 255, 0, 17, 128}, {5}, DType::U8), b = make_tensor({100, 1, 1, 16, 2}, {5}, DType::U8);
  EXPECT_EQ(values(a + b), (std::vector<double>{44, 0, 1, 33, 130}));
  EXPECT_EQ(values(a * b), (std::vector<double>{32, 255, 0, 16, 0}));
  EXPECT_EQ(values((a + b) - b), (std::vector<double>{200, 255, 0, 17, 128}));  // wraps both ways
  EXPECT_EQ(values(b - a), (std::vector<double>{156, 2, 1, 255, 130}));
  Tensor c = make_tensor({100, -128, 127, -1, 5}, {5}, DType::I8);
  EXPECT_EQ(values(c + c), (std::vector<double>{-56, 0, -2, -2, 10}));
  EXPECT_EQ(values(-c), (std::vector<double>{-100, -128, -127, 1, -5}));
  EXPECT_EQ(values(abs(c)), (std::vector<double>{100, -128, 127, 1, 5}));
  EXPECT_EQ(values(maximum(c, make_tensor({0, 0, 0, 0, 0}, {5}, DType::I8))), (std::vector<double>{100, 0, 127, 0, 5}));
  EXPECT_EQ(values(a > b), (std::vector<double>{1, 1, 0, 1, 1}));
  EXPECT_EQ(values(a + c), (std::vector<double>{300, 127, 127, 16, 133}));  // u8 + i8 -> i32
  EXPECT_EQ(values(where(c > 0, a, b)), (std::vector<double>{200, 1, 0, 16, 128}));
}

// Float ops on f16/bf16 compute in f32: within a few ulps of the storage type of the fp64
// reference, on odd sizes, size 1, empty and non-contiguous operands.
TEST_P(LowPrecisionOn, FloatOpsMatchTheReference) {
  for (DType t : {DType::F16, DType::BF16}) {
    const double tol = t == DType::F16 ? 2e-3 : 1.6e-2;
    for (const Shape& s : std::vector<Shape>{{1}, {7}, {5, 19}, {0, 3}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + shape_str(s));
      const auto n = static_cast<size_t>(count_of(s));
      Tensor x = make_tensor(random_values(n, 3, -3, 3), s, t), y = make_tensor(random_values(n, 4, 0.5, 2), s, t);
      std::vector<Tensor> outs = {x + y,      x * y,   x / y,         exp(x),      tanh(x),
                                  sigmoid(x), sqrt(y), maximum(x, y), relu(x) - y, where(x > y, x, y),
                                  x * 2.5 + 1};
      if (s.size() == 2) {
        Tensor xt = transpose(x), yt = transpose(y);  // non-contiguous
        outs.push_back(xt * yt + xt);
        outs.push_back(x.slice({Range::all(), Range{0, std::nullopt, 2}}) - 1);
      }
      eval(outs);
      auto ref = reference_values(outs);
      for (size_t i = 0; i < outs.size(); ++i) {
        EXPECT_EQ(outs[i].dtype(), t) << i;
        EXPECT_TRUE(all_close(values(outs[i]), ref[i], tol, tol)) << "output " << i;
      }
    }
  }
}

TEST_P(LowPrecisionOn, ReductionsAccumulateInTheComputeType) {
  // 4096 ones: an f16 accumulator would stop at 2048 (2049 is not an f16), a bf16 one at 256.
  EXPECT_EQ(sum(full({4096}, 1, DType::F16)).item<double>(), 4096);
  EXPECT_EQ(sum(full({4, 512}, 1, DType::BF16), 1).to_vector<double>(), std::vector<double>(4, 512));
  Tensor u = make_tensor(random_ints(301, 5, 0, 255), {7, 43}, DType::U8);
  Tensor h = make_tensor(random_values(301, 6, -4, 4), {7, 43}, DType::F16);
  std::vector<Tensor> outs = {sum(u, 1),
                              max(u, 0),
                              argmax(u, 1),
                              sum(h, 0),
                              max(h, 1),
                              min(h),
                              mean(h, 1),
                              softmax(h, -1),
                              sum(u.cast(DType::I8)),
                              matmul(h, transpose(h))};
  eval(outs);
  auto ref = reference_values(outs);
  for (size_t i = 0; i < outs.size(); ++i) {
    const bool exact = !is_float(outs[i].dtype());
    EXPECT_TRUE(all_close(values(outs[i]), ref[i], exact ? 0 : 4e-3, exact ? 0 : 4e-2)) << "output " << i;
  }
  EXPECT_EQ(sum(u, 1).dtype(), DType::I64);
  EXPECT_EQ(sum(h, 0).dtype(), DType::F16);
  EXPECT_EQ(sum(zeros({0}, DType::F16)).item<double>(), 0);
}

// The random-DAG property: inputs of every new dtype (and f32), results within the storage
// type's tolerance of the fp64 reference (integers exactly where no float is involved).
// KFUSE_TEST_SEED=<n> runs seed n instead, KFUSE_TEST_SEED=<n>:<count> a sweep of others.
TEST_P(LowPrecisionOn, RandomDagsWithNarrowInputsMatchTheReference) {
  const auto [first, end] = seed_range("KFUSE_TEST_SEED", 2000, 6);  // ~1 s per seed of LLVM compiles
  if (std::getenv("KFUSE_TEST_SEED")) expect_kernels_ = false;
  for (uint64_t seed = first; seed < end; ++seed) {
    Dag d = random_dag(seed, {DType::F16, DType::BF16, DType::U8, DType::I8, DType::F32});
    eval(d.roots);
    auto ref = reference_values(d.roots);
    for (size_t i = 0; i < d.roots.size(); ++i)
      ASSERT_TRUE(all_close(values(d.roots[i]), ref[i], 6e-2, 6e-2))
          << "seed " << seed << " root " << i << " " << dtype_name(d.roots[i].dtype());
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, LowPrecisionOn, ::testing::Values("reference", "llvm", "xbyak", "opencl"),
                         [](const auto& info) { return info.param; });

}  // namespace
