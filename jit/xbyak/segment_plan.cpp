// xbyak backend: analysis of segment kernels (embedding bags), the subset segment.hpp describes.
// Everything else is declined with a reason: the kernel then runs on LLVM.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_set>

#include "ir/expr_util.hpp"
#include "segment.hpp"

namespace kfuse::detail::xb {

using ir::ExprKind;
using ir::ExprRef;

namespace {

// (the emitter's DeclineError: one type for every reason xbyak gives a kernel back)
[[noreturn]] void decline(const std::string& why) { throw DeclineError("xbyak: segment kernel: " + why); }

bool int_dtype(DType d) { return d == DType::I64 || d == DType::I32 || d == DType::Bool; }

// Narrow table dtypes a row load may convert from (cast.f32 of the load).
bool narrow_table(DType d) { return d == DType::U8 || d == DType::I8 || d == DType::F16 || d == DType::BF16; }

bool int_op(Op op) {
  switch (op) {
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Minimum:
    case Op::Maximum:
    case Op::Eq:
    case Op::Ne:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::Where:
    case Op::And:
    case Op::Or:
    case Op::Not:
    case Op::Cast: return true;
    default: return false;
  }
}

class Analysis {
 public:
  Analysis(const ir::Kernel& k, Plan& plan) : k_(k), plan_(plan), last_(static_cast<int>(k.outer.size()) - 1) {}

  void run() {
    if (k_.outer.size() < 2) decline("no column dimension (outer dims [bags..., columns] expected)");
    if (k_.outer.size() > static_cast<size_t>(kMaxOuterDims)) decline("more than 8 outer dimensions");
    if (k_.accs.size() > static_cast<size_t>(kMaxAccs)) decline("more than 64 accumulators");
    for (const auto& o : k_.outer)
      if (ir::contains(o.get(), ExprKind::Load)) decline("data-dependent outer extent");
    plan_.mode = Mode::Segment;
    plan_.row_dims = last_;
    if (!uniform(k_.reduce_begin, false, false) || !uniform(k_.reduce_end, false, false))
      decline("bag bounds are not uniform integer expressions: " + ir::print_expr(k_.reduce_begin) + " .. " +
              ir::print_expr(k_.reduce_end));
    if (k_.phases.empty() || !k_.phases[0].over_reduce || !k_.phases[0].stores.empty())
      decline("phase 0 must fold the bag (accumulators only, no stores)");
    for (size_t p = 1; p < k_.phases.size(); ++p)
      if (k_.phases[p].over_reduce) decline("more than one phase over the bag");
    sp_.scalar.resize(k_.phases.size());
    for (int a : k_.phases[0].accs) {
      const ir::Accumulator& A = k_.accs[a];
      if (A.dtype == DType::I64 && A.kind == ir::AccKind::Sum && uniform(A.value, true, false)) {
        sp_.int_accs.push_back(a);
        continue;
      }
      if (A.dtype != DType::F32) decline(std::string(dtype_name(A.dtype)) + " accumulator (f32, or an i64 count)");
      if (A.kind == ir::AccKind::ArgMax || A.kind == ir::AccKind::ArgMin)
        decline(std::string(ir::acc_kind_name(A.kind)) + " accumulators are not supported");
      sp_.vec_accs.push_back(a);
      value(A.value, 0);
    }
    if (sp_.vec_accs.empty()) decline("no f32 accumulator");
    plan_.stores.resize(k_.phases.size());
    for (size_t p = 1; p < k_.phases.size(); ++p)
      for (const auto& s : k_.phases[p].stores) {
        if (k_.buffers[static_cast<size_t>(s.buffer)].dtype != DType::F32) decline("non-f32 output");
        value(s.value, static_cast<int>(p));
        plan_.stores[p].push_back(epilogue_access(s.buffer, s.index, true));
      }
    find_shared();
    // Prefetched: rows, and gathered elements whose address does not move with the bag (a
    // per-bag element is read once, not worth a prefetch that would stop the next bag's).
    for (auto& p : sp_.ptrs) {
      bool bag_dim = false;
      for (int d = 0; d < last_; ++d) bag_dim |= ir::depends_on(p.base.get(), ir::Space::Outer, d);
      p.prefetch = p.row || (ir::contains(p.base.get(), ExprKind::Load) && !bag_dim);
    }
    sp_.ahead_past_bag = true;
    for (const auto& p : sp_.ptrs)
      for (int d = 0; d < last_; ++d)
        if (p.prefetch && ir::depends_on(p.base.get(), ir::Space::Outer, d)) sp_.ahead_past_bag = false;
    plan_.segment = std::make_shared<const SegmentPlan>(std::move(sp_));
  }

