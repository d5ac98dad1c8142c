// xbyak backend: the code generator class, private to jit/xbyak/ (includes xbyak).
//
// Gen<Vmm> (Vmm = Xbyak::Zmm on AVX-512, Xbyak::Ymm on AVX2) emits one kernel. It is declared
// here because its members are defined in several files:
//   emitter.cpp  everything shared by every strategy: prologue/epilogue, stack slots,
//                constants, the pointwise/row/global phase loops, streaming stores, prefetch;
//   rows.cpp     the row loop, stream pointers per row, prefetch slots of the next rows;
//   accumulators.cpp  accumulator registers: identities, folds, unrolled sets, horizontal sums;
//   eval.cpp     expression evaluation: the DAG of a phase body, the register allocator (Belady
//                spilling), instruction selection per op (the math injectors);
//   index_eval.cpp  integer index arithmetic in general registers (rows and segments);
//   interleave.cpp  U copies of a loop body interleaved node by node, and their math functions
//                emitted instruction by instruction over register groups (AVX2);
//   lanes.cpp    rows across lanes (Plan::lanes): groups of W rows, lane i owning a row, the
//                reduce index unrolled; gathers/scatters, stack tiles and their transposes;
//   index_masks.cpp  comparisons of index expressions as lane masks, loads under them;
//   random.cpp   f32 uniform random numbers: the counter hash in 64-bit lanes;
//   online.cpp   online softmax (Plan::online: max and exp-sum in one loop) and pipelined rows
//                (Plan::pipeline: row i's loop also runs row i-1's stores).
// The two talk through a narrow interface, marked below: the lane path uses the stack slots,
// streams, constants, eval/hoist_invariants and the accumulator pins of the emitter; the
// allocator calls the lane path back for the leaves and stores of a lane Eval (lane_load,
// lane_store, lane_acc). Each .cpp explicitly instantiates what it defines for both Vmm.
#pragma once
#include <xbyak/xbyak.h>

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "injectors.hpp"
#include "xbyak_backend.hpp"

namespace kfuse::detail::xb {

using ir::ExprKind;
using ir::ExprRef;
using Xbyak::Address;
using Xbyak::Label;
using Xbyak::Reg64;

template <class Vmm>
class Gen : public Xbyak::CodeGenerator {
 public:
  static constexpr bool Z = std::is_same_v<Vmm, Xbyak::Zmm>;
  static constexpr int W = Z ? 16 : 8;
  static constexpr int VB = W * 4;
  static constexpr int NREG = Z ? 32 : 16;
  static constexpr int kMaskReg = NREG - 1;  // AVX2 tail mask
  static constexpr int kAccTmp = NREG - 2;   // accumulator update scratch
  static constexpr int kMaxVSlots = 256;
  static constexpr int kLaneSubs = 2;  // rows across lanes: groups of W rows per iteration

  static constexpr size_t kMaxCodeBytes = 1 << 20;
  /// `buf`: kMaxCodeBytes of writable memory for the code (the result is copied out of it).
  Gen(const ir::Kernel& k, const Plan& p, uint8_t* buf)
      : CodeGenerator(kMaxCodeBytes, buf),
        k_(k),
        p_(p),
        inj_{*this},
        nptrs_(stream_pointers(p, p.pipeline, &prev_ptr_)) {}

  // constants (full vectors, after the code, or a register in a loop that holds them:
  // invariants_in_regs, loop_invariants.cpp)
  // and the injectors' select (see injectors.hpp). A Cst is an operand of either kind.
  struct Cst {
    Address mem;
    Vmm reg;
    bool in_reg = false;
    operator const Xbyak::Operand&() const {
      if (in_reg) return reg;
      return mem;
    }
  };
  Cst cstu(uint32_t bits);
  Cst cst(float v);
  void select(const Vmm& dst, const Vmm& a, const Xbyak::Operand& b, uint8_t pred, const Xbyak::Operand& v,
              const Vmm& tmp);
  /// Emits the kernel and its constant tables; returns the size of the instructions.
  size_t generate();

