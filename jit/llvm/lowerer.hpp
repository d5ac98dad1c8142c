// The LLVM backend's kernel lowering (kernel IR -> LLVM IR), shared by the files that define its
// parts; nothing outside jit/llvm includes it. How a kernel is walked is described at the top of
// lower_kernel.cpp.
//
//   lower_kernel.cpp  scaffolding, loops, accumulators, the point path, cascaded sums, kf_main /
//                     kf_part / kf_fin, plan_launch
//   lower_tiles.cpp   column tiles (column and segment kernels): lane slots, cascade levels in
//                     tiles, bags' walk with row prefetches, register blocks and lane pairs
//   lower_rows.cpp    row blocks of a contraction: rows x lanes of sums in registers, packed B
//   transpose_tiles.cpp  the tiled walk of a pointwise kernel reading an input transposed
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

using llvm::Value;

inline constexpr int64_t kSplitBlock = 16384;  // reduce points per block of a split global reduction
// Column tiles: consecutive points of the innermost reduce dim folded per visit of a lane (still
// one after the other, so the order and the bits are unchanged), which loads and stores the
// lane's state once per 4 rows instead of every row. Only phases with accumulators (a store-only
// phase has no state). [4096, 4096] f32, 1 thread: sum axis 0 3.1 -> 2.6 ms (sum axis 1: 2.5 ms),
// max axis 0 3.7 -> 2.7 ms; [5e5, 3] sum 1.1 -> 0.47 ms (the state's store-to-load chain through
// memory is what bounds narrow tiles); compile time +10%.
inline constexpr int64_t kTileRowUnroll = 4;
// Rows of a contraction's register block (Lowerer::row_block).
inline constexpr int64_t kRowBlockRows = 6;

inline bool is_arg(ir::AccKind k) { return k == ir::AccKind::ArgMax || k == ir::AccKind::ArgMin; }

// Loop-carried state of one accumulator: {value} or {best value, best index} for Arg*.
struct AccState {
  std::vector<Value*> v;
};

class Lowerer {
 public:
  Lowerer(const ir::Kernel& k, const LaunchPlan& plan, llvm::Module& m, const MathLib& math)
      : k_(k), plan_(plan), m_(m), c_(m.getContext()), b_(c_), math_(math) {}

  void lower();

 private:
  llvm::Function* begin_function(const char* name, std::vector<llvm::Type*> extra, ExprEmitter& ex,
                                 std::vector<Value*>& extra_args);

  // i64 minimum and maximum (loop bounds, tile and piece edges).
  Value* smin(Value* x, Value* y) { return b_.CreateIntrinsic(llvm::Intrinsic::smin, {b_.getInt64Ty()}, {x, y}); }
  Value* smax(Value* x, Value* y) { return b_.CreateIntrinsic(llvm::Intrinsic::smax, {b_.getInt64Ty()}, {x, y}); }

  // ---- loops ----
  using Carried = std::vector<Value*>;

  Carried counted_loop(Value* n, bool n_positive, const Carried& init,
                       const std::function<Carried(Value* iv, const Carried& cur)>& body,
                       llvm::MDNode* loop_md = nullptr);

  Carried close_loop(const Carried& phis, const Carried& init, const Carried& next, llvm::BasicBlock* pre,
                     llvm::BasicBlock* latch, llvm::BasicBlock* after, bool always_runs);

  using PointBody = std::function<Carried(const std::vector<Value*>&, const Carried&)>;
  // seg(indices of the segment's first point, its length >= 1, carried values)
  using SegmentBody = std::function<Carried(const std::vector<Value*>&, Value*, const Carried&)>;

  // `parallel`: the innermost loop's memory accesses declared independent across its iterations
  // (points that each write their own elements, never reading another's: lower_kernel.cpp).
  Carried flat_range(Value* begin, Value* end, const std::vector<Value*>& extents, bool known_nonempty,
                     const Carried& init, const PointBody& body, bool parallel = false);