 private:
  // An integer (or bool) expression the same in every lane: evaluated in general registers.
  bool uniform(const ExprRef& e, bool r0, bool accs) {
    if (!int_dtype(e->dtype)) return false;
    switch (e->kind) {
      case ExprKind::Const:
      case ExprKind::Param: return true;
      case ExprKind::Var: return e->space == ir::Space::Outer ? e->index < last_ : r0 && e->index == 0;
      case ExprKind::Acc: return accs && k_.accs[static_cast<size_t>(e->index)].dtype == DType::I64;
      case ExprKind::Load: {
        const DType bt = k_.buffers[static_cast<size_t>(e->index)].dtype;
        if (bt != DType::I64 && bt != DType::I32) return false;
        for (const auto& a : e->args)
          if (!uniform(a, r0, accs)) return false;
        return true;
      }
      case ExprKind::Op:
        if (!int_op(e->op)) return false;
        for (const auto& a : e->args)
          if (!uniform(a, r0, accs)) return false;
        return true;
      default: return false;
    }
  }

  // A vector (f32 or bool) value of phase `ph`.
  void value(const ExprRef& e, int ph) {
    if (!seen_.insert({e.get(), ph}).second) return;
    const bool bag = ph == 0;
    if (e->kind != ExprKind::Const &&
        (e->dtype == DType::Bool ||
         (e->kind == ExprKind::Op && e->op == Op::Cast && e->dtype == DType::F32 && int_dtype(e->args[0]->dtype)))) {
      const ExprRef& x = e->dtype == DType::Bool ? e : e->args[0];
      if (uniform(x, bag, !bag)) {  // computed in a general register, broadcast
        sp_.scalar[static_cast<size_t>(ph)].push_back(e.get());
        if (bag) sp_.uniform.push_back(e.get());
        return;
      }
    }
    switch (e->kind) {
      case ExprKind::Const:
        if (e->dtype != DType::F32 && e->dtype != DType::Bool) decline(std::string(dtype_name(e->dtype)) + " constant");
        return;
      case ExprKind::Acc:
        if (bag) decline("accumulator read inside the bag's fold");
        if (k_.accs[static_cast<size_t>(e->index)].dtype != DType::F32) decline("i64 accumulator used as a vector");
        return;
      case ExprKind::Load:
        if (e->dtype != DType::F32) decline(std::string(dtype_name(e->dtype)) + " load used as a value");
        if (bag) row_leaf(e, e);
        else plan_.loads[e.get()] = epilogue_access(e->index, e->args[0]);
        return;
      case ExprKind::Op: break;
      default: decline("integer arithmetic used as a value: " + ir::print_expr(e));
    }
    if (e->dtype != DType::F32 && e->dtype != DType::Bool)
      decline(std::string(dtype_name(e->dtype)) + " arithmetic (" + op_name(e->op) + ")");
    if (e->op == Op::Pow || e->op == Op::Sin || e->op == Op::Cos) decline(std::string("op ") + op_name(e->op));
    if (e->op == Op::Fma && e->dtype != DType::F32) decline("fma of bools");
    if (e->op == Op::Cast && e->args[0]->dtype != DType::F32 && e->args[0]->dtype != DType::Bool) {
      const ExprRef& x = e->args[0];
      if (e->dtype == DType::F32 && bag && x->kind == ExprKind::Load && narrow_table(x->dtype)) {
        row_leaf(e, x);
        return;
      }
      if (e->dtype == DType::F32 && bag && x->kind == ExprKind::Op && x->op == Op::BitAnd) {
        nibble_leaf(e, x);  // (declines saying which part is not a 4-bit table's nibble)
        return;
      }
      decline("cast.f32 of " + std::string(dtype_name(x->dtype)) +
              " other than a u8/i8/f16/bf16 table row or a 4-bit table's nibble (" + ir::print_expr(e) + ")");
    }
    for (const auto& a : e->args) {
      if (a->dtype != DType::F32 && a->dtype != DType::Bool)
        decline(std::string(dtype_name(a->dtype)) + " operand of " + op_name(e->op));
      value(a, ph);
    }
  }

