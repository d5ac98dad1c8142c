// xbyak backend: x @ W^T for a few dozen rows of x (gemm.hpp, gemm_swapped), a linear layer at a
// small batch. B is W [N, K], contiguous along K. The packed path transposes all of W into
// panels every call and then reuses each panel for only one or two row tiles; the GEMV kernel
// transposes W in registers, which pays for a few rows only. Here the roles swap instead:
// C^T = W A^T, computed by the direct microkernels with W as their "A" operand, read in place
// (each W element broadcast once, each of its rows a sequential stream) and A^T as their "B"
// operand, packed (a KC-long column of x per k, its rows padded to whole vectors): the packing
// is of x, which is small, and W is read once, as it is stored.
//
// f16 and bf16 weights: each KC block of a tile's rows is converted into an f32 block in L1 by
// the packers' loaders (gemm_loads.hpp), then read by the same kernels: W converted once, not
// transposed, and the f32 values the packed path sums. The conversion's loads would wait on
// memory with no FMAs beside them: the kernels of each tile ask the next tile's rows into L2 as
// they run (a prefetch stream spread over their k loop), and the staging reads them from there.
//
// Summation order: every C element is summed per KC block, k ascending from 0 in one register,
// then added to C in block order, as on the packed path (fma(w, x, acc) is fma(x, w, acc)): the
// same bits whichever path or thread split computes it.
#include <algorithm>

#include "gemm.hpp"
#include "gemm_loads.hpp"
#include "kfuse/profile.hpp"

// GCC 12 warns inside its AVX-512 intrinsics (gemv.cpp says why).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kfuse::detail::xb {

namespace {

// Rows [0, rows) x k [0, kc) of W (row stride w_rs) as f32 into dst (row stride ld); AVX2.
template <class L>
__attribute__((target("avx2,f16c"))) void stage_rows(float* dst, int64_t ld, const typename L::T* w, int64_t w_rs,
                                                     int rows, int64_t kc) {
  for (int r = 0; r < rows; ++r) {
    const typename L::T* s = w + r * w_rs;
    float* d = dst + r * ld;
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
      if (k % (64 / sizeof(typename L::T)) == 0) _mm_prefetch(reinterpret_cast<const char*>(s + k + kc), _MM_HINT_T0);
      _mm256_storeu_ps(d + k, L::load8(s + k));
    }
    for (; k < kc; ++k) d[k] = L::one(s + k);
  }
}

// The same with AVX-512 (the zmm kernels' blocks): 16 elements per conversion, half the
// instructions of the ymm loop. Intel Xeon (model 207), 1 thread, [16,4096]x[4096,4096]^T bf16
// x bf16, 38 interleaved calls of each, medians of three runs on a noisy host: ymm 6.90 / 11.07
// / 8.72 ms, zmm 6.43 / 9.77 / 7.68.
template <class L>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c"))) void stage_rows_z(float* dst, int64_t ld,
                                                                                 const typename L::T* w, int64_t w_rs,
                                                                                 int rows, int64_t kc) {
  for (int r = 0; r < rows; ++r) {
    const typename L::T* s = w + r * w_rs;
    float* d = dst + r * ld;
    int64_t k = 0;
    for (; k + 16 <= kc; k += 16) _mm512_storeu_ps(d + k, L::load16(s + k));
    if (k < kc) {
      const __mmask16 m = static_cast<__mmask16>((1u << (kc - k)) - 1);
      _mm512_mask_storeu_ps(d + k, m, L::load16(m, s + k));
    }
  }
}

}  // namespace

int64_t swapped_width(const Ukrs& u, int64_t m) { return (m + u.w - 1) / u.w * u.w; }

// A line past KC: at KC = 1024 rows 4 KiB apart had put the tile's 14 rows into one L1 set, more
// than its 12 ways, and the kernel's reads of them missed L1 every 16 k (Intel Xeon, model 207, a
// 14 x 1 direct kernel over a staged 14 x 1024 block: 134-144 -> 154-161 GFLOP/s, the best of 7).
int64_t swapped_stage_ld(int64_t KC) { return (KC + 15) / 16 * 16 + 16; }

int64_t swapped_chunk(const Ukrs& u, int64_t l2, int64_t m, int64_t K, int64_t KC) {
  // Whole KC blocks of A^T that take at most half of L2: a chunk is read once per tile of W rows.
  const int64_t per_block = KC * swapped_width(u, m) * 4;
  return std::min(K, std::max<int64_t>(1, l2 / 2 / per_block) * KC);
}

