// xbyak backend: expression evaluation, the Gen members (gen.hpp) that turn one expression DAG
// into vector instructions: make_dag (the DAG of a phase body, built once and evaluated for every
// vector copy or reduce index), eval (register allocation with Belady spilling to stack slots,
// loop invariants from their slots), emit_leaf/emit_op (instruction selection per leaf and op,
// the math injectors), root_actions (stores and accumulations of a root). Called by the loops of
// emitter.cpp and lanes.cpp; calls back the lane path for the leaves and stores of a lane Eval.
#include <algorithm>
#include <cstring>

#include "gen.hpp"
#include "reg_group.hpp"

namespace kfuse::detail::xb {

template <class Vmm>
typename Gen<Vmm>::Dag Gen<Vmm>::make_dag(const std::vector<const ir::Expr*>& roots,
                                          const std::unordered_map<const ir::Expr*, int>* inv,
                                          const std::vector<PhaseItem>& items, const std::vector<int>& accs,
                                          const std::unordered_map<const ir::Expr*, int>* to_slot,
                                          const std::unordered_map<const ir::Expr*, int>* recip) const {
  Dag g;
  std::unordered_map<const ir::Expr*, int> pos;
  std::vector<std::vector<int>> args;  // per node, then flattened
  auto visit = [&](const ir::Expr* e, auto&& self) -> int {
    if (auto it = pos.find(e); it != pos.end()) return it->second;
    typename Dag::Node n;
    n.e = e;
    if (inv)
      if (auto it = inv->find(e); it != inv->end()) n.inv = it->second;
    // (a masked load is an op over its condition: index_masks.cpp, masked_load)
    const bool masked = is_masked_load(e);  // (a random number: an op without value operands, random.cpp)
    n.leaf = n.inv >= 0 || e->kind == ExprKind::Const || e->kind == ExprKind::Acc ||
             (e->kind == ExprKind::Load && !masked) || is_cmp(e) ||
             seg_row_leaf(e);  // (a segment kernel's cast.f32 of a narrow row is one load)
    std::vector<int> a;
    if (recip)
      if (auto it = recip->find(e); it != recip->end()) n.recip = it->second;
    if (n.recip >= 0) {
      a.push_back(self(e->args[0].get(), self));
    } else if (masked && !n.leaf) {
      a.push_back(self(e->args[1].get(), self));
    } else if (is_rand(e)) {
    } else if (!n.leaf) {
      if (e->args.size() > 3) throw DeclineError("xbyak: internal: op with more than 3 operands");
      for (const auto& x : e->args) a.push_back(self(x.get(), self));
    }
    const int p = static_cast<int>(g.nodes.size());
    pos[e] = p;
    g.nodes.push_back(n);
    args.push_back(std::move(a));
    return p;
  };
  for (const auto* r : roots) visit(r, visit);
  link(g, args);
  const int n = static_cast<int>(g.nodes.size());
  // root actions, grouped per node in the order of `items` / `accs`
  for (int p = 0; p < n; ++p) {
    auto& node = g.nodes[p];
    if (to_slot)
      if (auto it = to_slot->find(node.e); it != to_slot->end()) node.to_slot = it->second;
    node.st0 = static_cast<int>(g.stores.size());
    for (const auto& it : items)
      if (it.store->value.get() == node.e) g.stores.push_back(&it);
    node.nst = static_cast<int>(g.stores.size()) - node.st0;
    node.acc0 = static_cast<int>(g.accs.size());
    for (int a : accs)
      if (k_.accs[a].value.get() == node.e) g.accs.push_back(a);
    node.nacc = static_cast<int>(g.accs.size()) - node.acc0;
  }
  return g;
}

// Fills the operand and use lists of g's nodes (positions) from args (per node, its operands).
template <class Vmm>
void Gen<Vmm>::link(Dag& g, const std::vector<std::vector<int>>& args) {
  const int n = static_cast<int>(g.nodes.size());
  std::vector<std::vector<int>> uses(n);
  g.args.clear();
  g.uses.clear();
  for (int p = 0; p < n; ++p) {
    auto& node = g.nodes[p];
    node.arg0 = static_cast<int>(g.args.size());
    node.nargs = static_cast<int>(args[p].size());
    for (int a : args[p]) {
      g.args.push_back(a);
      uses[a].push_back(p);
    }
  }
  for (int p = 0; p < n; ++p) {
    auto& node = g.nodes[p];
    node.use0 = static_cast<int>(g.uses.size());
    node.nuses = static_cast<int>(uses[p].size());
    node.last = uses[p].empty() ? p : uses[p].back();
    g.uses.insert(g.uses.end(), uses[p].begin(), uses[p].end());
  }
}

// Register allocation of one DAG evaluation: operands are loaded into registers (reloaded from
// their spill slot if evicted), a free register is taken for the result, otherwise the one whose
// value is used farthest ahead is spilled (Belady). Pinned: the accumulators, the mask and the
// accumulator scratch.
template <class Vmm>
void Gen<Vmm>::eval(const Dag& g, const Eval& ev) {
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int>& reg = ev_reg_;    // per node: register holding it, or -1
  std::vector<int>& slot = ev_slot_;  // per node: spill slot, or -1
  reg.assign(n, -1);
  slot.assign(n, -1);
  int owner[32];  // per register: node held, or -1
  bool pinned[32];
  for (int i = 0; i < NREG; ++i) {
    owner[i] = -1;
    pinned[i] = false;
  }
  pinned[kMaskReg] = pinned[kAccTmp] = true;
  for (auto [a, r] : acc_reg_) pinned[r] = true;
  for (auto [a, r] : acc_nan_) pinned[r] = true;
  for (int r : online_regs_) pinned[r] = true;
  for (const auto& c : ireg_) pinned[c.second] = true;
  for (const auto& c : seg_nib_reg_) pinned[c.second] = true;
  for (const auto& [regs, nans] : acc_sets_) {
    for (auto [a, r] : regs) pinned[r] = true;
    for (auto [a, r] : nans) pinned[r] = true;
  }

  auto next_use = [&](int p, int i) {
    const auto& node = g.nodes[p];
    for (int k = node.use0; k < node.use0 + node.nuses; ++k)
      if (g.uses[k] >= i) return g.uses[k];
    return 1 << 30;
  };
  uint32_t busy = 0;  // registers that must not be taken now
  auto taken = [&](int r) { return pinned[r] || (busy >> r & 1u); };
  auto alloc = [&](int i) -> int {
    for (int r = 0; r < NREG; ++r)
      if (owner[r] < 0 && !taken(r)) {
        max_reg_ = std::max(max_reg_, r);
        return r;
      }
    int victim = -1, far = -1;
    for (int r = 0; r < NREG; ++r) {
      if (owner[r] < 0 || taken(r)) continue;
      int nu = next_use(owner[r], i);
      if (nu > far) {
        far = nu;
        victim = r;
      }
    }
    if (victim < 0) throw DeclineError("xbyak: out of vector registers");
    const int vp = owner[victim];
    if (slot[vp] < 0) {
      slot[vp] = new_vslot();
      ++spills_;
      vmovups(ptr[rsp + vslot_off(slot[vp])], Vmm(victim));
    }
    reg[vp] = -1;
    owner[victim] = -1;
    return victim;
  };

  // The register of node a as an operand at position i (reloaded if spilled), kept busy.
  auto operand = [&](int a, int i) {
    int r = reg[a];
    if (r < 0) {
      r = alloc(i);
      vmovups(Vmm(r), ptr[rsp + vslot_off(slot[a])]);
      reg[a] = r;
      owner[r] = a;
    }
    busy |= 1u << r;
    return r;
  };
  // An interleaved copy's vector and accumulator set (interleave()).
  auto enter = [&](const typename Dag::Node& node) {
    if (node.copy < 0) return;
    disp_ = node.copy * VB;
    if (node.nacc) use_acc_set(node.copy);
  };
  // The copies i .. i + k - 1 of one math function (interleave() puts them side by side): their
  // operands, destinations and scratch registers all at once, then emit_math_group.
  auto math_run = [&](int i, int k) {
    busy = 0;
    int opr[kMaxGroup], dst[kMaxGroup];
    for (int c = 0; c < k; ++c) opr[c] = operand(g.args[g.nodes[i + c].arg0], i);
    // A copy's own operand, last used here, becomes its destination (the function works in
    // place); every other destination is a free register, so no copy's first instruction
    // overwrites another copy's operand.
    for (int c = 0; c < k; ++c) {
      const int a = g.args[g.nodes[i + c].arg0];
      dst[c] = -1;
      if (g.nodes[a].last <= i + k - 1 && g.nodes[a].copy == c && reg[a] >= 0) {
        dst[c] = reg[a];
        owner[reg[a]] = -1;
        reg[a] = -1;
      }
    }
    for (int c = 0; c < k; ++c)
      if (dst[c] < 0) {
        dst[c] = alloc(i);
        busy |= 1u << dst[c];
      }
    const int ns = scratch_count(g.nodes[i].e);
    Vmm scr[kMaxGroup * 8];
    for (int s = 0; s < k * ns; ++s) {
      const int r = alloc(i);
      scr[s] = Vmm(r);
      busy |= 1u << r;
    }
    Vmm d[kMaxGroup];
    for (int c = 0; c < k; ++c) {
      d[c] = Vmm(dst[c]);
      if (dst[c] != opr[c]) vmovups(d[c], Vmm(opr[c]));
    }
    emit_math_group(g.nodes[i].e, d, k, scr);
    for (int c = 0; c < k; ++c) {  // operands not taken as destinations, last used here
      const int a = g.args[g.nodes[i + c].arg0];
      if (g.nodes[a].last <= i + k - 1 && reg[a] >= 0) {
        owner[reg[a]] = -1;
        reg[a] = -1;
      }
    }
    for (int c = 0; c < k; ++c) {
      const auto& node = g.nodes[i + c];
      reg[i + c] = dst[c];
      owner[dst[c]] = i + c;
      enter(node);
      root_actions(g, node, d[c], ev);
      if (node.last <= i + c) {
        owner[dst[c]] = -1;
        reg[i + c] = -1;
      }
    }
  };

  for (int i = 0; i < n; ++i) {
    const auto& node = g.nodes[i];
    const int* args = g.args.data() + node.arg0;
    if (node.copy == 0 && !node.leaf && node.recip < 0 && math_group_op(node.e)) {
      int k = 1;
      while (k < kMaxGroup && i + k < n && g.nodes[i + k].e == node.e && g.nodes[i + k].copy == k) ++k;
      if (k > 1) {
        math_run(i, k);
        i += k - 1;
        continue;
      }
    }
    enter(node);
    if (node.leaf && node.nacc == 1 && node.nst == 0 && node.to_slot < 0 && node.nuses == 0 &&
        sum_from_memory(g.accs[node.acc0], node, ev))
      continue;
    // An invariant the loop keeps in a register (invariants_in_regs) is used from there: pinned,
    // so never a destination, a scratch or a spill victim. (Roots are copied: a store or an
    // accumulation may take its register as the value to change.)
    if (node.leaf && node.nst == 0 && node.nacc == 0 && node.to_slot < 0) {
      if (const int r = leaf_reg(node, ev); r >= 0) {
        reg[i] = r;
        continue;
      }
    }
    busy = 0;
    int opr[3];
    for (int j = 0; j < node.nargs; ++j) opr[j] = operand(args[j], i);
    // operands whose last use is here may be reused as the destination (not as scratch)
    for (int j = 0; j < node.nargs; ++j) {
      const int a = args[j];
      if (g.nodes[a].last == i && reg[a] >= 0) {
        owner[reg[a]] = -1;
        reg[a] = -1;
      }
    }
    const uint32_t operands = busy;
    busy = 0;
    for (int r = 0; r < NREG; ++r)
      if ((operands >> r & 1u) && owner[r] >= 0) busy |= 1u << r;  // still-live operands stay put
    const int dst = alloc(i);
    busy = operands | 1u << dst;
    Vmm scr[8];
    const int ns = node.leaf ? 0 : scratch_count(node.e);
    for (int s = 0; s < ns; ++s) {
      const int r = alloc(i);
      scr[s] = Vmm(r);
      busy |= 1u << r;
    }
    if (node.leaf) emit_leaf(node, Vmm(dst), ev);
    else if (node.recip >= 0) vmulps(Vmm(dst), Vmm(opr[0]), slot_operand(node.recip));
    else if (node.e->kind == ExprKind::Load) masked_load(Vmm(dst), node.e, Vmm(opr[0]), ev.masked);
    else if (is_rand(node.e)) rand_uniform(Vmm(dst), p_.rands.at(node.e), scr);
    else emit_op(node.e, Vmm(dst), opr, node.nargs, scr);
    reg[i] = dst;
    owner[dst] = i;
    root_actions(g, node, Vmm(dst), ev);
    if (node.last <= i) {
      owner[dst] = -1;
      reg[i] = -1;
    }
  }
}

// A leaf that only feeds Sum accumulator a, read from memory unmasked (an f32 load, a segment
// kernel's f32 row): added straight from its address, one instruction instead of a load and an
// add (an f32 bag's id: 8 vectors of a 64-float row). Same bits. False when it is not one.
template <class Vmm>
bool Gen<Vmm>::sum_from_memory(int a, const typename Dag::Node& n, const Eval& ev) {
  if (ev.masked || ev.lanes || n.inv >= 0 || a == cap_acc_ || k_.accs[a].kind != ir::AccKind::Sum) return false;
  const ir::Expr* e = n.e;
  if (e->dtype != DType::F32) return false;
  Address at = ptr[rsp];
  if (const auto* row = seg_row_address(e)) {
    at = *row;
  } else if (e->kind == ExprKind::Load && !p_.segment) {
    const Access& l = p_.loads.at(e);
    if (l.coeff != 1 || k_.buffers[static_cast<size_t>(e->index)].dtype != DType::F32) return false;
    at = ptr[stream(l.addr) + r14 * 4 + disp_];
  } else {
    return false;
  }
  const Vmm acc(acc_reg_.at(a));
  vaddps(acc, acc, at);
  return true;
}

// The register invariants_in_regs keeps leaf n in, or -1.
template <class Vmm>
int Gen<Vmm>::leaf_reg(const typename Dag::Node& n, const Eval& ev) {
  if (dry_ || ireg_.empty()) return -1;  // (a dry run counts the use in emit_leaf)
  auto reg_of = [](const Cst& c) { return c.in_reg ? c.reg.getIdx() : -1; };
  if (n.inv >= 0) return reg_of(slot_operand(n.inv));
  const ir::Expr* e = n.e;
  if (e->kind == ExprKind::Acc && !ev.lanes) return acc_reg(acc_index(e));
  if (e->kind == ExprKind::Const) return reg_of(const_operand(e));
  return -1;
}

template <class Vmm>
void Gen<Vmm>::emit_leaf(const typename Dag::Node& n, const Vmm& d, const Eval& ev) {
  if (n.inv >= 0) {
    vmovups(d, slot_operand(n.inv));
    return;
  }
  const ir::Expr* e = n.e;
  if (seg_leaf(e, d, ev)) return;
  if (is_cmp(e)) {
    cmp_mask(d, p_.cmps.at(e));
    return;
  }
  switch (e->kind) {
    case ExprKind::Const: vmovups(d, const_operand(e)); return;
    case ExprKind::Acc:
      if (ev.lanes) {
        lane_acc(d, e->index);
        return;
      }
      acc_broadcast(d, acc_index(e));
      return;
    case ExprKind::Load: {
      const Access& a = p_.loads.at(e);
      if (ev.lanes) {
        lane_load(d, a);
        return;
      }
      if (p_.addrs[static_cast<size_t>(a.addr)].dtype != DType::F32) {
        narrow_load(d, a, a.coeff == 0, ev.masked);
        return;
      }
      Reg64 b = stream(a.addr);
      if (a.coeff == 0) {
        vbroadcastss(d, dword[b]);
      } else if (!ev.masked) {
        vmovups(d, ptr[b + r14 * 4 + disp_]);
      } else if constexpr (Z) {
        vmovups(d | k1 | T_z, ptr[b + r14 * 4 + disp_]);
      } else {
        vmaskmovps(d, Vmm(kMaskReg), ptr[b + r14 * 4 + disp_]);
      }
      return;
    }
    default: throw DeclineError("xbyak: internal: bad leaf");
  }
}

// bool operand as a lane mask (bool values are all-ones/zero lanes); f32 -> (x != 0)
template <class Vmm>
void Gen<Vmm>::truth(const Vmm& d, const ir::Expr* arg, const Vmm& v) {
  if (arg->dtype == DType::Bool) {
    if (d.getIdx() != v.getIdx()) vmovups(d, v);
  } else {
    cmp_to_mask(d, v, cst(0.0f), kNeqUQ);
  }
}

template <class Vmm>
void Gen<Vmm>::cmp_to_mask(const Vmm& d, const Vmm& a, const Xbyak::Operand& b, uint8_t pred) {
  if constexpr (Z) {
    vcmpps(k2, a, b, pred);
    vpmovm2d(d, k2);
  } else {
    vcmpps(d, a, b, pred);
  }
}

template <class Vmm>
void Gen<Vmm>::blend(const Vmm& d, const Vmm& mask, const Vmm& if_true, const Vmm& if_false) {
  if constexpr (Z) {
    vpmovd2m(k2, mask);
    vblendmps(d | k2, if_false, if_true);
  } else {
    vblendvps(d, if_false, if_true, mask);
  }
}

// True when e is <= 0 or NaN for every input, by its form: -(y*y), -|y|, and v - m where m is
// a Max accumulator over the same v (the row's maximum: softmax's exp argument). exp then needs
// only its lower clamp (one vector op and one constant load fewer).
template <class Vmm>
bool Gen<Vmm>::nonpositive(const ir::Expr* e) const {
  if (e->kind != ExprKind::Op || e->dtype != DType::F32) return false;
  const auto arg = [&](int i) { return e->args[static_cast<size_t>(i)].get(); };
  const auto is = [](const ir::Expr* x, Op o) { return x->kind == ExprKind::Op && x->op == o; };
  if (e->op == Op::Neg) {
    const ir::Expr* y = arg(0);
    if (is(y, Op::Abs) || is(y, Op::Square)) return true;
    return is(y, Op::Mul) && ir::same_expr(y->args[0].get(), y->args[1].get());
  }
  if (e->op == Op::Mul)  // (-y) * y
    for (int i = 0; i < 2; ++i)
      if (is(arg(i), Op::Neg) && ir::same_expr(arg(i)->args[0].get(), arg(1 - i))) return true;
  return minus_row_max(e);
}

// e = v - m, m a Max accumulator over the same v (the row's maximum: softmax's exp argument)
template <class Vmm>
bool Gen<Vmm>::minus_row_max(const ir::Expr* e) const {
  if (e->kind != ExprKind::Op || e->op != Op::Sub || e->args[1]->kind != ExprKind::Acc) return false;
  const ir::Accumulator& m = k_.accs[static_cast<size_t>(e->args[1]->index)];
  return m.kind == ir::AccKind::Max && ir::same_expr(m.value.get(), e->args[0].get());
}

// s is a Sum accumulator of exp(v - m) with m the row's maximum of v: s >= 1 (the maximum's own
// term is exp(0) = 1) or NaN. So 1/s is a normal number in (0, 1] (or NaN) and x * (1/s) is
// within 1.5 ulp of x / s for every x, specials included (x = inf, 0, NaN; s = NaN, inf).
template <class Vmm>
bool Gen<Vmm>::sum_of_exps_at_max(const ir::Expr* s) const {
  if (s->kind != ExprKind::Acc || s->dtype != DType::F32) return false;
  const ir::Accumulator& a = k_.accs[static_cast<size_t>(s->index)];
  const ir::Expr* v = a.value.get();
  return a.kind == ir::AccKind::Sum && v->kind == ExprKind::Op && v->op == Op::Exp && minus_row_max(v->args[0].get());
}

template <class Vmm>
void Gen<Vmm>::emit_op(const ir::Expr* e, const Vmm& d, const int* o, int nopr, const Vmm* t) {
  Vmm a(o[0]);
  Vmm b(nopr > 1 ? o[1] : o[0]);
  auto unary_inplace = [&](auto&& f) {
    if (d.getIdx() != a.getIdx()) vmovups(d, a);
    f(d, t);
  };
  if (injector_math_op(e->op)) {
    const bool np = e->op == Op::Exp && nonpositive(e->args[0].get());
    unary_inplace([&](const Vmm& x, const Vmm* s) { apply_math(inj_, e->op, x, s, np); });
    return;
  }
  switch (e->op) {
    case Op::Neg: inj_.vxor(d, a, cstu(0x80000000u)); return;
    case Op::Abs: inj_.vand(d, a, cstu(0x7fffffffu)); return;
    case Op::Sqrt: vsqrtps(d, a); return;
    case Op::Rsqrt:
      vsqrtps(t[0], a);
      vmovups(d, cst(1.0f));
      vdivps(d, d, t[0]);
      return;
    case Op::Recip:
      vmovups(t[0], cst(1.0f));
      vdivps(d, t[0], a);
      return;
    case Op::Square: vmulps(d, a, a); return;
    case Op::Relu:
      // x > 0 or NaN ? x : +0
      if constexpr (Z) {
        vcmpps(k2, a, cst(0.0f), kNleUQ);
        vmovups(d | k2 | T_z, a);
      } else {
        vcmpps(t[0], a, cst(0.0f), kNleUQ);
        vandps(d, a, t[0]);
      }
      return;
    case Op::Floor: inj_.round(d, a, 1); return;
    case Op::Ceil: inj_.round(d, a, 2); return;
    case Op::Round: inj_.round(d, a, 0); return;
    case Op::Sign:
      vmovups(t[0], a);
      select(t[0], a, cst(0.0f), kGtOS, cst(1.0f), d.getIdx() == a.getIdx() ? Vmm(kAccTmp) : d);
      select(t[0], a, cst(0.0f), kLtOS, cst(-1.0f), d.getIdx() == a.getIdx() ? Vmm(kAccTmp) : d);
      vmovups(d, t[0]);
      return;
    case Op::Not:
      if (e->args[0]->dtype == DType::Bool) inj_.vxor(d, a, cstu(0xffffffffu));
      else cmp_to_mask(d, a, cst(0.0f), kEqOQ);
      return;
    case Op::Add: vaddps(d, a, b); return;
    case Op::Sub: vsubps(d, a, b); return;
    case Op::Mul: vmulps(d, a, b); return;
    case Op::Div: vdivps(d, a, b); return;
    case Op::Maximum:
    case Op::Minimum:
      if (e->dtype == DType::Bool) {  // max/min of truth masks
        if (e->op == Op::Maximum) inj_.vor(d, a, b);
        else inj_.vand(d, a, b);
        return;
      }
      if (e->op == Op::Maximum) vmaxps(t[0], a, b);
      else vminps(t[0], a, b);                                                      // NaN in b -> b
      select(t[0], a, a, kUnordQ, a, d.getIdx() == a.getIdx() ? Vmm(kAccTmp) : d);  // NaN in a -> a
      vmovups(d, t[0]);
      return;
    case Op::Eq:
    case Op::Ne:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge: {
      static const std::map<Op, uint8_t> pred = {{Op::Eq, kEqOQ}, {Op::Ne, kNeqUQ}, {Op::Lt, kLtOS},
                                                 {Op::Le, kLeOS}, {Op::Gt, kGtOS},  {Op::Ge, kGeOS}};
      if (e->args[0]->dtype == DType::Bool) {  // compare truth masks: as 0/1 floats
        inj_.vand(t[0], a, cst(1.0f));
        inj_.vand(d, b, cst(1.0f));
        cmp_to_mask(d, t[0], d, pred.at(e->op));
      } else {
        cmp_to_mask(d, a, b, pred.at(e->op));
      }
      return;
    }
    case Op::And:
    case Op::Or:
      truth(t[0], e->args[0].get(), a);
      truth(d, e->args[1].get(), b);
      if (e->op == Op::And) inj_.vand(d, d, t[0]);
      else inj_.vor(d, d, t[0]);
      return;
    case Op::Where: {
      Vmm c(o[0]), x(o[1]), y(o[2]);
      truth(t[0], e->args[0].get(), c);
      blend(d, t[0], x, y);
      if (e->dtype == DType::Bool && e->args[1]->dtype != DType::Bool) throw DeclineError("xbyak: where dtype mix");
      return;
    }
    case Op::Fma: {  // d = a * b + c, one rounding; whichever operand d shares a register with
      Vmm c(o[2]);
      if (d.getIdx() == c.getIdx()) vfmadd231ps(d, a, b);
      else if (d.getIdx() == a.getIdx()) vfmadd213ps(d, b, c);
      else if (d.getIdx() == b.getIdx()) vfmadd213ps(d, a, c);
      else {
        vmovups(d, c);
        vfmadd231ps(d, a, b);
      }
      return;
    }
    case Op::Cast: {
      DType from = e->args[0]->dtype, to = e->dtype;
      if (from == to || (to == DType::F32 && is_narrow(from))) {  // (narrow values: f32 lanes)
        if (d.getIdx() != a.getIdx()) vmovups(d, a);
      } else if (is_narrow(to)) {
        narrow_round(to, d, a, t);
      } else if (to == DType::Bool) {
        cmp_to_mask(d, a, cst(0.0f), kNeqUQ);
      } else {
        inj_.vand(d, a, cst(1.0f));  // bool mask -> 1.0f / 0.0f
      }
      return;
    }
    default: throw DeclineError(std::string("xbyak: op ") + op_name(e->op) + " not supported");
  }
}

template <class Vmm>
void Gen<Vmm>::root_actions(const Dag& g, const typename Dag::Node& n, const Vmm& v, const Eval& ev) {
  if (n.to_slot >= 0) vmovups(ptr[rsp + vslot_off(n.to_slot)], v);
  for (int k = n.st0; k < n.st0 + n.nst; ++k) {
    const PhaseItem* s = g.stores[k];
    if (ev.lanes) {
      lane_store(s->acc, v);
      continue;
    }
    if (p_.addrs[static_cast<size_t>(s->acc.addr)].dtype != DType::F32) {
      narrow_store(s->acc, v, !ev.in_loop || s->acc.coeff == 0, ev.masked);
      continue;
    }
    Reg64 b = stream(s->acc.addr);
    if (!ev.in_loop) {
      vmovss(dword[b], Xbyak::Xmm(v.getIdx()));
    } else if (s->acc.coeff == 0) {  // one-point kernel: lane 0
      vmovss(dword[b], Xbyak::Xmm(v.getIdx()));
    } else if (!ev.masked) {
      if (stream_) vmovntps(ptr[b + r14 * 4 + disp_], v);
      else vmovups(ptr[b + r14 * 4 + disp_], v);
    } else if constexpr (Z) {
      vmovups(ptr[b + r14 * 4 + disp_] | k1, v);
    } else {
      vmaskmovps(ptr[b + r14 * 4 + disp_], Vmm(kMaskReg), v);
    }
  }
  for (int k = n.acc0; k < n.acc0 + n.nacc; ++k) accumulate(g.accs[k], v, ev.masked);
}

// The entry points called from emitter.cpp and lanes.cpp (the other members are instantiated
// through them).
#define KFUSE_XB_EVAL_ENTRY_POINTS(V)                                                                          \
  template typename Gen<V>::Dag Gen<V>::make_dag(                                                              \
      const std::vector<const ir::Expr*>&, const std::unordered_map<const ir::Expr*, int>*,                    \
      const std::vector<PhaseItem>&, const std::vector<int>&, const std::unordered_map<const ir::Expr*, int>*, \
      const std::unordered_map<const ir::Expr*, int>*) const;                                                  \
  template void Gen<V>::eval(const Dag&, const Eval&);                                                         \
  template void Gen<V>::link(Dag&, const std::vector<std::vector<int>>&);                                      \
  template void Gen<V>::emit_leaf(const typename Dag::Node&, const V&, const Eval&);                           \
  template bool Gen<V>::sum_of_exps_at_max(const ir::Expr*) const;
KFUSE_XB_EVAL_ENTRY_POINTS(Xbyak::Zmm)
KFUSE_XB_EVAL_ENTRY_POINTS(Xbyak::Ymm)
#undef KFUSE_XB_EVAL_ENTRY_POINTS

}  // namespace kfuse::detail::xb