  // A phase-0 load (leaf = the load, or cast.f32 of it): a row (uniform + column) or a broadcast.
  void row_leaf(const ExprRef& leaf, const ExprRef& load) {
    if (load->args.size() > 1) decline("masked table load");
    auto s = ir::affine_split(load->args[0], ir::Space::Outer, last_);
    if (!s || (s->step != 0 && s->step != 1))
      decline("table index not (uniform + column): " + ir::print_expr(load->args[0]));
    add_leaf(leaf, load, s->base ? s->base : ir::iconst(0), s->step == 1, false);
  }

  // Leaf `leaf` reads `load` through the pointer buffer + base (per id): a row (a vector of
  // columns; nibble: a 4-bit table's, base in bytes) or one element, broadcast (shift >= 0: one
  // nibble of a u8 element, (byte >> shift) & 15).
  void add_leaf(const ExprRef& leaf, const ExprRef& load, ExprRef base, bool row, bool nibble, int shift = -1) {
    if (!uniform(base, true, false)) decline("table row index is not uniform: " + ir::print_expr(base));
    int64_t offset = 0;
    if (ExprRef rest = split_offset(base, offset); offset > -(1 << 24) && offset < (1 << 24)) base = rest;
    else offset = 0;  // (the offset goes into a 32-bit displacement in bytes)
    // (a nibble row's pointer also moves with the block's first column / 2: its own pointer)
    const auto key = std::make_tuple(load->index, ir::print_expr(base), nibble);
    auto [it, fresh] = ptr_ids_.emplace(key, static_cast<int>(sp_.ptrs.size()));
    if (fresh) sp_.ptrs.push_back({load->index, base, load->dtype, false, false, offset, offset, nibble});
    SegmentPlan::Ptr& p = sp_.ptrs[static_cast<size_t>(it->second)];
    p.row |= row;
    p.lo = std::min(p.lo, offset);
    p.hi = std::max(p.hi, offset);
    sp_.leaves[leaf.get()] = {it->second, row, offset, shift};
    if (!row) sp_.uniform.push_back(leaf.get());
  }

