// xbyak backend: the Gen members (gen.hpp) of two row strategies that overlap a row's math with
// memory traffic (README "xbyak backend", "Rows pipelined"):
//   - online softmax (Plan::online, lib/ir/online_softmax.hpp): a max accumulator m over v and
//     the sum s of exp(v - m) in ONE loop over the row;
//   - pipelined rows (Plan::pipeline, pipeline_rows at the end of this file): the last
//     accumulating loop over row i also runs row i-1's store loop.
//
// Why: a long row (log_softmax [1024,32000]: 128 KiB) is read from memory by the max loop, and
// the exp-sum loop then runs on the row in L2: the exp work (about half the kernel's time on one
// core) adds to the memory time instead of overlapping it. With one loop the exps run while
// the next lines stream in.
//
// How: per lane, a running maximum M and a sum S of exp(x - Mc), Mc = max(M, -FLT_MAX) (finite
// unless M is +inf, so that -inf elements add exp(-inf) = 0 instead of exp(-inf + inf) = NaN).
// The row is taken in blocks of kOnlineU vectors (one or two from each of the 2 or 4 parts of
// the row that the loop runs through side by side, see online_phase): the block's values are
// captured in registers (the accumulate() of m), their maximum is compared with M, and only when
// some lane grew (a few times per row for data in random order) S is rescaled by
// exp(Mc_old - Mc_new), exactly 1 in the lanes that did not grow. Then S += exp(x - Mc) for the block. At the end of
// the row the lanes are brought to the row maximum: s = sum over lanes of S * exp(Mc - max(m, -FLT_MAX)).
//
// Specials, so that the results are those of the two loops (IR semantics): the loop's maximum
// ignores NaNs, but a NaN element makes S NaN (x - Mc is NaN), and so does a +inf element
// (inf - inf). So at the end: S NaN and m != +inf -> m = NaN; S NaN and m = +inf -> the row
// is scanned again by the plain max loop (rare: only rows holding +inf); m = NaN or +-inf ->
// s = NaN (every term exp(v - m) of the two loops is then NaN or there is one inf - inf).
// Everything but the NaN markers is in the fixed order of the code: results do not depend on
// the thread count or chunking.
#include <cfloat>
#include <cmath>

#include "gen.hpp"

