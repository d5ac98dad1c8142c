// Counter-based random numbers: element i of rand(shape, seed) is a pure function of
// (seed, i), so values never depend on evaluation order, kernel boundaries or thread count.
#pragma once
#include <cmath>
#include <cstdint>

#include "kfuse/dtype.hpp"

namespace kfuse::detail {

// The constants, named for the code generators that emit the same hash (lib/ir/kernel.hpp, Rand;
// the GPU helpers in templates/gpu/helpers.tmpl spell them out).
inline constexpr uint64_t kMixMul1 = 0xbf58476d1ce4e5b9ULL, kMixMul2 = 0x94d049bb133111ebULL;
inline constexpr uint64_t kSeedGamma = 0x9e3779b97f4a7c15ULL;

inline uint64_t mix64(uint64_t x) {  // the splitmix64 finaliser
  x ^= x >> 30;
  x *= kMixMul1;
  x ^= x >> 27;
  x *= kMixMul2;
  return x ^ (x >> 31);
}

inline uint64_t counter_bits(uint64_t seed, uint64_t i) { return mix64(mix64(seed + kSeedGamma) ^ i); }

/// Uniform in [0, 1) with the precision of `dt` (24 bits for f32, 53 for f64, 11 for f16, 8 for
/// bf16: fewer bits than the significand, so rounding to `dt` never reaches 1).
inline double counter_uniform(uint64_t seed, uint64_t i, DType dt) {
  uint64_t b = counter_bits(seed, i);
  const int bits = dt == DType::F32 ? 24 : dt == DType::F16 ? 11 : dt == DType::BF16 ? 8 : 53;
  return static_cast<double>(b >> (64 - bits)) * std::ldexp(1.0, -bits);
}

/// Standard normal by Box-Muller over the uniforms of counters 2i and 2i+1.
inline double counter_normal(uint64_t seed, uint64_t i) {
  double u1 = static_cast<double>(counter_bits(seed, 2 * i) >> 11) * 0x1p-53;
  double u2 = static_cast<double>(counter_bits(seed, 2 * i + 1) >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace kfuse::detail