 private:
  struct PhaseItem {
    const ir::Store* store;
    Access acc;
  };
  // How the leaves and root actions of one DAG evaluation are emitted.
  struct Eval {
    bool in_loop = false;
    bool masked = false;
    bool lanes = false;  ///< rows across lanes: loads gather, stores scatter, accs from slots
  };
  // An expression DAG linearised for the register allocator (eval), with its root actions: built
  // once (make_dag) and evaluated once per emitted copy (unrolled vectors, masked tail, each
  // reduce index of a lane phase). Nodes are in evaluation order; operands and uses are node
  // positions, so that eval needs no lookups by pointer.
  struct Dag {
    struct Node {
      const ir::Expr* e = nullptr;
      bool leaf = false;
      int inv = -1;             // invariant leaf: the slot it is loaded from
      int to_slot = -1;         // hoisted value: the slot it is saved to
      int last = 0;             // last position that uses it (its own when none)
      int arg0 = 0, nargs = 0;  // operand positions: args[arg0 .. arg0 + nargs)
      int use0 = 0, nuses = 0;  // positions that use it, ascending: uses[use0 .. use0 + nuses)
      int st0 = 0, nst = 0;     // stores of this value: stores[st0 .. st0 + nst)
      int acc0 = 0, nacc = 0;   // accumulators fed by it: accs[acc0 .. acc0 + nacc)
      int recip = -1;           // x / s as x * (1/s): the slot holding 1/s (s is then not an operand)
      int copy = -1;            // interleave(): the vector copy it belongs to (-1: shared, or not interleaved)
    };
    std::vector<Node> nodes;
    std::vector<int> args, uses, accs;
    std::vector<const PhaseItem*> stores;
  };

  const ir::Kernel& k_;
  const Plan& p_;
  Injectors<Gen, Vmm> inj_;
  std::vector<int> prev_ptr_;    // stream_pointers: per address, the previous row's pointer
  int nptrs_;                    // ... and the pointers in all
  std::vector<uint32_t> cvals_;  // constants in ctab_ (a few dozen: found by a linear search)
  // invariants_in_regs (loop_invariants.cpp): the invariants held in registers in the loop being
  // emitted (key, register); the uses counted by its dry run of a loop body, and the highest
  // register eval took. A key is the kind in the high half, a constant's bits, an accumulator's
  // index in Frame::accs or a slot in the low half.
  enum class InvKind : uint32_t { Const, Acc, Slot };
  static uint64_t inv_key(InvKind k, uint32_t v) { return uint64_t{static_cast<uint32_t>(k)} << 32 | v; }
  int inv_reg(uint64_t key);
  int leaf_reg(const typename Dag::Node& n, const Eval& ev);
  Cst const_operand(const ir::Expr* e);
  int acc_index(const ir::Expr* e) const;
  int acc_reg(int index);
  void acc_broadcast(const Vmm& d, int index);
  Cst slot_operand(int s);
  std::vector<std::pair<uint64_t, int>> ireg_;
  std::vector<std::pair<uint64_t, int>> iuse_;
  bool dry_ = false;
  int max_reg_ = -1;
  Label ctab_, masktab_, qiotatab_, boundtab_;
  Label nibtab_;  // segment kernels with nibble rows: the lanes' shifts 0, 4, 0, 4, ..., a byte shuffle (seg_leaf)
  int vslot_base_ = 0;
  int nvslots_ = 0;
  bool prefetch_rows_ = false;                   // the loop being emitted prefetches the rows ahead
  std::vector<std::pair<int, int64_t>> row_pf_;  // rows: the prefetched streams (address, row stride)
  // Pinned accumulator registers (and NaN markers for Max/Min) of the set being emitted; a loop
  // unrolled U times keeps U independent sets (acc_sets_) so that the adds of consecutive vectors
  // do not wait on each other's latency, combined in a fixed order after the loop.
  std::map<int, int> acc_reg_, acc_nan_;
  std::vector<std::pair<std::map<int, int>, std::map<int, int>>> acc_sets_;
  // Cascaded sums (accumulators.cpp): the registers of the loop being emitted that cascade, its
  // levels (level l >= 1 closes every casc_base_ * kCascadeFan^l elements), their first slot.
  std::vector<int> casc_regs_;
  int casc_levels_ = 0, casc_slot0_ = 0;
  int64_t casc_base_ = 0;
  int disp_ = 0;              // byte displacement of the vector being emitted within an unrolled iteration
  bool stream_ = false;       // emit full-vector stores as non-temporal (streaming) stores
  bool uses_stream_ = false;  // some path streams: the epilogue fences

