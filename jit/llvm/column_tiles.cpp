// Column tiles: which column kernels the LLVM backend lowers with loop interchange, how wide a
// tile is, and which bags walk a tile's lanes in pairs (the lowering itself is
// Lowerer::column_segment in lower_tiles.cpp).
//
// A column kernel (outer = the kept axes with the innermost one kept, reduce = the reduced axes)
// lowered point by point walks each column down with the row stride: one element per cache line
// and, for long rows, one page per element (sum(x, 0) on [4096, 4096] f32 ran at 2% of memory
// bandwidth). Interchanged, a TILE of adjacent columns (adjacent points of the innermost outer
// dim) is processed together: every phase loops over the reduce domain outside and over the
// tile's lanes inside, so each reduce point reads a contiguous run of the tile's lanes. Each
// accumulator keeps one state slot per lane (a stack array of `tile` elements), later phases read
// their lane's slot, and the lane loop is a plain unit-stride loop that the loop vectoriser turns
// into vector loads, vector folds and a remainder (vector epilogue, then scalar). Launches with
// a single column take the point path instead (kColumnTileMinLen in llvm_jit.hpp), but for bags.
//
// A lane's result does not depend on its tile: it folds its column's values in row-major reduce
// order with plain (not reassociated) operations, and lanes never interact. So tile boundaries
// (chunks of columns per thread, the column-count tail) cannot change any bit.
//
// A contraction (matmul) whose B rows are contiguous along N is the same shape of loop: the lane
// is n, A[m, k] is lane-invariant and B[k, n] lane-contiguous, so a tile computes a block of one
// output row as K axpy steps of vector width (the point path would walk B's column with stride N).
//
// A segment kernel (embedding_bag: outer [bags, D], a dynamic reduce range per bag) is the same
// shape again: the lanes are a bag's columns, the bag's ids are walked once per tile (the id, its
// weight and the row's scale/bias are lane-invariant) and each id's row is read as vectors; point
// by point it would walk the ids once per column, with one scalar gathered load per (id, column).
//
// A row kernel whose loads pass the same test reads its rows across memory: a reduction over the
// last axis of a transposed view (sum(transpose(x), 1) is a column sum of x). Point by point each
// row was one element per cache line ([1024, 4096] of a transposed [4096, 1024]: 30 ms, 100x the
// column sum); as tiles it is the column kernel it is in memory. An ordinary row kernel never
// qualifies: its loads move by a row length per lane.
//
// Eligible: kind "column", "contraction" or "row", a non-empty reduce domain, and every load and store index moves by a
// compile-time 0 or 1 elements per step of the innermost outer dim (lane-contiguous or
// lane-invariant accesses). Anything else (a transposed input whose rows are the contiguous axis,
// reshapes that divide the column index, gathers) keeps the point-by-point path, where the reduce
// loop is the one that vectorises. Kind "segment": a reduce range that does not depend on the lane
// and store indices as above; loads may move in any way.
#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "ir/expr_util.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

namespace {

// Tile width. Wide tiles win because each reduce point then reads a long contiguous run (pages
// stay hot in the TLB and the hardware prefetchers, which stop at 4 KiB page boundaries, keep
// streaming). Measured on [4096, 4096] f32, 1 thread, before the 4-row unroll of
// lower_tiles.cpp (ms, sum axis 0 / x - mean(x, 0, keepdim)): tile 64: 3.7 / 22.0, 256:
// 3.5 / 14.9, 1024: 2.8 / 11.2, 2048: 2.6 / 10.1, 4096 and 8192 the same as 2048. Narrow tiles that would keep a
// multi-phase kernel's block of rows in L2 between its phases lose for the same reason (every row visit lands on
// another page), so there is no such rule. The slots of all accumulators of a tile stay within kStateBytes (stack,
// mostly L1).
constexpr int64_t kMaxLanes = 2048;
constexpr int64_t kStateBytes = 16 << 10;

int64_t pow2_floor(int64_t v) {
  int64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}

// Elements an index moves by per lane step, when that is a compile-time constant. An index
// that reads an accumulator is per lane (accumulators are per column) and never qualifies.
std::optional<int64_t> lane_step(const ir::ExprRef& e, int lane) {
  if (ir::contains(e.get(), ir::ExprKind::Acc)) return std::nullopt;
  return ir::affine_step(e.get(), ir::Space::Outer, lane);
}

int64_t tile_width(const ir::Kernel& k) {
  // Stack slots per lane: one per accumulator (two for ArgMax/ArgMin: value and index).
  int64_t state = 0;
  for (const auto& a : k.accs) {
    bool arg = a.kind == ir::AccKind::ArgMax || a.kind == ir::AccKind::ArgMin;
    state += arg ? dtype_size(a.value->dtype) + 8 : std::max<int64_t>(1, dtype_size(a.dtype));
  }
  return std::min(kMaxLanes, pow2_floor(std::max<int64_t>(1, kStateBytes / std::max<int64_t>(1, state))));
}

}  // namespace