  void tiled_range(Value* begin, Value* end, const std::vector<Value*>& extents, int64_t T, ExprEmitter& ex,
                   const std::vector<const ir::Expr*>& tloads,
                   const std::function<void(const std::vector<Value*>&)>& body);

  std::vector<Value*> unravel(Value* pos, const std::vector<Value*>& extents, size_t nd);

  void if_else(Value* cond, const std::function<void()>& then_fn, const std::function<void()>& else_fn);

  Carried flat_segments(Value* begin, Value* end, const std::vector<Value*>& extents, bool known_nonempty,
                        const Carried& init, const SegmentBody& seg_body);

  // ---- accumulators ----
  llvm::Type* acc_type(int a) { return reg_type(c_, k_.accs[a].dtype); }

  Value* identity(int a);

  AccState init_state(int a);

  Value* fold(int a, Value* s, Value* x, bool reassoc = true);

  AccState fold_arg(int a, const AccState& st, Value* x, Value* flat);

  bool fused_product(const ir::Accumulator& A) const;

  Value* final_value(int a, const AccState& st) { return is_arg(k_.accs[a].kind) ? st.v[1] : st.v[0]; }

  Carried reduce_point(const ir::Phase& ph, ExprEmitter& ex, const std::vector<Value*>& ridx, const Carried& cur,
                       bool reassoc = true);

  void run_stores(const ir::Phase& ph, ExprEmitter& ex);

  Carried initial_states(const ir::Phase& ph);

  void finish_accs(const ir::Phase& ph, ExprEmitter& ex, const Carried& states);

  Value* empty_value(int a);

  void dynamic_phase(const ir::Phase& ph, ExprEmitter& ex);

  void outer_point(ExprEmitter& ex, size_t first);

  // ---- cascaded sums ----
  // Why: a reduce loop folds its points one after the other (the vectoriser spreads them over
  // its lanes, 32 on AVX2, each lane still adding n/32 in a row), so the rounding error of a
  // float sum grows like n/L * u (u = 2^-24): 2^20 copies of 0.1f were off by 4.5e-6.
  // How: a phase with a float Sum (and no Arg accumulator) walks its flat reduce domain as
  // leaf blocks of kCascadeLeaf points, each its own (vectorised) loop from the identity; a level
  // folds kCascadeFan blocks of the level below, in order, with plain operations; as many levels
  // as cover the domain. An element goes through leaf/L roundings in its lane, log2(L) in the
  // vector's horizontal fold and at most kCascadeFan - 1 per level, so
  //   |sum - exact| <= (8 * ceil(log8 n) + 8) * u * sum|x|
  // (the leaf loop vectorised, L >= 16 lanes). Blocks are fixed positions of the reduce domain
  // and each point runs in one thread: the order stays a function of the code alone.
  static constexpr int64_t kCascadeLeaf = 256;
  static constexpr int64_t kCascadeFan = 8;

  bool cascades(const ir::Phase& ph) const;

  static int cascade_levels(int64_t n);

  Carried cascade(const ir::Phase& ph, ExprEmitter& ex, int level, Value* start, Value* count);

  // ---- column tiles (plan_.column_tile > 0, see column_tiles.cpp; lower_tiles.cpp) ----
  std::vector<llvm::Type*> state_types(int a);
  static llvm::Type* slot_type(llvm::Type* t) { return t->isIntegerTy(1) ? llvm::Type::getInt8Ty(t->getContext()) : t; }

  void alloc_tile_slots();

