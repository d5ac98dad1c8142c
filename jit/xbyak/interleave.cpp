// xbyak backend: interleaved copies of a loop body, the Gen members (gen.hpp) behind them:
// interleave (U copies of a body's DAG, node by node) and emit_math_group (one math function of
// every copy, instruction by instruction, through the injectors over register groups,
// reg_group.hpp). loop_phase (emitter.cpp) takes them when the copies fit the registers; eval
// (eval.cpp) hands a run of copies of one math function to emit_math_group.
//
// Measured (2-vCPU AMD EPYC, AVX2; see docs/performance.md): a body of one vector at a time
// leaves the out-of-order window one chain of 15-30 dependent vector ops per math function.
#include "gen.hpp"
#include "reg_group.hpp"

namespace kfuse::detail::xb {

// U copies of a loop body's DAG, interleaved node by node (node p of copies 0..U-1, then node
// p + 1): copy j is the vector at r14 + j*W and accumulates into set j. Why: a math function is
// a chain of 15-30 dependent vector ops; one vector after the other, the out-of-order window
// holds only two or three vectors' chains and the FMA pipes wait on latency, while U chains side
// by side issue together. Leaves that are the same for every copy (constants, hoisted
// invariants, finished accumulators, broadcast loads) stay one node, shared.
template <class Vmm>
typename Gen<Vmm>::Dag Gen<Vmm>::interleave(const Dag& g, int U) const {
  Dag w;
  w.stores = g.stores;
  w.accs = g.accs;
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> at(n);  // position of node p's copy 0 (its only one when shared)
  std::vector<char> shared(n, 0);
  std::vector<std::vector<int>> args;
  for (int p = 0; p < n; ++p) {
    const auto& node = g.nodes[p];
    const ir::Expr* e = node.e;
    shared[p] = node.leaf && node.nst == 0 && node.nacc == 0 && node.to_slot < 0 &&
                (node.inv >= 0 || e->kind == ExprKind::Const || e->kind == ExprKind::Acc ||
                 (e->kind == ExprKind::Load && p_.loads.at(e).coeff == 0));
    at[p] = static_cast<int>(w.nodes.size());
    for (int j = 0; j < (shared[p] ? 1 : U); ++j) {
      w.nodes.push_back(node);
      w.nodes.back().copy = shared[p] ? -1 : j;
      std::vector<int> a;
      for (int k = node.arg0; k < node.arg0 + node.nargs; ++k) {
        const int q = g.args[k];
        a.push_back(at[q] + (shared[q] ? 0 : j));
      }
      args.push_back(std::move(a));
    }
  }
  link(w, args);
  return w;
}

// Whether eval emits the copies of e as one group (emit_math_group): the unary functions the
// injectors compute in many dependent steps. AVX2 only (see reg_group.hpp).
template <class Vmm>
bool Gen<Vmm>::math_group_op(const ir::Expr* e) const {
  return !Z && e->kind == ExprKind::Op && e->dtype == DType::F32 && injector_math_op(e->op);
}

// d[c] = e of copy c (its operand already in d[c]) for c < n; scratch scr[c * ns + s], ns =
// scratch_count(e). The same instructions as emit_op's, each emitted for every copy in turn.
template <class Vmm>
void Gen<Vmm>::emit_math_group(const ir::Expr* e, const Vmm* d, int n, const Vmm* scr) {
  if constexpr (Z) {
    throw DeclineError("xbyak: internal: math groups are AVX2 only");
  } else {
    const int ns = scratch_count(e);
    RegGroup x, t[8];
    for (int c = 0; c < n; ++c) {
      x.r[c] = d[c];
      for (int s = 0; s < ns; ++s) t[s].r[c] = scr[c * ns + s];
    }
    GroupHost<Gen> gh{*this, n};
    Injectors<GroupHost<Gen>, RegGroup> g{gh};
    apply_math(g, e->op, x, t, e->op == Op::Exp && nonpositive(e->args[0].get()));
  }
}

#define KFUSE_XB_INTERLEAVE_MEMBERS(V)                                     \
  template typename Gen<V>::Dag Gen<V>::interleave(const Dag&, int) const; \
  template bool Gen<V>::math_group_op(const ir::Expr*) const;              \
  template void Gen<V>::emit_math_group(const ir::Expr*, const V*, int, const V*);
KFUSE_XB_INTERLEAVE_MEMBERS(Xbyak::Zmm)
KFUSE_XB_INTERLEAVE_MEMBERS(Xbyak::Ymm)
#undef KFUSE_XB_INTERLEAVE_MEMBERS

}  // namespace kfuse::detail::xb