  // ---- emitter.cpp (stream, compute_addrs, load_ptr_regs: rows.cpp): services for the lane path ----
  int vslot_off(int s) const { return vslot_base_ + s * 64; }  // byte offset of vector slot s from rsp
  int new_vslot();
  Reg64 stream(int addr);
  void compute_addrs();
  void load_ptr_regs();
  Dag make_dag(const std::vector<const ir::Expr*>& roots, const std::unordered_map<const ir::Expr*, int>* inv,
               const std::vector<PhaseItem>& items, const std::vector<int>& accs,
               const std::unordered_map<const ir::Expr*, int>* to_slot = nullptr,
               const std::unordered_map<const ir::Expr*, int>* recip = nullptr) const;
  static void link(Dag& g, const std::vector<std::vector<int>>& args);
  Dag interleave(const Dag& g, int U) const;
  bool math_group_op(const ir::Expr* e) const;
  void emit_math_group(const ir::Expr* e, const Vmm* d, int n, const Vmm* scr);
  void eval(const Dag& g, const Eval& ev);
  int spills_ = 0;                     // values eval has spilled to a stack slot (spill_free counts them)
  std::vector<int> ev_reg_, ev_slot_;  // eval's per-node register and spill slot (kept: no allocation per call)
  std::unordered_map<const ir::Expr*, int> hoist_invariants(const std::vector<const ir::Expr*>& roots, bool lanes,
                                                            std::unordered_map<const ir::Expr*, int>* recip = nullptr);
  void pin_accs(const std::vector<int>& accs, int nsets = 1);
  void release_accs();
  int acc_regs(const std::vector<int>& accs) const;

