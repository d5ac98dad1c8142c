// xbyak backend: machine-code emission from an analysed kernel (see xbyak_backend.hpp), the
// members of Gen (gen.hpp) that drive a kernel: prologue/epilogue, stack slots, constants, the
// pointwise/row/global phase loops, streaming stores and prefetch. The row loop and stream
// pointers are in rows.cpp, accumulators in accumulators.cpp, expression evaluation (register
// allocation, instruction selection) in eval.cpp, the rows-across-lanes path in lanes.cpp, the
// online softmax loop and pipelined rows in online.cpp.
//
// Generated function: void fn(Frame*). Registers: rdi frame, rbp saved rsp, r12/r13 row range,
// r14 inner index, r15 inner end, rax/rdx scratch, {rbx rsi r8 r9 r10 r11 rcx} stream pointers
// (further streams are reloaded from their stack slot into rax at each use). Stack (64-aligned):
// pointer slots (this row's, then the previous row's when pipelined), then 64-byte vector slots
// (loop invariants and spills); the scratch row of Plan::reuse is Frame::scratch (a row of
// 32768 floats would not be safe on a caller's stack). Vector registers: the
// last one is the AVX2 tail mask (k1 on AVX-512), the one before it the accumulator scratch;
// accumulators are pinned, the rest is allocated per expression DAG with Belady spilling.
#include <algorithm>
#include <cstring>

#include "gen.hpp"
#include "reg_group.hpp"
#include "segment.hpp"
#include "ir/expr_util.hpp"

