// xbyak backend: the packers of the dot-product GEMM kernels (gemm_run.cpp, gemm_ukrs_dot): bf16
// x bf16 on AVX-512 BF16 (`vdpbf16ps`, pairs of k) and u8 x i8 on AVX-512 VNNI (`vpdpbusd`,
// quads of k). A sliver `width` wide (MR rows of A, NR columns of B) holds, for each group g of
// a KC block, `width` 32-bit lanes: the line's G = 4 / sizeof(E) values at k = G g .. G g + G - 1,
// the first in the low bits (0 past kc: a block's last group may be partial), which is what the
// instructions multiply lane by lane. Lines past the operand's edge are zero. Private to jit/xbyak/.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "transpose8.hpp"

namespace kfuse::detail::xb {

/// Values of element type E in one 32-bit lane: 2 (bf16) or 4 (8-bit).
template <class E>
constexpr int64_t kGroup = 4 / static_cast<int64_t>(sizeof(E));

/// Groups of `g` values in a KC block of `kc` values.
constexpr int64_t groups_of(int64_t kc, int64_t g) { return (kc + g - 1) / g; }

/// The lane of the first `live` of G values p[0], p[stride], ... (the rest 0).
template <class E>
inline uint32_t group_lane(const E* p, int64_t stride, int64_t live) {
  uint32_t v = 0;
  for (int64_t t = 0; t < live && t < kGroup<E>; ++t) v |= static_cast<uint32_t>(p[t * stride]) << (8 * sizeof(E) * t);
  return v;
}

// Groups [g0, g0 + 8) of lines [c0, c0 + 8) (zero past `lines`), transposed: blk[k] = group g0 + k
// of the 8 lines. A line's group is one 32-bit value already (unit stride along K), so the
// 8 x 8 blocks are transposed in registers as the f32 packers transpose floats (bits moved).
template <class E>
__attribute__((target("avx2"))) inline void group_block(__m256* blk, const E* src, int64_t line, int lines, int c0,
                                                        int64_t g0) {
  for (int i = 0; i < 8; ++i)
    blk[i] = c0 + i < lines ? _mm256_loadu_ps(reinterpret_cast<const float*>(src + (c0 + i) * line + kGroup<E> * g0))
                            : _mm256_setzero_ps();
  if (c0 < lines) transpose8(blk);
}

// One sliver of `lines` lines (of `width`, the rest zero) with unit stride along K, line i at
// src + i * line (A row-major; B stored [N, K], a linear layer's weight): 8 x 8 blocks of groups
// transposed (group_block); groups past the last whole 8 are copied lane by lane. A width of
// whole 8-lane chunks (B's 32) goes chunk by chunk; another (A's 14, at most 16) stores both
// chunks of each group in turn, whole, in ascending order: the 2 lanes past the sliver's width
// land on the next group's first lanes, which the next store rewrites, or past the sliver
// (scratch keeps slack; the next sliver rewrites them), as pack_a_rows does. (Masked stores for
// those lanes had made packing A 11% of a bf16 128^3 product.)
template <class E>
__attribute__((target("avx2"))) inline void pack_group_lines(uint32_t* dst, const E* src, int64_t line, int width,
                                                             int lines, int64_t kc) {
  constexpr int64_t G = kGroup<E>;
  const int64_t ng = groups_of(kc, G), gv = kc / (8 * G) * 8;
  if (width % 8 == 0) {
    __m256 blk[8];
    for (int c0 = 0; c0 < width; c0 += 8)
      for (int64_t g0 = 0; g0 < gv; g0 += 8) {
        group_block(blk, src, line, lines, c0, g0);
        for (int k = 0; k < 8; ++k) _mm256_storeu_ps(reinterpret_cast<float*>(dst + (g0 + k) * width + c0), blk[k]);
      }
  } else {
    __m256 blk[2][8];
    const int chunks = (width + 7) / 8;  // (1 or 2: width <= 16)
    for (int64_t g0 = 0; g0 < gv; g0 += 8) {
      for (int c = 0; c < chunks; ++c) group_block(blk[c], src, line, lines, 8 * c, g0);
      for (int k = 0; k < 8; ++k)
        for (int c = 0; c < chunks; ++c)
          _mm256_storeu_ps(reinterpret_cast<float*>(dst + (g0 + k) * width + 8 * c), blk[c][k]);
    }
  }
  for (int64_t g = gv; g < ng; ++g)
    for (int i = 0; i < width; ++i)
      dst[g * width + i] = i < lines ? group_lane(src + i * line + G * g, 1, kc - G * g) : 0u;
}

// All slivers of B stored [K, N] (row-major): columns [0, n) of the rows at src (row stride
// `row`), slivers of `width` columns (a multiple of 32 / sizeof(E): 16 for bf16, 32 for 8-bit)
// one after another (sliver s at dst + s * width * groups), the last one's columns past n
// zero. One pass along each group of G rows: the rows interleaved by unpacks within 128-bit
// halves, put in column order by 128-bit permutes; rows past kc read as zeros.
// 32 bytes at p, or zeros (a row past the block's kc: not read).
__attribute__((target("avx2"))) inline __m256i row_or_zero(const void* p, bool live) {
  return live ? _mm256_loadu_si256(static_cast<const __m256i*>(p)) : _mm256_setzero_si256();
}

template <class E>
__attribute__((target("avx2"))) inline void pack_group_rows(uint32_t* dst, const E* src, int64_t row, int64_t n,
                                                            int width, int64_t kc) {
  constexpr int64_t G = kGroup<E>, step = 32 / sizeof(E);  // columns per 32-byte load
  const int64_t ng = groups_of(kc, G), full = n / width * width;
  for (int64_t g = 0; g < ng; ++g) {
    const E* r0 = src + G * g * row;
    const int64_t live = kc - G * g < G ? kc - G * g : G;
    for (int64_t j0 = 0; j0 < full; j0 += width) {
      uint32_t* d = dst + j0 * ng + g * width;
      for (int64_t j = 0; j < width; j += step) {
        __m256i* o = reinterpret_cast<__m256i*>(d + j);
        if constexpr (G == 2) {  // 16 columns: two rows' 16-bit values interleaved
          const __m256i a = row_or_zero(r0 + j0 + j, true), b = row_or_zero(r0 + row + j0 + j, live > 1);
          const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
          _mm256_storeu_si256(o, _mm256_permute2x128_si256(lo, hi, 0x20));
          _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
        } else {  // 32 columns: four rows' bytes, then their 16-bit pairs, interleaved
          const __m256i a = row_or_zero(r0 + j0 + j, true), b = row_or_zero(r0 + row + j0 + j, live > 1),
                        c = row_or_zero(r0 + 2 * row + j0 + j, live > 2),
                        e = row_or_zero(r0 + 3 * row + j0 + j, live > 3);
          const __m256i ab0 = _mm256_unpacklo_epi8(a, b), ab1 = _mm256_unpackhi_epi8(a, b);
          const __m256i ce0 = _mm256_unpacklo_epi8(c, e), ce1 = _mm256_unpackhi_epi8(c, e);
          const __m256i q0 = _mm256_unpacklo_epi16(ab0, ce0), q1 = _mm256_unpackhi_epi16(ab0, ce0);
          const __m256i q2 = _mm256_unpacklo_epi16(ab1, ce1), q3 = _mm256_unpackhi_epi16(ab1, ce1);
          _mm256_storeu_si256(o, _mm256_permute2x128_si256(q0, q1, 0x20));      // columns 0-7
          _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(q2, q3, 0x20));  // 8-15
          _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(q0, q1, 0x31));  // 16-23
          _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(q2, q3, 0x31));  // 24-31
        }
      }
    }
    if (full < n) {
      uint32_t* d = dst + full * ng + g * width;
      for (int64_t j = 0; j < width; ++j) d[j] = full + j < n ? group_lane(r0 + full + j, row, live) : 0u;
    }
  }
}

