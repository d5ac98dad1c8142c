// xbyak backend: accumulators, the Gen members (gen.hpp) that keep reduction state in pinned
// vector registers: identities, the per-vector fold (Max/Min with a NaN marker), independent sets
// for unrolled loops combined in a fixed order, and the horizontal reduction into Frame::accs.
// Used by every strategy: the row/global loops (emitter.cpp), rows across lanes (lanes.cpp) and
// the online loop (online.cpp, which also folds its max through accumulate()).
#include <cmath>

#include "gen.hpp"

namespace kfuse::detail::xb {

template <class Vmm>
float Gen<Vmm>::identity(ir::AccKind k) {
  switch (k) {
    case ir::AccKind::Sum: return 0.0f;
    case ir::AccKind::Prod: return 1.0f;
    case ir::AccKind::Max: return -INFINITY;
    case ir::AccKind::Min: return INFINITY;
    default: return 0.0f;
  }
}

template <class Vmm>
void Gen<Vmm>::accumulate(int a, const Vmm& v0, bool masked) {
  if (a == cap_acc_) {
    capture(v0, masked);
    return;
  }
  ir::AccKind kind = k_.accs[a].kind;
  Vmm acc(acc_reg_.at(a));
  Vmm v = v0;
  Vmm tmp(kAccTmp);
  if constexpr (!Z) {
    if (masked) {  // masked-off lanes contribute the identity
      vmovups(tmp, cst(identity(kind)));
      vblendvps(tmp, tmp, v0, Vmm(kMaskReg));
      v = tmp;
    }
  }
  auto m = [&](const Vmm& r) -> Vmm {
    if constexpr (Z) {
      if (masked) return r | k1;
    }
    return r;
  };
  switch (kind) {
    case ir::AccKind::Sum: vaddps(m(acc), acc, v); break;
    case ir::AccKind::Prod: vmulps(m(acc), acc, v); break;
    case ir::AccKind::Max:
    case ir::AccKind::Min: {
      Vmm nan(acc_nan_.at(a));
      if (kind == ir::AccKind::Max) vmaxps(m(acc), v, acc);
      else vminps(m(acc), v, acc);  // NaN in v -> acc kept
      if constexpr (Z) {
        if (masked) vcmpps(k2 | k1, v, v, kUnordQ);
        else vcmpps(k2, v, v, kUnordQ);
        vmovups(nan | k2, v);
      } else {
        vcmpps(tmp, v, v, kUnordQ);
        vblendvps(nan, nan, cst(NAN), tmp);
      }
      break;
    }
    default: throw DeclineError("xbyak: accumulator kind");
  }
}

// horizontal reduction of accumulator a into accs[a] (fixed order)
template <class Vmm>
void Gen<Vmm>::finish_acc(int a) {
  ir::AccKind kind = k_.accs[a].kind;
  Vmm acc(acc_reg_.at(a));
  mov(rax, qword[rdi + frame_off::accs]);
  Label done;
  if (kind == ir::AccKind::Max || kind == ir::AccKind::Min) {
    Vmm nan(acc_nan_.at(a));
    if (kind == ir::AccKind::Max) vmaxps(acc, acc, nan);
    else vminps(acc, acc, nan);
    Label clean;
    if constexpr (Z) {
      vcmpps(k2, acc, acc, kUnordQ);
      kortestw(k2, k2);
    } else {
      vcmpps(Vmm(kAccTmp), acc, acc, kUnordQ);
      vtestps(Vmm(kAccTmp), Vmm(kAccTmp));
    }
    jz(clean, T_NEAR);
    mov(dword[rax + 4 * a], 0x7fc00000);
    jmp(done, T_NEAR);
    L(clean);
  }
  hreduce(kind, acc);
  vmovss(dword[rax + 4 * a], Xbyak::Xmm(0));
  L(done);
}

// Lane 0 of Xmm(0) = the lanes of v folded with `kind`'s operation in a fixed tree order.
// Uses the low registers 0 and 1 (VEX-encodable); the caller has nothing live in them.
template <class Vmm>
void Gen<Vmm>::hreduce(ir::AccKind kind, const Vmm& v) {
  auto op = [&](const Xbyak::Xmm& d, const Xbyak::Xmm& x, const Xbyak::Xmm& y) {
    switch (kind) {
      case ir::AccKind::Sum: vaddps(d, x, y); break;
      case ir::AccKind::Prod: vmulps(d, x, y); break;
      case ir::AccKind::Max: vmaxps(d, x, y); break;
      default: vminps(d, x, y); break;
    }
  };
  if (v.getIdx() != 0) vmovups(Vmm(0), v);
  Xbyak::Ymm ya(0), yt(1);
  Xbyak::Xmm xa(0), xt(1);
  if constexpr (Z) {
    vextractf64x4(yt, Xbyak::Zmm(0), 1);
    op(ya, ya, yt);
  }
  vextractf128(xt, ya, 1);
  op(xa, xa, xt);
  vmovhlps(xt, xt, xa);
  op(xa, xa, xt);
  vmovshdup(xt, xa);
  op(xa, xa, xt);
}

// Accumulator registers (and NaN markers for Max/Min), initialised to the identity: `nsets`
// independent sets (see acc_sets_); set 0 is made current.
template <class Vmm>
void Gen<Vmm>::pin_accs(const std::vector<int>& accs, int nsets) {
  acc_sets_.assign(nsets, {});
  int next = kAccTmp - 1;
  for (auto& [regs, nans] : acc_sets_)
    for (int a : accs) {
      regs[a] = next--;
      vmovups(Vmm(regs[a]), cst(identity(k_.accs[a].kind)));
      if (k_.accs[a].kind == ir::AccKind::Max || k_.accs[a].kind == ir::AccKind::Min) {
        nans[a] = next--;
        vmovups(Vmm(nans[a]), cst(identity(k_.accs[a].kind)));
      }
      if (next < 4) throw DeclineError("xbyak: too many accumulators in one phase");
    }
  use_acc_set(0);
}

template <class Vmm>
void Gen<Vmm>::use_acc_set(int s) {
  acc_reg_ = acc_sets_[s].first;
  acc_nan_ = acc_sets_[s].second;
}

template <class Vmm>
void Gen<Vmm>::release_accs() {
  acc_sets_.clear();
  acc_reg_.clear();
  acc_nan_.clear();
}

// Vector registers one set of `accs` pins.
template <class Vmm>
int Gen<Vmm>::acc_regs(const std::vector<int>& accs) const {
  int n = 0;
  for (int a : accs) n += k_.accs[a].kind == ir::AccKind::Max || k_.accs[a].kind == ir::AccKind::Min ? 2 : 1;
  return n;
}

// Folds the sets into set 0 in a fixed tree order ((0,1),(2,3)),(0,2) so that results do not
// depend on anything but the code. NaN markers are OR-ed: a marker is the identity (an
// infinity) or a NaN, and an infinity OR a NaN is still a NaN.
template <class Vmm>
void Gen<Vmm>::combine_acc_sets(const std::vector<int>& accs) {
  const int n = static_cast<int>(acc_sets_.size());
  for (int step = 1; step < n; step *= 2)
    for (int s = 0; s + step < n; s += 2 * step)
      for (int a : accs) {
        Vmm d(acc_sets_[s].first.at(a)), o(acc_sets_[s + step].first.at(a));
        switch (k_.accs[a].kind) {
          case ir::AccKind::Sum: vaddps(d, d, o); break;
          case ir::AccKind::Prod: vmulps(d, d, o); break;
          case ir::AccKind::Max: vmaxps(d, d, o); break;
          default: vminps(d, d, o); break;
        }
        if (acc_sets_[s].second.count(a))
          inj_.vor(Vmm(acc_sets_[s].second.at(a)), Vmm(acc_sets_[s].second.at(a)),
                   Vmm(acc_sets_[s + step].second.at(a)));
      }
  use_acc_set(0);
}

// ---- cascaded sums ----
// Why: a loop unrolled U times adds vector j of each iteration into set j, so each of the
// L = U*W lanes would add n/L elements one after the other and the rounding error would grow
// like n/L * u (u = 2^-24): 2^20 copies of 0.1f summed to 104859.29 (exact 104857.6, 1.6e-5).
// How: the lanes' partials are closed every kCascadeFan (F) of their own elements: at every
// multiple of L*F of the loop index (a leaf block along the reduced axis) each set's Sum
// register is added into its level-1 slot (a stack vector) and restarts from 0; at every
// multiple of L*F^2 the level-1 slots are added into level 2 and cleared, and so on (level l
// closes at multiples of L*F^l, tested on r14; L is a power of two, see unroll_for). After the
// loop: acc + s1 + ... + sD, then the sets and lanes in their fixed trees. An element goes
// through at most F-1 roundings per level, D <= log_F(n/L) levels, log2(L) in the trees, so
//   |sum - exact| <= (F * ceil(log_F n) + 8) * u * sum|x|     (F = 8: 3.8e-6 * sum|x| at n = 2^20)
// where a plain loop's bound is (n/L + 8) * u * sum|x|. The boundaries are positions of the
// reduced index (rows count from 0; global blocks start at multiples of kGlobalBlock, a power
// of two), so the order is still fixed by the code and n: bitwise independent of threads and
// chunking. Cost: a test and branch per unrolled iteration, 3 instructions per set every F.
// Only Sum accumulators (Max/Min are exact; Prod keeps its plain order), and the online softmax
// loop's sums of exps (online.cpp: a block of kOnlineU vectors is two elements per lane of each
// sum register; its rescales multiply the levels too).

// `regs`: the registers to cascade (each holding 0 now); `base`: elements per unrolled iteration
// (a power of two); level l closes at multiples of base * kCascadeFan^l; `extent`: the most
// elements the loop covers from a position that is a multiple of every level's block.
template <class Vmm>
void Gen<Vmm>::cascade_begin(const std::vector<int>& regs, int64_t base, int64_t extent) {
  casc_regs_.clear();
  casc_levels_ = 0;
  if (regs.empty() || (base & (base - 1)) != 0) return;
  casc_regs_ = regs;
  casc_base_ = base;
  for (int64_t b = base * kCascadeFan; b <= extent; b *= kCascadeFan) ++casc_levels_;
  casc_slot0_ = nvslots_;
  const int nr = static_cast<int>(regs.size());
  for (int s = 0; s < casc_levels_ * nr; ++s) {
    new_vslot();
    vmovups(ptr[rsp + vslot_off(casc_slot0_ + s)], Vmm(regs[s % nr]));
  }
}

// The Sum registers of every set of `accs` (pinned by pin_accs: 0 now).
template <class Vmm>
std::vector<int> Gen<Vmm>::sum_regs(const std::vector<int>& accs) const {
  std::vector<int> regs;
  for (const auto& set : acc_sets_)
    for (int a : accs)
      if (k_.accs[a].kind == ir::AccKind::Sum) regs.push_back(set.first.at(a));
  return regs;
}

template <class Vmm>
Address Gen<Vmm>::cascade_slot(int level, int i) {
  return ptr[rsp + vslot_off(casc_slot0_ + (level - 1) * static_cast<int>(casc_regs_.size()) + i)];
}

// After an unrolled iteration (r14 = the next element): close the levels whose block ends here.
template <class Vmm>
void Gen<Vmm>::cascade_fold() {
  if (casc_levels_ == 0) return;
  Label skip;
  int64_t block = casc_base_;
  for (int l = 1; l <= casc_levels_; ++l) {
    block *= kCascadeFan;
    test(r14, static_cast<uint32_t>(block - 1));
    jnz(skip, T_NEAR);
    for (size_t i = 0; i < casc_regs_.size(); ++i) {
      const Vmm r(casc_regs_[i]);  // 0 from level 2 on: the scratch
      const int ii = static_cast<int>(i);
      if (l > 1) vmovups(r, cascade_slot(l - 1, ii));
      vaddps(r, r, cascade_slot(l, ii));
      vmovups(cascade_slot(l, ii), r);
      inj_.vxor(r, r, r);
      if (l > 1) vmovups(cascade_slot(l - 1, ii), r);
    }
  }
  L(skip);
}

// Every level times `f` (online softmax's rescale); `tmp` is free.
template <class Vmm>
void Gen<Vmm>::cascade_scale(const Vmm& f, const Vmm& tmp) {
  for (int l = 1; l <= casc_levels_; ++l)
    for (size_t i = 0; i < casc_regs_.size(); ++i) {
      vmulps(tmp, f, cascade_slot(l, static_cast<int>(i)));
      vmovups(cascade_slot(l, static_cast<int>(i)), tmp);
    }
}

// After the loop: each register takes its levels, lowest first.
template <class Vmm>
void Gen<Vmm>::cascade_end() {
  for (int l = 1; l <= casc_levels_; ++l)
    for (size_t i = 0; i < casc_regs_.size(); ++i)
      vaddps(Vmm(casc_regs_[i]), Vmm(casc_regs_[i]), cascade_slot(l, static_cast<int>(i)));
  casc_levels_ = 0;
  casc_regs_.clear();
}

// Defined here, called from the other files.
#define KFUSE_XB_ACC_MEMBERS(V)                                                   \
  template float Gen<V>::identity(ir::AccKind);                                   \
  template void Gen<V>::accumulate(int, const V&, bool);                          \
  template void Gen<V>::finish_acc(int);                                          \
  template void Gen<V>::hreduce(ir::AccKind, const V&);                           \
  template void Gen<V>::pin_accs(const std::vector<int>&, int);                   \
  template void Gen<V>::use_acc_set(int);                                         \
  template void Gen<V>::release_accs();                                           \
  template int Gen<V>::acc_regs(const std::vector<int>&) const;                   \
  template void Gen<V>::combine_acc_sets(const std::vector<int>&);                \
  template void Gen<V>::cascade_begin(const std::vector<int>&, int64_t, int64_t); \
  template std::vector<int> Gen<V>::sum_regs(const std::vector<int>&) const;      \
  template Address Gen<V>::cascade_slot(int, int);                                \
  template void Gen<V>::cascade_fold();                                           \
  template void Gen<V>::cascade_scale(const V&, const V&);                        \
  template void Gen<V>::cascade_end();
KFUSE_XB_ACC_MEMBERS(Xbyak::Zmm)
KFUSE_XB_ACC_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_ACC_MEMBERS

}  // namespace kfuse::detail::xb
