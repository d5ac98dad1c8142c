// xbyak backend: u8 x i8 products with both operands contiguous along K (gemm.hpp,
// gemm_dot_rows), the quantised linear layer x @ W^T at a small batch.
//
// The packed path packs quads of k of W^T into panels on every call (a read and a write of all
// of W, then the kernels' read of the panels), and reuses each panel for a few row tiles only.
// Here both operands are read as stored: a 64-byte vector of a row of A and one of a row of W
// hold the same 64 values of k, and one `vpdpbusd` adds their 64 products, four per 32-bit
// lane, into a register of 16 partial sums of that C element. A tile of up to 16 C elements
// (4 rows of A x 4 rows of W, or 2 x 8, 1 x 16) keeps 16 such registers over all of K; per 64 k
// it loads each of its rows once (8 loads per 16 dot products at 4 x 4), and W's rows, read
// once from memory, stay in L1 for the next tiles of rows of A. At the end a tree of shuffles
// and adds (45 instructions) reduces the 16 registers to one, lane i * P + j holding C[i, j]
// (P = 16 / rows, rounded to a power of two), stored row by row under a mask.
//
// Memory: A is copied (M x K bytes, once per call) to the offset in its lines at which W's rows
// start, and a head step loads the first k from the line boundary under a byte mask, so that
// every later load of both is aligned (a borrowed std::vector sits 16 bytes past a line, and
// loads straddling two lines cost twice). The first tile of rows of each column of tiles
// prefetches the next column's rows of W into L2, and loads their first lines up front: with
// 4 KiB pages each row of W is a page of its own, whose translation (a nested walk in a VM) the
// prefetches alone did not hide. The last k (K % 64) are loaded under a byte mask, zeros past
// K: nothing outside the operands' lines is read. i32 sums wrap as the packed path's do, and
// integer sums do not depend on their order: the same values as the packed path, whatever the
// split of rows, columns or threads.
#include <xbyak/xbyak.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <string>

#include "gemm.hpp"
#include "kfuse/error.hpp"

