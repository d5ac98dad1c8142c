// xbyak backend: the GEMM's GEMV path (gemm.hpp gemv, gemv_t), a few rows of C computed with B
// streamed once for all of them and no packing. Both kernels, in their ymm (AVX2) and zmm
// (AVX-512) forms, leave in each element the FMA chain of the microkernels, k ascending from 0 per
// KC block, so the result depends neither on the path nor on the ISA. B may be stored as f32, f16
// or bf16 (a linear layer's half-precision weights), converted as it is loaded exactly as the
// packers convert it (gemm_loads.hpp): the same f32 values, the same chains, the same bits.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <utility>

#include "gemm.hpp"
#include "gemm_loads.hpp"
#include "transpose8.hpp"

// GCC 12 warns inside its own AVX-512 intrinsics, whose pass-through operand is a deliberately
// uninitialised _mm512_undefined_ps() (GCC bug 105593, fixed in GCC 13), wherever they inline
// (-Wuninitialized in the sanitizer builds' lower optimisation levels).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kfuse::detail::xb {

namespace {

// Why a few rows of A at once: running the rows one by one streamed B once per row (batch 2 took
// twice batch 1's time). Why at most kGemvRows here (the register tiles below take up to
// kGemvRowsY / kGemvRowsZ): gemv_rows holds 4 x R broadcast A values, which spill past 4 rows (8 rows of
// [8,1024]x[1024,4096] took 3.3x the packed path's time), and gemv_t_rows spends a broadcast and an 8-wide FMA per
// product where the packed path's microkernel spends one 16-wide FMA (and a broadcast per 2 FMAs): past 4 rows it is
// compute bound, and the packed path wins once A's rows no longer fit L1 (Zen 4, 1 thread, 8 rows:
// [8,1024]x[4096,1024]^T 1.55 -> 1.25 ms, but [8,4096]x[1024,4096]^T 1.55 -> 3.35 ms). AVX2 + FMA:
// the xbyak backend needs them anyway.

// B contiguous along N (b[k * b_rs + j]): into t[r * ldt + j] the chain over k in [0, kc). B is
// read along its rows, four rows at a time (four contiguous streams the prefetchers follow; the
// register kernel walked a column strip down K, one 16 KiB row stride per k, and ran at half of
// oneDNN on [1,4096]x[4096,4096]).
template <class L, int R>
__attribute__((target("avx2,fma,f16c"))) void gemv_rows(const float* a, int64_t a_rs, int64_t a_ks,
                                                        const typename L::T* b, int64_t b_rs, float* t, int64_t ldt,
                                                        int64_t n, int64_t kc) {
  using T = typename L::T;
  std::fill(t, t + R * ldt, 0.0f);
  const int64_t nv = n / 8 * 8;
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    const T* b0 = b + k * b_rs;
    const T *b1 = b0 + b_rs, *b2 = b1 + b_rs, *b3 = b2 + b_rs;
    float s[R][4];
    __m256 av[R][4];
    for (int r = 0; r < R; ++r)
      for (int u = 0; u < 4; ++u) {
        s[r][u] = a[r * a_rs + (k + u) * a_ks];
        av[r][u] = _mm256_set1_ps(s[r][u]);
      }
    for (int64_t j = 0; j < nv; j += 8) {
      const __m256 v0 = L::load8(b0 + j), v1 = L::load8(b1 + j), v2 = L::load8(b2 + j), v3 = L::load8(b3 + j);
      for (int r = 0; r < R; ++r) {
        float* tr = t + r * ldt + j;
        __m256 v = _mm256_loadu_ps(tr);
        v = _mm256_fmadd_ps(av[r][0], v0, v);
        v = _mm256_fmadd_ps(av[r][1], v1, v);
        v = _mm256_fmadd_ps(av[r][2], v2, v);
        v = _mm256_fmadd_ps(av[r][3], v3, v);
        _mm256_storeu_ps(tr, v);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int64_t j = nv; j < n; ++j) {
        float& x = t[r * ldt + j];
        x = std::fma(
            s[r][3], L::one(b3 + j),
            std::fma(s[r][2], L::one(b2 + j), std::fma(s[r][1], L::one(b1 + j), std::fma(s[r][0], L::one(b0 + j), x))));
      }
  }
  for (; k < kc; ++k) {
    const T* br = b + k * b_rs;
    for (int r = 0; r < R; ++r) {
      const float s0 = a[r * a_rs + k * a_ks];
      const __m256 a0 = _mm256_set1_ps(s0);
      float* tr = t + r * ldt;
      for (int64_t j = 0; j < nv; j += 8)
        _mm256_storeu_ps(tr + j, _mm256_fmadd_ps(a0, L::load8(br + j), _mm256_loadu_ps(tr + j)));
      for (int64_t j = nv; j < n; ++j) tr[j] = std::fma(s0, L::one(br + j), tr[j]);
    }
  }
}

constexpr int64_t kGemvKb = 16;  // rows of B per block of the register tiles (gemv_rows_tiled_z/y; zmm, two tiles: 32)
// How far ahead (in tiles) the tiles prefetch each row of their block of B. The hardware
// prefetchers do not keep kGemvKb streams 16 KiB apart fed (Zen 4, 1 thread, [M,4096]x[4096,4096]
// with t unaliased (gemv_sums_stride): zmm 16 rows 8.3-8.9 -> 6.5-7.1 ms, ymm 6 rows 5.5 -> 4.4).
constexpr int64_t kGemvAheadZ = 3;
constexpr int64_t kGemvAheadY = 4;
constexpr int kGemvTileRows = 8;  // rows per zmm register tile past 12 rows (gemv_rows_tiled_z)

// gemv_rows_tiled_z's register tiles on ymm (AVX2): 5 or 6 rows x 16 columns (12 of the 16
// registers), so they take one sweep of B where gemv_rows took two (Intel Xeon, AVX2 kernels, 1
// thread, [M,4096]x[4096,4096]: 5 rows 5.7-7.1 -> 3.4-3.7 ms, 6 rows 6.1-7.2 -> 3.8-3.9). 7 and 8 rows
// stay two sweeps of up to 4: as one tile of 8 x 8 columns or as two tiles of 4 rows per block
// of B they ran 6.1-6.8 against 9.0 ms at 4096 but 0.37-0.48 against 0.30 ms at [8,1024]x[1024,1024]. Columns past the
// last whole tile are summed one by one (std::fma: the same rounding as the vector FMA), per block of B, k ascending:
// the same chains as gemv_rows, the same bits.
template <class L, int R, int V>
__attribute__((target("avx2,fma,f16c"))) inline void gemv_tile_y(const float* a, int64_t a_rs, int64_t a_ks,
                                                                 const typename L::T* b, int64_t b_rs, float* t,
                                                                 int64_t ldt, int64_t n, int64_t kn) {
  __m256 x[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) x[r][v] = _mm256_loadu_ps(t + r * ldt + 8 * v);
  for (int64_t k = 0; k < kn; ++k) {
    const typename L::T* bk = b + k * b_rs;
    __m256 w[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) w[v] = L::load8(bk + 8 * v);
    _mm_prefetch(reinterpret_cast<const char*>(bk + kGemvAheadY * 8 * V), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 ar = _mm256_broadcast_ss(a + r * a_rs + k * a_ks);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) x[r][v] = _mm256_fmadd_ps(ar, w[v], x[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(t + r * ldt + 8 * v, x[r][v]);
}

template <class L, int R>
__attribute__((target("avx2,fma,f16c"))) void gemv_rows_tiled_y(const float* a, int64_t a_rs, int64_t a_ks,
                                                                const typename L::T* b, int64_t b_rs, float* t,
                                                                int64_t ldt, int64_t n, int64_t kc) {
  constexpr int V = 2;
  static_assert(R <= 6);
  constexpr int64_t C = 8 * V;
  std::fill(t, t + R * ldt, 0.0f);
  const int64_t nt = n / C * C;
  for (int64_t k0 = 0; k0 < kc; k0 += kGemvKb) {
    const int64_t kn = std::min(kGemvKb, kc - k0);
    const float* ak = a + k0 * a_ks;
    const typename L::T* bk = b + k0 * b_rs;
    for (int64_t j = 0; j < nt; j += C) gemv_tile_y<L, R, V>(ak, a_rs, a_ks, bk + j, b_rs, t + j, ldt, n, kn);
    for (int r = 0; r < R; ++r)
      for (int64_t j = nt; j < n; ++j) {
        float x = t[r * ldt + j];
        for (int64_t k = 0; k < kn; ++k) x = std::fma(ak[r * a_rs + k * a_ks], L::one(bk + k * b_rs + j), x);
        t[r * ldt + j] = x;
      }
  }
}

#define KFUSE_XB_ZMM __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

// One pass of gemv_rows_z over t for u <= U k from k0: x = fma(a_k, b_k, x), k ascending.
template <class L, int R, int U>
KFUSE_XB_ZMM void gemv_pass_z(const float* a, int64_t a_rs, int64_t a_ks, const typename L::T* b, int64_t b_rs,
                              float* t, int64_t ldt, int64_t n, int64_t k0, int u) {
  const int64_t nv = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - nv)) - 1);
  __m512 av[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int q = 0; q < U; ++q) av[r][q] = _mm512_set1_ps(q < u ? a[r * a_rs + (k0 + q) * a_ks] : 0.0f);
  const typename L::T* bk = b + k0 * b_rs;
  for (int64_t j = 0; j < nv; j += 16) {
    __m512 v[U];
#pragma GCC unroll 8
    for (int q = 0; q < U; ++q) v[q] = q < u ? L::load16(bk + q * b_rs + j) : _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float* tr = t + r * ldt + j;
      __m512 x = _mm512_loadu_ps(tr);
#pragma GCC unroll 8
      for (int q = 0; q < U; ++q)
        if (q < u) x = _mm512_fmadd_ps(av[r][q], v[q], x);
      _mm512_storeu_ps(tr, x);
    }
  }
  if (tail) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      float* tr = t + r * ldt + nv;
      __m512 x = _mm512_maskz_loadu_ps(tail, tr);
#pragma GCC unroll 8
      for (int q = 0; q < U; ++q)
        if (q < u) x = _mm512_fmadd_ps(av[r][q], L::load16(tail, bk + q * b_rs + nv), x);
      _mm512_mask_storeu_ps(tr, tail, x);
    }
  }
}

