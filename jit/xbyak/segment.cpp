// xbyak backend: segment kernels (embedding bags), the Gen members (gen.hpp) that walk a bag (its
// fold's leaves: segment_leaves.cpp).
//
// Per bag (the row loop over the bag dims), per block of columns (nv vectors: as many as the
// registers hold, then one block of 1..nv vectors for the rest, its last vector masked): the
// bag's ids are walked once, in order, with the block's accumulators pinned in vector registers;
// per id the uniform integer values (the clamped id, the row pointers, weights, padding tests)
// are computed in general registers, the broadcasts into pinned vector registers, then each
// vector of the block evaluates the fold's DAG (eval.cpp: the same instruction selection as
// every other kernel; a row leaf reads its vector of columns, converting narrow tables). The rows
// of the id a few positions ahead (in the bags that follow near the end of this one) are prefetched, into
// L1 or L2 by the table's size, as the LLVM bag kernel does (backend/gather_prefetch.hpp). After
// the walk, the epilogue phases run per vector with the accumulators as their Acc leaves.
//
// Exactness: each column folds its ids in order with the fold's own operations (no FMA
// contraction, eval.cpp has none), starting from the identity, so a column's bits are the LLVM
// kernel's; an empty bag gives each accumulator its empty value (0; 1 for Prod), as the
// reference evaluator and LLVM do.
//
// General registers: rdi frame, rbp, r12/r13 bag range (pinned values during the id walk), r14
// block's first column, r15 columns, rcx the id position, {rbx rsi r8 r9 r10 r11} the per-id
// pointers (then free for index arithmetic or pinned values), rax/rdx scratch. Stack: qword slots in the first vector
// slots of the body.
#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_set>

#include "backend/gather_prefetch.hpp"
#include "gen.hpp"
#include "ir/expr_util.hpp"
#include "segment.hpp"