void gemm_swapped(const Ukrs& u, const SwappedArgs& s) {
  const int64_t mp = swapped_width(u, s.m), NR = u.nr, W = u.w;
  // An f32 W is read in place: as many rows per tile as fit the ways of an L1 set (rows 4 KiB
  // apart share one set; staged half rows are padded instead). Intel Xeon (model 207), 1 thread,
  // [16,4096]x[4096,4096]^T f32, 38 interleaved calls of each, medians (two runs): 14 rows 5.07
  // / 4.44 ms, 12 rows 4.66 / 4.26. (The next tile's rows streamed into L2 as for half weights,
  // two lines per two k, lost: 12 rows 5.59 / 4.99, 14 rows 5.48 / 4.97.)
  const int64_t MR = s.w_dt == DType::F32 ? gemm_direct_tile_rows(s.w_rs * 4, u.mr, probe::cache_sizes().l1d) : u.mr;
  const bool one_chunk = s.kb >= s.K;
  // Half weights: while a tile's kernels run, its first column of kernels asks the next tile's
  // rows into L2 (direct_streaming), so that their staging reads L2. The rows of a dense W are
  // one range (K elements apart), and over a tile the stream covers 32 bytes per k, a 14-row
  // tile's 28 of bf16 or f16. Intel Xeon (model 207), 1 thread, [16,4096]x[4096,4096]^T bf16,
  // 38 interleaved calls of each, medians (two runs): no prefetch 6.09 / 6.11 ms; the staging
  // asking for the next tile's lines as it converts (a burst that waits on memory) 5.80 / 5.82;
  // the stream 4.81 / 4.90; both 5.23 / 5.42. (An f32 W, read in place by the kernels, gained
  // 3-6% from the same stream, which covers half of its next tile, and lost with two lines per
  // two k: not taken.) The AVX2 kernels, not measured with it, stage as before.
  const int64_t esz = static_cast<int64_t>(dtype_size(s.w_dt));
  const bool stream = W == 16 && s.w_dt != DType::F32 && one_chunk && s.w_rs == s.K;
  // C'^T tile by tile (rows of W x the padded rows of x): into C at once when K is one chunk,
  // else kept whole (ct holds n x mp floats) until the last chunk has been added.
  auto ct_at = [&](int64_t i) { return one_chunk ? s.ct : s.ct + i * mp; };
  auto to_c = [&](int64_t i, int64_t rows) {
    const float* t = ct_at(i);
    for (int64_t r = 0; r < s.m; ++r) {
      float* c = s.c + r * s.c_rs + i;
      for (int64_t j = 0; j < rows; ++j) c[j] = t[j * mp + r];
    }
  };
  for (int64_t k0 = 0; k0 < s.K; k0 += s.kb) {
    const int64_t kn = std::min(s.kb, s.K - k0);
    for (int64_t r = 0; r < mp; ++r) {  // A^T: xt[k * mp + r] = A[r, k0 + k], zero past m
      float* d = s.xt + r;
      if (r >= s.m) {
        for (int64_t k = 0; k < kn; ++k) d[k * mp] = 0.0f;
        continue;
      }
      const float* a = s.a + r * s.a_rs + k0 * s.a_ks;
      for (int64_t k = 0; k < kn; ++k) d[k * mp] = a[k * s.a_ks];
    }
    for (int64_t i = 0; i < s.n; i += MR) {
      const int mr = static_cast<int>(std::min(MR, s.n - i));
      // The tile's rows of W stream once through the chunk; each KC block of them stays in L1
      // across the vectors of x.
      for (int64_t pc = k0; pc < k0 + kn; pc += s.KC) {
        const int64_t kc = std::min(s.KC, k0 + kn - pc);
        const float* wf = s.wt;
        int64_t w_rs = swapped_stage_ld(s.KC);
        if (s.w_dt == DType::F32) {
          wf = static_cast<const float*>(s.w) + i * s.w_rs + pc;
          w_rs = s.w_rs;
        } else {
          with_loader(s.w_dt, [&](auto l) {
            using L = decltype(l);
            const auto* w = static_cast<const typename L::T*>(s.w) + i * s.w_rs + pc;
            if (W == 16) stage_rows_z<L>(s.wt, w_rs, w, s.w_rs, mr, kc);
            else stage_rows<L>(s.wt, w_rs, w, s.w_rs, mr, kc);
          });
        }
        for (int64_t j = 0; j < mp; j += NR) {
          const int nv = static_cast<int>(std::min(NR, mp - j) / W);
          UkrArgs g{wf, s.xt + (pc - k0) * mp + j, ct_at(i) + j, kc, w_rs * 4, 4, mp * 4, mp * 4, pc == 0 ? 0 : 1};
          if (stream && j == 0 && i + MR < s.n) {
            g.pf = static_cast<const char*>(s.w) + ((i + MR) * s.w_rs) * esz + (pc - k0) * 32;
            u.direct_streaming(mr, nv)(&g);
          } else {
            u.direct_tile(mr, nv)(&g);
          }
        }
      }
      if (one_chunk) to_c(i, mr);
    }
  }
  if (!one_chunk)
    for (int64_t i = 0; i < s.n; i += MR) to_c(i, std::min(MR, s.n - i));
}

}  // namespace kfuse::detail::xb