// 5 to kGemvRowsZ (32) rows of A on zmm, B contiguous along N, in one sweep of B. gemv_pass_z's
// broadcasts (R x U registers) do not fit past 4 rows, and two sweeps of B cost twice one (Intel
// Xeon, 1 thread, [M,4096]x[4096,4096]: 4 rows 3.1 ms, 6 rows 5.9, 8 rows 6.3; oneDNN 3.0-3.4
// for all three). Here the outputs stay in registers across a block of kGemvKb rows of B
// instead: a tile of R rows x 32 columns (up to 24 accumulators), per k two loads of B, a
// broadcast of A per row and 2R FMAs; then the tile goes back to t. The block's rows of B are
// read along, 128 bytes of each per tile, so B is kGemvKb sequential streams and each row of B is
// read once. Past 12 rows, tiles of up to 8 rows (8 + 8, 8 + 8 + 8, ...) share each block of B,
// the later ones reading it from L1 or L2 (Intel Xeon, [16,4096]x[4096,4096] 6.4-6.5 ms against
// 7.1 as two sweeps of 8, and 7.6 as one tile of 16 columns; Zen 4, 24 rows as 8 + 8 + 8 10.1
// against 10.8 as 12 + 12), and the block is 32 rows of B (Zen 4, 1 thread: 16 rows 7.1 -> 6.7
// ms, 32 rows 14.0 -> 12.8; a single tile loses with 32, 8 rows 4.4 -> 6.1). The
// chains are gemv_pass_z's: x = fma(a_k, b_k, x), k ascending from 0 per KC block (t starts at
// 0), so the bits are the same.