namespace kfuse::detail::xb {

namespace {

using Xbyak::Reg64;
using Xbyak::Zmm;
using DotRowsFn = void (*)(const DotRowsArgs*);

static_assert(offsetof(DotRowsArgs, a) == 0 && offsetof(DotRowsArgs, w) == 8 && offsetof(DotRowsArgs, c) == 16 &&
                  offsetof(DotRowsArgs, k) == 24 && offsetof(DotRowsArgs, a_rs) == 32 &&
                  offsetof(DotRowsArgs, w_rs) == 40 && offsetof(DotRowsArgs, c_rs) == 48 &&
                  offsetof(DotRowsArgs, pf) == 56 && offsetof(DotRowsArgs, skew) == 64,
              "DotRowsArgs layout");

constexpr int kLanes = 16;

// C elements per row of a tile of `rows` rows in the reduced vector (its lanes i * P + j).
constexpr int lanes_per_row(int rows) { return rows == 1 ? 16 : rows == 2 ? 8 : 4; }

class DotRowsGen : public Xbyak::CodeGenerator {
 public:
  // A tile of mt rows of A (1..4) x nt rows of W (1..lanes_per_row(mt)), C stored (accumulate 0).
  // `prefetch`: the rows of W at DotRowsArgs::pf (nt of them, W's row stride) are prefetched
  // into L2 a line per row per step, the next column of tiles' rows while this one computes.
  DotRowsGen(uint8_t* buf, size_t size, int mt, int nt, bool prefetch)
      : CodeGenerator(size, buf), mt_(mt), nt_(nt), prefetch_(prefetch) {
    const int P = lanes_per_row(mt);
    for (const auto& r : {rbx, rbp, r12, r13, r14, r15}) push(r);
    push(rdi);
    mov(pa_, qword[rdi + 0]);
    mov(wb_[0], qword[rdi + 8]);
    mov(ars_, qword[rdi + 32]);
    lea(ar3_, ptr[ars_ + ars_ * 2]);
    mov(wrs_, qword[rdi + 40]);
    lea(wr3_, ptr[wrs_ + wrs_ * 2]);
    for (int g = 1; g < groups(); ++g) lea(wb_[g], ptr[wb_[g - 1] + wrs_ * 4]);
    for (int s = 0; s < kLanes; ++s) vpxord(Zmm(s), Zmm(s), Zmm(s));  // (unused slots stay zero)
    mov(rsi, qword[rdi + 24]);                                        // K
    // The head: with DotRowsArgs::skew = s > 0, the first min(K, 64 - s) k are loaded from the
    // 64-byte boundary before the operands, bytes [s, ..) under a mask, so that every later
    // load is aligned (gemm_dot_rows puts A and W at the same offset in their lines).
    Xbyak::Label body;
    mov(rdx, qword[rdi + 64]);
    test(rdx, rdx);
    jz(body, T_NEAR);
    mov(eax, 64);
    sub(rax, rdx);
    cmp(rax, rsi);
    cmova(rax, rsi);
    sub(rsi, rax);
    mov(ecx, 1);
    shlx(rcx, rcx, rax);
    dec(rcx);
    shlx(rcx, rcx, rdx);
    kmovq(k2, rcx);
    sub(pa_, rdx);
    for (int g = 0; g < groups(); ++g) sub(wb_[g], rdx);
    step(true);
    add(pa_, 64);
    for (int g = 0; g < groups(); ++g) add(wb_[g], 64);
    L(body);
    if (prefetch_) {
      mov(pb_[0], qword[rdi + 56]);
      for (int g = 1; g < groups(); ++g) lea(pb_[g], ptr[pb_[g - 1] + wrs_ * 4]);
    }
    mov(rax, rsi);
    shr(rax, 6);
    // A load (not a prefetch) of each next row's first line: it walks the page tables now, while
    // this tile computes (software prefetches that miss the TLB may be dropped).
    if (prefetch_)
      for (int j = 0; j < nt; ++j) vmovdqu8(Zmm(27), w_at(j, true));
    Xbyak::Label loop, tail, reduce;
    test(rax, rax);
    jz(tail, T_NEAR);
    L(loop);
    step(false);
    add(pa_, 64);
    for (int g = 0; g < groups(); ++g) add(wb_[g], 64);
    if (prefetch_)
      for (int g = 0; g < groups(); ++g) add(pb_[g], 64);
    dec(rax);
    jnz(loop, T_NEAR);
    L(tail);
    and_(rsi, 63);
    jz(reduce, T_NEAR);
    mov(rdx, 1);
    shlx(rdx, rdx, rsi);
    dec(rdx);
    kmovq(k2, rdx);
    step(true);
    L(reduce);
    pop(rdi);
    // The tree: 16 registers -> 8 (256-bit halves added), 4 (128-bit quarters), 2, 1. Slot s of
    // the tree's input ends in lane 4 * (s % 4) + s / 4 (hence slot()).
    for (int p = 0; p < 8; ++p) pair(Zmm(p), Zmm(2 * p), Zmm(2 * p + 1), 0);
    for (int q = 0; q < 4; ++q) pair(Zmm(q), Zmm(2 * q), Zmm(2 * q + 1), 1);
    for (int r = 0; r < 2; ++r) pair(Zmm(r), Zmm(2 * r), Zmm(2 * r + 1), 2);
    pair(Zmm(0), Zmm(0), Zmm(1), 3);
    // Row i's nt sums from lane i * P, under the mask of nt lanes.
    mov(rcx, qword[rdi + 16]);
    mov(rdx, qword[rdi + 48]);
    mov(esi, (1u << nt) - 1);
    kmovw(k3, esi);
    for (int i = 0; i < mt; ++i) {
      const Zmm t = i == 0 ? Zmm(0) : Zmm(1);
      if (i > 0) {
        valignd(t, Zmm(0), Zmm(0), static_cast<uint8_t>(i * P));
        add(rcx, rdx);
      }
      vmovdqu32(ptr[rcx] | k3, t);
    }
    for (const auto& r : {r15, r14, r13, r12, rbp, rbx}) pop(r);
    vzeroupper();
    ret();
  }

  // The register of C element (i, j): the tree slot whose sum lands in lane i * P + j.
  int slot(int i, int j) const {
    const int lane = i * lanes_per_row(mt_) + j;
    return 4 * (lane % 4) + lane / 4;
  }

 private:
  int groups() const { return (nt_ + 3) / 4; }
  // Row r of A / j of W at the current k (bases advance by 64 per step).
  Xbyak::Address a_at(int r) const {
    static const int sc[] = {0, 1, 2, 0};
    if (r == 0) return zword[pa_];
    if (r == 3) return zword[pa_ + ar3_];
    return zword[pa_ + ars_ * sc[r]];
  }
  Xbyak::Address w_at(int j, bool pf = false) const {
    const Reg64& b = pf ? pb_[j / 4] : wb_[j / 4];
    switch (j % 4) {
      case 0: return zword[b];
      case 1: return zword[b + wrs_];
      case 2: return zword[b + wrs_ * 2];
      default: return zword[b + wr3_];
    }
  }
  // One step of 64 k (`masked`: the last K % 64 under k2, zeros past K).
  void step(bool masked) {
    const Zmm a0(30), a1(31);
    if (prefetch_ && !masked)
      for (int j = 0; j < nt_; ++j) prefetcht1(w_at(j, true));
    auto load = [&](const Zmm& z, const Xbyak::Address& m) {
      if (masked) vmovdqu8(z | k2 | T_z, m);
      else vmovdqu32(z, m);
    };
    if (mt_ == 1) {  // 16 rows of W (no room for them in registers): a memory operand each
      load(a0, a_at(0));
      for (int j = 0; j < nt_; ++j) {
        if (masked) {
          load(Zmm(16), w_at(j));
          vpdpbusd(Zmm(slot(0, j)), a0, Zmm(16));
        } else {
          vpdpbusd(Zmm(slot(0, j)), a0, w_at(j));
        }
      }
      return;
    }
    for (int j = 0; j < nt_; ++j) load(Zmm(16 + j), w_at(j));
    for (int i = 0; i < mt_; ++i) {
      const Zmm& a = i % 2 ? a1 : a0;
      load(a, a_at(i));
      for (int j = 0; j < nt_; ++j) vpdpbusd(Zmm(slot(i, j)), a, Zmm(16 + j));
    }
  }
  // d = the level's combination of x and y (see the constructor).
  void pair(const Zmm& d, const Zmm& x, const Zmm& y, int level) {
    const Zmm t1(28), t2(29);
    switch (level) {
      case 0:  // 256-bit halves: [x.lo, y.lo] + [x.hi, y.hi]
        vshufi64x2(t1, x, y, 0x44);
        vshufi64x2(t2, x, y, 0xEE);
        break;
      case 1:  // 128-bit quarters: [x.q0, x.q2, y.q0, y.q2] + [x.q1, x.q3, y.q1, y.q3]
        vshufi32x4(t1, x, y, 0x88);
        vshufi32x4(t2, x, y, 0xDD);
        break;
      case 2:  // 64-bit pairs within each quarter
        vpunpcklqdq(t1, x, y);
        vpunpckhqdq(t2, x, y);
        break;
      default:  // 32-bit lanes within each quarter
        vshufps(t1, x, y, 0x88);
        vshufps(t2, x, y, 0xDD);
        break;
    }
    vpaddd(d, t1, t2);
  }

