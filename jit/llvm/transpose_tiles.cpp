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
// Pointwise points are independent (no accumulators, each point stores its own outputs), so the
// order of the walk cannot change a bit.
//
// Eligible: kind "pointwise" with at least two outer dims, every store contiguous along the
// innermost outer dim, and a load that moves by more than one element (or by a run-time amount)
// per step of the innermost outer dim but by one element per step of the dim before it.
#include "ir/expr_util.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

namespace {

// Whether a load under `e` reads transposed: strided along the innermost dim, unit along the next.
bool transposed_load(const ir::Expr* e, int inner) {
  if (e->kind == ir::ExprKind::Load) {
    const ir::Expr* idx = e->args[0].get();
    const std::optional<int64_t> s_in = ir::affine_step(idx, ir::Space::Outer, inner);
    const std::optional<int64_t> s_next = ir::affine_step(idx, ir::Space::Outer, inner - 1);
    const bool strided = !s_in || (*s_in != 0 && *s_in != 1 && *s_in != -1);
    if (strided && ir::depends_on(idx, ir::Space::Outer, inner) && s_next && (*s_next == 1 || *s_next == -1))
      return true;
  }
  for (const auto& a : e->args)
    if (transposed_load(a.get(), inner)) return true;
  return false;
}

}  // namespace

int64_t plan_transpose_tile(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Pointwise || k.outer.size() < 2 || !k.reduce.empty() || !k.accs.empty()) return 0;
  const int inner = static_cast<int>(k.outer.size()) - 1;
  bool any = false;
  for (const auto& ph : k.phases) {
    if (ph.over_reduce) return 0;
    for (const auto& s : ph.stores) {
      if (ir::affine_step(s.index.get(), ir::Space::Outer, inner) != std::optional<int64_t>(1)) return 0;
      any = any || transposed_load(s.value.get(), inner);
    }
  }
  return any ? kTransposeTile : 0;
}

}  // namespace kfuse::detail::llvmjit