template <class L, int R, int V, bool Masked, bool Prefetch>
KFUSE_XB_ZMM inline void gemv_tile_z(const float* a, int64_t a_rs, int64_t a_ks, const typename L::T* b, int64_t b_rs,
                                     float* t, int64_t ldt, int64_t n, int64_t kn, const __mmask16* mk) {
  __m512 x[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v)
      x[r][v] = Masked ? _mm512_maskz_loadu_ps(mk[v], t + r * ldt + 16 * v) : _mm512_loadu_ps(t + r * ldt + 16 * v);
  for (int64_t k = 0; k < kn; ++k) {
    const typename L::T* bk = b + k * b_rs;
    __m512 w[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) w[v] = Masked ? L::load16(mk[v], bk + 16 * v) : L::load16(bk + 16 * v);
    // This row's bytes of the tile kGemvAheadZ tiles on (past the row's end: a prefetch does not fault).
    if constexpr (Prefetch) {
      const char* ahead = reinterpret_cast<const char*>(bk + kGemvAheadZ * 16 * V);
      _mm_prefetch(ahead, _MM_HINT_T0);
      if constexpr (sizeof(typename L::T) == 4) _mm_prefetch(ahead + 64, _MM_HINT_T0);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * a_rs + k * a_ks]);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) x[r][v] = _mm512_fmadd_ps(ar, w[v], x[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      if (Masked) _mm512_mask_storeu_ps(t + r * ldt + 16 * v, mk[v], x[r][v]);
      else _mm512_storeu_ps(t + r * ldt + 16 * v, x[r][v]);
    }
}

