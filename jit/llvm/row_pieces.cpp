// LLVM backend: two analyses of pointwise kernels that choose how lower_kernel.cpp emits them.
//
// plan_row_pieces: index-set splitting of the rows at the constants the innermost index is
// compared with (a concat along the last axis: o1 < 512 picks the first input; a pad's edges;
// arange(n) == c). Each piece's stores are folded for its range (ir::fold_var_range), so a
// concat's pieces are plain copies. Row by row, every lane had evaluated every input's mask and
// the vectoriser read the inputs with masked gathers: a concat of two [4096, 512] f32 along the
// last axis took 3.4-4.0 ms, 0.56-0.59 ms in pieces (1 thread, Zen 4; docs/performance.md,
// "Concats, pads, strided slices and gathers on LLVM").
//
// prefers_no_gather: which kernels get "+prefer-no-gather" on their functions (below).
#include <functional>
#include <limits>
#include <set>

#include "ir/expr_util.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

std::vector<RowPiece> plan_row_pieces(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Pointwise || k.outer.empty()) return {};
  for (const ir::Phase& ph : k.phases)
    if (ph.over_reduce) return {};
  const int inner = static_cast<int>(k.outer.size()) - 1;
  std::set<int64_t> all;
  for (const ir::Phase& ph : k.phases)
    for (const ir::Store& st : ph.stores)
      for (const ir::Expr* e : {st.index.get(), st.value.get()})
        for (int64_t c : ir::var_range_cuts(e, inner))
          if (c > 0) all.insert(c);  // (o >= 0 always: a cut at 0 or below splits nothing)
  if (all.empty() || all.size() > kMaxRowCuts) return {};
  const std::vector<int64_t> cuts(all.begin(), all.end());
  std::vector<RowPiece> pieces;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    RowPiece p{i == 0 ? 0 : cuts[i - 1], i == cuts.size() ? std::numeric_limits<int64_t>::max() : cuts[i], {}};
    for (const ir::Phase& ph : k.phases) {
      ir::Phase q = ph;
      for (ir::Store& st : q.stores) {
        st.index = ir::fold_var_range(st.index, inner, p.lo, p.hi);
        st.value = ir::fold_var_range(st.value, inner, p.lo, p.hi);
      }
      p.phases.push_back(std::move(q));
    }
    pieces.push_back(std::move(p));
  }
  return pieces;
}

// Whether the vectoriser should read `k`'s loads without gather instructions. LLVM's cost model
// takes AVX-512 gathers as fast ("fast-gather"), so it vectorised a step-2 slice's load as a
// 16-lane gather (vgatherdps: on Zen 4 about an element per cycle) rather than as wide loads
// and shuffles (an interleave group); a gather whose index is data (index_select, gather) as
// well, where scalar loads inserted into a vector beat it. With "prefer-no-gather" on the
// kernel's functions, [4096, 2048] -> [4096, 1024] step 2 went from 5.4-5.6 to 1.6 ms, step 3
// from 7.4-7.5 to 2.2-2.3 ms, index_select of 512 columns of [4096, 1024] from 3.3-5.0 to
// 1.8-2.0 ms and a random gather along the rows from 6.3-7.3 to 4.7-4.9 ms (1 thread, Zen 4).
// Only pointwise kernels with such a load take it: set for every kernel it made a mean over a
// middle axis 1.6x slower and a 3-way concat 1.35x slower (docs/performance.md, "Concats, pads,
// strided slices and gathers on LLVM").
bool prefers_no_gather(const ir::Kernel& k) {
  if (k.kind != ir::KernelKind::Pointwise || k.outer.empty()) return false;
  const int inner = static_cast<int>(k.outer.size()) - 1;
  bool found = false;
  std::set<const ir::Expr*> seen;  // (a DAG: shared subexpressions once)
  std::function<void(const ir::Expr*)> visit = [&](const ir::Expr* e) {
    if (found || !seen.insert(e).second) return;
    if (e->kind == ir::ExprKind::Load) {
      const ir::Expr* idx = e->args[0].get();
      if (ir::contains(idx, ir::ExprKind::Load) && ir::depends_on(idx, ir::Space::Outer, inner)) {
        found = true;  // a gather along the vectorised dim
        return;
      }
      const std::optional<int64_t> step = ir::affine_step(idx, ir::Space::Outer, inner);
      if (step && (*step >= 2 || *step <= -2) && *step <= 8 && *step >= -8) {
        found = true;  // a strided read an interleave group covers
        return;
      }
    }
    for (const auto& a : e->args) visit(a.get());
  };
  for (const ir::Phase& ph : k.phases)
    for (const ir::Store& st : ph.stores) visit(st.value.get());
  return found;
}
}  // namespace kfuse::detail::llvmjit