  // ---- emitter.cpp (row_steps, prefetch_slots, row_loop, next_cursor: rows.cpp): the rest ----
  const std::vector<Reg64>& ptr_pool();
  const std::vector<Reg64>& ieval_pool();
  int ptr_slot(int addr) const { return addr * 8; }
  int pf_slot(size_t i) const { return (nptrs_ + static_cast<int>(i)) * 8; }
  // Bytes a base moves per step of the innermost row index (pointwise row walk), after pf slots.
  int step_slot(size_t base) const { return (nptrs_ + static_cast<int>(row_pf_.size() + base)) * 8; }
  std::vector<ExprRef> row_steps() const;
  void prefetch_slots();
  void prologue();
  void epilogue();
  void row_loop(const std::function<void()>& body);
  void next_cursor();
  void ieval(const ir::Expr* e, const Reg64& d, std::vector<Reg64> f);  // index_eval.cpp
  void phase(size_t ph, bool static_range);
  void emit_leaf(const typename Dag::Node& n, const Vmm& d, const Eval& ev);
  // ---- narrow.cpp: u8/i8/f16/bf16 streams (Addr::dtype), their values in f32 lanes ----
  int esz(int addr) const {  // (an index stream's "pointer" is its base value: size 1)
    const Addr& a = p_.addrs[static_cast<size_t>(addr)];
    return a.buffer == kIndexBuffer ? 1 : static_cast<int>(dtype_size(a.dtype));
  }
  /// The vector of stream `addr` at column r14 (+ disp_ + `extra`, bytes of f32 lanes, scaled to
  /// the stream's element size), through its base register b.
  Address elem(const Reg64& b, int addr, int extra = 0) const {
    const int s = esz(addr);
    return ptr[b + r14 * s + (disp_ + extra) / 4 * s];
  }
  void narrow_load(const Vmm& d, const Access& a, bool broadcast, bool masked);
  void narrow_store(const Access& a, const Vmm& v, bool scalar, bool masked);
  void narrow_round(DType to, const Vmm& d, const Vmm& a, const Vmm* t);
  void narrow_tail_copy(const Address& at, int slot, int esize, bool to_stack);
  // ---- index_masks.cpp: comparisons of index expressions as masks, loads under them ----
  bool is_cmp(const ir::Expr* e) const { return p_.cmps.count(e) > 0; }
  bool is_masked_load(const ir::Expr* e) const {
    return e->kind == ir::ExprKind::Load && e->args.size() > 1 && !p_.segment && p_.loads.count(e);
  }
  void cmp_mask(const Vmm& t, const IndexCmp& c);
  void masked_load(const Vmm& d, const ir::Expr* e, const Vmm& mask, bool tail);
  // ---- random.cpp: f32 uniform random numbers (Rand) ----
  bool is_rand(const ir::Expr* e) const { return p_.rands.count(e) > 0; }
  void rand_uniform(const Vmm& d, const RandLeaf& r, const Vmm* t);
  void mix64_lanes(const Vmm& x, const Vmm& t, const Vmm& u);
  /// An expression the loop emitter treats as a unit whose variance is its own (its operands are
  /// index expressions, not values): loads, index comparisons, random numbers.
  bool opaque_value(const ir::Expr* e) const { return e->kind == ir::ExprKind::Load || is_cmp(e) || is_rand(e); }
  bool opaque_variant(const ir::Expr* e) const {
    if (e->kind == ir::ExprKind::Load) return p_.loads.at(e).coeff != 0;
    if (is_cmp(e)) return p_.cmps.at(e).coeff != 0;
    return p_.rands.at(e).coeff != 0;
  }
  void truth(const Vmm& d, const ir::Expr* arg, const Vmm& v);
  void cmp_to_mask(const Vmm& d, const Vmm& a, const Xbyak::Operand& b, uint8_t pred);
  void blend(const Vmm& d, const Vmm& mask, const Vmm& if_true, const Vmm& if_false);
  bool nonpositive(const ir::Expr* e) const;
  bool minus_row_max(const ir::Expr* e) const;
  bool sum_of_exps_at_max(const ir::Expr* s) const;
  void emit_op(const ir::Expr* e, const Vmm& d, const int* o, int nopr, const Vmm* t);
  void root_actions(const Dag& g, const typename Dag::Node& n, const Vmm& v, const Eval& ev);
  bool sum_from_memory(int a, const typename Dag::Node& n, const Eval& ev);
  float identity(ir::AccKind k);
  void accumulate(int a, const Vmm& v0, bool masked);
  void finish_acc(int a);
  void once_phase(const std::vector<PhaseItem>& items);
  void mark_variant(const ir::Expr* e, std::unordered_map<const ir::Expr*, bool>& memo);
  void use_acc_set(int s);
  void combine_acc_sets(const std::vector<int>& accs);
  void cascade_begin(const std::vector<int>& regs, int64_t base, int64_t extent);
  std::vector<int> sum_regs(const std::vector<int>& accs) const;
  Address cascade_slot(int level, int i);
  void cascade_fold();
  void cascade_scale(const Vmm& f, const Vmm& tmp);
  void cascade_end();
  bool cheap_body(const std::vector<const ir::Expr*>& roots) const;
  void invariants_in_regs(const std::function<void()>& body, int busy_below = 0);
  bool spill_free(const std::function<void()>& body);
  int unroll_for(const std::vector<int>& accs) const;
  void loop_phase(const std::vector<PhaseItem>& items, const std::vector<int>& accs, bool static_range,
                  const std::vector<PhaseItem>* prev = nullptr);
  Dag prev_row_dag(const std::vector<PhaseItem>& items);
  void eval_joined(const Dag& dag, const Dag* prev, const Eval& ev);
  void prev_row_variants(const std::vector<PhaseItem>* prev, const std::function<void()>& loop);
  void row_phases(size_t end);
  void prefetch_streams(bool along_row = false);
  std::vector<int> contiguous_load_streams() const;
  template <class Body, class Group>
  void static_loop(const Body& body, int U, const Group& group);
  bool streaming_ok(const std::vector<PhaseItem>& items, const std::vector<int>& accs) const;
  void streaming_check(const std::vector<PhaseItem>& items, Label& regular);
  void set_mask_rax();                           // tail mask for rax (1..W-1) remaining lanes
  void hreduce(ir::AccKind kind, const Vmm& v);  // lanes of v folded into Xmm(0) (clobbers 0, 1)