// The tiles of rows NT .. 1 over one block of columns, as even as whole rows allow; the first
// prefetches B (the others read the block after it).
template <class L, int R, int NT, int V, bool Masked, bool First = true>
KFUSE_XB_ZMM inline void gemv_tiles_z(const float* a, int64_t a_rs, int64_t a_ks, const typename L::T* b, int64_t b_rs,
                                      float* t, int64_t ldt, int64_t n, int64_t kn, const __mmask16* mk) {
  constexpr int R1 = (R + NT - 1) / NT;
  static_assert(R1 <= 12);
  gemv_tile_z<L, R1, V, Masked, First>(a, a_rs, a_ks, b, b_rs, t, ldt, n, kn, mk);
  if constexpr (NT > 1)
    gemv_tiles_z<L, R - R1, NT - 1, V, Masked, false>(a + R1 * a_rs, a_rs, a_ks, b, b_rs, t + R1 * ldt, ldt, n, kn, mk);
}

template <class L, int R>
KFUSE_XB_ZMM void gemv_rows_tiled_z(const float* a, int64_t a_rs, int64_t a_ks, const typename L::T* b, int64_t b_rs,
                                    float* t, int64_t ldt, int64_t n, int64_t kc) {
  constexpr int V = 2;  // vectors of columns per tile: R x V <= 24 accumulators
  constexpr int64_t C = 16 * V;
  // Past 12 rows, tiles of up to 8 rows per block of columns: the later ones read the block's
  // bytes of B from L1 or L2, and B is still read from memory once.
  constexpr int NT = R <= 12 ? 1 : (R + kGemvTileRows - 1) / kGemvTileRows;
  constexpr int64_t Kb = NT > 1 ? 2 * kGemvKb : kGemvKb;
  std::fill(t, t + R * ldt, 0.0f);
  const int64_t nt = n / C * C, rest = n - nt;
  __mmask16 mk[V];
  for (int v = 0; v < V; ++v) {
    const int64_t e = std::clamp<int64_t>(rest - 16 * v, 0, 16);
    mk[v] = static_cast<__mmask16>((1u << e) - 1);
  }
  for (int64_t k0 = 0; k0 < kc; k0 += Kb) {
    const int64_t kn = std::min(Kb, kc - k0);
    const float* ak = a + k0 * a_ks;
    const typename L::T* bk = b + k0 * b_rs;
    for (int64_t j = 0; j < nt; j += C)
      gemv_tiles_z<L, R, NT, V, false>(ak, a_rs, a_ks, bk + j, b_rs, t + j, ldt, n, kn, mk);
    if (rest) gemv_tiles_z<L, R, NT, V, true>(ak, a_rs, a_ks, bk + nt, b_rs, t + nt, ldt, n, kn, mk);
  }
}