  int mt_, nt_;
  bool prefetch_;
  const Reg64 pa_ = r8, ars_ = r9, ar3_ = r10, wrs_ = r14, wr3_ = r15;
  const std::array<Reg64, 4> wb_{rbx, rbp, r12, r13};
  const std::array<Reg64, 4> pb_{rcx, rdx, r11, rdi};  // (rdi: the arguments' pointer is pushed)
};

std::atomic<DotRowsFn> g_tiles[2][5][kLanes + 1];  // [prefetch][rows][rows of W]

DotRowsFn tile_kernel(int mt, int nt, bool prefetch) {
  return generated_once(g_tiles[prefetch][mt][nt], [&] {
    DotRowsGen g(gemm_gen_buffer(), kGemmGenBytes, mt, nt, prefetch);
    g.ready();
    return keep_gemm_code(
        g.getCode(), g.getSize(),
        "kfuse_gemm_dot_rows_" + std::to_string(mt) + "x" + std::to_string(nt) + (prefetch ? "_u8s8_pf" : "_u8s8"));
  });
}

}  // namespace

int64_t dot_rows_a_stride(int64_t K) { return (K + 63) / 64 * 64 + 64; }

void gemm_dot_rows(const DotRowsArgs& s, int64_t m, int64_t n, uint8_t* at) {
  if (m <= 0 || n <= 0) return;
  // Loads that straddle two lines (a borrowed std::vector is 16 bytes past a line) cost twice:
  // with W's rows all at one offset s in their lines, A is copied to that offset (A is read
  // once per column of tiles, W once: the copy is M x K bytes) and the kernels peel the first
  // 64 - s of k. Intel Xeon (model 207), 1 thread, [16,4096]x[4096,4096]^T, operands 16 bytes
  // past a line: 1.85 -> 1.3 ms (aligned: 1.28).
  const int64_t skew = s.w_rs % 64 == 0 ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(s.w) % 64) : 0;
  const int64_t as = dot_rows_a_stride(s.k);
  for (int64_t r = 0; r < m; ++r) std::memcpy(at + r * as + skew, s.a + r * s.a_rs, static_cast<size_t>(s.k));
  // Tiles of 4 rows x 4 rows of W (2 x 8 and 1 x 16 for one or two rows in all: the tree
  // reduces 16 registers either way). W's rows of a column of tiles stay in L1 (4 KiB each at
  // K = 4096) while the tiles of rows of A pass over them.
  const int MT = static_cast<int>(std::min<int64_t>(m, 4)), P = lanes_per_row(MT);
  for (int64_t j0 = 0; j0 < n; j0 += P) {
    const int nt = static_cast<int>(std::min<int64_t>(P, n - j0));
    // The first tile of rows prefetches the next column's rows of W (as many as this one's, all
    // of K: W's rows may each be a page of their own, where the hardware's prefetchers stop).
    const int64_t next = std::min<int64_t>(nt, n - j0 - P);
    for (int64_t i0 = 0; i0 < m; i0 += MT) {
      const int mt = static_cast<int>(std::min<int64_t>(MT, m - i0));
      const bool pf = i0 == 0 && next == nt;
      DotRowsArgs t{at + i0 * as + skew,
                    s.w + j0 * s.w_rs,
                    reinterpret_cast<int32_t*>(reinterpret_cast<char*>(s.c) + i0 * s.c_rs) + j0,
                    s.k,
                    as,
                    s.w_rs,
                    s.c_rs,
                    pf ? s.w + (j0 + P) * s.w_rs : nullptr,
                    skew};
      tile_kernel(mt, nt, pf)(&t);
    }
  }
}

}  // namespace kfuse::detail::xb
