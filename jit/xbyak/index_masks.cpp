// xbyak backend: comparisons of index expressions as lane masks, and loads under such masks: the
// bounds of concat and pad (`where(lo <= i < hi, load a[i - lo] if ..., ...)`) and masks built
// from positions (causal `j <= i`). Members of Gen (gen.hpp); the analysis that finds them is
// analyze.cpp (Plan::cmps, IndexCmp).
//
// A comparison is X <pred> 0 with X = base + inner index (IndexCmp, normalised to coefficient
// 1; its constant folded into the base, an index stream computed per row). Lane l of the vector
// at inner index i0 holds X = X0 + l, X0 = base + i0: the lanes where X < 0 are the first
// n = clamp(-X0, 0, W), those where X >= 0 the rest, and X == 0 only lane n. So a mask is a
// clamp in general registers and a load from the tail-mask table (no 64-bit lane arithmetic:
// AVX2 has no cheap 64-bit signed lane compare, and the values need not fit 32 bits). A
// comparison constant along the row (coefficient 0) is all lanes or none.
//
// The table (emitter.cpp, generate): W lanes of -1, W of 0, W + 1 of -1. first(n) is W lanes at
// table + 4 (W - n), from(n) (lanes >= n) at table + 4 (2W - n).
//
// A masked load reads only the lanes of its condition (vmaskmovps: no fault on the others; none
// at all where no lane is set, a plain load where all are), so a concat or pad never reads
// outside its inputs. Its condition is its operand in the expression
// DAG (eval.cpp, make_dag), so a where over the same condition (concat, pad) computes it once.
// The zmm emitter has none of this yet (Avx2OnlyError: AVX-512 machines run the AVX2 code).
#include "gen.hpp"

namespace kfuse::detail::xb {

// t = the lanes of comparison c. rax, rdx scratch.
template <class Vmm>
void Gen<Vmm>::cmp_mask(const Vmm& t, const IndexCmp& c) {
  if constexpr (Z) throw Avx2OnlyError("xbyak: index masks on AVX-512");
  const IndexCmp::Pred pred = c.pred;
  if (c.known >= 0) {  // decided by the loop variable's range (analyze.cpp)
    vmovups(t, cstu(c.known ? 0xffffffffu : 0u));
    return;
  }
  mov(rdx, stream(c.addr));  // X = base + k (the stream's value) + the vector's inner index
  if (c.coeff) {
    add(rdx, r14);
    if (disp_ != 0) add(rdx, disp_ / 4);
  }
  if (!c.coeff) {  // all lanes or none: first(W) or first(0)
    test(rdx, rdx);
    switch (pred) {
      case IndexCmp::Pred::Lt: setl(dl); break;
      case IndexCmp::Pred::Ge: setge(dl); break;
      case IndexCmp::Pred::Eq: sete(dl); break;
      case IndexCmp::Pred::Ne: setne(dl); break;
    }
    movzx(edx, dl);
    imul(edx, edx, -W);
    movsxd(rdx, edx);                                 // -n
    lea(rax, dry_ ? ptr[rip] : ptr[rip + masktab_]);  // (no label use in a dry run: loop_invariants.cpp)
    vmovups(t, ptr[rax + rdx * 4 + 4 * W]);
    return;
  }
  // rdx = -n, n = clamp(-X, lo, W): X clamped to [-W, -lo]; lo = -1 for Eq/Ne (then no lane:
  // first(0) & from(-1))
  // (the bounds from memory: boundtab_ holds -W, 0, 1; no label use in a dry run)
  const bool eq = pred == IndexCmp::Pred::Eq || pred == IndexCmp::Pred::Ne;
  auto bound = [&](int i) { return dry_ ? qword[rip] : qword[rip + boundtab_ + 8 * i]; };
  cmp(rdx, -W);
  cmovl(rdx, bound(0));
  cmp(rdx, eq ? 1 : 0);
  cmovg(rdx, bound(eq ? 2 : 1));
  lea(rax, dry_ ? ptr[rip] : ptr[rip + masktab_]);  // (no label use in a dry run: loop_invariants.cpp)
  const Address first = ptr[rax + rdx * 4 + 4 * W], from = ptr[rax + rdx * 4 + 8 * W];
  switch (pred) {
    case IndexCmp::Pred::Lt: vmovups(t, first); return;
    case IndexCmp::Pred::Ge: vmovups(t, from); return;
    case IndexCmp::Pred::Eq:
    case IndexCmp::Pred::Ne:
      vmovups(t, ptr[rax + rdx * 4 + 4 * W - 4]);  // first(n + 1)
      vandps(t, t, from);
      if (pred == IndexCmp::Pred::Ne) vxorps(t, t, cstu(0xffffffffu));
      return;
  }
}

// d = the f32 vector of masked load e (a contiguous stream) in the lanes of `mask` (its
// condition, evaluated as its operand in the expression DAG), 0 elsewhere; with `tail` only
// within the tail mask too.
template <class Vmm>
void Gen<Vmm>::masked_load(const Vmm& d, const ir::Expr* e, const Vmm& mask, bool tail) {
  if constexpr (Z) throw Avx2OnlyError("xbyak: masked loads on AVX-512");
  Vmm m = mask;
  if (tail) {
    m = Vmm(kAccTmp);
    vandps(m, mask, Vmm(kMaskReg));
  }
  const Reg64 b = stream(p_.loads.at(e).addr);
  const Address at = ptr[b + r14 * 4 + disp_];
  // Only a vector with some lanes in and some out takes vmaskmovps. A vector wholly outside its
  // input (every vector of the other part of a concat) loads nothing: its address may lie in no
  // mapped page (the rows of `b` in concat({a, b}, 0) before b's first row), and a masked load
  // there, though it does not fault, takes a microcode assist of ~700 cycles on each call (AMD
  // Zen 3: concat of two [2048, 1024] along rows 60 ms, 1.3 ms with LLVM's branches). A vector
  // wholly inside is a plain load (vmaskmovps costs more even when every lane is set).
  Xbyak::Label partial, none, done;
  vtestps(m, cstu(0xffffffffu));  // ZF: no lane set; CF: every lane set
  jz(none, T_NEAR);
  jnc(partial, T_NEAR);
  vmovups(d, at);
  jmp(done, T_NEAR);
  L(partial);
  vmaskmovps(d, m, at);
  jmp(done, T_NEAR);
  L(none);
  vxorps(d, d, d);
  L(done);
}

#define KFUSE_XB_INDEX_MASK_MEMBERS(V)                       \
  template void Gen<V>::cmp_mask(const V&, const IndexCmp&); \
  template void Gen<V>::masked_load(const V&, const ir::Expr*, const V&, bool);
KFUSE_XB_INDEX_MASK_MEMBERS(Xbyak::Zmm)
KFUSE_XB_INDEX_MASK_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_INDEX_MASK_MEMBERS

}  // namespace kfuse::detail::xb