// gemv_rows on zmm registers (AVX-512 kernels, Ukrs::w == 16): the same chains, 16 columns per
// FMA and U k per pass over t (8 for one row of A: half the passes over t; 4 for more rows, whose
// R x U broadcasts would otherwise crowd the 32 registers); the last part-vector of columns under
// a mask. 1 thread, data in L2 (2-vCPU Sapphire Rapids class Xeon): [1,512]x[512,512] 14.5 ->
// 12.8 us against the ymm kernel; from L3 or memory both are bound by B's stream.
template <class L, int R>
KFUSE_XB_ZMM void gemv_rows_z(const float* a, int64_t a_rs, int64_t a_ks, const typename L::T* b, int64_t b_rs,
                              float* t, int64_t ldt, int64_t n, int64_t kc) {
  constexpr int U = R == 1 ? 8 : 4;
  std::fill(t, t + R * ldt, 0.0f);
  int64_t k = 0;
  for (; k + U <= kc; k += U) gemv_pass_z<L, R, U>(a, a_rs, a_ks, b, b_rs, t, ldt, n, k, U);
  if (k < kc) gemv_pass_z<L, R, U>(a, a_rs, a_ks, b, b_rs, t, ldt, n, k, static_cast<int>(kc - k));
}

// B contiguous along K (b[j * b_cs + k]: the weight of a linear layer, x @ W^T, W [N, K]
// row-major): 8 rows of W at a time, read 8 k at a time and transposed in registers, so that each
// output keeps its k-ascending chain in one lane. Packing W^T for one row of A had read W, written
// its panel and read the panel again: [1,4096] x [4096,4096]^T took 3x the time of the same
// product with W stored [K, N]. Each group of 8 rows of W is read over all of K in one sweep (per
// KC block a chain from 0, then written to C or added to it, as the other paths do), so every row
// of W is one long stream. In cache, one row of A is bound by the 8 serial FMA chains of a group
// (4 cycles per k: [1,1024]x[1024,1024]^T 143 us, the [K, N] layout 52 us). Tried and dropped
// (Zen 4, 1 thread): sweeping a KC block at a time (2 KiB runs per row: half the speed), K in
// chunks whose rows of A fit L1 (4 x [4096,4096]^T 3.7 -> 5.2 ms), 2-4 groups at once (rows a
// power-of-two K apart share one L1 set: [1,1024]x[1024,1024]^T 143 -> 247 us, 8.2 ms for
// 4096^2), and two KC blocks at once (two chains per output: 143 -> 100 us in cache, but 3.1 ->
// 4.6 ms for 4096^2 from memory, where the extra streams cost more than the chains).
template <class L, int R>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void gemv_t_rows_body(
    const float* a, int64_t a_rs, int64_t a_ks, const typename L::T* b, int64_t b_cs, float* c, int64_t c_rs, int64_t n,
    int64_t K, int64_t KC) {
  const int64_t nv = n / 8 * 8;
  for (int64_t j = 0; j < nv; j += 8) {
    const typename L::T* bj = b + j * b_cs;
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t ke = std::min(K, pc + KC), k8 = pc + (ke - pc) / 8 * 8;
      __m256 acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
      for (int64_t k = pc; k < k8; k += 8) {
        __m256 w[8];
        for (int i = 0; i < 8; ++i) w[i] = L::load8(bj + i * b_cs + k);
        transpose8(w);  // w[u] = B[k + u, j .. j + 7]
        for (int u = 0; u < 8; ++u)
          for (int r = 0; r < R; ++r)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a[r * a_rs + (k + u) * a_ks]), w[u], acc[r]);
      }
      for (int64_t k = k8; k < ke; ++k) {
        alignas(32) float col[8];
        for (int i = 0; i < 8; ++i) col[i] = L::one(bj + i * b_cs + k);
        const __m256 w = _mm256_load_ps(col);
        for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(a[r * a_rs + k * a_ks]), w, acc[r]);
      }
      for (int r = 0; r < R; ++r) {
        float* cr = c + r * c_rs + j;
        _mm256_storeu_ps(cr, pc == 0 ? acc[r] : _mm256_add_ps(_mm256_loadu_ps(cr), acc[r]));
      }
    }
  }
  for (int64_t j = nv; j < n; ++j)
    for (int r = 0; r < R; ++r)
      for (int64_t pc = 0; pc < K; pc += KC) {
        float x = 0.0f;
        for (int64_t k = pc; k < std::min(K, pc + KC); ++k)
          x = std::fma(a[r * a_rs + k * a_ks], L::one(b + j * b_cs + k), x);
        float& cr = c[r * c_rs + j];
        cr = pc == 0 ? x : cr + x;
      }
}