  // ---- online.cpp: online softmax (Plan::online) ----
  void pipeline_rows();  // Mode::Row with Plan::pipeline: the whole row loop
  void online_phase(const std::vector<PhaseItem>* prev_stores = nullptr);
  void online_block(const Dag& dag, const std::vector<int>& disps, bool masked, const Dag* prev);
  void online_finish();
  void capture(const Vmm& v, bool masked);            // accumulate() of the max accumulator in online_phase
  static constexpr int kOnlineU = 4;                  // vectors per block (one rescale check per block)
  static constexpr int64_t kOnlineFourParts = 16384;  // rows this long: the loop in 4 parts, else 2
  int cap_acc_ = -1, cap_reg_ = -1;                   // the accumulator captured, and into which register
  int on_m_ = -1, on_mc_ = -1, on_s_[2] = {-1, -1}, on_x_[kOnlineU] = {};
  std::vector<int> online_regs_;  // pinned during the online loop
  bool prev_row_ = false;         // emitting the previous row's stores: its stream pointers and accs

  // ---- segment.cpp, segment_leaves.cpp (the fold's leaves): segment kernels (Plan::segment) ----
  void segment_loop();                                             // Mode::Segment: the whole bag loop
  bool seg_leaf(const ir::Expr* e, const Vmm& d, const Eval& ev);  // emit_leaf of a row leaf (false: not one)
  bool seg_row_leaf(const ir::Expr* e) const;
  const Address* seg_row_address(const ir::Expr* e);  // an f32 row leaf's vector, or null
  Address seg_addr_ = Xbyak::util::ptr[Xbyak::util::rsp];
  // internals
  const std::vector<Reg64>& seg_pool();
  void seg_scalar(const ir::Expr* e, const Vmm& d, const std::vector<Reg64>& f);
  void seg_broadcast(const ir::Expr* e, const Vmm& d);
  void seg_prefetch(int nv, bool masked);
  void seg_shared(size_t i, const Reg64& d, const std::vector<Reg64>& f);
  std::optional<Reg64> seg_held(const ir::Expr* e) const;
  void seg_block(int nv, bool masked, const Dag& fold, const Dag& once,
                 const std::vector<std::pair<const ir::Expr*, int>>& once_scalars);
  int dag_width(const Dag& g) const;
  // state
  Reg64 seg_r0_{Xbyak::Operand::RCX};  // register read by Var(reduce 0)
  bool seg_last_bag_ = false;          // Var(outer, last bag dim) reads the last bag's index
  bool seg_unclamped_ = false;         // ieval: min/max against a constant pass their other side
  bool seg_use_cse_ = false;           // shared values read from their slots or registers
  // ieval inside an id loop: a clamp of an id into [0, c] is a compare and a branch to code
  // emitted after the loop (seg_cold_), not taken for the ids the record-time check passed.
  bool seg_cold_ok_ = false;
  std::deque<Label> seg_cold_labels_;                 // (xbyak labels must outlive their references)
  std::vector<std::function<void()>> seg_cold_;       // the out-of-line fix-ups, emitted by seg_block
  std::unordered_map<const ir::Expr*, int> seg_cse_;  // shared value -> its qword slot (>= 0) or ~register
  std::vector<int> seg_shared_reg_;                   // per shared value: the register holding it, or -1 (slot)
  std::vector<int> seg_buf_q_, seg_shared_q_;         // qword slots (rsp offsets): buffer bases, shared values
  std::map<int, int> seg_acc_q_;                      // i64 accumulator -> its qword slot
  int seg_lo_q_ = 0, seg_hi_q_ = 0, seg_limit_q_ = 0, seg_tl_q_ = 0, seg_tail_off_ = 0;
  int seg_save_q_[2] = {0, 0};  // qword slots of r12 and r13 while the id loop pins values in them
  int seg_half_q_ = 0;          // qword slot: the block's first column / 2 (a nibble row's first byte)
  int seg_nptr_ = 0;            // pointers in seg_pool() (the next one is free)
  // Values an id loop keeps in general registers (the last ones of seg_pool(), seg_pin_gprs):
  // parameters and buffer bases, read by ieval and the row pointers instead of their slots.
  enum class GprInv : uint32_t { Param, Buffer };
  static uint64_t gpr_key(GprInv k, int index) {
    return uint64_t{static_cast<uint32_t>(k)} << 32 | static_cast<uint32_t>(index);
  }
  std::vector<std::pair<uint64_t, Reg64>> gpr_inv_;
  const Reg64* gpr_inv(GprInv kind, int index) const;
  std::vector<Reg64> seg_free(std::vector<Reg64> regs) const;  // regs less the pinned and shared-value ones
  void seg_pin_gprs();
  int seg_v_ = 0;  // vector of the block being emitted
  // AVX-512 decodes a nibble row two vectors at a time (seg_leaf): the even vector's leaf widens
  // one load of both vectors' bytes and leaves the odd one's in a register pinned for the block.
  // Per nibble row leaf of the fold: that register. seg_pair_end_: vectors below it are paired
  // (the block's unmasked vectors, rounded down to pairs).
  std::vector<std::pair<const ir::Expr*, int>> seg_nib_reg_;
  int seg_pair_end_ = 0;
  // The pairs hold columns even / odd (seg_leaf), interleaved back after the walk (seg_block):
  // when every row the fold reads is a nibble row, so nothing else in it depends on the column.
  bool seg_even_odd_ = false;
  std::vector<const ir::Expr*> seg_nibble_rows(const Dag& fold) const;
  bool seg_rows_all_nibbles(const Dag& fold) const;