namespace kfuse::detail::xb {

// The max accumulator's value of vector copy j (cap_reg_): masked-off lanes are -inf.
template <class Vmm>
void Gen<Vmm>::capture(const Vmm& v, bool masked) {
  const Vmm x(cap_reg_);
  if (!masked) {
    vmovaps(x, v);
    return;
  }
  vmovups(x, cst(-INFINITY));
  if constexpr (Z) vmovups(x | k1, v);
  else vblendvps(x, x, v, Vmm(kMaskReg));
}

// prev_stores: the store loop of the previous row, run in the same loop (pipeline_rows).
template <class Vmm>
void Gen<Vmm>::online_phase(const std::vector<PhaseItem>* prev_stores) {
  const ir::OnlineExpSum& on = p_.online;
  load_ptr_regs();
  const std::vector<const ir::Expr*> roots = {on.value.get()};
  std::unordered_map<const ir::Expr*, int> inv = hoist_invariants(roots, false);
  const Dag dag = make_dag(roots, &inv, {}, {on.max_acc});
  const Dag prev = prev_stores ? prev_row_dag(*prev_stores) : Dag{};
  // Pinned registers, below the accumulator scratch like pin_accs' (the rest is the DAGs').
  int next = kAccTmp - 1;
  on_m_ = next--;
  on_mc_ = next--;
  for (int& r : on_s_) r = next--;
  for (int& r : on_x_) r = next--;
  online_regs_.clear();
  for (int r = next + 1; r < kAccTmp; ++r) online_regs_.push_back(r);
  vmovups(Vmm(on_m_), cst(-INFINITY));
  vmovups(Vmm(on_mc_), cst(-FLT_MAX));
  for (int r : on_s_) inj_.vxor(Vmm(r), Vmm(r), Vmm(r));
  cap_acc_ = on.max_acc;
  // The loop keeps its constants (exp's) in the registers left free (invariants_in_regs), counted by
  // a dry run of one vector's work; online_block's exps and block maximum also use registers 0-3.
  // log_softmax [8192,32000], 1 thread, 3 interleaved rounds: 152-161 -> 138-143 ms (in cache,
  // [8,32000]: min 0.058-0.061 -> 0.050-0.053 ms).
  cap_reg_ = on_x_[0];
  invariants_in_regs(
      [&] {
        Eval ev;
        ev.in_loop = true;
        eval_joined(dag, prev_stores ? &prev : nullptr, ev);
        const Vmm tj[2] = {Vmm(0), Vmm(1)};
        inj_.exp(Vmm(on_x_[0]), tj, true);
      },
      4);

  const int64_t n = p_.reduce_n, nfull = n / W, rem = n % W;
  const int64_t iters = nfull / kOnlineU, left = nfull % kOnlineU;
  // The first iters * U vectors as `parts` parts of H elements; a block takes U / parts vectors
  // at r14 in each part, so the row streams in from `parts` places at once (the loop's prefetch
  // too, ahead in each part): one core keeps more misses in flight than along one stream.
  // softmax / log_softmax alone, medians of 3 interleaved rounds, 1 part -> 2 -> 4: [8192,32000]
  // 1 thread 146 -> 117 -> 112 / 130 -> 113 -> 104 ms, 2 threads softmax 79 -> 67 -> 64 ms;
  // [1024,32000] (in the L3) softmax 16.3 -> 14.3 -> 14.6 / 2 threads 9.4 -> 8.2 -> 7.3 ms,
  // log_softmax 17.0 -> 14.3 -> 13.7 ms; log_softmax [21845,6144] 77 -> 64 -> 72 ms.
  const int parts = n >= kOnlineFourParts ? 4 : 2;
  const int64_t H = iters * (kOnlineU / parts) * W;
  std::vector<int> disps(kOnlineU);
  for (int j = 0; j < kOnlineU; ++j)
    disps[j] = static_cast<int>(H * 4 * (j / (kOnlineU / parts)) + (j % (kOnlineU / parts)) * VB);
  // Cascaded sums (accumulators.cpp): a block adds 2 elements per lane to each sum register, so
  // a leaf of kCascadeFan elements is 4 blocks: base = r14's step per block / 2.
  const int64_t step = kOnlineU / parts * W;
  cascade_begin({on_s_[0], on_s_[1]}, step / 2, H);
  auto loop = [&] {
    xor_(r14d, r14d);
    if (iters > 0) {
      Label top;
      L(top);
      online_block(dag, disps, false, prev_stores ? &prev : nullptr);
      add(r14, static_cast<int>(step));
      cascade_fold();
      cmp(r14, static_cast<int>(H));
      jl(top, T_NEAR);
      add(r14, static_cast<int>(H * (parts - 1)));
    }
    if (left || rem) {  // r14 = iters * U * W here: the last vectors and the masked tail, one block
      if (rem) {
        mov(eax, static_cast<int>(rem));
        set_mask_rax();
      }
      std::vector<int> tail;
      for (int j = 0; j < left + (rem ? 1 : 0); ++j) tail.push_back(j * VB);
      online_block(dag, tail, rem != 0, prev_stores ? &prev : nullptr);
    }
  };
  prev_row_variants(prev_stores, loop);
  ireg_.clear();
  cap_acc_ = -1;
  online_finish();
}

// The vectors at r14 + disps[j] bytes (the last one masked when `masked`): captured, then folded
// into M and S; with `prev`, the previous row's stores of the same vectors.
template <class Vmm>
void Gen<Vmm>::online_block(const Dag& dag, const std::vector<int>& disps, bool masked, const Dag* prev) {
  const int nv = static_cast<int>(disps.size());
  for (int j = 0; j < nv; ++j) {
    disp_ = disps[j];
    cap_reg_ = on_x_[j];
    const int slots = nvslots_;
    Eval ev;
    ev.in_loop = true;
    ev.masked = masked && j == nv - 1;
    if (!ev.masked) prefetch_streams(true);
    eval_joined(dag, prev, ev);
    nvslots_ = slots;
  }
  disp_ = 0;
  const Vmm M(on_m_), Mc(on_mc_), bm(kAccTmp), t0(0), t1(1), t2(2), t3(3);
  if (nv == 1) {
    vmovaps(bm, Vmm(on_x_[0]));
  } else {
    vmaxps(bm, Vmm(on_x_[0]), Vmm(on_x_[1]));
    for (int j = 2; j < nv; ++j) vmaxps(bm, bm, Vmm(on_x_[j]));
  }
  Label same;
  if constexpr (Z) {
    vcmpps(k2, bm, M, kGtOS);
    kortestw(k2, k2);
  } else {
    vcmpps(t0, bm, M, kGtOS);
    vtestps(t0, t0);
  }
  jz(same, T_NEAR);
  // Some lane grew: M = max(block, M) (a NaN in the block keeps M), S *= exp(Mc_old - Mc_new).
  vmaxps(M, bm, M);
  vmaxps(t0, M, cst(-FLT_MAX));
  vsubps(t1, Mc, t0);
  const Vmm ts[2] = {t2, t3};
  inj_.exp(t1, ts, true);
  for (int r : on_s_) vmulps(Vmm(r), Vmm(r), t1);
  cascade_scale(t1, t2);
  vmovaps(Mc, t0);
  L(same);
  for (int j = 0; j < nv; ++j) {  // S += exp(x - Mc); x - Mc <= 0 or NaN
    const Vmm xj(on_x_[j]);
    const Vmm tj[2] = {Vmm(2 * (j % 2)), Vmm(2 * (j % 2) + 1)};
    vsubps(xj, xj, Mc);
    inj_.exp(xj, tj, true);
    vaddps(Vmm(on_s_[j % 2]), Vmm(on_s_[j % 2]), xj);
  }
}

// The row's m and s from the lanes' M, Mc and S (see the top of the file for the specials).
template <class Vmm>
void Gen<Vmm>::online_finish() {
  const ir::OnlineExpSum& on = p_.online;
  const int m4 = 4 * on.max_acc, s4 = 4 * on.sum_acc;
  const Vmm S(on_s_[0]), Mc(on_mc_), t2(2), t3(3), t4(4), t5(5);
  cascade_end();
  vaddps(S, S, Vmm(on_s_[1]));
  mov(rax, qword[rdi + frame_off::accs]);
  hreduce(ir::AccKind::Max, Vmm(on_m_));
  vmovss(dword[rax + m4], Xbyak::Xmm(0));
  vbroadcastss(t2, dword[rax + m4]);
  vmaxps(t2, t2, cst(-FLT_MAX));
  vsubps(t3, Mc, t2);
  const Vmm ts[2] = {t4, t5};
  inj_.exp(t3, ts, true);
  vmulps(S, S, t3);
  hreduce(ir::AccKind::Sum, S);
  online_regs_.clear();
  Label s_nan, m_nan, done;
  vucomiss(Xbyak::Xmm(0), Xbyak::Xmm(0));
  jp(s_nan, T_NEAR);
  // s is a number: m is finite, or -inf (every element -inf), when s must be NaN
  vmovss(dword[rax + s4], Xbyak::Xmm(0));
  mov(edx, dword[rax + m4]);
  and_(edx, 0x7fffffff);
  cmp(edx, 0x7f800000);
  jne(done, T_NEAR);
  mov(dword[rax + s4], 0x7fc00000);
  jmp(done, T_NEAR);
  L(s_nan);  // a NaN element, or m = +inf (then the plain max loop tells whether a NaN is there)
  mov(dword[rax + s4], 0x7fc00000);
  cmp(dword[rax + m4], 0x7f800000);
  jne(m_nan, T_NEAR);
  loop_phase({}, {on.max_acc}, true);
  jmp(done, T_NEAR);
  L(m_nan);
  mov(dword[rax + m4], 0x7fc00000);
  L(done);
}

// Rows of a kernel whose last loop only stores (softmax, log_softmax, rms_norm, layer_norm), software-
// pipelined: the loop before it over row i (the online max+sum loop, or a plain accumulating
// loop) also runs row i-1's store loop (same length, same tail mask), from the previous row's
// stream pointers and accumulators (saved at the end of each row). Memory then reads row i and
// writes row i-1 while the core computes row i's exps; the last row's stores run after the loop.
template <class Vmm>
void Gen<Vmm>::pipeline_rows() {
  const size_t q = k_.phases.size() - 1, mp = q - 1;  // the store loop; the loop it joins
  const bool online_mp = p_.online.phase >= 0 && static_cast<size_t>(p_.online.phase) + 1 == mp;
  std::vector<PhaseItem> items, keep;  // the store loop; what the joined loop stores (Plan::reuse)
  if (p_.reuse) {
    items.push_back({&p_.reuse->store, p_.stores[q][0]});
    keep.push_back({&p_.reuse->keep, p_.reuse->scratch});
  } else {
    for (size_t s = 0; s < k_.phases[q].stores.size(); ++s) items.push_back({&k_.phases[q].stores[s], p_.stores[q][s]});
  }
  const int naddr = static_cast<int>(p_.addrs.size());
  auto joined_loop = [&](const std::vector<PhaseItem>* prev) {
    if (online_mp) {
      online_phase(prev);
      return;
    }
    prefetch_rows_ = true;  // the last loop over the row: fetch the rows ahead (prefetch_streams)
    loop_phase(keep, k_.phases[mp].accs, true, prev);
    prefetch_rows_ = false;
  };
  row_loop([&] {
    row_phases(online_mp ? mp - 1 : mp);
    Label first, joined;
    cmp(r12, qword[rdi + frame_off::row_begin]);
    je(first, T_NEAR);
    joined_loop(&items);
    jmp(joined, T_NEAR);
    L(first);
    joined_loop(nullptr);
    L(joined);
    mov(rax, qword[rdi + frame_off::accs]);  // this row becomes the previous one
    for (int a = 0; a < static_cast<int>(k_.accs.size()); ++a) {
      mov(edx, dword[rax + 4 * a]);
      mov(dword[rax + 4 * (kMaxAccs + a)], edx);
    }
    for (int a = 0; a < naddr; ++a) {
      const int prev = prev_ptr_[static_cast<size_t>(a)];
      if (prev == a) continue;  // a stream that does not move with the row
      mov(rax, qword[rsp + ptr_slot(a)]);
      mov(qword[rsp + ptr_slot(prev)], rax);
    }
  });
  Label none;
  mov(rax, qword[rdi + frame_off::row_begin]);
  cmp(rax, qword[rdi + frame_off::row_end]);
  jge(none, T_NEAR);
  nvslots_ = 0;
  prev_row_ = true;
  loop_phase(items, {}, true);
  prev_row_ = false;
  L(none);
}

// The entry points called from emitter.cpp (the other members are instantiated through them).
template void Gen<Xbyak::Zmm>::online_phase(const std::vector<PhaseItem>*);
template void Gen<Xbyak::Ymm>::online_phase(const std::vector<PhaseItem>*);
template void Gen<Xbyak::Zmm>::pipeline_rows();
template void Gen<Xbyak::Ymm>::pipeline_rows();
template void Gen<Xbyak::Zmm>::capture(const Xbyak::Zmm&, bool);
template void Gen<Xbyak::Ymm>::capture(const Xbyak::Ymm&, bool);

}  // namespace kfuse::detail::xb