template <class L, int R>
__attribute__((target("avx2,fma,f16c"))) void gemv_t_rows(const float* a, int64_t a_rs, int64_t a_ks,
                                                          const typename L::T* b, int64_t b_cs, float* c, int64_t c_rs,
                                                          int64_t n, int64_t K, int64_t KC) {
  gemv_t_rows_body<L, R>(a, a_rs, a_ks, b, b_cs, c, c_rs, n, K, KC);
}

// The same kernel compiled for AVX-512VL (GemvTForm::YmmVl): ymm0-31 hold up to 12 accumulators
// beside the 8 transposed rows, so up to kGemvTRowsVl rows of A take one sweep of W.
template <class L, int R>
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) void gemv_t_rows_vl(const float* a, int64_t a_rs,
                                                                              int64_t a_ks, const typename L::T* b,
                                                                              int64_t b_cs, float* c, int64_t c_rs,
                                                                              int64_t n, int64_t K, int64_t KC) {
  gemv_t_rows_body<L, R>(a, a_rs, a_ks, b, b_cs, c, c_rs, n, K, KC);
}

// Transposes 16 rows of 16 floats in place: r[j] becomes column j (four rounds of two-source
// shuffles: 32-bit pairs, 64-bit pairs, then 128-bit lanes twice).
KFUSE_XB_ZMM inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    const __m512d a0 = _mm512_castps_pd(t[i]), a1 = _mm512_castps_pd(t[i + 1]);
    const __m512d a2 = _mm512_castps_pd(t[i + 2]), a3 = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
  // r[4g + c] holds column c + 4L of rows 4g .. 4g + 3 in its 128-bit lane L
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const int g = i / 4, c = i % 4;
    t[i] = _mm512_shuffle_f32x4(r[8 * g + c], r[8 * g + 4 + c], 0x88);
    t[i + 8] = _mm512_shuffle_f32x4(r[8 * g + c], r[8 * g + 4 + c], 0xdd);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[4 + c], 0x88);
    r[c + 8] = _mm512_shuffle_f32x4(t[c], t[4 + c], 0xdd);
    r[c + 4] = _mm512_shuffle_f32x4(t[8 + c], t[12 + c], 0x88);
    r[c + 12] = _mm512_shuffle_f32x4(t[8 + c], t[12 + c], 0xdd);
  }
}

// The 16 rows of a block of W: four bases (rows 0, 4, 8, 12) plus 0, 1, 2 or 3 row strides, an
// x86 address mode. With the strides opaque to the optimiser (the empty asm), GCC no longer turns
// the 16 row pointers (and 16 more for the prefetch) into induction variables that spill, which
// had cost a reload from the stack per load ([1,512]x[512,512]^T, W in L2: 24 -> 29 us).
struct Rows16 {
  const char* base[4];
  int64_t s1, s3;  // bytes
  KFUSE_XB_ZMM Rows16(const void* w0, int64_t row_bytes) : s1(row_bytes), s3(3 * row_bytes) {
    asm("" : "+r"(s1), "+r"(s3));
    const char* p0 = static_cast<const char*>(w0);
    base[0] = p0, base[1] = p0 + 4 * s1, base[2] = p0 + 8 * s1, base[3] = p0 + 4 * s3;
  }
  const char* operator()(int r) const { return base[r / 4] + (r % 4 == 3 ? s3 : (r % 4) * s1); }
};

