// Shared helpers of the kfuse tests: deterministic random data, tensors from double values,
// tolerant comparison with NaN/Inf awareness, index arithmetic and an independent NumPy-style
// broadcasting rule. Everything here uses the public API only, so the tests keep passing when
// eval() moves from the reference evaluator to the fused JIT pipeline.
#pragma once
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <kfuse/kfuse.hpp>
#include <kfuse/reference.hpp>

namespace kfuse::test {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();
/// Rounding error of one f32 store (2^-24, with a little slack).
inline constexpr double kF32Eps = 1.2e-7;

inline const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> v = {DType::Bool, DType::I32, DType::I64, DType::F32, DType::F64};
  return v;
}

/// The seeds a randomised test runs: [first, first + count) by default, or those the environment
/// variable `var` names, `<first>` (that one seed) or `<first>:<count>`. One process then runs
/// them all, so a sweep also checks what the kernel cache, and the plan cache where the test
/// keeps its options (set_options starts it afresh), carry from one graph to the next.
inline std::pair<uint64_t, uint64_t> seed_range(const char* var, uint64_t first, uint64_t count) {
  if (const char* s = std::getenv(var)) {
    const std::string v = s;
    const size_t colon = v.find(':');
    first = std::strtoull(v.c_str(), nullptr, 10);
    count = colon == std::string::npos ? 1 : std::strtoull(v.c_str() + colon + 1, nullptr, 10);
  }
  return {first, first + count};
}

