// Transpose tiles: which pointwise kernels the LLVM backend walks in tiles of the two innermost
// outer dims instead of row by row (the lowering is Lowerer::tiled_range in lower_kernel.cpp).
//
// A pointwise kernel reading an input transposed (transpose(x) + y, x.t() materialised, a
// permute that moves the innermost axis) walks the output row by row, so each output row reads a
// column of the input: one element per cache line, one line per input row. By the time the next
// output row wants the neighbouring element of those lines they are gone (the lines of one
// column, a power-of-two row length apart, share a handful of cache sets): [4096, 1024] f32
// transposed took 28.5 ms on one Zen 4 core, 40x its plain copy. Walked as tiles (for each block
// of kTransposeRows output rows, for each block of kTransposeTile columns, the block's points row
// by row), a tile reads kTransposeTile input rows as streams and each input line serves the
// consecutive output rows of the block: 2.5 ms. Measured on that copy (1 thread, ms): 8 columns x
// 16 / 64 / 256 / 1024 rows 7.3 / 3.2 / 2.4 / 2.2 (but transpose(x) + y, whose y is read like the
// output, 6.1 / 5.6 / 5.0 / 11.5); 16 columns x the same rows 9.4 / 4.4 / 3.9 / 3.8; square tiles
// of 8 / 16 / 32 / 64 5.4 / 7.5 / 8.2 / 12.4 (a row of tiles revisits each input line only after
// a whole row of input rows, and rows a power of two apart share too few cache sets to keep them).
// Whole column blocks run with a constant trip count (unrolled).
//
// Register transposes: the SLP vectoriser made each tile row's 8 transposed elements one gather
// (vgatherqps), on which batched transposes waited: [512, 128, 64] took 7.4-7.9 ms against
// 2.5-2.9 ms for [4096, 1024]. A small kernel (transpose_tile_loads: at most
// kTransposeTileMaxNodes nodes, unmasked transposed loads that step by one element along the
// next-to-innermost dim) instead reads each transposed input as 8 vectors along that dim, one
// per column of an 8 x 8 tile, transposes them with shuffles, and stores each tile row as one
// vector (transpose_tile8); rows by chunks of kTransposeChunk blocks, groups of 8 rows along a
// chunk (Lowerer::tiled_range). The tile's points are then evaluated a row at a time as vectors
// (the transposed rows from a stack slot), not point by point: see tiled_range. Zen 4, 1 thread, `transpose(x) + 0`,
// old / new alternating, ms: [512, 128, 64] 8.2-8.6 -> 4.2-4.4; [64, 256, 256] 8.2-8.8 -> 2.8-3.6; [16, 512,
// 512] 5.6-5.8 -> 2.3-2.5 (a slow spell of the host: its copy took 1.3-1.6 ms); [4096, 1024] unchanged (quiet host,
// four pairs: 2.70-2.92 -> 2.66-2.82).
//
// Pointwise points are independent (no accumulators, each point stores its own outputs), so the
// order of the walk cannot change a bit.
//
// Eligible: kind "pointwise" with at least two outer dims, every store contiguous along the
// innermost outer dim, and a load that moves by more than one element (or by a run-time amount)
// per step of the innermost outer dim but by one element per step of the dim before it.
#include <algorithm>
#include <array>
#include <unordered_set>

#include "ir/expr_util.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

namespace {

// Whether `e` is a load that reads transposed: strided along the innermost dim, unit along the next.
bool reads_transposed(const ir::Expr* e, int inner) {
  if (e->kind != ir::ExprKind::Load) return false;
  const ir::Expr* idx = e->args[0].get();
  const std::optional<int64_t> s_in = ir::affine_step(idx, ir::Space::Outer, inner);
  const std::optional<int64_t> s_next = ir::affine_step(idx, ir::Space::Outer, inner - 1);
  const bool strided = !s_in || (*s_in != 0 && *s_in != 1 && *s_in != -1);
  return strided && ir::depends_on(idx, ir::Space::Outer, inner) && s_next && (*s_next == 1 || *s_next == -1);
}

// The loads under `e` that read transposed (not looking inside them), appended to `out` once each.
void collect_transposed(const ir::Expr* e, int inner, std::vector<const ir::Expr*>& out) {
  if (reads_transposed(e, inner)) {
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
    return;
  }
  for (const auto& a : e->args) collect_transposed(a.get(), inner, out);
}

size_t count_nodes(const ir::Expr* e, std::unordered_set<const ir::Expr*>& seen) {
  if (!seen.insert(e).second) return 0;
  size_t n = 1;
  for (const auto& a : e->args) n += count_nodes(a.get(), seen);
  return n;
}

}  // namespace