  // ---- lanes.cpp: rows across lanes ----
  // entry points used by emitter.cpp
  void lane_loop();                                // Mode::Row with Plan::lanes: the whole row loop
  void lane_tables();                              // the index vectors, after the constants
  void lane_load(const Vmm& d, const Access& a);   // Load leaf of a lane Eval
  void lane_store(const Access& a, const Vmm& v);  // store root of a lane Eval
  void lane_acc(const Vmm& d, int acc);            // Acc leaf of a lane Eval
  // internals
  int64_t lane_stride(int addr) const;
  void set_lane_index(int64_t c);
  bool tiled_store(const Access& a) const;
  void flush_tiles();
  void set_row_mask(bool partial);
  void lane_body(bool full, int nsub);
  void lane_block_loads(int nsub);
  void lane_phase(size_t ph);
  // state
  using IndexVector = std::array<int32_t, 16>;  // first W used
  struct Gathered {
    int sub, addr, disp, slot;
  };
  Label lidxtab_;
  std::vector<IndexVector> lidx_;                  // index vectors in lidxtab_
  int cur_idx_ = -1;                               // index vector now in Vmm(kMaskReg); -1 = none
  bool lane_full_ = false;                         // emitting the body for a full group of W rows
  bool lane_tile_ok_ = false;                      // the phase being emitted may use stack tiles (tiled_store)
  std::map<int, int> lane_tile_;                   // addr -> first of reduce_n slots: outputs of a full group
  int lane_r_ = 0;                                 // reduce index being emitted
  std::vector<Gathered> lane_cache_;               // gathered vectors of this body: (sub, addr, byte disp) -> slot
  std::vector<int> acc_slot_[kLaneSubs];           // per sub-group, per accumulator: slot with its per-lane value
  int lane_sub_ = 0;                               // sub-group being emitted (a double body runs rows o..o+2W-1)
  int row_mask_slot_ = -1, lane_store_slot_ = -1;  // AVX2: the row mask; a vector being stored per row
};

}  // namespace kfuse::detail::xb