namespace kfuse::detail::xb {

namespace {
// A pointer's element index `e` (elements of `esz` bytes) as (index, byte scale): x * c with
// c * esz a lea scale folds its multiply into the pointer's lea. The 8-bit table's scale/bias
// row (id * 2 floats) is then `lea [sb + id * 8]`, the id read from its register, where it took
// a copy, an imul and the lea.
std::pair<const ir::Expr*, int> lea_index(const ir::Expr* e, int esz) {
  if (e->kind == ir::ExprKind::Op && e->op == Op::Mul)
    for (size_t i = 0; i < 2; ++i) {
      const ir::Expr* k = e->args[i].get();
      const double s = k->kind == ir::ExprKind::Const ? k->value * esz : 0;
      if (s == 1 || s == 2 || s == 4 || s == 8) return {e->args[1 - i].get(), static_cast<int>(s)};
    }
  return {e, esz};
}
}  // namespace

// Shared value i into its register (seg_shared_reg_) or, where it has none, through `d` into
// its slot; later ievals of it read that (seg_cse_). `f`: the registers computing it may use.
template <class Vmm>
void Gen<Vmm>::seg_shared(size_t i, const Reg64& d, const std::vector<Reg64>& f) {
  const ir::Expr* e = p_.segment->shared[i];
  if (const int r = seg_shared_reg_[i]; r >= 0) {
    ieval(e, Reg64(r), f);
    seg_cse_[e] = ~r;
    return;
  }
  ieval(e, d, f);
  mov(qword[rsp + seg_shared_q_[i]], d);
  seg_cse_[e] = seg_shared_q_[i];
}

// Prefetch of the lines the id a few positions ahead of rcx (in a later bag when past this one's
// end) reads through each prefetched pointer: the block's vectors of a row (from the block's first
// column), the elements of a gathered broadcast (an 8-bit table's scale and bias). How far ahead,
// into L1 or L2, or none, by the size of the tables: backend/gather_prefetch.hpp.
template <class Vmm>
void Gen<Vmm>::seg_prefetch(int nv, bool masked) {
  const SegmentPlan& sp = *p_.segment;
  bool any = false;
  for (const auto& p : sp.ptrs) any |= p.prefetch;
  if (!any) return;
  // Bytes [first, last] past each prefetched pointer (+ the block's first column for a row: its
  // bytes, the column / 2, for a nibble row, whose block of nv * W columns is nv * W / 2 bytes).
  auto span = [&](const SegmentPlan::Ptr& p) {
    const int64_t esz = static_cast<int64_t>(dtype_size(p.dtype));
    const int64_t block = p.nibble ? nv * W / 2 : nv * W * esz;
    // (AVX-512's masked tail loads a nibble vector's W / 2 bytes as 16 (seg_leaf): the line
    // those reach is fetched too, or the load waits for it)
    const int64_t over = Z && masked && p.nibble ? W / 2 : 0;
    return std::pair<int64_t, int64_t>{p.lo * esz, p.hi * esz + (p.row ? block + over : esz) - 1};
  };
  // The tables' bytes this block reads (rows a clamped id can select x the bytes read per row):
  // into L1 or L2 by the table's size (backend/gather_prefetch.hpp).
  int64_t table_bytes = 0, id_bytes = 0;
  bool rows_only = true;
  for (const auto& p : sp.ptrs) {
    if (!p.prefetch) continue;
    const auto [first, last] = span(p);
    table_bytes = add_table_bytes(table_bytes, ir::clamped_rows(p.base.get()).value_or(-1), last - first + 1);
    id_bytes += last - first + 1;
    rows_only &= p.row;
  }
  const GatherPrefetch how = gather_prefetch(table_bytes, id_bytes, rows_only);
  if (how.ahead == 0) return;
  // The position ahead, below the walk's limit: the last bag's end, so that the prefetch runs on
  // through the bags that follow (bags of 20-100 ids, 32 or 64 ahead: stopping at the next bag's end
  // left the first rows of the bag after it unfetched), or this bag's end when the prefetched
  // addresses read the bag index.
  Label skip;
  lea(rax, ptr[rcx + how.ahead]);
  cmp(rax, qword[rsp + seg_limit_q_]);
  jge(skip, T_NEAR);
  seg_r0_ = rax;
  // A shared value two prefetched bases read (the 8-bit table's clamped row id, for its row and
  // its scale/bias) is computed once for the id ahead, into its register or slot: this id's
  // value overwrites it after the prefetch (seg_block).
  std::function<bool(const ir::Expr*, const ir::Expr*)> reads = [&](const ir::Expr* e, const ir::Expr* x) {
    if (e == x) return true;
    for (const auto& a : e->args)
      if (reads(a.get(), x)) return true;
    return false;
  };
  seg_cse_.clear();
  seg_use_cse_ = true;
  seg_unclamped_ = true;
  for (size_t i = 0; i < sp.shared.size(); ++i) {
    int bases = 0;
    for (const auto& p : sp.ptrs) bases += p.prefetch && reads(p.base.get(), sp.shared[i]);
    if (bases < 2) continue;
    seg_shared(i, rdx, seg_free(seg_pool()));
  }
  for (const auto& p : sp.ptrs) {
    if (!p.prefetch) continue;
    const int esz = static_cast<int>(dtype_size(p.dtype));
    const auto [first, last] = span(p);
    const auto [ix, scale] = lea_index(p.base.get(), esz);
    const std::optional<Reg64> held = seg_held(ix);
    if (!held) ieval(ix, rdx, seg_free(seg_pool()));
    const Reg64* pinned = gpr_inv(GprInv::Buffer, p.buffer);
    if (!pinned) mov(rbx, qword[rsp + seg_buf_q_.at(static_cast<size_t>(p.buffer))]);
    lea(rdx, ptr[(pinned ? *pinned : rbx) + (held ? *held : rdx) * scale]);
    if (p.nibble) add(rdx, qword[rsp + seg_half_q_]);
    else if (p.row) lea(rdx, ptr[rdx + r14 * esz]);
    auto line = [&](int64_t off) {
      if (how.to_l2) prefetcht1(ptr[rdx + off]);
      else prefetcht0(ptr[rdx + off]);
    };
    for (int64_t off = first; off <= last; off += 64) line(off);
    if ((last - first) % 64 != 0) line(last);  // a span not aligned to lines touches one more
  }
  seg_cse_.clear();
  seg_use_cse_ = false;
  seg_unclamped_ = false;
  seg_r0_ = rcx;
  L(skip);
}

// Pins the parameters and buffer bases the id loop reads most into general registers (gpr_inv_),
// loaded here once per walk: from their slots they cost a load per use, two for a parameter, and
// an f32 bag's id spent a dozen of its ~60 instructions on them (the LLVM kernel keeps them in
// registers). The registers: r12 and r13 (the row loop's range, saved to slots for the walk),
// then the last ones of seg_pool(). Two pool registers past the pointers stay free: index
// arithmetic and a narrow row's tail copy (seg_leaf) take them.
template <class Vmm>
void Gen<Vmm>::seg_pin_gprs() {
  const SegmentPlan& sp = *p_.segment;
  gpr_inv_.clear();
  std::vector<std::pair<uint64_t, int>> uses;  // key, count
  auto count = [&](GprInv kind, int index) {
    const uint64_t key = gpr_key(kind, index);
    auto it = std::find_if(uses.begin(), uses.end(), [&](const auto& u) { return u.first == key; });
    if (it == uses.end()) uses.push_back({key, 1});
    else ++it->second;
  };
  std::unordered_set<const ir::Expr*> seen;
  std::function<void(const ir::Expr*)> walk = [&](const ir::Expr* e) {
    if (!seen.insert(e).second) return;
    if (e->kind == ExprKind::Param) count(GprInv::Param, e->index);
    if (e->kind == ExprKind::Load) count(GprInv::Buffer, e->index);
    for (const auto& a : e->args) walk(a.get());
  };
  for (const ir::Expr* e : sp.shared) walk(e);
  for (int a : sp.int_accs) walk(k_.accs[static_cast<size_t>(a)].value.get());
  for (const auto& p : sp.ptrs) {
    seen.clear();  // (each pointer's base is evaluated on its own, twice with its prefetch)
    walk(p.base.get());
    count(GprInv::Buffer, p.buffer);
    if (p.prefetch) count(GprInv::Buffer, p.buffer);
  }
  for (const ir::Expr* u : sp.uniform)
    if (!sp.leaves.count(u)) walk(u);
  std::stable_sort(uses.begin(), uses.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  // r12 and r13 (the row loop's range: unused during the walk, saved around it) first, then the
  // pool's registers past the pointers and the two kept free
  std::vector<Reg64> regs = {r12, r13};
  for (size_t i = seg_pool().size(); i-- > sp.ptrs.size() + 2;) regs.push_back(seg_pool()[i]);
  const int n = std::min(static_cast<int>(regs.size()), static_cast<int>(uses.size()));
  if (n > 0) {
    mov(qword[rsp + seg_save_q_[0]], r12);
    mov(qword[rsp + seg_save_q_[1]], r13);
  }
  for (int i = 0; i < n; ++i) {
    const Reg64 r = regs[static_cast<size_t>(i)];
    const auto kind = static_cast<GprInv>(uses[static_cast<size_t>(i)].first >> 32);
    const auto index = static_cast<int>(static_cast<uint32_t>(uses[static_cast<size_t>(i)].first));
    if (kind == GprInv::Param) {
      mov(r, qword[rdi + frame_off::params]);
      mov(r, qword[r + 8 * index]);
    } else {
      mov(r, qword[rsp + seg_buf_q_.at(static_cast<size_t>(index))]);
    }
    gpr_inv_.push_back({uses[static_cast<size_t>(i)].first, r});
  }
}

template <class Vmm>
std::vector<Reg64> Gen<Vmm>::seg_free(std::vector<Reg64> regs) const {
  regs.erase(std::remove_if(regs.begin(), regs.end(),
                            [&](const Reg64& r) {
                              for (const auto& [k, p] : gpr_inv_)
                                if (p.getIdx() == r.getIdx()) return true;
                              for (int h : seg_shared_reg_)
                                if (h == r.getIdx()) return true;
                              return false;
                            }),
             regs.end());
  return regs;
}

// One walk of the bag for a block of nv vectors at column r14 (the last masked when `masked`).
template <class Vmm>
void Gen<Vmm>::seg_block(int nv, bool masked, const Dag& fold, const Dag& once,
                         const std::vector<std::pair<const ir::Expr*, int>>& once_scalars) {
  const SegmentPlan& sp = *p_.segment;
  const bool nibbles = sp.has_nibbles();
  if (nibbles) {  // a nibble row's pointer adds the block's first byte (r14 / 2: r14 is a multiple of W)
    mov(rax, r14);
    shr(rax, 1);
    mov(qword[rsp + seg_half_q_], rax);
  }
  if (masked) {  // tail lanes = columns - r14 - (nv - 1) * W
    mov(rax, r15);
    sub(rax, r14);
    sub(rax, (nv - 1) * W);
    mov(qword[rsp + seg_tl_q_], rax);
    set_mask_rax();
    if (Z && nibbles) {  // k4: the tail's ceil(lanes / 2) bytes of a nibble row (seg_leaf)
      mov(rax, qword[rsp + seg_tl_q_]);
      inc(eax);
      shr(eax, 1);
      bzhi(eax, dword[rip + masktab_], eax);
      kmovw(k4, eax);
    }
  }
  pin_accs(sp.vec_accs, nv);
  int next = kAccTmp - 1 - nv * acc_regs(sp.vec_accs);
  std::vector<int> ureg;
  for (size_t i = 0; i < sp.uniform.size(); ++i) ureg.push_back(next--);
  // AVX-512 nibble rows: a register per row leaf for the pairs' odd vectors (seg_leaf), pairs
  // over the unmasked vectors. In-cache 4-bit bag ([20000, 64], 246k ids, 1 thread, Zen 4):
  // 1.35-1.42 ms decoding each vector on its own, 1.06-1.07 ms in pairs (docs/performance.md).
  seg_nib_reg_.clear();
  if constexpr (Z)
    for (const ir::Expr* e : seg_nibble_rows(fold)) seg_nib_reg_.push_back({e, next--});
  seg_pair_end_ = (nv - (masked ? 1 : 0)) / 2 * 2;
  const int pairs_end = seg_pair_end_;
  // (the interleave after the walk needs two vector registers besides kAccTmp's: next and next - 1)
  seg_even_odd_ = Z && pairs_end > 0 && !seg_nib_reg_.empty() && next >= 1 && seg_rows_all_nibbles(fold);
  const bool even_odd = seg_even_odd_;
  for (int a : sp.int_accs) mov(qword[rsp + seg_acc_q_.at(a)], 0);
  Label top, end;
  seg_pin_gprs();
  // Shared values live in pool registers the pointers and pins leave, one kept free for index
  // arithmetic (and for the AVX2 tail copy, seg_pool()[seg_nptr_]: the first of them); the rest
  // in stack slots. Through a slot (a store, then a load per use, on the row address path) the
  // 8-bit bag's clamped id cost it 15-20%: [2M, 64], 1 thread, Zen 4, uniform ids 3.87-3.97 ms
  // through the slot against 3.21-3.27 ms in a register, Zipf 2.11 against 1.87-1.92 ms.
  {
    std::vector<Reg64> spare = seg_free(
        std::vector<Reg64>(seg_pool().begin() + static_cast<std::ptrdiff_t>(sp.ptrs.size()), seg_pool().end()));
    seg_shared_reg_.assign(sp.shared.size(), -1);
    for (size_t i = 0; i < sp.shared.size() && spare.size() > 1; ++i) {
      seg_shared_reg_[i] = spare.back().getIdx();
      spare.pop_back();
    }
  }
  // The walk tests its end at the bottom (one branch per id; an empty bag skips it at the top).
  mov(rcx, qword[rsp + seg_lo_q_]);
  cmp(rcx, qword[rsp + seg_hi_q_]);
  jge(end, T_NEAR);
  L(top);
  seg_prefetch(nv, masked);
  // uniform values of this id
  seg_cse_.clear();
  seg_use_cse_ = true;
  seg_cold_ok_ = true;
  std::vector<Reg64> all = seg_free(seg_pool());
  all.push_back(rdx);
  for (size_t i = 0; i < sp.shared.size(); ++i) seg_shared(i, rax, all);
  for (int a : sp.int_accs) {
    ieval(k_.accs[static_cast<size_t>(a)].value.get(), rax, all);
    add(qword[rsp + seg_acc_q_.at(a)], rax);
  }
  for (size_t j = 0; j < sp.ptrs.size(); ++j) {
    std::vector<Reg64> f = {rax, rdx};
    f.insert(f.end(), seg_pool().begin() + static_cast<std::ptrdiff_t>(j) + 1, seg_pool().end());
    const Reg64 r = seg_pool()[j];
    const auto [ix, scale] = lea_index(sp.ptrs[j].base.get(), static_cast<int>(dtype_size(sp.ptrs[j].dtype)));
    const std::optional<Reg64> held = seg_held(ix);
    if (!held) ieval(ix, r, seg_free(f));
    const Reg64* pinned = gpr_inv(GprInv::Buffer, sp.ptrs[j].buffer);
    if (!pinned) mov(rax, qword[rsp + seg_buf_q_.at(static_cast<size_t>(sp.ptrs[j].buffer))]);
    lea(r, ptr[(pinned ? *pinned : rax) + (held ? *held : r) * scale]);
    if (sp.ptrs[j].nibble) add(r, qword[rsp + seg_half_q_]);
  }
  std::vector<Reg64> rest = {rdx};
  rest.insert(rest.end(), seg_pool().begin() + static_cast<std::ptrdiff_t>(sp.ptrs.size()), seg_pool().end());
  rest = seg_free(rest);
  ireg_.clear();
  for (size_t i = 0; i < sp.uniform.size(); ++i) {
    const ir::Expr* u = sp.uniform[i];
    if (sp.leaves.count(u)) seg_broadcast(u, Vmm(ureg[i]));
    else seg_scalar(u, Vmm(ureg[i]), rest);
    ireg_.push_back({inv_key(InvKind::Slot, static_cast<uint32_t>(i)), ureg[i]});
  }
  seg_use_cse_ = false;
  seg_cold_ok_ = false;
  for (int v = 0; v < nv; ++v) {
    seg_v_ = v;
    use_acc_set(v);
    const int slots = nvslots_;
    Eval ev;
    ev.in_loop = true;
    ev.masked = masked && v == nv - 1;
    eval(fold, ev);
    nvslots_ = slots;
  }
  ireg_.clear();
  inc(rcx);
  cmp(rcx, qword[rsp + seg_hi_q_]);
  jl(top, T_NEAR);
  if (!seg_cold_.empty()) jmp(end, T_NEAR);
  for (const auto& cold : seg_cold_) cold();  // (reached only by their branches)
  seg_cold_.clear();
  L(end);
  seg_nib_reg_.clear();  // (the epilogue decodes any nibble row vector by vector)
  seg_pair_end_ = 0;
  seg_even_odd_ = false;
  if (!gpr_inv_.empty()) {
    mov(r12, qword[rsp + seg_save_q_[0]]);
    mov(r13, qword[rsp + seg_save_q_[1]]);
  }
  gpr_inv_.clear();
  seg_shared_reg_.clear();
  // NaN markers into Max/Min accumulators; an empty bag's empty values
  bool fix_empty = false;
  for (int v = 0; v < nv; ++v)
    for (int a : sp.vec_accs) {
      const ir::AccKind kind = k_.accs[static_cast<size_t>(a)].kind;
      if (kind == ir::AccKind::Max || kind == ir::AccKind::Min) {
        const Vmm r(acc_sets_[static_cast<size_t>(v)].first.at(a)), n(acc_sets_[static_cast<size_t>(v)].second.at(a));
        if (kind == ir::AccKind::Max) vmaxps(r, r, n);
        else vminps(r, r, n);
      }
      fix_empty |= kind != ir::AccKind::Sum;
    }
  if (fix_empty) {
    Label nonempty;
    mov(rax, qword[rsp + seg_lo_q_]);
    cmp(rax, qword[rsp + seg_hi_q_]);
    jl(nonempty, T_NEAR);
    for (int v = 0; v < nv; ++v)
      for (int a : sp.vec_accs) {
        const Vmm r(acc_sets_[static_cast<size_t>(v)].first.at(a));
        vmovups(r, cst(k_.accs[static_cast<size_t>(a)].kind == ir::AccKind::Prod ? 1.0f : 0.0f));
      }
    L(nonempty);
  }
  // Pairs accumulated even / odd: their columns interleaved back (lanes 0-15 of the pair from
  // lanes 0-7 of each, 16-31 from lanes 8-15; nibtab_'s index vectors).
  if constexpr (Z)
    for (int v = 0; even_odd && v < pairs_end; v += 2)
      for (int a : sp.vec_accs) {
        const Vmm e(acc_sets_[static_cast<size_t>(v)].first.at(a)),
            o(acc_sets_[static_cast<size_t>(v + 1)].first.at(a));
        const Vmm lo(next), hi(next - 1);
        vmovups(lo, dry_ ? ptr[rip] : ptr[rip + nibtab_ + 2 * VB]);
        vpermi2ps(lo, e, o);
        vmovups(hi, dry_ ? ptr[rip] : ptr[rip + nibtab_ + 3 * VB]);
        vpermi2ps(hi, e, o);
        vmovaps(e, lo);
        vmovaps(o, hi);
      }
  // the epilogue phases, per vector
  std::vector<Reg64> f = seg_pool();
  f.push_back(rdx);
  f.push_back(rcx);
  for (const auto& [e, slot] : once_scalars) {
    seg_scalar(e, Vmm(0), f);
    vmovups(ptr[rsp + vslot_off(slot)], Vmm(0));
  }
  load_ptr_regs();
  for (int v = 0; v < nv; ++v) {
    ireg_.clear();
    for (int a : sp.vec_accs)
      ireg_.push_back({inv_key(InvKind::Acc, static_cast<uint32_t>(a)), acc_sets_[static_cast<size_t>(v)].first.at(a)});
    disp_ = v * VB;
    const int slots = nvslots_;
    Eval ev;
    ev.in_loop = true;
    ev.masked = masked && v == nv - 1;
    eval(once, ev);
    nvslots_ = slots;
  }
  disp_ = 0;
  ireg_.clear();
  release_accs();
}

// The nibble row leaves the fold reads, in the DAG's order.
template <class Vmm>
std::vector<const ir::Expr*> Gen<Vmm>::seg_nibble_rows(const Dag& fold) const {
  std::vector<const ir::Expr*> rows;
  for (const auto& n : fold.nodes)
    if (n.leaf && seg_row_leaf(n.e) && p_.segment->ptrs[static_cast<size_t>(p_.segment->leaves.at(n.e).ptr)].nibble &&
        std::find(rows.begin(), rows.end(), n.e) == rows.end())
      rows.push_back(n.e);
  return rows;
}

// Whether every row leaf the fold reads is a nibble row (its other leaves are then broadcasts).
template <class Vmm>
bool Gen<Vmm>::seg_rows_all_nibbles(const Dag& fold) const {
  for (const auto& n : fold.nodes)
    if (n.leaf && seg_row_leaf(n.e) && !p_.segment->ptrs[static_cast<size_t>(p_.segment->leaves.at(n.e).ptr)].nibble)
      return false;
  return true;
}

// Registers one evaluation of `g` needs at its widest node (operands, result, scratch).
template <class Vmm>
int Gen<Vmm>::dag_width(const Dag& g) const {
  int w = 2;
  for (const auto& n : g.nodes) w = std::max(w, n.nargs + 1 + (n.leaf ? 1 : scratch_count(n.e)));
  return w;
}

template <class Vmm>
void Gen<Vmm>::segment_loop() {
  const SegmentPlan& sp = *p_.segment;
  seg_r0_ = rcx;
  seg_nptr_ = static_cast<int>(sp.ptrs.size());
  if (sp.ptrs.size() > seg_pool().size()) throw DeclineError("xbyak: segment kernel: more than 6 table pointers");
  // DAGs: the fold (uniform leaves from pinned registers: pseudo slots 0..), the epilogue
  std::unordered_map<const ir::Expr*, int> uinv;
  for (size_t i = 0; i < sp.uniform.size(); ++i) uinv[sp.uniform[i]] = static_cast<int>(i);
  std::vector<const ir::Expr*> roots;
  for (int a : sp.vec_accs) roots.push_back(k_.accs[static_cast<size_t>(a)].value.get());
  const Dag fold = make_dag(roots, &uinv, {}, sp.vec_accs);
  std::vector<PhaseItem> items;
  for (size_t ph = 1; ph < k_.phases.size(); ++ph)
    for (size_t s = 0; s < k_.phases[ph].stores.size(); ++s)
      items.push_back({&k_.phases[ph].stores[s], p_.stores[ph][s]});
  // block width: the accumulators of nv vectors, the broadcasts and the widest DAG node in registers
  const int per = acc_regs(sp.vec_accs);
  const int nuni = static_cast<int>(sp.uniform.size());
  int nv = Z ? 16 : 8;
  nv = std::min(nv, (NREG - 7) / per);                                      // (pin_accs keeps 4 registers below them)
  const int nnib = Z ? static_cast<int>(seg_nibble_rows(fold).size()) : 0;  // (seg_block's pair registers)
  nv = std::min(nv, (NREG - 2 - nuni - nnib - dag_width(fold)) / per);
  if (nv < 1) throw DeclineError("xbyak: segment kernel: accumulators and broadcasts need more vector registers");

  row_loop([&] {
    // qword slots (in vector slots: allocated in the same order for every bag)
    int nq = 0, base = 0;
    auto q = [&]() {
      if (nq % 8 == 0) base = vslot_off(new_vslot());
      return base + 8 * (nq++ % 8);
    };
    seg_buf_q_.clear();
    for (size_t b = 0; b < k_.buffers.size(); ++b) seg_buf_q_.push_back(q());
    seg_lo_q_ = q();
    seg_hi_q_ = q();
    seg_limit_q_ = q();
    seg_tl_q_ = q();
    seg_save_q_[0] = q();
    seg_save_q_[1] = q();
    seg_half_q_ = q();
    seg_acc_q_.clear();
    for (int a : sp.int_accs) seg_acc_q_[a] = q();
    seg_shared_q_.clear();
    for (size_t i = 0; i < sp.shared.size(); ++i) seg_shared_q_.push_back(q());
    seg_tail_off_ = vslot_off(new_vslot());
    std::vector<std::pair<const ir::Expr*, int>> once_scalars;  // epilogue scalar leaves, their slots
    std::unordered_map<const ir::Expr*, int> oinv;
    for (size_t ph = 1; ph < sp.scalar.size(); ++ph)
      for (const ir::Expr* e : sp.scalar[ph]) {
        once_scalars.push_back({e, new_vslot()});
        oinv[e] = once_scalars.back().second;
      }
    std::vector<const ir::Expr*> oroots;
    for (const auto& it : items) oroots.push_back(it.store->value.get());
    const Dag once = make_dag(oroots, &oinv, items, {});
    if ((NREG - 2 - dag_width(once)) / per < 1)
      throw DeclineError("xbyak: segment kernel: the epilogue needs more vector registers");
    const int nv_once = std::min(nv, (NREG - 2 - dag_width(once)) / per);

    for (size_t b = 0; b < k_.buffers.size(); ++b) {
      mov(rax, qword[rdi + frame_off::bufs]);
      mov(rax, qword[rax + 8 * b]);
      mov(qword[rsp + seg_buf_q_[b]], rax);
    }
    std::vector<Reg64> f = seg_pool();
    f.push_back(rdx);
    f.push_back(rcx);
    ieval(k_.reduce_begin.get(), rax, f);
    mov(qword[rsp + seg_lo_q_], rax);
    ieval(k_.reduce_end.get(), rax, f);
    mov(qword[rsp + seg_hi_q_], rax);
    // The prefetch's limit (seg_prefetch): this bag's end, in rax, or, when the prefetch may run
    // past it, the last bag's end (the same for every bag: a few instructions).
    if (sp.ahead_past_bag) {
      seg_last_bag_ = true;
      ieval(k_.reduce_end.get(), rax, f);
      seg_last_bag_ = false;
    }
    mov(qword[rsp + seg_limit_q_], rax);
    mov(r15, qword[rdi + frame_off::ext + 8 * p_.row_dims]);
    xor_(r14d, r14d);
    const int n = std::min(nv, nv_once);
    Label full, rem, done;
    L(full);
    lea(rax, ptr[r14 + n * W]);
    cmp(rax, r15);
    jg(rem, T_NEAR);
    seg_block(n, false, fold, once, once_scalars);
    add(r14, n * W);
    jmp(full, T_NEAR);
    L(rem);
    mov(rax, r15);
    sub(rax, r14);
    jle(done, T_NEAR);
    // A rest of whole vectors (D = 64 where the block is wider) runs unmasked: the masked last
    // vector cost the in-cache 8-bit bag 2.5% ([20000, 64], Zipf ids, Zen 4: 1031 -> 1005 us).
    // AVX-512 nibble rows needed it first: the masked tail loads a nibble vector's 8 bytes as 16
    // under k4, and where those cross into the next, unfetched line the load waits for it.
    const bool exact_tails = n > 1;
    std::vector<Label> exact(static_cast<size_t>(n));
    Label masked_rest;
    if (exact_tails) {
      test(eax, W - 1);
      jnz(masked_rest, T_NEAR);
      for (int m = 1; m < n; ++m) {  // (the rest is under n * W: the full loop took those)
        cmp(rax, m * W);
        je(exact[static_cast<size_t>(m - 1)], T_NEAR);
      }
    }
    L(masked_rest);
    // the rest: m = ceil(rest / W) vectors (1..n), the last masked
    std::vector<Label> blocks(static_cast<size_t>(n));
    for (int m = 1; m < n; ++m) {
      cmp(rax, m * W);
      jle(blocks[static_cast<size_t>(m - 1)], T_NEAR);
    }
    jmp(blocks[static_cast<size_t>(n - 1)], T_NEAR);
    for (int m = 1; m <= n; ++m) {
      L(blocks[static_cast<size_t>(m - 1)]);
      seg_block(m, true, fold, once, once_scalars);
      jmp(done, T_NEAR);
    }
    if (exact_tails)
      for (int m = 1; m < n; ++m) {
        L(exact[static_cast<size_t>(m - 1)]);
        seg_block(m, false, fold, once, once_scalars);
        jmp(done, T_NEAR);
      }
    L(done);
  });
}

#define KFUSE_XB_SEGMENT_MEMBERS(V)     \
  template void Gen<V>::segment_loop(); \
  template void Gen<V>::seg_pin_gprs(); \
  template std::vector<Reg64> Gen<V>::seg_free(std::vector<Reg64>) const;
KFUSE_XB_SEGMENT_MEMBERS(Xbyak::Zmm)
KFUSE_XB_SEGMENT_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_SEGMENT_MEMBERS

}  // namespace kfuse::detail::xb
