// xbyak backend: u8 x i8 products with W stored [K, N] (gemm.hpp, gemm_dot_cols): x @ W of a
// quantised layer whose weight runs along N (ONNX's MatMulInteger layout), at a small batch.
//
// `vpdpbusd` needs four consecutive k of W in each 32-bit lane: the packed path interleaves
// them into panels on every call, its scattered stores a read and a write of all of W besides
// the kernels' read. Here the interleave happens in registers instead: per step of 4 k, one
// 64-byte load of each of W's 4 rows (64 columns), byte then 16-bit unpacks (8 instructions)
// give 4 vectors of quads, and each row of the tile broadcasts its quad of A (u8, the unsigned
// operand) into 4 `vpdpbusd`. A tile is up to 6 rows x 64 columns (24 accumulators); a lane
// of quad vector q, 128-bit block l, holds column 16 l + 4 q + j, so the tile's rows are put
// back in column order by a 4 x 4 transpose of 128-bit blocks before they are stored.
//
// Order: blocks of kDotColsRows rows of W (their pages stay in the TLB: a row of a 4 KiB-page
// W is a page of its own, and a 64-column strip touches one line of each), then the strips of
// 64 columns, then the tiles of rows, the later ones reading the strip from L1. The first tile
// of a strip prefetches the next strip's line of each row into L2 (the stream prefetcher
// follows at most a few dozen pages, a strip reads 256). Intel Xeon (model 207), 1 thread,
// [M,4096]x[4096,4096] u8 x i8, prefetches into L1 from every tile -> into L2 from the first:
// M = 1 1.04 -> 0.85 ms, 8 1.58 -> 1.42, 16 2.57 -> 1.94, 32 3.33 -> 3.43 (packed 3.57).
// Integer sums are exact, so adding each block's sums into C gives the packed path's values.
// A is copied (zero-padded to whole quads, so that no quad reads past a row) into scratch.
#include <xbyak/xbyak.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>

#include "gemm.hpp"

namespace kfuse::detail::xb {

namespace {

using Xbyak::Reg64;
using Xbyak::Zmm;

struct ColsArgs {
  const uint8_t* a;  // quads of A, row stride a_rs (bytes), kq quads a row
  const int8_t* w;   // W's first row of the block, row stride w_rs
  int32_t* c;        // row stride c_rs (bytes)
  int64_t kq;        // whole quads of k (rows of W in fours)
  int64_t rem;       // rows of a last part-quad (0..3)
  int64_t a_rs, w_rs, c_rs;
  int64_t cols;        // live columns of the strip (1..64)
  int64_t accumulate;  // 0: C = sums; 1: C += sums
};
static_assert(offsetof(ColsArgs, a) == 0 && offsetof(ColsArgs, w) == 8 && offsetof(ColsArgs, c) == 16 &&
                  offsetof(ColsArgs, kq) == 24 && offsetof(ColsArgs, rem) == 32 && offsetof(ColsArgs, a_rs) == 40 &&
                  offsetof(ColsArgs, w_rs) == 48 && offsetof(ColsArgs, c_rs) == 56 && offsetof(ColsArgs, cols) == 64 &&
                  offsetof(ColsArgs, accumulate) == 72,
              "ColsArgs layout");
using ColsFn = void (*)(const ColsArgs*);

constexpr int kTileRows = 6;

class DotColsGen : public Xbyak::CodeGenerator {
 public:
  // A tile of mt rows (1..6) x nv vectors of 16 columns (1..4; the last one's live columns
  // ColsArgs::cols - 16 (nv - 1)).
  // `prefetch`: the next strip's line of each row of W read (the first tile of rows of a strip).
  DotColsGen(uint8_t* buf, size_t size, int mt, int nv, bool prefetch)
      : CodeGenerator(size, buf), mt_(mt), prefetch_(prefetch) {
    for (const auto& r : {rbx, rbp, r12, r13, r14, r15}) push(r);
    mov(pa_, qword[rdi + 0]);
    mov(wb_, qword[rdi + 8]);
    mov(ars_, qword[rdi + 40]);
    lea(ar3_, ptr[ars_ + ars_ * 2]);
    lea(ar5_, ptr[ars_ + ars_ * 4]);
    mov(wrs_, qword[rdi + 48]);
    lea(wr3_, ptr[wrs_ + wrs_ * 2]);
    lea(wr4_, ptr[wrs_ * 4]);
    mov(rax, -1);  // the live columns' bytes of each row of W
    mov(rcx, qword[rdi + 64]);
    bzhi(rax, rax, rcx);
    kmovq(k1, rax);
    for (int i = 0; i < 4 * mt; ++i) vpxord(Zmm(i), Zmm(i), Zmm(i));
    Xbyak::Label loop, part, done;
    mov(rax, qword[rdi + 24]);
    test(rax, rax);
    jz(part, T_NEAR);
    L(loop);
    quad(4);
    add(wb_, wr4_);
    add(pa_, 4);
    dec(rax);
    jnz(loop, T_NEAR);
    L(part);  // the last 1-3 rows of W (the quads of A are zero past K)
    for (int r = 3; r >= 1; --r) {
      Xbyak::Label next;
      cmp(qword[rdi + 32], r);
      jne(next, T_NEAR);
      quad(r);
      jmp(done, T_NEAR);
      L(next);
    }
    L(done);
    store(nv);
    for (const auto& r : {r15, r14, r13, r12, rbp, rbx}) pop(r);
    vzeroupper();
    ret();
  }

