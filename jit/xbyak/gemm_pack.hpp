// xbyak backend: the GEMM's host-side packers (gemm_run.cpp): an operand's slivers copied into
// the packed panels the microkernels read (8 x 8 register transposes where the operand's unit
// stride runs along K), through the element loaders of gemm_loads.hpp, and the scalar converters
// of the dtypes without a vector loader. Private to jit/xbyak/.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "gemm_loads.hpp"
#include "transpose8.hpp"
#include "kfuse/dtype.hpp"
#include "kfuse/half.hpp"

namespace kfuse::detail::xb {

// One MR-tall sliver of A with unit stride along K (row-major A), its first `rows` rows from A and
// the rest zero: 8 x 8 blocks transposed in registers. Column k of a block is stored whole at
// dst + k * mr + i0; when mr is not a multiple of 8 its last 2..7 lanes land on the next k's first
// rows, which the next store (k ascending) rewrites, or past the sliver (scratch() keeps slack; the
// next sliver rewrites them). k past the last multiple of 8 is copied element by element. An edge
// sliver (rows < mr) goes through the same transposes: element by element, with its zero rows
// stored k by k, it had taken most of a batch of small products ([2048 x [9,64] x [64,9]], a
// recommender's pairwise interaction).
template <class L>
__attribute__((target("avx2,f16c"))) inline void pack_a_rows(float* dst, const typename L::T* a, int64_t row, int mr,
                                                             int rows, int64_t kc) {
  const int64_t kv = kc / 8 * 8;
  __m256 blk[2][8];
  const int chunks = (mr + 7) / 8;
  for (int64_t k0 = 0; k0 < kv; k0 += 8) {
    for (int c = 0; c < chunks; ++c) {
      if (c * 8 >= rows) {  // (zero rows: nothing to transpose)
        for (int i = 0; i < 8; ++i) blk[c][i] = _mm256_setzero_ps();
        continue;
      }
      for (int i = 0; i < 8; ++i) {
        const int r = c * 8 + i;
        blk[c][i] = r < rows ? L::load8(a + r * row + k0) : _mm256_setzero_ps();
      }
      transpose8(blk[c]);
    }
    for (int k = 0; k < 8; ++k)
      for (int c = 0; c < chunks; ++c) _mm256_storeu_ps(dst + (k0 + k) * mr + c * 8, blk[c][k]);
  }
  for (int64_t k = kv; k < kc; ++k)
    for (int i = 0; i < mr; ++i) dst[k * mr + i] = i < rows ? L::one(a + i * row + k) : 0.0f;
}

// One NR-wide sliver of B with unit stride along K (column-major B, e.g. x @ w.T), its first
// `cols` columns from B and the rest zero: 8 x 8 blocks transposed in registers, so that each k's
// nr floats are contiguous (an edge sliver too, as pack_a_rows).
template <class L>
__attribute__((target("avx2,f16c"))) inline void pack_b_cols(float* dst, const typename L::T* b, int64_t col, int nr,
                                                             int cols, int64_t kc) {
  const int64_t kv = kc / 8 * 8;
  __m256 blk[8];
  for (int j0 = 0; j0 < nr; j0 += 8) {
    if (j0 >= cols) {  // (zero columns: nothing to transpose; N = 9 in slivers of 32 were 3/4 of them)
      for (int64_t k = 0; k < kc; ++k) _mm256_storeu_ps(dst + k * nr + j0, _mm256_setzero_ps());
      continue;
    }
    for (int64_t k0 = 0; k0 < kv; k0 += 8) {
      for (int j = 0; j < 8; ++j) blk[j] = j0 + j < cols ? L::load8(b + (j0 + j) * col + k0) : _mm256_setzero_ps();
      transpose8(blk);
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(dst + (k0 + k) * nr + j0, blk[k]);
    }
    for (int64_t k = kv; k < kc; ++k)
      for (int j = 0; j < 8; ++j) dst[k * nr + j0 + j] = j0 + j < cols ? L::one(b + (j0 + j) * col + k) : 0.0f;
  }
}

// NR elements of B with unit stride along N (row-major B): whole vectors, no library call.
template <class L>
__attribute__((target("avx2,f16c"))) inline void copy_row(float* dst, const typename L::T* src, int nr) {
  for (int j = 0; j < nr; j += 8) _mm256_storeu_ps(dst + j, L::load8(src + j));
}

// Element i of a buffer of dtype dt as f32, exactly as a Cast to f32 gives it (one rounding
// for f64 and 64-bit integers, exact otherwise).
using ToF32 = float (*)(const void*, int64_t);
template <class T>
float to_f32(const void* p, int64_t i) {
  return static_cast<float>(static_cast<const T*>(p)[i]);
}
inline float f16_to_f32(const void* p, int64_t i) { return f16_bits_to_float(static_cast<const uint16_t*>(p)[i]); }
inline float bf16_to_f32(const void* p, int64_t i) { return bf16_bits_to_float(static_cast<const uint16_t*>(p)[i]); }
inline ToF32 converter(DType dt) {
  switch (dt) {
    case DType::F64: return to_f32<double>;
    case DType::F16: return f16_to_f32;
    case DType::BF16: return bf16_to_f32;
    case DType::I8: return to_f32<int8_t>;
    case DType::U8: return to_f32<uint8_t>;
    case DType::I32: return to_f32<int32_t>;
    case DType::I64: return to_f32<int64_t>;
    default: return nullptr;  // f32: the vector paths
  }
}

}  // namespace kfuse::detail::xb