  // A 4-bit table's column (lib/api/quantize.cpp packs byte j = q[2j] | q[2j + 1] << 4):
  //   leaf = cast.f32(bitwise_and(shift_right(cast.iN(load u8[base + idiv(o, 2)]), s), 15))
  // (either operand order of the and), o the column and s = 4 * (o & 1): the low nibble of byte
  // o / 2 for an even column, the high one for an odd column, which is what the emitter's lanes
  // compute (segment.cpp, seg_leaf). A bag of one column has the column folded to a constant
  // (lowering drops o when its extent is 1): s is then a constant 0 or 4 and the leaf one
  // nibble per id, broadcast. Declines naming the part that differs.
  void nibble_leaf(const ExprRef& leaf, const ExprRef& x) {
    auto miss = [&](const std::string& what) {
      decline("not a 4-bit table's nibble (" + what + "): " + ir::print_expr(leaf));
    };
    const ExprRef* shifted = nullptr;
    for (int i = 0; i < 2; ++i)
      if (int_value(x->args[static_cast<size_t>(1 - i)]) == 15) shifted = &x->args[static_cast<size_t>(i)];
    if (!shifted) miss("the mask is not 15");
    const ExprRef& shr = *shifted;
    if (shr->kind != ExprKind::Op || shr->op != Op::Shr) miss("the masked value is not a shift_right");
    const std::optional<int> shift = nibble_shift(shr->args[1]);
    if (!shift) miss("the shift is not 4 * (column & 1)");
    ExprRef load = shr->args[0];
    if (load->kind == ExprKind::Op && load->op == Op::Cast && int_dtype(load->dtype) && load->dtype != DType::Bool)
      load = load->args[0];
    if (load->kind != ExprKind::Load || load->dtype != DType::U8 || load->args.size() != 1)
      miss("the shifted value is not an unmasked u8 load");
    if (*shift >= 0) {  // one nibble per id
      if (ir::depends_on(load->args[0].get(), ir::Space::Outer, last_))
        miss("a constant shift with a byte index that moves with the column");
      add_leaf(leaf, load, load->args[0], false, false, *shift);
      return;
    }
    // index = base + idiv(o, 2), the addends in any order
    std::vector<ExprRef> terms;
    std::function<void(const ExprRef&)> flatten = [&](const ExprRef& t) {
      if (t->kind == ExprKind::Op && t->op == Op::Add && t->dtype == DType::I64) {
        flatten(t->args[0]);
        flatten(t->args[1]);
      } else {
        terms.push_back(t);
      }
    };
    flatten(load->args[0]);
    ExprRef base;
    int halves = 0;
    for (const auto& t : terms) {
      if (t->kind == ExprKind::IDiv && is_column(t->args[0]) && int_value(t->args[1]) == 2) ++halves;
      else base = base ? ir::iadd(base, t) : t;
    }
    if (halves != 1) miss("the byte index is not (row + column / 2)");
    add_leaf(leaf, load, base ? base : ir::iconst(0), true, true);
  }

  bool is_column(const ExprRef& e) const {
    return e->kind == ExprKind::Var && e->space == ir::Space::Outer && e->index == last_;
  }

  // The value of an integer constant (any dtype holding an integer), or nullopt.
  static std::optional<int64_t> int_value(const ExprRef& e) {
    if (e->kind != ExprKind::Const || e->value != std::floor(e->value) || std::abs(e->value) > 0x1p40) return {};
    return static_cast<int64_t>(e->value);
  }

  // Whether s = 4 * (q & 1): shift_left(p, 2), mul(p, 4) or bitwise_and(shift_left(q, 2), 4)
  // with p = bitwise_and(q, 1), q = o + c exactly (column_value). Returns -1 when q is the
  // column o (c even, so s = 4 * (o & 1); the plan's max_columns is lowered to the columns for
  // which the steps are exact), the shift 0 or 4 when q is a constant, nullopt otherwise.
  std::optional<int> nibble_shift(const ExprRef& s) {
    if (s->kind != ExprKind::Op || !int_dtype(s->dtype)) return {};
    // the operand of e beside the constant c (either order but for a shift), or null
    auto beside = [](const ExprRef& e, Op op, int64_t c) -> const ExprRef* {
      if (e->kind != ExprKind::Op || e->op != op || e->args.size() != 2) return nullptr;
      if (int_value(e->args[1]) == c) return &e->args[0];
      if (op != Op::Shl && int_value(e->args[0]) == c) return &e->args[1];
      return nullptr;
    };
    const ExprRef* q = nullptr;
    if (const ExprRef* p = beside(s, Op::Shl, 2); p) q = beside(*p, Op::BitAnd, 1);
    else if (const ExprRef* p4 = beside(s, Op::Mul, 4); p4) q = beside(*p4, Op::BitAnd, 1);
    else if (const ExprRef* t = beside(s, Op::BitAnd, 4); t) q = beside(*t, Op::Shl, 2);
    if (!q) return {};
    int64_t c = 0, limit = INT64_MAX;
    bool column = false;
    if (!column_value(*q, c, limit, column) || limit < 1) return {};
    if (!column) return c % 2 == 0 ? 0 : 4;
    if (c % 2 != 0) return {};  // (the odd columns' low nibbles: not what the lanes compute)
    sp_.max_columns = std::min(sp_.max_columns, limit);
    return -1;
  }