std::vector<const ir::Expr*> transpose_tile_loads(const ir::Kernel& k) {
  if (plan_transpose_tile(k) != kTransposeTile) return {};
  const int inner = static_cast<int>(k.outer.size()) - 1;
  std::vector<const ir::Expr*> loads;
  std::unordered_set<const ir::Expr*> seen;
  size_t nodes = 0;
  for (const auto& ph : k.phases)
    for (const auto& s : ph.stores) {
      collect_transposed(s.value.get(), inner, loads);
      nodes += count_nodes(s.value.get(), seen) + count_nodes(s.index.get(), seen);
    }
  if (nodes > kTransposeTileMaxNodes || loads.size() > kTransposeTileMaxLoads) return {};
  for (const ir::Expr* l : loads)
    if (l->args.size() != 1 ||
        ir::affine_step(l->args[0].get(), ir::Space::Outer, inner - 1) != std::optional<int64_t>(1))
      return {};
  // (a tile's stores land after its loads: no load may read a buffer the kernel writes)
  std::unordered_set<int> written;
  for (const auto& ph : k.phases)
    for (const auto& s : ph.stores) written.insert(s.buffer);
  for (const ir::Expr* e : seen)
    if (e->kind == ir::ExprKind::Load && written.count(e->index)) return {};
  return loads;
}

int64_t plan_transpose_tile(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Pointwise || k.outer.size() < 2 || !k.reduce.empty() || !k.accs.empty()) return 0;
  const int inner = static_cast<int>(k.outer.size()) - 1;
  bool any = false;
  for (const auto& ph : k.phases) {
    if (ph.over_reduce) return 0;
    for (const auto& s : ph.stores) {
      if (ir::affine_step(s.index.get(), ir::Space::Outer, inner) != std::optional<int64_t>(1)) return 0;
      std::vector<const ir::Expr*> loads;
      collect_transposed(s.value.get(), inner, loads);
      any = any || !loads.empty();
    }
  }
  return any ? kTransposeTile : 0;
}

namespace {

using llvm::Value;

// Transposes 8 vectors of 8: lane j of result i is lane i of v[j]. Three rounds of two-input
// shuffles, each doubling the runs of lanes already in place.
std::array<Value*, 8> transpose8(Builder& b, const std::array<Value*, 8>& v) {
  auto shuf = [&](Value* x, Value* y, std::array<int, 8> m) { return b.CreateShuffleVector(x, y, m); };
  std::array<Value*, 8> a{}, h{}, r{};
  for (int p = 0; p < 4; ++p) {  // pairs of vectors interleaved: lanes 0-3, then lanes 4-7
    a[2 * p] = shuf(v[2 * p], v[2 * p + 1], {0, 8, 1, 9, 2, 10, 3, 11});
    a[2 * p + 1] = shuf(v[2 * p], v[2 * p + 1], {4, 12, 5, 13, 6, 14, 7, 15});
  }
  for (int q = 0; q < 2; ++q)  // vectors 4q..4q+3: runs of 4 per lane
    for (int s = 0; s < 2; ++s) {
      Value* x = a[4 * q + s];
      Value* y = a[4 * q + 2 + s];
      h[4 * q + 2 * s] = shuf(x, y, {0, 1, 8, 9, 2, 3, 10, 11});
      h[4 * q + 2 * s + 1] = shuf(x, y, {4, 5, 12, 13, 6, 7, 14, 15});
    }
  for (int c = 0; c < 4; ++c) {  // lanes 2c and 2c + 1 of all 8 vectors
    r[2 * c] = shuf(h[c], h[4 + c], {0, 1, 2, 3, 8, 9, 10, 11});
    r[2 * c + 1] = shuf(h[c], h[4 + c], {4, 5, 6, 7, 12, 13, 14, 15});
  }
  return r;
}

}  // namespace

void transpose_tile8(Builder& b, ExprEmitter& ex, const std::vector<const ir::Expr*>& tloads,
                     const std::vector<Value*>& row, Value* c0, const std::vector<Value*>& slots, int64_t stride,
                     int64_t first) {
  llvm::LLVMContext& c = b.getContext();
  for (size_t l = 0; l < tloads.size(); ++l) {
    const ir::Expr* ld = tloads[l];
    llvm::Type* mt = mem_type(c, ld->dtype);
    auto* vt = llvm::FixedVectorType::get(mt, 8);
    const llvm::Align align(mt->getPrimitiveSizeInBits() / 8);
    std::array<Value*, 8> col{};
    for (int j = 0; j < 8; ++j) {
      ex.reset();
      ex.outer = row;
      ex.outer.push_back(b.CreateAdd(c0, b.getInt64(j), "", true, true));
      Value* at = ex.convert(ex.emit(ld->args[0]), ld->args[0]->dtype, DType::I64);
      Value* p = b.CreateInBoundsGEP(mt, ex.buffers.at(static_cast<size_t>(ld->index)), at);
      col[static_cast<size_t>(j)] = b.CreateAlignedLoad(vt, p, align);
    }
    const std::array<Value*, 8> rows = transpose8(b, col);
    for (int i = 0; i < 8; ++i)
      b.CreateAlignedStore(rows[static_cast<size_t>(i)],
                           b.CreateInBoundsGEP(mt, slots[l], b.getInt64(stride * i + first)), align);
  }
  ex.reset();
}

}  // namespace kfuse::detail::llvmjit