  // Cascaded sums in column tiles (see cascade): a lane's partial closes every kTileLeaf of its
  // points (4 visits) into level 1 of its column, level l every kTileLeaf * kCascadeFan^(l-1)
  // into level l + 1 (arrays like the state's), so |err| stays within the bound of cascade.
  // A contraction's leaf is longer: its row blocks (row_block) close their register sums into
  // the level arrays in memory, a load, add and store per sum, once per leaf. AVX2's block
  // (12 FMAs per k, half of AVX-512's 24 of twice the width) runs a leaf in half the time, so
  // its leaf is twice as long: Zen 3, f64, 1 thread, kfuse / OpenBLAS at leaf 64 -> 128:
  // 1024^3 0.90-0.93 -> 0.95, 2048^3 0.82 -> 0.87, [1000,999]x[999,1001] 0.85 -> 0.89.
  static constexpr int64_t kTileLeaf = 16, kContractionLeaf = 64, kContractionLeafAvx2 = 128;
  int64_t tile_leaf() const {
    if (k_.kind != ir::KernelKind::Contraction) return kTileLeaf;
    return math_.tier == MathLib::Tier::AVX2 ? kContractionLeafAvx2 : kContractionLeaf;
  }
  int tile_levels() const;
  std::vector<int> tile_cascade_accs(const ir::Phase& ph) const;
  Value* level_ptr(int a, int l, Value* lane) { return b_.CreateInBoundsGEP(acc_type(a), levels_[a][l - 1], lane); }
  void tile_close(const std::vector<int>& cs, Value* w, Value* after, int64_t count, int l = 1);

  using StateArrays = std::vector<std::vector<Value*>>;  // per accumulator, its state arrays
  AccState load_state(int a, Value* lane, const StateArrays* arrays = nullptr);

  void store_state(int a, Value* lane, const AccState& st, const StateArrays* arrays = nullptr);

  // Lanes [base, base + n) of a tile (base null: 0); their states live in `arrays` at index
  // lane - base (arrays null: the tile's slots_ at index lane).
  struct LaneBlock {
    Value* n;
    Value* base;
    const StateArrays* arrays;
    bool pairs = false;  // two lanes per iteration (a bag's nibble rows: plan_lane_pairs)
  };

  void column_segment(ExprEmitter& ex, const std::vector<Value*>& first, Value* len);

  void column_tile(ExprEmitter& ex, const std::vector<Value*>& first, Value* w);

  void tile_segment(const ir::Phase& ph, ExprEmitter& ex, const std::vector<Value*>& first, Value* w, Value*& pos,
                    const std::function<void(int64_t, const LaneBlock&)>& fold_points,
                    const std::function<void(const LaneBlock&, const std::function<void(Value*)>&)>& lanes_of);

  void lane_pairs(const LaneBlock& blk, Value* c0, const std::function<void(Value*, Value*)>& f);

  // ---- row blocks of a contraction (plan_row_blocks, column_tiles.cpp; lower_rows.cpp) ----
  // Register tile: kRowBlockRows (6) rows x 4 vectors of lanes on AVX-512 (24 of the 32
  // registers hold sums; B's vectors for one k take 4 more, A's elements are broadcast from
  // memory), 3 x 4 on AVX2 (12 of 16; plan_row_block). Rows per pass over B's columns (row_panel_): as many as
  // keep that panel of A (rows x min(K, kRowKc)) within kRowPanelBytes, in L2
  // while each block of lanes of B is read once per block of rows.
  //
  // Packed B (contraction_b: K > kRowKc, or B read along K): whole rows go in pieces of up to
  // kRowPassRows rows (K in one step: all of a chunk's rows), a piece's columns in blocks of
  // row_nc_ lanes; in each block K goes in steps of kRowKc, each step copying its kRowKc x
  // lanes of B once per block of lanes into the scratch (pack_rows), then running the piece's
  // rows in panels of row_panel_ (their rows x kRowKc of A stay in L2) along those slivers. The
  // sums (and cascade levels) of the piece's rows x row_nc_ lanes carry from step to step in
  // the scratch kf_main gets (row_state_). Read in place, a block's B rows lie a row length
  // apart: at 2048 f64 columns (16 KiB) each is on its own page and in one of 8 sets of L2, and
  // a 2048^3 f64 GEMM ran at 35% of the FMA peak.
  static constexpr int64_t kRowPanelBytes = 256 << 10;
  static constexpr int64_t kRowKc = 1024;                   // a multiple of every contraction leaf
  static constexpr int64_t kRowStateBytes = 4 << 20;        // row_state_ (the scratch) at most
  static constexpr int64_t kRowMaxNc = 2048;                // lanes of a pass's column block at most
  static constexpr int64_t kRowPassRows = 504;              // rows of a pass (packed B, K in steps)
  static constexpr int64_t kRowPassAll = int64_t{1} << 40;  // ... (packed B, K in one step: any)
  void plan_row_block();
  // Cascade levels of accumulator a in a row block (those of the column tile: tile_levels()).
  int row_levels(int a) const { return is_float(k_.accs[a].dtype) ? tile_levels() : 0; }