  // Whether e is exactly o + c (`column`: o the column) or the constant c, for every column
  // o < limit, through the steps an arange of the columns lowers to: casts, + or - an integer
  // constant, * 1. A float step is exact while its values are integers its mantissa holds; a
  // float -> i32/i64 cast while they fit (then it truncates nothing); integer steps wrap, which
  // keeps the parity. `limit` is lowered to the columns for which every step is exact.
  bool column_value(const ExprRef& e, int64_t& c, int64_t& limit, bool& column) const {
    auto exact = [](DType d) -> int64_t {  // every integer of magnitude <= this is exact in d
      switch (d) {
        case DType::F32: return int64_t{1} << 24;
        case DType::F64: return int64_t{1} << 53;
        case DType::I32: return INT32_MAX;
        default: return INT64_MAX;
      }
    };
    const bool is_float = e->dtype == DType::F32 || e->dtype == DType::F64;
    auto fits = [&](int64_t bound) {  // values o + c, o in [0, limit), within +-bound
      const int64_t ac = c < 0 ? -c : c;
      if (ac >= bound) return false;
      limit = std::min(limit, bound - ac);
      return true;
    };
    if (is_column(e)) return column = true;
    if (const std::optional<int64_t> v = int_value(e); v && e->kind == ExprKind::Const) {
      c += *v;
      return !is_float || fits(exact(e->dtype));
    }
    if (e->kind != ExprKind::Op || (!is_float && !int_dtype(e->dtype)) || e->dtype == DType::Bool) return false;
    if (e->op == Op::Cast) {
      const DType from = e->args[0]->dtype;
      if (!column_value(e->args[0], c, limit, column)) return false;
      if (is_float) return fits(exact(e->dtype));
      return from == DType::F32 || from == DType::F64 ? fits(exact(e->dtype)) : true;
    }
    if (e->args.size() != 2) return false;
    for (int i = 0; i < 2; ++i) {
      const ExprRef &k = e->args[static_cast<size_t>(i)], &rest = e->args[static_cast<size_t>(1 - i)];
      const std::optional<int64_t> v = int_value(k);
      if (!v || (e->op == Op::Sub && i == 0)) continue;
      const bool add = e->op == Op::Add || e->op == Op::Sub;
      if (!add && !(e->op == Op::Mul && *v == 1)) continue;
      if (!column_value(rest, c, limit, column)) return false;
      if (add) c += e->op == Op::Sub ? -*v : *v;
      return !is_float || fits(exact(e->dtype));
    }
    return false;
  }

  // base = rest + c with c a constant addend: returns rest (iconst(0) when nothing is left) and
  // adds c to `offset`. Loads at base and base + 1 (an 8-bit table's scale and bias) then share
  // one pointer, and one register, per id.
  static ExprRef split_offset(const ExprRef& base, int64_t& offset) {
    auto int_const = [](const ExprRef& e) {
      return e->kind == ExprKind::Const && (e->dtype == DType::I64 || e->dtype == DType::I32);
    };
    auto ival = [](const ExprRef& e) { return static_cast<int64_t>(e->value); };
    if (int_const(base)) {
      offset += ival(base);
      return ir::iconst(0);
    }
    if (base->kind != ExprKind::Op || (base->op != Op::Add && base->op != Op::Sub)) return base;
    const ExprRef &x = base->args[0], &y = base->args[1];
    if (int_const(y)) {
      offset += base->op == Op::Add ? ival(y) : -ival(y);
      return split_offset(x, offset);
    }
    if (base->op == Op::Add && int_const(x)) {
      offset += ival(x);
      return split_offset(y, offset);
    }
    return base;
  }