namespace kfuse::detail::xb {

// dst = (a pred b) ? v : dst
template <class Vmm>
void Gen<Vmm>::select(const Vmm& dst, const Vmm& a, const Xbyak::Operand& b, uint8_t pred, const Xbyak::Operand& v,
                      const Vmm& tmp) {
  if constexpr (Z) {
    vcmpps(k2, a, b, pred);
    vmovups(dst | k2, v);
  } else {
    vcmpps(tmp, a, b, pred);
    vblendvps(dst, dst, v, tmp);
  }
}

template <class Vmm>
size_t Gen<Vmm>::generate() {
  prologue();
  switch (p_.mode) {
    case Mode::Pointwise: {
      row_loop([&] {
        std::vector<PhaseItem> items;
        for (size_t ph = 0; ph < k_.phases.size(); ++ph)
          for (size_t s = 0; s < k_.phases[ph].stores.size(); ++s)
            items.push_back({&k_.phases[ph].stores[s], p_.stores[ph][s]});
        loop_phase(items, {}, false);
      });
      break;
    }
    case Mode::Row:
      if (p_.lanes) {
        lane_loop();
        break;
      }
      if (p_.pipeline) {
        pipeline_rows();
        break;
      }
      row_loop([&] { row_phases(k_.phases.size()); });
      break;
    case Mode::Segment: segment_loop(); break;
    case Mode::Global: {
      compute_addrs();
      Label end;
      for (size_t ph = 0; ph < k_.phases.size(); ++ph) {
        Label next;
        cmp(qword[rdi + frame_off::phase], static_cast<int>(ph));
        jne(next, T_NEAR);
        phase(ph, false);
        jmp(end, T_NEAR);
        L(next);
      }
      L(end);
      break;
    }
  }
  epilogue();
  size_t code = getSize();
  align(64);
  L(ctab_);
  for (uint32_t v : cvals_)
    for (int i = 0; i < W; ++i) dd(v);
  L(masktab_);  // (the last W + 1 lanes: index_masks.cpp)
  for (int i = 0; i < 8; ++i) dd(0xffffffffu);
  for (int i = 0; i < 8; ++i) dd(0);
  for (int i = 0; i < 9; ++i) dd(0xffffffffu);
  if (!p_.cmps.empty()) {
    align(8);
    L(boundtab_);  // the clamp bounds of an index mask's offset, -W, 0, 1 (index_masks.cpp)
    dq(static_cast<uint64_t>(-W));
    dq(0);
    dq(1);
  }
  // The tables below are read as whole vectors in loops: vector-aligned, never across a cache
  // line (a nibble table 4 bytes off its line cost the 4-bit bag ~15%).
  if (!p_.rands.empty()) {
    align(64);
    L(qiotatab_);  // 64-bit lane offsets of a random counter (random.cpp)
    for (int i = 0; i < W; ++i) dq(static_cast<uint64_t>(i));
  }
  if (p_.segment && p_.segment->has_nibbles()) {
    align(64);
    L(nibtab_);  // per lane i: the shift 4 * (i & 1), then the vpshufb control picking byte i / 2
    for (int i = 0; i < W; ++i) dd(i % 2 == 0 ? 0 : 4);
    for (int i = 0; i < W; ++i) dd(0x80808000u | static_cast<uint32_t>(i / 2));
    if (W == 16)  // the interleave of a pair's even / odd columns (vpermi2ps indices: lanes 0-15, 16-31)
      for (int half : {0, 8})
        for (int i = 0; i < W; ++i) dd(static_cast<uint32_t>((i % 2) * 16 + half + i / 2));
  }
  lane_tables();
  return code;
}

template <class Vmm>
const std::vector<Reg64>& Gen<Vmm>::ptr_pool() {
  static const std::vector<Reg64> p = {rbx, rsi, r8, r9, r10, r11, rcx};
  static_assert(kPipelinePointers == 7, "the pool above");
  return p;
}

// The registers a row's index arithmetic may use besides r8, which receives its value (the
// stream pointers are in their stack slots then).
template <class Vmm>
const std::vector<Reg64>& Gen<Vmm>::ieval_pool() {
  static const std::vector<Reg64> p = {r9, r10, r11, rsi, rbx, rcx};
  return p;
}

template <class Vmm>
int Gen<Vmm>::new_vslot() {
  if (nvslots_ >= kMaxVSlots) throw DeclineError("xbyak: too many spill/invariant slots");
  return nvslots_++;
}

template <class Vmm>
void Gen<Vmm>::prologue() {
  for (const auto& r : {rbx, rbp, r12, r13, r14, r15}) push(r);
  mov(rbp, rsp);
  if (p_.mode == Mode::Row && !p_.lanes)
    for (int addr : contiguous_load_streams()) {
      const int64_t rs = p_.row_stride.empty() ? 0 : p_.row_stride[p_.addrs[addr].base];
      if (rs > 0 && rs < (int64_t{1} << 26)) row_pf_.push_back({addr, rs});
    }
  vslot_base_ = static_cast<int>(((nptrs_ + row_pf_.size() + p_.bases.size()) * 8 + 63) / 64 * 64);
  sub(rsp, vslot_base_ + kMaxVSlots * 64 + 64);
  and_(rsp, -64);
  const int naddr = static_cast<int>(p_.addrs.size());
  for (int a = 0; a < naddr; ++a)
    if (p_.addrs[a].buffer == kScratchBuffer) {  // the same row for this row and the previous one
      mov(rax, qword[rdi + frame_off::scratch]);
      mov(qword[rsp + ptr_slot(a)], rax);
    }
}

template <class Vmm>
void Gen<Vmm>::epilogue() {
  if (uses_stream_) {  // order the write-combined stores before the pool's completion signal
    Label no_fence;    // (only when streaming was asked for: sfence waits for every store)
    cmp(qword[rdi + frame_off::stream], 0);
    je(no_fence, T_NEAR);
    sfence();
    L(no_fence);
  }
  mov(rsp, rbp);
  for (const auto& r : {r15, r14, r13, r12, rbp, rbx}) pop(r);
  vzeroupper();
  ret();
}

// ---- phases ----
template <class Vmm>
void Gen<Vmm>::phase(size_t ph, bool static_range) {
  const ir::Phase& P = k_.phases[ph];
  std::vector<PhaseItem> items;
  for (size_t s = 0; s < P.stores.size(); ++s) items.push_back({&P.stores[s], p_.stores[ph][s]});
  size_t last = 0;
  for (size_t q = 0; q < k_.phases.size(); ++q)
    if (k_.phases[q].over_reduce) last = q;
  prefetch_rows_ = p_.mode == Mode::Row && ph == last;
  if (P.over_reduce) loop_phase(items, P.accs, static_range);
  else once_phase(items);
}

// Phases [0, end) of a row: the online pair (Plan::online) as one loop, the others one by one.
template <class Vmm>
void Gen<Vmm>::row_phases(size_t end) {
  for (size_t ph = 0; ph < end; ++ph) {
    if (static_cast<int>(ph) == p_.online.phase) {  // this phase and the next, in one loop
      online_phase();
      ++ph;
      continue;
    }
    phase(ph, true);
  }
}

template <class Vmm>
void Gen<Vmm>::once_phase(const std::vector<PhaseItem>& items) {
  load_ptr_regs();
  std::vector<const ir::Expr*> roots;
  for (const auto& it : items) roots.push_back(it.store->value.get());
  eval(make_dag(roots, nullptr, items, {}), Eval{});
}

template <class Vmm>
void Gen<Vmm>::mark_variant(const ir::Expr* e, std::unordered_map<const ir::Expr*, bool>& memo) {
  if (memo.count(e)) return;
  bool v = false;
  if (opaque_value(e)) v = opaque_variant(e);
  for (const auto& a : e->args) {
    if (opaque_value(e)) break;
    mark_variant(a.get(), memo);
    v |= memo[a.get()];
  }
  memo[e] = v;
}

// Few vector instructions per element (no transcendental op): loop overhead matters.
template <class Vmm>
bool Gen<Vmm>::cheap_body(const std::vector<const ir::Expr*>& roots) const {
  std::unordered_set<const ir::Expr*> seen;
  int ops = 0;
  std::function<void(const ir::Expr*)> walk = [&](const ir::Expr* e) {
    if (!seen.insert(e).second || opaque_value(e)) return;
    if (e->kind == ExprKind::Op) ops += scratch_count(e) > 1 ? 16 : 1;  // a math function
    for (const auto& a : e->args) walk(a.get());
  };
  for (const auto* r : roots) walk(r);
  return ops <= 8;
}

// Independent accumulator sets for a loop over `accs`: up to 4, within a register budget that
// leaves the expression enough registers (the widest op needs 8).
template <class Vmm>
int Gen<Vmm>::unroll_for(const std::vector<int>& accs) const {
  const int per = acc_regs(accs);
  if (per == 0) return 1;
  const int budget = Z ? 12 : 6;
  const int u = std::max(1, std::min(4, budget / per));
  for (int a : accs)  // cascaded sums close blocks at multiples of U*W: a power of two
    if (u == 3 && k_.accs[a].kind == ir::AccKind::Sum) return 2;
  return u;
}

// Loop-invariant frontier (non-leaf invariant nodes used by variant nodes or roots): evaluated
// once into slots; returns node -> slot. With `recip` (not for lanes): a division by a row's sum
// of exps (softmax's exp(v - m) / s) becomes a product with 1/s, computed here once per loop;
// recip: the division -> the slot of 1/s. softmax [8,32000] in cache, 1 thread: 0.090 -> 0.078
// ms (a vdivps per vector: 2.7 ns each on the AVX-512 Xeon); out of cache within the noise.
template <class Vmm>
std::unordered_map<const ir::Expr*, int> Gen<Vmm>::hoist_invariants(const std::vector<const ir::Expr*>& roots,
                                                                    bool lanes,
                                                                    std::unordered_map<const ir::Expr*, int>* recip) {
  std::unordered_map<const ir::Expr*, bool> var;
  for (const auto* r : roots) mark_variant(r, var);
  std::unordered_map<const ir::Expr*, int> inv;
  std::vector<const ir::Expr*> frontier;
  auto consider = [&](const ir::Expr* e) {
    if (var[e] || e->kind == ExprKind::Const || e->kind == ExprKind::Acc || e->kind == ExprKind::Load || is_cmp(e))
      return;  // (an invariant random number goes to the frontier: computed once per loop)
    if (!inv.count(e)) {
      inv[e] = new_vslot();
      frontier.push_back(e);
    }
  };
  std::unordered_map<const ir::Expr*, int> recip_of;  // divisor -> slot of its reciprocal
  std::unordered_set<const ir::Expr*> seen;
  std::function<void(const ir::Expr*)> walk = [&](const ir::Expr* e) {
    if (!seen.insert(e).second || !var[e] || opaque_value(e)) return;
    if (recip && !lanes && e->kind == ExprKind::Op && e->op == Op::Div && sum_of_exps_at_max(e->args[1].get())) {
      const ir::Expr* s = e->args[1].get();
      if (!recip_of.count(s)) recip_of[s] = new_vslot();
      (*recip)[e] = recip_of[s];
    }
    for (const auto& a : e->args) {
      consider(a.get());
      walk(a.get());
    }
  };
  for (const auto* r : roots) {
    consider(r);
    walk(r);
  }
  if (!frontier.empty()) {
    Eval pre;
    pre.lanes = lanes;
    eval(make_dag(frontier, nullptr, {}, {}, &inv), pre);  // inv: exactly the frontier
  }
  for (const auto& [s, slot] : recip_of) {  // (registers 0 and 1: nothing is live before a loop)
    typename Dag::Node leaf;
    leaf.e = s;
    leaf.leaf = true;
    emit_leaf(leaf, Vmm(0), Eval{});
    vmovups(Vmm(1), cst(1.0f));
    vdivps(Vmm(1), Vmm(1), Vmm(0));
    vmovups(ptr[rsp + vslot_off(slot)], Vmm(1));
  }
  return inv;
}

// The previous row's store loop as a DAG for a pipelined loop (Plan::pipeline); its invariants
// (e.g. log(s)) are computed now, from the previous row's accumulators.
template <class Vmm>
typename Gen<Vmm>::Dag Gen<Vmm>::prev_row_dag(const std::vector<PhaseItem>& items) {
  prev_row_ = true;
  std::vector<const ir::Expr*> roots;
  for (const auto& it : items) roots.push_back(it.store->value.get());
  std::unordered_map<const ir::Expr*, int> recip;
  std::unordered_map<const ir::Expr*, int> inv = hoist_invariants(roots, false, &recip);
  Dag d = make_dag(roots, &inv, items, {}, nullptr, &recip);
  prev_row_ = false;
  return d;
}

// One vector of a joined loop (pipeline_rows): this row's DAG, whose own stores (the scratch row)
// never stream, then the previous row's stores. With Plan::reuse the previous row's stores come
// first: they read the scratch row this row's loop overwrites. Otherwise this row's loads come
// first: a load after a store of the same iteration at nearly the same address modulo 4 KiB
// (rows 4 KiB apart) waits for it (4K aliasing, streaming_check): log_softmax [4096,512] with
// the input at 16 mod 4096, 1 thread on the AMD EPYC: 4.67 -> 3.5 ms.
template <class Vmm>
void Gen<Vmm>::eval_joined(const Dag& dag, const Dag* prev, const Eval& ev) {
  const bool streaming = stream_;
  auto previous_row = [&] {
    prev_row_ = true;
    stream_ = streaming;
    eval(*prev, ev);
    prev_row_ = false;
  };
  const bool prev_first = prev && p_.reuse;
  if (prev_first) previous_row();
  if (prev) stream_ = false;
  eval(dag, ev);
  if (prev && !prev_first) previous_row();
  stream_ = streaming;
}

// Emits `loop` for a joined loop: twice when the previous row's stores may stream (streaming
// when the host asks for it and that row's store addresses are aligned, regular otherwise, as
// loop_phase does for a store loop of its own), once otherwise.
template <class Vmm>
void Gen<Vmm>::prev_row_variants(const std::vector<PhaseItem>* prev, const std::function<void()>& loop) {
  if (!prev || !streaming_ok(*prev, {})) {
    loop();
    return;
  }
  Label regular, done;
  xor_(r14d, r14d);
  prev_row_ = true;
  streaming_check(*prev, regular);
  prev_row_ = false;
  stream_ = true;
  loop();
  stream_ = false;
  jmp(done, T_NEAR);
  L(regular);
  loop();
  L(done);
}

// `prev`: the previous row's store loop, run in this loop (pipeline_rows).
template <class Vmm>
void Gen<Vmm>::loop_phase(const std::vector<PhaseItem>& items, const std::vector<int>& accs, bool static_range,
                          const std::vector<PhaseItem>* prev) {
  load_ptr_regs();
  std::vector<const ir::Expr*> roots;
  for (const auto& it : items) roots.push_back(it.store->value.get());
  for (int a : accs) roots.push_back(k_.accs[a].value.get());
  std::unordered_map<const ir::Expr*, int> recip;
  std::unordered_map<const ir::Expr*, int> inv = hoist_invariants(roots, false, &recip);
  const Dag pdag = prev ? prev_row_dag(*prev) : Dag{};
  // Loops with accumulators are unrolled U times, copy j using accumulator set j: a reduction
  // is then bound by throughput, not by the latency of one add chain. The order stays fixed
  // (set j takes vectors j, j+U, ...; then the sets are combined) for any chunking.
  // Cheap pointwise bodies are unrolled too: in cache, the loop's own instructions and the
  // per-vector prefetches are then a smaller share (add [256,256]: see README).
  const Dag dag = make_dag(roots, &inv, items, accs, nullptr, &recip);  // evaluated once per vector copy below
  const bool cheap = cheap_body(roots);
  // Math-heavy bodies without accumulators take two or four vectors per iteration when
  // interleaving them needs no spill (below); cheap pointwise bodies four, one after the other.
  // AVX-512 keeps its measured code (one math vector at a time, sequential reduction copies):
  // interleaving is AVX2 only (interleave.cpp) and has not run on an AVX-512 machine.
  int U = !accs.empty() ? unroll_for(accs) : !cheap ? (Z ? 1 : 2) : p_.mode == Mode::Pointwise ? 4 : 1;
  // Only loops with much math per vector prefetch (see prefetch_streams); the hardware
  // prefetcher keeps up with cheap ones, which would only pay the extra instructions.
  const bool prefetch = prefetch_rows_ || (!cheap && p_.mode == Mode::Pointwise && !p_.cached_rows);
  // AVX2 streams only cheap bodies. A ymm streaming store fills half a line, the other half
  // comes one iteration later; on the 2-vCPU AMD EPYC (README "xbyak backend") math-heavy loops
  // over 16M floats ran 12-15% slower streaming (gelu/tanh/exp: 40.1/21.0/27.6 ms against
  // 34.5/18.3/24.1 ms) while y = 2x gained a third (8.4 against 12.4 ms). A zmm store writes a
  // whole line: AVX-512 streams any body (measured on the AVX-512 Xeon).
  const bool may_stream = streaming_ok(items, accs) && (Z || cheap);
  pin_accs(accs, U);
  const bool dynamic = !static_range || p_.mode == Mode::Global;
  cascade_begin(sum_regs(accs), int64_t{U} * W, dynamic ? kGlobalBlock : p_.reduce_n / (U * W) * (U * W));
  // One vector (copy j of an unrolled iteration at r14 + j*W); spill slots are reused
  // across copies (nothing in them outlives one copy).
  auto body = [&](bool masked, int j) {
    disp_ = j * VB;
    use_acc_set(j);
    const int slots = nvslots_;
    if (!masked && prefetch) prefetch_streams();
    Eval ev;
    ev.in_loop = true;
    ev.masked = masked;
    eval_joined(dag, prev ? &pdag : nullptr, ev);
    nvslots_ = slots;
    disp_ = 0;
  };
  // A loop with math keeps its constants in the registers its body leaves free (invariants_in_regs).
  // Row loops too since session 9: in cache, 1 thread, 5 interleaved rounds, log_softmax
  // [512,512] 0.089 -> 0.066 ms, softmax 0.079 -> 0.062, softmax [4096,64] 0.118 -> 0.109 (AVX2
  // alike); long rows (log_softmax [256,4096], softmax [64,32000]) and out of cache: within noise.
  // The U vectors of an unrolled iteration: interleaved (interleave()) when the body has math
  // and that fits the registers, else one after the other.
  bool wide = false;
  Dag wdag;
  auto group = [&] {
    if (!wide) {
      for (int j = 0; j < U; ++j) body(false, j);
      return;
    }
    const int slots = nvslots_;
    if (prefetch)
      for (int j = 0; j < U; ++j) {
        disp_ = j * VB;
        prefetch_streams();
      }
    Eval ev;
    ev.in_loop = true;
    eval(wdag, ev);
    nvslots_ = slots;
    disp_ = 0;
    if (!acc_sets_.empty()) use_acc_set(0);
  };
  if (!Z && U > 1 && !prev && (!cheap || !accs.empty())) {
    // Without accumulators the widest of 4 and 2 copies that needs no spill; with them, the U
    // sets pinned above. Math vectors one after the other gain nothing: U = 1 then.
    const std::vector<int> widths = accs.empty() ? std::vector<int>{kMaxGroup, 2} : std::vector<int>{U};
    for (int u : widths) {
      U = u;
      wdag = interleave(dag, U);
      wide = true;
      if (spill_free(group)) break;
      wide = false;
    }
    if (!wide && accs.empty()) U = 1;
    if (accs.empty()) pin_accs(accs, U);  // (U empty sets: body(masked, j) makes set j current)
  }
  if (!cheap) invariants_in_regs([&] { wide ? group() : body(false, 0); });
  if (static_range && p_.mode != Mode::Global && may_stream) {
    Label regular, done;  // a store phase of a row kernel: streaming per row, when aligned
    xor_(r14d, r14d);
    streaming_check(items, regular);
    stream_ = true;
    static_loop(body, 1, group);
    stream_ = false;
    jmp(done, T_NEAR);
    L(regular);
    static_loop(body, U, group);
    L(done);
  } else if (static_range && p_.mode != Mode::Global) {
    prev_row_variants(prev, [&] { static_loop(body, U, group); });
  } else {
    Label top, single, tail, done;
    mov(r14, qword[rdi + frame_off::lo]);
    mov(r15, qword[rdi + frame_off::hi]);
    if (may_stream) {  // whole vectors while aligned; the rest below
      Label regular;
      streaming_check(items, regular);
      stream_ = true;
      Label ntop, ndone;
      L(ntop);
      lea(rax, ptr[r14 + W]);
      cmp(rax, r15);
      jg(ndone, T_NEAR);
      body(false, 0);
      add(r14, W);
      jmp(ntop, T_NEAR);
      L(ndone);
      stream_ = false;
      L(regular);
    }
    if (U > 1) {
      L(top);
      lea(rax, ptr[r14 + U * W]);
      cmp(rax, r15);
      jg(single, T_NEAR);
      group();
      add(r14, U * W);
      cascade_fold();
      jmp(top, T_NEAR);
    }
    L(single);
    lea(rax, ptr[r14 + W]);
    cmp(rax, r15);
    jg(tail, T_NEAR);
    body(false, 0);
    add(r14, W);
    if (U == 1) cascade_fold();  // (after U > 1 iterations this loop never reaches a block end)
    jmp(single, T_NEAR);
    L(tail);
    mov(rax, r15);
    sub(rax, r14);
    jle(done, T_NEAR);
    set_mask_rax();
    body(true, 0);
    L(done);
  }
  ireg_.clear();
  cascade_end();
  combine_acc_sets(accs);
  for (int a : accs) finish_acc(a);
  release_accs();
}

// k1 (AVX-512) or Vmm(kMaskReg) (AVX2) = the first rax lanes (1..W-1); clobbers rax, rdx.
template <class Vmm>
void Gen<Vmm>::set_mask_rax() {
  if constexpr (Z) {
    bzhi(eax, dword[rip + masktab_], eax);
    kmovw(k1, eax);
  } else {
    lea(rdx, ptr[rip + masktab_ + 32]);
    shl(rax, 2);
    sub(rdx, rax);
    vmovups(Vmm(kMaskReg), ptr[rdx]);
  }
}

// Addresses (p_.addrs indices, ascending: emission order independent of the hash map's) of the
// loads that advance one element per element (not the scratch row of Plan::reuse: in cache).
template <class Vmm>
std::vector<int> Gen<Vmm>::contiguous_load_streams() const {
  std::vector<int> seen;
  for (const auto& [e, a] : p_.loads)
    if (a.coeff == 1 && p_.addrs[a.addr].buffer != kScratchBuffer &&
        std::find(seen.begin(), seen.end(), a.addr) == seen.end())
      seen.push_back(a.addr);
  std::sort(seen.begin(), seen.end());
  return seen;
}

// Software prefetch of the contiguous load streams. Measured on this 2-core AVX-512 VM (README
// "xbyak backend"): a compute-heavy loop (gelu, tanh/sigmoid chains: 20-60 vector ops per
// vector) has too few loads in its out-of-order window to keep enough lines in flight, and
// memory time adds to compute time instead of hiding behind it (gelu 16M: 12.6 -> 7.7 ms).
// Pointwise and `along_row` (the online softmax loop, which reads a long row from memory while
// doing an exp per element): 8 KiB ahead in all, split over the streams (2-4 KiB each). Rows:
// the last loop over a row fetches the row two rows ahead, so the next rows arrive during this
// row's math. (Session 7 tried the first loop and prefetcht2 on the Xeon with the 480 MiB L3:
// out of L3 they measured 7-10% better in one phase of the host and 0-5% worse in another, and
// layer_norm [4096,1024] / [32768,512], whose data sit in that L3, 20-45% slower: reverted.)
template <class Vmm>
void Gen<Vmm>::prefetch_streams(bool along_row) {
  if (p_.mode == Mode::Row && !along_row) {  // Frame::pf_rows rows ahead (compute_addrs)
    for (size_t i = 0; i < row_pf_.size(); ++i) {
      mov(rax, qword[rsp + pf_slot(i)]);
      prefetcht0(elem(rax, row_pf_[i].first));
    }
    return;
  }
  const std::vector<int> seen = contiguous_load_streams();
  const int nstreams = static_cast<int>(seen.size());
  const int64_t pointwise_dist = nstreams ? std::clamp(8192 / nstreams, 2048, 4096) : 0;
  for (int addr : seen) {
    Reg64 b = stream(addr);
    prefetcht0(elem(b, addr, static_cast<int>(pointwise_dist)));
  }
}

// Static reduce loop (row kernels): n = reduce_n vectors, unrolled U times (group() emits the U
// vectors of one iteration; with U = 1 body(false, 0) does), masked tail.
template <class Vmm>
template <class Body, class Group>
void Gen<Vmm>::static_loop(const Body& body, int U, const Group& group) {
  const int64_t n = p_.reduce_n, nfull = n / W, rem = n % W;
  const int64_t iters = nfull / U;  // unrolled iterations, then nfull % U single vectors
  auto unrolled = [&] {
    if (U == 1) body(false, 0);
    else group();
  };
  xor_(r14d, r14d);
  if (iters == 1) {
    unrolled();
  } else if (iters > 1) {
    Label top;
    L(top);
    unrolled();
    add(r14, U * W);
    cascade_fold();
    cmp(r14, static_cast<int>(iters * U * W));
    jl(top, T_NEAR);
  }
  if (iters > 0 && nfull % U) mov(r14, iters * U * W);
  for (int j = 0; j < nfull % U; ++j) body(false, j);
  if (rem) {
    mov(r14, nfull * W);
    mov(eax, static_cast<int>(rem));
    set_mask_rax();
    body(true, 0);
  }
}

// Streaming stores: a phase without accumulators whose every store is a full contiguous
// vector may write with non-temporal stores, which skip the read-for-ownership of the
// destination lines (a quarter of the traffic of c = a*b). Taken at run time when the host
// asks for it (Frame::stream: the outputs are too big to be read back from cache) and every
// store address is vector aligned; masked tails use regular stores. The epilogue fences.
template <class Vmm>
bool Gen<Vmm>::streaming_ok(const std::vector<PhaseItem>& items, const std::vector<int>& accs) const {
  if (p_.mode == Mode::Global || p_.scalar || !accs.empty() || items.empty()) return false;
  for (const auto& it : items)  // (narrow stores: vmovdqu of a converted vector, narrow.cpp)
    if (it.acc.coeff != 1 || p_.addrs[static_cast<size_t>(it.acc.addr)].dtype != DType::F32) return false;
  return true;
}

// Jumps to `regular` unless streaming was asked for and every store address at r14 is aligned.
template <class Vmm>
void Gen<Vmm>::streaming_check(const std::vector<PhaseItem>& items, Label& regular) {
  uses_stream_ = true;
  cmp(qword[rdi + frame_off::stream], 0);
  je(regular, T_NEAR);
  xor_(edx, edx);
  for (const auto& it : items) {
    Reg64 b = stream(it.acc.addr);
    lea(rax, ptr[b + r14 * 4]);
    or_(rdx, rax);
  }
  test(edx, VB - 1);
  jnz(regular, T_NEAR);
  Label no_alias_check;  // (the host asks for the check on CPUs where aliasing stalls: stream_alias_check)
  test(byte[rdi + frame_off::stream], static_cast<uint8_t>(kStreamAliasCheck));
  jz(no_alias_check, T_NEAR);
  // 4K aliasing: a load whose address is up to 4 vectors behind a store's modulo 4 KiB looks,
  // to the memory disambiguation (which compares the low 12 address bits), like a read of that
  // recent store and waits until it is written; a streaming store takes far longer to be written
  // than a regular one. Measured on a 2-vCPU AMD EPYC (AVX2), y = 2x over 16M floats: 8 ms
  // streaming, 19 ms streaming with the input 16-32 bytes behind the output modulo 4 KiB
  // (std::vector data is at 16 mod 4096, kfuse's pool buffers at 64), 11-12 ms with regular
  // stores at any offset. So those launches store regularly: (store - load) mod 4096 in
  // [1, 4 vectors] for any contiguous load stream of the loop. When these are the previous row's
  // stores in a joined loop (prev_row_ is set), [-(1 vector - 1), 4 vectors] for the current
  // row's loads: rows of 1024 floats are 4 KiB apart, so an input at 16 mod 4096 and an output
  // at 0 alias row to row. Measured (log_softmax [4096,1024], input at 16 mod 4096, 1 thread,
  // AMD EPYC): streaming 18.5 ms before eval_joined put this row's loads first, 10.1 ms after,
  // 6.6 ms with regular stores either way.
  const bool was_prev = prev_row_;
  const std::vector<int> loads = contiguous_load_streams();
  for (const auto& it : items)
    for (int row = 0; row < (was_prev ? 2 : 1); ++row)
      for (int a : loads) {
        const bool wide = was_prev && row == 0;
        mov(rdx, stream(it.acc.addr));
        prev_row_ = was_prev && row == 1;
        sub(rdx, stream(a));
        prev_row_ = was_prev;
        add(edx, wide ? VB - 1 : -1);
        and_(edx, 4095);
        cmp(edx, wide ? 5 * VB : 4 * VB);
        jb(regular, T_NEAR);
      }
  L(no_alias_check);
}

// Every member defined above (lanes.cpp instantiates its own).
template class Gen<Xbyak::Zmm>;
template class Gen<Xbyak::Ymm>;

namespace {

template <class Vmm>
Code emit_isa(const ir::Kernel& k, const Plan& p) {
  try {
    // The code is assembled in a buffer kept per thread: a fresh 1 MiB allocation per kernel
    // was an mmap, page faults on every page written and an munmap (~5% of a kernel's emit time).
    // Page aligned like xbyak's own buffers (align() pads relative to the absolute address).
    constexpr size_t kPage = 4096;
    thread_local std::unique_ptr<uint8_t[]> buf(new uint8_t[Gen<Vmm>::kMaxCodeBytes + kPage]);
    uint8_t* top = buf.get() + (kPage - reinterpret_cast<uintptr_t>(buf.get()) % kPage) % kPage;
    Gen<Vmm> g(k, p, top);
    size_t code = g.generate();
    g.ready();
    Code c;
    c.code_bytes = code;
    c.bytes.assign(g.getCode(), g.getCode() + g.getSize());
    return c;
  } catch (const Xbyak::Error& e) { throw DeclineError(std::string("xbyak: emitter error: ") + e.what()); }
}

}  // namespace

// A limit hit by a faster strategy (registers, slots, code size) falls back to a plainer one:
// rows across lanes -> per-row code; pipelined rows -> one row at a time; the online softmax
// loop -> its two loops.
template <class Vmm>
Code emit_with_fallback(const ir::Kernel& k, const Plan& plan) {
  Plan plainer = plan;
  if (plan.lanes) {
    plainer.lanes = false;
  } else if (plan.pipeline) {
    plainer.pipeline = false;
  } else if (plan.online.phase >= 0) {
    plainer.online = {};
  } else {
    return emit_isa<Vmm>(k, plan);
  }
  try {
    return emit_isa<Vmm>(k, plan);
  } catch (const Avx2OnlyError&) {
    throw;  // no plainer zmm plan helps: the backend takes the ymm code
  } catch (const DeclineError&) { return emit_with_fallback<Vmm>(k, plainer); }
}

Code emit(const ir::Kernel& k, const Plan& plan, Isa isa) {
  return isa == Isa::Avx512 ? emit_with_fallback<Xbyak::Zmm>(k, plan) : emit_with_fallback<Xbyak::Ymm>(k, plan);
}

Code emit_code(const ir::Kernel& k, const Plan& plan, Isa& isa) {
  try {
    return emit(k, plan, isa);
  } catch (const Avx2OnlyError&) {
    isa = Isa::Avx2;  // (an AVX-512 machine runs AVX2 code: the ymm emitter takes what the zmm one does not yet)
    return emit(k, plan, isa);
  }
}

}  // namespace kfuse::detail::xb
