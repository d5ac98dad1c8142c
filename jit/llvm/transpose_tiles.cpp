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
// vector (Lowerer::tile8); rows by chunks of kTransposeChunk blocks, groups of 8 rows along a
// chunk (Lowerer::tiled_range). Zen 4, 1 thread, `transpose(x) + 0`, old / new alternating, ms:
// [512, 128, 64] 8.2-8.6 -> 4.2-4.4; [64, 256, 256] 8.2-8.8 -> 2.8-3.6; [16, 512, 512] 5.6-5.8 ->
// 2.3-2.5; [4096, 1024] 4.0-5.1 -> 3.1-3.5 (a slow spell of the host: its copy took 1.3-1.6 ms).
//
// Pointwise points are independent (no accumulators, each point stores its own outputs), so the
// order of the walk cannot change a bit.
//
// Eligible: kind "pointwise" with at least two outer dims, every store contiguous along the
// innermost outer dim, and a load that moves by more than one element (or by a run-time amount)
// per step of the innermost outer dim but by one element per step of the dim before it.
#include <algorithm>
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

}  // namespace kfuse::detail::llvmjit