  void while_loop(Value* start, Value* limit, const std::function<Value*(Value*)>& body);

  void row_range(ExprEmitter& ex, Value* begin, Value* end, const std::vector<Value*>& ext);

  void row_panel(ExprEmitter& ex, const std::vector<Value*>& idx, Value* rows, Value* c0, Value* c1);

  void row_lanes(const std::function<void(Value*)>& body);

  Value* sliver(Value* t);
  void pack_rows(ExprEmitter& ex, const std::vector<Value*>& first, Value* k0, Value* n, Value* nb);

  // What one row_block call computes: reduce points [k0, k0 + n) (k0 a multiple of tile_leaf()
  // unless n is all of K). state_row: null, or the block's first row in row_state_ (rows of
  // row_nc_ lanes; state_col its first lane there): its sums are read from there before
  // unless `first` holds and written back after unless `last` holds, and B's values come from
  // `packed`. `last`: the sums are complete; finish them and run the later phases.
  struct RowPart {
    Value* k0;
    Value* n;
    Value* state_row;  // (and state_col: the block's first lane there)
    Value* state_col;
    Value* packed;  // with state_row: B's sliver for these lanes (pack_rows)
    Value* rows;    // the block's rows that exist, 2..row_rows_ (the others repeat the last)
    Value* first;   // (i1; only with state_row: the sums start from the identity, not the state)
    Value* last;    // (i1; only with state_row: without, the block always finishes)
  };

  void row_block(ExprEmitter& ex, const std::vector<Value*>& first, const RowPart& part);

  // Lanes of a register block (tile_segment) for this kernel's accumulator states: as many as
  // fill kRegVectors vector registers, at most kRegBytes (8 AVX2 registers, 4 AVX-512 ones; 8
  // SSE2 registers are 128 bytes: 32 f32 lanes), 0 when the kernel takes none (not a segment
  // kernel, an ArgMax/ArgMin state). Kernel alone, f32 sum, 1 thread, AVX2 (EPYC), ns per id,
  // generic tile -> register blocks: D = 64 in cache 7.3 -> 3.9 (a hand-written AVX2 kernel:
  // 3.3), out of cache (512 MiB table) 39 -> 28-30 (hand: 27); D = 128 (two blocks) in cache
  // 12.6 -> 8.1, out of cache 118 -> 63 (docs/performance.md).
  // Blocks per tile at most: D = 256 f32 as four blocks vs the generic tile, in cache 27 -> 24
  // ns per id, out of cache 140 -> 105-130 (noisy); D = 512 as eight ties in cache (55 ns).
  static constexpr int64_t kRegBytes = 256;
  static constexpr int64_t kRegVectors = 8;
  static constexpr int64_t kRegMaxBlocks = 4;
  // Narrower single blocks (w == R) down to kRegMinLanes: each is one more copy of the bag's
  // walk, ~25 ms of compile time (f32 bag kernel: 97 ms with 64-lane blocks only, 124 with 32,
  // 153 with 16, 176 with 8). Kernel alone in cache, ns per id, generic tile -> block: D = 32
  // 3.3 -> 2.5, D = 16 2.9 -> 2.1, D = 8 4.2 -> 2.0 (not taken: D = 8 bags are rare).
  static constexpr int64_t kRegMinLanes = 16;
  // Points per visit of a register block's lanes: its state costs no memory traffic, so the
  // unroll that amortises it in the generic tile only lengthens the code. D = 64 f32 in cache,
  // ns per id (min of 3): 1: 4.0, 2: 4.5, 4: 4.6, 8: 4.8; out of cache 1 and 4 tie (27).
  static constexpr int64_t kRegRowUnroll = 1;
  // The lane loop of a register block: widened at the full vector width of the accumulator type;
  // `unroll_after`: kept whole until the vectoriser has run, then fully unrolled (row blocks).
  llvm::MDNode* register_lane_loop(bool unroll_after = false);
  // Loop metadata: vectorise at `lanes` lanes whatever the cost model says; with unroll_after,
  // not unrolled before the vectoriser (which would leave scalar code: no SLP, optimize.cpp),
  // fully unrolled once widened.
  llvm::MDNode* vector_loop(int64_t lanes, bool unroll_after);
  int64_t register_lanes() const;