// 16 rows of W (row stride b_cs) by 16 k, transposed: w[u][e] = W[e, u]; prefetches the same rows
// `ahead` elements on (past the end of W near its end: a prefetch never faults).
//
// f32: the first of the two rounds is done by the loads: each register gathers four rows' runs
// of 4 k, one per 128-bit lane (a load and three `vinsertf32x4` from memory, which run on the FMA
// port as well as the shuffle port); the second is a 4 x 4 transpose inside each lane (8 shuffles
// per 4 outputs). Lane L of the q-th group holds the rows 4L + g, so output element e = 4L + g is
// row e. Half of a 16 x 16 register transpose's 64 shuffles, which all wait on the one shuffle
// port: with W from L3, [1,4096]x[4096,4096]^T 1 thread 3.07-3.39 -> 2.74-2.96 ms with the
// prefetch (scratch, 2-vCPU Sapphire Rapids class Xeon; oneDNN's sgemm 2.64-2.94 ms in the same
// runs). f16 and bf16: each row's 16 k converted as loaded (gemm_loads.hpp), then transpose16.
template <class L>
KFUSE_XB_ZMM inline void load_transposed16(const typename L::T* w0, int64_t b_cs, int64_t ahead, __m512 w[16]) {
  using T = typename L::T;
  const Rows16 row(w0, b_cs * static_cast<int64_t>(sizeof(T)));
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) _mm_prefetch(row(r) + ahead * static_cast<int64_t>(sizeof(T)), _MM_HINT_T0);
  if constexpr (L::dtype != DType::F32) {
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) w[r] = L::load16(reinterpret_cast<const T*>(row(r)));
    transpose16(w);
    return;
  } else {
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      __m512 z[4];
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        // lane L: row 4L + g
        __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(reinterpret_cast<const float*>(row(g)) + 4 * q));
        v = _mm512_insertf32x4(v, _mm_loadu_ps(reinterpret_cast<const float*>(row(4 + g)) + 4 * q), 1);
        v = _mm512_insertf32x4(v, _mm_loadu_ps(reinterpret_cast<const float*>(row(8 + g)) + 4 * q), 2);
        z[g] = _mm512_insertf32x4(v, _mm_loadu_ps(reinterpret_cast<const float*>(row(12 + g)) + 4 * q), 3);
      }
      const __m512d t0 = _mm512_castps_pd(_mm512_unpacklo_ps(z[0], z[1]));
      const __m512d t1 = _mm512_castps_pd(_mm512_unpackhi_ps(z[0], z[1]));
      const __m512d t2 = _mm512_castps_pd(_mm512_unpacklo_ps(z[2], z[3]));
      const __m512d t3 = _mm512_castps_pd(_mm512_unpackhi_ps(z[2], z[3]));
      w[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
      w[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
      w[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
      w[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
  }
}

// How far ahead along each of the 16 rows of W the zmm kernel prefetches, in elements: 8 lines of
// f32 (4 lines of f16 or bf16; not tuned for them). Each row is
// its own stream, 16 of them a power-of-two stride apart, which the hardware prefetchers follow
// late (no prefetch 3.08-3.11 ms; 4, 8, 12 and 16 lines ahead measured 2.97-3.04, 2.74-2.96,
// 2.79-2.86 and 2.76-2.91 ms).
constexpr int64_t kGemvTAhead = 128;

template <class L, int R>
KFUSE_XB_ZMM void gemv_t_rows_z(const float* a, int64_t a_rs, int64_t a_ks, const typename L::T* b, int64_t b_cs,
                                float* c, int64_t c_rs, int64_t n, int64_t K, int64_t KC) {
  const int64_t nv = n / 16 * 16;
  for (int64_t j = 0; j < nv; j += 16) {
    const typename L::T* bj = b + j * b_cs;
    for (int64_t pc = 0; pc < K; pc += KC) {
      const int64_t ke = std::min(K, pc + KC), k16 = pc + (ke - pc) / 16 * 16;
      __m512 acc[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t k = pc; k < k16; k += 16) {
        __m512 w[16];
        load_transposed16<L>(bj + k, b_cs, kGemvTAhead, w);  // w[u] = B[k + u, j .. j + 15]
#pragma GCC unroll 16
        for (int u = 0; u < 16; ++u)
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r)
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * a_rs + (k + u) * a_ks]), w[u], acc[r]);
      }
      for (int64_t k = k16; k < ke; ++k) {
        alignas(64) float col[16];
        for (int i = 0; i < 16; ++i) col[i] = L::one(bj + i * b_cs + k);
        const __m512 w = _mm512_load_ps(col);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * a_rs + k * a_ks]), w, acc[r]);
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        float* cr = c + r * c_rs + j;
        _mm512_storeu_ps(cr, pc == 0 ? acc[r] : _mm512_add_ps(_mm512_loadu_ps(cr), acc[r]));
      }
    }
  }
  if (nv < n) gemv_t_rows<L, R>(a, a_rs, a_ks, b + nv * b_cs, b_cs, c + nv, c_rs, n - nv, K, KC);
}