 private:
  Xbyak::Address w_row(int r) const {
    switch (r) {
      case 0: return zword[wb_];
      case 1: return zword[wb_ + wrs_];
      case 2: return zword[wb_ + wrs_ * 2];
      default: return zword[wb_ + wr3_];
    }
  }
  Xbyak::Address a_quad(int i) const {
    switch (i) {
      case 0: return dword[pa_];
      case 1: return dword[pa_ + ars_];
      case 2: return dword[pa_ + ars_ * 2];
      case 3: return dword[pa_ + ar3_];
      case 4: return dword[pa_ + ars_ * 4];
      default: return dword[pa_ + ar5_];
    }
  }
  Xbyak::Address w_next(int r) const {  // (the next strip's line of row r)
    switch (r) {
      case 0: return ptr[wb_ + 64];
      case 1: return ptr[wb_ + wrs_ + 64];
      case 2: return ptr[wb_ + wrs_ * 2 + 64];
      default: return ptr[wb_ + wr3_ + 64];
    }
  }
  // One step of 4 k, `rows` of them live (the rest zero).
  void quad(int rows) {
    const Zmm r[4] = {Zmm(24), Zmm(25), Zmm(26), Zmm(27)}, t[4] = {Zmm(28), Zmm(29), Zmm(30), Zmm(31)};
    for (int i = 0; i < 4; ++i) {
      if (i < rows) {
        vmovdqu8(r[i] | k1 | T_z, w_row(i));
        if (prefetch_) prefetcht1(w_next(i));
      } else {
        vpxord(r[i], r[i], r[i]);
      }
    }
    vpunpcklbw(t[0], r[0], r[1]);
    vpunpckhbw(t[1], r[0], r[1]);
    vpunpcklbw(t[2], r[2], r[3]);
    vpunpckhbw(t[3], r[2], r[3]);
    vpunpcklwd(r[0], t[0], t[2]);  // columns 16 l + 0..3
    vpunpckhwd(r[1], t[0], t[2]);  // 16 l + 4..7
    vpunpcklwd(r[2], t[1], t[3]);  // 16 l + 8..11
    vpunpckhwd(r[3], t[1], t[3]);  // 16 l + 12..15
    for (int i = 0; i < mt_; ++i) {
      const Zmm& a = t[i % 2];
      vpbroadcastd(a, a_quad(i));
      for (int q = 0; q < 4; ++q) vpdpbusd(Zmm(4 * i + q), a, r[q]);
    }
  }
  // Row i's quad vectors back in column order (a 4 x 4 transpose of 128-bit blocks), stored
  // (or added) under the last vector's mask.
  void store(int nv) {
    mov(rcx, qword[rdi + 16]);
    mov(rdx, qword[rdi + 56]);
    mov(rax, qword[rdi + 64]);  // the last vector's live columns: cols - 16 (nv - 1)
    sub(rax, 16 * (nv - 1));
    mov(esi, 0xffff);
    bzhi(esi, esi, eax);
    kmovw(k2, esi);
    const Zmm u[4] = {Zmm(24), Zmm(25), Zmm(26), Zmm(27)}, o[4] = {Zmm(28), Zmm(29), Zmm(30), Zmm(31)};
    mov(r8, qword[rdi + 72]);
    for (int i = 0; i < mt_; ++i) {
      const Zmm a0(4 * i), a1(4 * i + 1), a2(4 * i + 2), a3(4 * i + 3);
      vshufi32x4(u[0], a0, a1, 0x44);
      vshufi32x4(u[1], a0, a1, 0xEE);
      vshufi32x4(u[2], a2, a3, 0x44);
      vshufi32x4(u[3], a2, a3, 0xEE);
      vshufi32x4(o[0], u[0], u[2], 0x88);
      vshufi32x4(o[1], u[0], u[2], 0xDD);
      vshufi32x4(o[2], u[1], u[3], 0x88);
      vshufi32x4(o[3], u[1], u[3], 0xDD);
      Xbyak::Label plain;
      test(r8, r8);
      jz(plain, T_NEAR);
      for (int b = 0; b < nv; ++b) {
        if (b == nv - 1) vpaddd(o[b] | k2, o[b], zword[rcx + 64 * b]);
        else vpaddd(o[b], o[b], zword[rcx + 64 * b]);
      }
      L(plain);
      for (int b = 0; b < nv; ++b) {
        if (b == nv - 1) vmovdqu32(zword[rcx + 64 * b] | k2, o[b]);
        else vmovdqu32(zword[rcx + 64 * b], o[b]);
      }
      add(rcx, rdx);
    }
  }