  std::vector<Value*> outer_extents(ExprEmitter& ex);

  void emit_main();

  // Whether a launch of a tiled kernel runs as tiles: at least kColumnTileMinLen columns and,
  // for a contraction reading B along K (x @ w.T), enough rows for its row blocks: with fewer,
  // each output is the point path's dot product of two contiguous runs, where a column tile
  // would read B lane by lane, K elements apart. (Decided by the launch's shape, never its
  // chunk: a column's bits do not change within a launch.)
  static constexpr int64_t kStridedBMinRows = 12;
  Value* tiles_wanted(const std::vector<Value*>& ext);

  bool range_pieces(ExprEmitter& ex, Value* begin, Value* end, const std::vector<Value*>& ext);

  void emit_part();

  void emit_fin();

  const ir::Kernel& k_;
  const LaunchPlan& plan_;
  llvm::Module& m_;
  llvm::LLVMContext& c_;
  Builder b_;
  const MathLib& math_;
  std::vector<std::vector<Value*>> slots_;           // column tiles: per accumulator, its state arrays
  std::vector<std::vector<Value*>> levels_;          // ... and its cascade levels (float sums)
  std::vector<std::vector<Value*>> regs_;            // ... and its register block states (tile_segment)
  int64_t reg_lanes_ = 0;                            // lanes of a register block, 0: none
  bool pair_lanes_ = false;                          // the generic tile's walk takes lanes in pairs (plan_lane_pairs)
  std::vector<std::vector<Value*>> rows_;            // row blocks: per accumulator, its sum and levels [rows x lanes]
  int64_t row_rows_ = 0, row_lanes_ = 0;             // ... their shape, 0: none (plan_row_block)
  int64_t row_panel_ = 0;                            // ... rows of C per pass over B's columns (row_range)
  const ir::Expr* row_pack_ = nullptr;               // ... B's load when packed (plan_row_block), else null
  Value* row_packed_ = nullptr;                      // ... its kRowKc x lanes values (pack_rows)
  std::vector<std::vector<Value*>> row_state_;       // ... per accumulator, a panel's sums and levels [rows x row_nc_]
  std::vector<std::vector<int64_t>> row_state_off_;  // ... their offsets in the scratch
  int64_t row_nc_ = 0, row_scratch_bytes_ = 0;       // ... lanes of a column block; the scratch kf_main wants
  int64_t row_pass_ = 0, row_packed_off_ = 0;        // ... rows of a piece of whole rows; B's slivers in the scratch
  Value* scratch_ = nullptr;                         // kf_main's scratch argument (row-blocked contractions)
  bool b_along_k_ = false;                           // a contraction whose B is read along K (plan_row_block)
  std::vector<Value*> outer_ext_;                    // kf_main: the outer extents
};

}  // namespace kfuse::detail::llvmjit