  // An f32 load or store of the epilogue phases: per-bag pointers (Plan::addrs, computed per bag).
  Access epilogue_access(int buffer, const ExprRef& index, bool store = false) {
    if (k_.buffers[static_cast<size_t>(buffer)].dtype != DType::F32)
      decline(std::string(dtype_name(k_.buffers[static_cast<size_t>(buffer)].dtype)) + " epilogue buffer");
    auto s = ir::affine_split(index, ir::Space::Outer, last_);
    if (!s || (s->step != 0 && s->step != 1)) decline("epilogue index not (bag + column): " + ir::print_expr(index));
    ExprRef base = s->base ? s->base : ir::iconst(0);
    if (ir::contains(base.get(), ExprKind::Load) || ir::contains(base.get(), ExprKind::Acc) ||
        ir::contains(base.get(), ExprKind::Rand) || ir::depends_on(base.get(), ir::Space::Reduce, 0))
      decline("epilogue index reads memory or the id position: " + ir::print_expr(index));
    // A store index without the column is a bag of one column (lowering folds o1 away when its
    // extent is 1): coeff 0 stores lane 0 (eval.cpp root_actions).
    if (s->step == 0 && !store) decline("broadcast load in the epilogue: " + ir::print_expr(index));
    auto [bit, bnew] = base_ids_.emplace(ir::print_expr(base), static_cast<int>(plan_.bases.size()));
    if (bnew) plan_.bases.push_back(base);
    auto [ait, anew] = addr_ids_.emplace(std::make_pair(buffer, bit->second), static_cast<int>(plan_.addrs.size()));
    if (anew) plan_.addrs.push_back({buffer, bit->second});
    return {ait->second, static_cast<int>(s->step)};
  }

  // Uniform subexpressions (loads and ops) that more than one per-id root reads: the clamped id
  // of a bag's row, scale and bias pointers, evaluated once per id into a stack slot.
  void find_shared() {
    std::map<const ir::Expr*, int> parents;
    std::unordered_set<const ir::Expr*> visited;
    std::function<void(const ir::Expr*)> walk = [&](const ir::Expr* e) {
      for (const auto& a : e->args) {
        if (a->kind == ExprKind::Op || a->kind == ExprKind::Load) ++parents[a.get()];
        if (visited.insert(a.get()).second) walk(a.get());
      }
    };
    std::vector<const ir::Expr*> roots;
    for (const auto& p : sp_.ptrs) roots.push_back(p.base.get());
    for (const ir::Expr* s : sp_.scalar[0]) roots.push_back(s->dtype == DType::Bool ? s : s->args[0].get());
    for (int a : sp_.int_accs) roots.push_back(k_.accs[static_cast<size_t>(a)].value.get());
    for (const ir::Expr* r : roots) {
      if (r->kind == ExprKind::Op || r->kind == ExprKind::Load) ++parents[r];
      if (visited.insert(r).second) walk(r);
    }
    // post-order: a shared node's shared operands first
    std::unordered_set<const ir::Expr*> done;
    std::function<void(const ir::Expr*)> order = [&](const ir::Expr* e) {
      if (!done.insert(e).second) return;
      for (const auto& a : e->args) order(a.get());
      auto it = parents.find(e);
      if (it != parents.end() && it->second > 1) sp_.shared.push_back(e);
    };
    for (const ir::Expr* r : roots) order(r);
  }

  const ir::Kernel& k_;
  Plan& plan_;
  const int last_;
  SegmentPlan sp_;
  std::set<std::pair<const ir::Expr*, int>> seen_;
  std::map<std::tuple<int, std::string, bool>, int> ptr_ids_;
  std::map<std::string, int> base_ids_;
  std::map<std::pair<int, int>, int> addr_ids_;
};

}  // namespace

std::string analyze_segment(const ir::Kernel& k, Plan& plan) {
  try {
    plan = Plan{};
    Analysis(k, plan).run();
    return {};
  } catch (const DeclineError& d) { return d.what(); }
}

}  // namespace kfuse::detail::xb