  int mt_;
  bool prefetch_;
  const Reg64 pa_ = r9, ars_ = r10, ar3_ = r11, ar5_ = rbx, wb_ = rbp, wrs_ = r12, wr3_ = r13, wr4_ = r14;
};

std::atomic<ColsFn> g_tiles[2][kTileRows + 1][5];  // [prefetch][rows][vectors]

ColsFn tile_kernel(int mt, int nv, bool prefetch) {
  return generated_once(g_tiles[prefetch][mt][nv], [&] {
    DotColsGen g(gemm_gen_buffer(), kGemmGenBytes, mt, nv, prefetch);
    g.ready();
    return keep_gemm_code(
        g.getCode(), g.getSize(),
        "kfuse_gemm_dot_cols_" + std::to_string(mt) + "x" + std::to_string(nv) + (prefetch ? "_u8s8_pf" : "_u8s8"));
  });
}

}  // namespace

int64_t dot_cols_a_stride(int64_t K) { return (K + 3) / 4 * 4 + 64; }

void gemm_dot_cols(const DotColsArgs& s, int64_t m, int64_t n, uint8_t* at) {
  if (m <= 0 || n <= 0) return;
  const int64_t as = dot_cols_a_stride(s.k);
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* d = at + r * as;
    std::memcpy(d, s.a + r * s.a_rs, static_cast<size_t>(s.k));
    std::memset(d + s.k, 0, static_cast<size_t>(as - s.k));
  }
  // Tiles of rows as even as 6 at most allow (16 rows: 6, 5, 5).
  const int64_t tiles = (m + kTileRows - 1) / kTileRows, per = (m + tiles - 1) / tiles;
  for (int64_t k0 = 0; k0 < s.k; k0 += kDotColsRows) {
    const int64_t kb = std::min(kDotColsRows, s.k - k0);
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
      const int64_t cols = std::min<int64_t>(64, n - j0);
      const int nv = static_cast<int>((cols + 15) / 16);
      for (int64_t i0 = 0; i0 < m; i0 += per) {
        const int mt = static_cast<int>(std::min(per, m - i0));
        ColsArgs t{at + i0 * as + k0,
                   s.w + k0 * s.w_rs + j0,
                   reinterpret_cast<int32_t*>(reinterpret_cast<char*>(s.c) + i0 * s.c_rs) + j0,
                   kb / 4,
                   kb % 4,
                   as,
                   s.w_rs,
                   s.c_rs,
                   cols,
                   k0 > 0};
        tile_kernel(mt, nv, i0 == 0)(&t);
      }
    }
  }
}

}  // namespace kfuse::detail::xb
