// xbyak backend: the packers of bf16 x bf16 contractions on AVX-512 BF16 (gemm_run.cpp, the
// kernels of gemm_ukrs_bf16). A sliver `width` wide (MR rows of A, NR columns of B) holds, for
// each pair p of a KC block, `width` 32-bit lanes: the line's bf16 value at k = 2p in the low
// half and at k = 2p + 1 in the high half (0 past kc, an odd block's last pair), which is what
// vdpbf16ps multiplies lane by lane. Lines past the operand's edge are zero. Private to jit/xbyak/.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "transpose8.hpp"

namespace kfuse::detail::xb {

/// Pairs of a KC block of `kc` values.
constexpr int64_t pairs_of(int64_t kc) { return (kc + 1) / 2; }

/// The lane of values p[0] and p[stride] (stride 0: p[0] alone, the high half 0).
inline uint32_t bf16_pair(const uint16_t* p, int64_t stride) {
  return p[0] | (stride ? static_cast<uint32_t>(p[stride]) << 16 : 0u);
}

// Pairs [p0, p0 + 8) of lines [c0, c0 + 8) (zero past `lines`), transposed: blk[k] = pair p0 + k
// of the 8 lines.
__attribute__((target("avx2"))) inline void pair_block(__m256* blk, const uint16_t* src, int64_t line, int lines,
                                                       int c0, int64_t p0) {
  for (int i = 0; i < 8; ++i)
    blk[i] = c0 + i < lines ? _mm256_loadu_ps(reinterpret_cast<const float*>(src + (c0 + i) * line + 2 * p0))
                            : _mm256_setzero_ps();
  if (c0 < lines) transpose8(blk);
}

// One sliver of `lines` lines (of `width`, the rest zero) with unit stride along K, line i at
// src + i * line (A row-major; B stored [N, K], a linear layer's weight): a line's pair is one
// 32-bit value already, so 8 x 8 blocks of them are transposed in registers as the f32 packers
// transpose floats (bits moved, never computed). Pairs past the last whole 8 (16 values of K)
// are copied lane by lane. A width of whole 8-lane chunks (B's 32) goes chunk by chunk; another
// (A's 14, at most 16) stores both chunks of each pair in turn, whole, in ascending order: the 2
// lanes past the sliver's width land on the next pair's first lanes, which the next store
// rewrites, or past the sliver (scratch keeps slack; the next sliver rewrites them), as
// pack_a_rows does. (Masked stores for those lanes had made packing A 11% of a 128^3 product.)
__attribute__((target("avx2"))) inline void pack_pair_lines(uint32_t* dst, const uint16_t* src, int64_t line, int width,
                                                            int lines, int64_t kc) {
  const int64_t np = pairs_of(kc), pv = kc / 16 * 8;
  if (width % 8 == 0) {
    __m256 blk[8];
    for (int c0 = 0; c0 < width; c0 += 8)
      for (int64_t p0 = 0; p0 < pv; p0 += 8) {
        pair_block(blk, src, line, lines, c0, p0);
        for (int k = 0; k < 8; ++k) _mm256_storeu_ps(reinterpret_cast<float*>(dst + (p0 + k) * width + c0), blk[k]);
      }
  } else {
    __m256 blk[2][8];
    const int chunks = (width + 7) / 8;  // (1 or 2: width <= 16)
    for (int64_t p0 = 0; p0 < pv; p0 += 8) {
      for (int c = 0; c < chunks; ++c) pair_block(blk[c], src, line, lines, 8 * c, p0);
      for (int k = 0; k < 8; ++k)
        for (int c = 0; c < chunks; ++c)
          _mm256_storeu_ps(reinterpret_cast<float*>(dst + (p0 + k) * width + 8 * c), blk[c][k]);
    }
  }
  for (int64_t p = pv; p < np; ++p) {
    const int64_t second = 2 * p + 1 < kc ? 1 : 0;
    for (int i = 0; i < width; ++i) dst[p * width + i] = i < lines ? bf16_pair(src + i * line + 2 * p, second) : 0u;
  }
}

// All slivers of B stored [K, N] (row-major): columns [0, n) of the rows at src (row stride
// `row`), slivers of `width` columns (a multiple of 16) one after another (sliver s at dst + s * width * pairs),
// the last one's columns past n zero. One pass along each pair of rows: 16 columns of the two
// rows interleaved by 16-bit unpacks (within 128-bit halves) and put in order by a 128-bit
// permute. An odd block's last pair interleaves its row with zeros.
__attribute__((target("avx2"))) inline void pack_pair_rows(uint32_t* dst, const uint16_t* src, int64_t row, int64_t n,
                                                           int width, int64_t kc) {
  const int64_t np = pairs_of(kc), full = n / width * width;
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t p = 0; p < np; ++p) {
    const uint16_t* r0 = src + 2 * p * row;
    const bool two = 2 * p + 1 < kc;
    for (int64_t j0 = 0; j0 < full; j0 += width) {
      uint32_t* d = dst + j0 * np + p * width;
      for (int j = 0; j < width; j += 16) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + j0 + j));
        const __m256i b = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0 + row + j0 + j)) : zero;
        const __m256i lo = _mm256_unpacklo_epi16(a, b), hi = _mm256_unpackhi_epi16(a, b);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + j), _mm256_permute2x128_si256(lo, hi, 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + j + 8), _mm256_permute2x128_si256(lo, hi, 0x31));
      }
    }
    if (full < n) {
      uint32_t* d = dst + full * np + p * width;
      for (int64_t j = 0; j < width; ++j) d[j] = full + j < n ? bf16_pair(r0 + full + j, two ? row : 0) : 0u;
    }
  }
}

// Any strides: slivers `width` wide of lines [0, count) (line stride `ls`), k [0, kc) (stride
// `ks`), lane by lane.
inline void pack_pairs_strided(uint32_t* dst, const uint16_t* src, int64_t ls, int64_t ks, int64_t count, int width,
                               int64_t kc) {
  const int64_t np = pairs_of(kc);
  for (int64_t i0 = 0; i0 < count; i0 += width, dst += np * width)
    for (int64_t p = 0; p < np; ++p)
      for (int64_t j = 0; j < width; ++j)
        dst[p * width + j] = i0 + j < count ? bf16_pair(src + (i0 + j) * ls + 2 * p * ks, 2 * p + 1 < kc ? ks : 0) : 0u;
}

// The slivers `width` wide of lines [0, count) of an operand (line stride `ls`, k stride `ks`,
// elements) for k [0, kc): each sliver after the last (pairs_of(kc) * width lanes each).
inline void pack_pairs_panel(uint32_t* dst, const uint16_t* src, int64_t ls, int64_t ks, int64_t count, int width,
                             int64_t kc) {
  if (ks == 1) {  // lines along K: A row-major, B stored [N, K]
    for (int64_t i0 = 0; i0 < count; i0 += width, dst += pairs_of(kc) * width)
      pack_pair_lines(dst, src + i0 * ls, ls, width, static_cast<int>(count - i0 < width ? count - i0 : width), kc);
    return;
  }
  if (ls == 1 && width % 16 == 0) return pack_pair_rows(dst, src, ks, count, width, kc);  // B row-major
  pack_pairs_strided(dst, src, ls, ks, count, width, kc);
}

}  // namespace kfuse::detail::xb