int64_t plan_column_tile(const ir::Kernel& k) {
  if (k.outer.empty()) return 0;
  const int lane = static_cast<int>(k.outer.size()) - 1;
  const bool segment = k.kind == ir::KernelKind::Segment;
  if (segment) {
    // A bag's columns share its id range, which a tile evaluates once: it must not depend on
    // the lane.
    if (ir::depends_on(k.reduce_begin.get(), ir::Space::Outer, lane) ||
        ir::depends_on(k.reduce_end.get(), ir::Space::Outer, lane))
      return 0;
  } else if ((k.kind != ir::KernelKind::Column && k.kind != ir::KernelKind::Contraction &&
              k.kind != ir::KernelKind::Row) ||
             k.reduce.empty() || k.reduce_numel() <= 0) {
    return 0;
  }
  bool ok = true;
  // A contraction's B read along K (x @ w.T) moves by K per lane: its row blocks pack it
  // (contraction_b), and the column tiles left at the edges read it lane by lane.
  const ir::Expr* packed_b = k.kind == ir::KernelKind::Contraction ? contraction_b(k) : nullptr;
  std::set<const ir::Expr*> seen;
  std::function<void(const ir::ExprRef&)> visit = [&](const ir::ExprRef& e) {
    if (!ok || !seen.insert(e.get()).second) return;
    if (e->kind == ir::ExprKind::Load && e.get() != packed_b) {
      auto s = lane_step(e->args[0], lane);
      if (!s || (*s != 0 && *s != 1)) ok = false;
    }
    for (const auto& a : e->args) visit(a);
  };
  // Segment kernels take tiles whatever their loads' lane pattern: even a strided one (4-bit
  // nibbles, lane / 2) beats the point path, which walks a bag's ids once per column.
  if (!segment)
    for (const auto& a : k.accs) visit(a.value);
  for (const auto& ph : k.phases)
    for (const auto& s : ph.stores) {
      auto st = lane_step(s.index, lane);
      if (!st || (*st != 0 && *st != 1)) ok = false;
      if (!segment) {
        visit(s.index);
        visit(s.value);
      }
    }
  if (!ok) return 0;
  return tile_width(k);
}

// The generic tile of a bag whose fold reads a row at column / 2 (a 4-bit table's nibble row,
// byte c / 2 of the row for column c) walks its lanes two per iteration (Lowerer::lane_pairs in
// lower_tiles.cpp): the loop vectoriser then sees each byte index move by one per iteration,
// where lane by lane it moved by a half and every byte became a scalar load and an insert.
// 4-bit bags, 246k ids, 1 thread, Zen 4, lane by lane -> in pairs: [20000, 64] 5.4 -> 2.0 ms
// (the 8-bit bag's register blocks: 0.9), [2M, 64] 6.3 -> 3.4, [1M, 128] 10.9 -> 4.2; compile
// +5 ms (of ~80).
bool plan_lane_pairs(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Segment || k.outer.empty()) return false;
  const int lane = static_cast<int>(k.outer.size()) - 1;
  bool half = false;
  std::set<const ir::Expr*> seen;
  std::function<void(const ir::Expr*, bool)> visit = [&](const ir::Expr* e, bool in_index) {
    if (!seen.insert(e).second) return;
    if (in_index && e->kind == ir::ExprKind::IDiv && e->args[1]->kind == ir::ExprKind::Const &&
        e->args[1]->value == 2 && ir::depends_on(e->args[0].get(), ir::Space::Outer, lane))
      half = true;
    for (size_t i = 0; i < e->args.size(); ++i)
      visit(e->args[i].get(), in_index || (e->kind == ir::ExprKind::Load && i == 0));
  };
  for (const auto& A : k.accs) visit(A.value.get(), false);
  return half;
}

const ir::Expr* contraction_b(const ir::Kernel& k) {
  if (k.outer.size() < 2 || k.phases.empty() || !k.phases[0].over_reduce) return nullptr;
  const int lane = static_cast<int>(k.outer.size()) - 1;
  std::vector<const ir::Expr*> moving;
  std::set<const ir::Expr*> seen;
  std::function<void(const ir::Expr*)> visit = [&](const ir::Expr* e) {
    if (!seen.insert(e).second) return;
    if (e->kind == ir::ExprKind::Load && ir::affine_step(e->args[0].get(), ir::Space::Outer, lane) != 0)
      moving.push_back(e);
    for (const auto& x : e->args) visit(x.get());
  };
  for (int a : k.phases[0].accs) visit(k.accs[a].value.get());
  if (moving.size() != 1) return nullptr;
  const ir::Expr* B = moving[0];
  const auto step = ir::affine_step(B->args[0].get(), ir::Space::Outer, lane);
  const bool stored =
      B->dtype == DType::F32 || B->dtype == DType::F64 || B->dtype == DType::I32 || B->dtype == DType::I64;
  if (!step || *step < 1 || B->args.size() != 1 || !stored ||
      ir::depends_on(B->args[0].get(), ir::Space::Outer, lane - 1))
    return nullptr;
  return B;
}

// Row blocks (Lowerer::row_block in lower_rows.cpp): a tiled contraction computes a block of
// rows x lanes of C with its sums in vector registers across K, so each B vector it loads
// serves every row of the block and each A element every lane; the generic tile reads a row of
// B per output row and carries its sums through stack slots. They take: one compile-time reduce
// dim (K), phase 0 the only phase over it (accumulators, no stores), every accumulator a
// non-Bool Sum (the register block keeps one value per lane and row), and a row dim (outer rank
// >= 2) to block; and column tiles (`column_tile`, plan_column_tile's width: it checked the
// row's and lane's loads).
bool plan_row_blocks(const ir::Kernel& k, int64_t column_tile) {
  if (k.kind != ir::KernelKind::Contraction || k.outer.size() < 2 || k.reduce.size() != 1 || k.dynamic_reduce() ||
      k.phases.empty() || !k.phases[0].over_reduce || !k.phases[0].stores.empty() || k.phases[0].accs.empty())
    return false;
  for (size_t p = 1; p < k.phases.size(); ++p)
    if (k.phases[p].over_reduce) return false;
  for (const auto& A : k.accs)
    if (A.kind != ir::AccKind::Sum || A.dtype == DType::Bool) return false;
  return column_tile > 0;
}

}  // namespace kfuse::detail::llvmjit
