// xbyak backend: element loaders of a stored operand dtype as f32, shared by the GEMM's packers
// (gemm_pack.hpp) and its GEMV kernels (gemv.cpp), which read f16 and bf16 weights in place: 8 or
// 16 consecutive elements (or one) exactly as a Cast to f32 gives them (f16 through F16C or
// AVX-512's vcvtph2ps, bf16 by a 16-bit shift), so a GEMV over half weights sums the same f32
// values as the packed path and gives its bits. Private to jit/xbyak/.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kfuse/dtype.hpp"
#include "kfuse/half.hpp"

namespace kfuse::detail::xb {

#define KFUSE_XB_LOAD16 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))

struct LoadF32 {
  using T = float;
  static constexpr DType dtype = DType::F32;
  __attribute__((target("avx2"))) static __m256 load8(const T* p) { return _mm256_loadu_ps(p); }
  KFUSE_XB_LOAD16 static __m512 load16(const T* p) { return _mm512_loadu_ps(p); }
  /// The first lanes of `m` (the rest 0), reading only those elements.
  KFUSE_XB_LOAD16 static __m512 load16(__mmask16 m, const T* p) { return _mm512_maskz_loadu_ps(m, p); }
  static float one(const T* p) { return *p; }
};

struct LoadF16 {
  using T = uint16_t;
  static constexpr DType dtype = DType::F16;
  __attribute__((target("avx2,f16c"))) static __m256 load8(const T* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  KFUSE_XB_LOAD16 static __m512 load16(const T* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  KFUSE_XB_LOAD16 static __m512 load16(__mmask16 m, const T* p) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
  static float one(const T* p) { return f16_bits_to_float(*p); }
};

struct LoadBF16 {
  using T = uint16_t;
  static constexpr DType dtype = DType::BF16;
  __attribute__((target("avx2"))) static __m256 load8(const T* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  KFUSE_XB_LOAD16 static __m512 load16(const T* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  KFUSE_XB_LOAD16 static __m512 load16(__mmask16 m, const T* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
  }
  static float one(const T* p) { return bf16_bits_to_float(*p); }
};

/// Rows [0, rows) x k [0, n) of an operand stored as L::T, element (r, k) at src + r * rs + k * ks,
/// as f32 into dst (row stride ld): a half A converted once so that the paths reading f32 A in
/// place take it (gemm_run.cpp).
template <class L>
__attribute__((target("avx2,f16c"))) void load_rows(float* dst, int64_t ld, const typename L::T* src, int64_t rs,
                                                    int64_t ks, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const typename L::T* s = src + r * rs;
    float* d = dst + r * ld;
    int64_t k = 0;
    if (ks == 1)
      for (; k + 8 <= n; k += 8) _mm256_storeu_ps(d + k, L::load8(s + k));
    for (; k < n; ++k) d[k] = L::one(s + k * ks);
  }
}

#undef KFUSE_XB_LOAD16

/// Calls f(Loader{}) for a dtype the loaders read: f32, bf16, and f16 where the CPU has F16C
/// (every AVX2 CPU so far); false, calling nothing, for the others (the packers convert those
/// element by element; the GEMV paths do not take them).
template <class F>
bool with_loader(DType dt, F&& f) {
  static const bool f16c = __builtin_cpu_supports("f16c");
  switch (dt) {
    case DType::F32: f(LoadF32{}); return true;
    case DType::F16:
      if (!f16c) return false;
      f(LoadF16{});
      return true;
    case DType::BF16: f(LoadBF16{}); return true;
    default: return false;
  }
}

}  // namespace kfuse::detail::xb