// Any strides: slivers `width` wide of lines [0, count) (line stride `ls`), k [0, kc) (stride
// `ks`), lane by lane.
template <class E>
inline void pack_groups_strided(uint32_t* dst, const E* src, int64_t ls, int64_t ks, int64_t count, int width,
                                int64_t kc) {
  constexpr int64_t G = kGroup<E>;
  const int64_t ng = groups_of(kc, G);
  for (int64_t i0 = 0; i0 < count; i0 += width, dst += ng * width)
    for (int64_t g = 0; g < ng; ++g)
      for (int64_t j = 0; j < width; ++j)
        dst[g * width + j] = i0 + j < count ? group_lane(src + (i0 + j) * ls + G * g * ks, ks, kc - G * g) : 0u;
}

// The slivers `width` wide of lines [0, count) of an operand (line stride `ls`, k stride `ks`,
// elements) for k [0, kc): each sliver after the last (groups_of(kc) * width lanes each).
template <class E>
inline void pack_groups_panel(uint32_t* dst, const E* src, int64_t ls, int64_t ks, int64_t count, int width,
                              int64_t kc) {
  constexpr int64_t G = kGroup<E>;
  if (ks == 1) {  // lines along K: A row-major, B stored [N, K]
    for (int64_t i0 = 0; i0 < count; i0 += width, dst += groups_of(kc, G) * width)
      pack_group_lines(dst, src + i0 * ls, ls, width, static_cast<int>(count - i0 < width ? count - i0 : width), kc);
    return;
  }
  if (ls == 1 && width % (32 / sizeof(E)) == 0) return pack_group_rows(dst, src, ks, count, width, kc);  // B row-major
  pack_groups_strided(dst, src, ls, ks, count, width, kc);
}

}  // namespace kfuse::detail::xb