/// `n` uniform values in [lo, hi) from a fixed seed (never all zero).
inline std::vector<double> random_values(size_t n, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

/// `n` integers in [lo, hi] from a fixed seed.
inline std::vector<double> random_ints(size_t n, uint64_t seed, int64_t lo, int64_t hi) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> d(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = static_cast<double>(d(g));
  return v;
}

/// The value a double becomes when stored in `dt` (float -> int truncates, bool tests != 0).
inline double stored_as(double v, DType dt) {
  switch (dt) {
    case DType::Bool: return v != 0.0 ? 1.0 : 0.0;
    case DType::I32: return static_cast<double>(static_cast<int32_t>(v));
    case DType::I64: return static_cast<double>(static_cast<int64_t>(v));
    case DType::F32: return static_cast<double>(static_cast<float>(v));
    case DType::F64: return v;
    case DType::U8: return static_cast<double>(static_cast<uint8_t>(static_cast<int32_t>(v)));
    case DType::I8: return static_cast<double>(static_cast<int8_t>(static_cast<int32_t>(v)));
    case DType::F16: return static_cast<double>(half(v));
    case DType::BF16: return static_cast<double>(bfloat16(v));
  }
  return v;
}

/// True when `d` can hold tensors (an OpenCL device: PoCL on CPU-only machines; a CUDA GPU).
inline bool device_usable(Device d) {
  try {
    Tensor::from_vector<float>({1.f}, {1}).to(d);
    return true;
  } catch (const BackendUnavailable&) { return false; }
}

/// A tensor holding `v` converted to `dt` (values must be representable).
inline Tensor make_tensor(const std::vector<double>& v, Shape shape, DType dt = DType::F32) {
  auto conv = [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> c(v.size());
    for (size_t i = 0; i < v.size(); ++i) c[i] = static_cast<T>(v[i]);
    return Tensor::from_vector<T>(c, std::move(shape));
  };
  switch (dt) {
    case DType::Bool: {
      std::vector<bool> c(v.size());
      for (size_t i = 0; i < v.size(); ++i) c[i] = v[i] != 0.0;
      return Tensor::from_vector<bool>(c, std::move(shape));
    }
    case DType::I32: return conv(int32_t{});
    case DType::I64: return conv(int64_t{});
    case DType::F32: return conv(float{});
    case DType::F64: return conv(double{});
    case DType::U8: return conv(uint8_t{});
    case DType::I8: return conv(int8_t{});
    case DType::F16: return conv(half{});
    case DType::BF16: return conv(bfloat16{});
  }
  return {};
}

/// The values `v` as they are after a round trip through `dt`.
inline std::vector<double> stored_values(const std::vector<double>& v, DType dt) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = stored_as(v[i], dt);
  return out;
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

/// Equal within `atol + rtol * |expected|`; NaN matches only NaN, infinities match exactly.
inline bool close(double actual, double expected, double rtol, double atol) {
  if (std::isnan(expected)) return std::isnan(actual);
  if (std::isinf(expected)) return actual == expected;
  if (!std::isfinite(actual)) return false;
  return std::fabs(actual - expected) <= atol + rtol * std::fabs(expected);
}

inline ::testing::AssertionResult all_close(const std::vector<double>& actual, const std::vector<double>& expected,
                                            double rtol, double atol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs expected " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i)
    if (!close(actual[i], expected[i], rtol, atol))
      return ::testing::AssertionFailure() << "element " << i << ": got " << actual[i] << ", expected " << expected[i]
                                           << " (rtol " << rtol << ", atol " << atol << ")";
  return ::testing::AssertionSuccess();
}

/// Bitwise equality (a NaN matches any NaN; -0 does not match +0).
inline ::testing::AssertionResult same_bits(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::isnan(want[i]) ? std::isnan(got[i])
                              : std::bit_cast<uint64_t>(got[i]) == std::bit_cast<uint64_t>(want[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

/// Checks `t` against independently computed `expected` values: its shape and dtype, the values
/// eval() produces, and the values of the fp64 reference evaluator.
inline void expect_tensor(const Tensor& t, const Shape& shape, DType dtype, const std::vector<double>& expected,
                          double rtol = 0, double atol = 0) {
  ASSERT_EQ(t.shape(), shape);
  ASSERT_EQ(t.dtype(), dtype) << dtype_name(t.dtype()) << " vs " << dtype_name(dtype);
  EXPECT_TRUE(all_close(values(t), expected, rtol, atol)) << "eval()";
  // The oracle works in double before the final rounding: allow one f32 rounding on top.
  double r_rtol = dtype == DType::F32 ? rtol + kF32Eps : rtol;
  EXPECT_TRUE(all_close(reference_values(t), expected, r_rtol, atol)) << "reference_values()";
}

// ---- index arithmetic ----
inline int64_t count_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
inline std::vector<int64_t> unravel(int64_t lin, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = s[d] ? lin % s[d] : 0;
    lin = s[d] ? lin / s[d] : 0;
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t lin = 0;
  for (size_t d = 0; d < s.size(); ++d) lin = lin * s[d] + idx[d];
  return lin;
}
/// out[i] = fn(multi-index of i) for every element of `s`, row-major.
inline std::vector<double> generate(const Shape& s, const std::function<double(const std::vector<int64_t>&)>& fn) {
  std::vector<double> out(static_cast<size_t>(count_of(s)));
  for (int64_t i = 0; i < count_of(s); ++i) out[i] = fn(unravel(i, s));
  return out;
}

/// NumPy's broadcasting rule, written independently of kfuse: nullopt when incompatible.
inline std::optional<Shape> numpy_broadcast(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}
/// The element of `v` (shape `from`) that broadcasting maps to index `idx` of shape `to`.
inline double broadcast_at(const std::vector<double>& v, const Shape& from, const std::vector<int64_t>& idx) {
  size_t lead = idx.size() - from.size();
  std::vector<int64_t> src(from.size());
  for (size_t d = 0; d < from.size(); ++d) src[d] = from[d] == 1 ? 0 : idx[lead + d];
  return v[ravel(src, from)];
}

/// The values of a row-major [rows, cols] matrix transposed.
inline std::vector<double> transposed(const std::vector<double>& v, int64_t rows, int64_t cols) {
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = v[i * cols + j];
  return out;
}

}  // namespace kfuse::test

/// Expects `stmt` to throw kfuse::UserError whose what() is exactly `msg`.
#define EXPECT_USER_ERROR(stmt, msg)                                                             \
  do {                                                                                           \
    try {                                                                                        \
      (void)(stmt);                                                                              \
      ADD_FAILURE() << "expected UserError from " #stmt;                                         \
    } catch (const kfuse::UserError& e) {                                                        \
      EXPECT_EQ(std::string(e.what()), std::string(msg));                                        \
    } catch (const std::exception& e) {                                                          \
      ADD_FAILURE() << "expected UserError from " #stmt ", got another exception: " << e.what(); \
    }                                                                                            \
  } while (0)