// The kernels of one stored dtype of B, by rows of A (1 .. kGemvRows).
template <class L>
struct GemvSet {
  using T = typename L::T;
  using Fn = void (*)(const float*, int64_t, int64_t, const T*, int64_t, float*, int64_t, int64_t, int64_t);
  using TFn = void (*)(const float*, int64_t, int64_t, const T*, int64_t, float*, int64_t, int64_t, int64_t, int64_t);
  static constexpr Fn ymm[kGemvRowsY + 1] = {
      nullptr,         gemv_rows<L, 1>,         gemv_rows<L, 2>,        gemv_rows<L, 3>,
      gemv_rows<L, 4>, gemv_rows_tiled_y<L, 5>, gemv_rows_tiled_y<L, 6>};
  template <int R>
  static constexpr Fn zmm_rows() {
    if constexpr (R <= kGemvRows) return gemv_rows_z<L, R>;
    else return gemv_rows_tiled_z<L, R>;
  }
  template <size_t... I>
  static constexpr std::array<Fn, kGemvRowsZ + 1> zmm_table(std::index_sequence<I...>) {
    return {nullptr, zmm_rows<static_cast<int>(I) + 1>()...};
  }
  static constexpr std::array<Fn, kGemvRowsZ + 1> zmm = zmm_table(std::make_index_sequence<kGemvRowsZ>{});
  static constexpr TFn t_ymm[kGemvRows + 1] = {nullptr, gemv_t_rows<L, 1>, gemv_t_rows<L, 2>, gemv_t_rows<L, 3>,
                                               gemv_t_rows<L, 4>};
  template <size_t... I>
  static constexpr std::array<TFn, kGemvTRowsVl + 1> t_vl_table(std::index_sequence<I...>) {
    return {nullptr, gemv_t_rows_vl<L, static_cast<int>(I) + 1>...};
  }
  static constexpr std::array<TFn, kGemvTRowsVl + 1> t_vl = t_vl_table(std::make_index_sequence<kGemvTRowsVl>{});
  static constexpr TFn t_zmm[kGemvRows + 1] = {nullptr, gemv_t_rows_z<L, 1>, gemv_t_rows_z<L, 2>, gemv_t_rows_z<L, 3>,
                                               gemv_t_rows_z<L, 4>};
};

#undef KFUSE_XB_ZMM

}  // namespace

bool gemv_reads(DType dt) {
  return with_loader(dt, [](auto) {});
}

void gemv(bool zmm, DType b_dt, int rows, const float* a, int64_t a_rs, int64_t a_ks, const void* b, int64_t b_rs,
          float* t, int64_t ldt, int64_t n, int64_t kc) {
  with_loader(b_dt, [&](auto l) {
    using S = GemvSet<decltype(l)>;
    (zmm ? S::zmm.data() : S::ymm)[rows](a, a_rs, a_ks, static_cast<const typename S::T*>(b), b_rs, t, ldt, n, kc);
  });
}

namespace {
std::atomic<int> g_t_form{-1};  // set_gemv_t_form's forced form, or -1
}  // namespace

GemvTForm gemv_t_form(bool zmm) {
  const int forced = g_t_form.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<GemvTForm>(forced);
  if (!zmm) return GemvTForm::Ymm;
  return direct_gemm_past_l2() ? GemvTForm::YmmVl : GemvTForm::Zmm;  // (AMD: see GemvTForm)
}

void set_gemv_t_form(std::optional<GemvTForm> form) {
  g_t_form.store(form ? static_cast<int>(*form) : -1, std::memory_order_relaxed);
}

void gemv_t(GemvTForm form, DType b_dt, int rows, const float* a, int64_t a_rs, int64_t a_ks, const void* b,
            int64_t b_cs, float* c, int64_t c_rs, int64_t n, int64_t K, int64_t KC) {
  with_loader(b_dt, [&](auto l) {
    using S = GemvSet<decltype(l)>;
    const auto* table = form == GemvTForm::YmmVl ? S::t_vl.data() : form == GemvTForm::Zmm ? S::t_zmm : S::t_ymm;
    table[rows](a, a_rs, a_ks, static_cast<const typename S::T*>(b), b_cs, c, c_rs, n, K, KC);
  });
}

}  // namespace kfuse::detail::xb
