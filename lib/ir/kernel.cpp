// Kernel IR builders, canonical printer and verifier.
#include "kernel.hpp"

#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "kfuse/error.hpp"

namespace kfuse::ir {

namespace {
ExprRef make(ExprKind k, DType dt) {
  auto e = std::make_shared<Expr>();
  e->kind = k;
  e->dtype = dt;
  return e;
}
bool const_value(const ExprRef& e, double& v) {
  if (e->kind != ExprKind::Const) return false;
  v = e->value;
  return true;
}
}  // namespace

ExprRef constant(double v, DType dt) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Const;
  e->dtype = dt;
  e->value = v;
  return e;
}
ExprRef iconst(int64_t v) {
  // 0 and 1 are shared so that lowering's memo tables see equal indices as equal pointers.
  static const ExprRef zero = constant(0, DType::I64), one = constant(1, DType::I64);
  if (v == 0) return zero;
  if (v == 1) return one;
  return constant(static_cast<double>(v), DType::I64);
}
ExprRef var(Space s, int dim) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Var;
  e->dtype = DType::I64;
  e->space = s;
  e->index = dim;
  return e;
}
ExprRef param(int id) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Param;
  e->dtype = DType::I64;
  e->index = id;
  return e;
}
ExprRef load(int buffer, DType dt, ExprRef index, ExprRef mask) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Load;
  e->dtype = dt;
  e->index = buffer;
  e->args.push_back(std::move(index));
  if (mask) e->args.push_back(std::move(mask));
  return e;
}
ExprRef acc(int id, DType dt) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Acc;
  e->dtype = dt;
  e->index = id;
  return e;
}
ExprRef op(Op o, DType dt, std::vector<ExprRef> args) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Op;
  e->dtype = dt;
  e->op = o;
  e->args = std::move(args);
  return e;
}
ExprRef rand_uniform(DType dt, ExprRef seed, ExprRef counter) {
  auto e = make(ExprKind::Rand, dt);
  const_cast<Expr*>(e.get())->args = {std::move(seed), std::move(counter)};
  return e;
}
bool is_const(const ExprRef& e, double v) { return e->kind == ExprKind::Const && e->value == v; }

ExprRef iadd(ExprRef a, ExprRef b) {
  double x, y;
  if (const_value(a, x) && const_value(b, y)) return iconst(static_cast<int64_t>(x + y));
  if (is_const(a, 0)) return b;
  if (is_const(b, 0)) return a;
  return op(Op::Add, DType::I64, {std::move(a), std::move(b)});
}
ExprRef isub(ExprRef a, ExprRef b) {
  double x, y;
  if (const_value(a, x) && const_value(b, y)) return iconst(static_cast<int64_t>(x - y));
  if (is_const(b, 0)) return a;
  return op(Op::Sub, DType::I64, {std::move(a), std::move(b)});
}
ExprRef imul(ExprRef a, ExprRef b) {
  double x, y;
  if (const_value(a, x) && const_value(b, y)) return iconst(static_cast<int64_t>(x * y));
  if (is_const(a, 0) || is_const(b, 0)) return iconst(0);
  if (is_const(a, 1)) return b;
  if (is_const(b, 1)) return a;
  return op(Op::Mul, DType::I64, {std::move(a), std::move(b)});
}
ExprRef idiv(ExprRef a, ExprRef b) {
  double x, y;
  if (const_value(a, x) && const_value(b, y) && y != 0) return iconst(static_cast<int64_t>(std::floor(x / y)));
  if (is_const(b, 1)) return a;
  auto e = make(ExprKind::IDiv, DType::I64);
  auto* m = const_cast<Expr*>(e.get());
  m->args = {std::move(a), std::move(b)};
  return e;
}
ExprRef imod(ExprRef a, ExprRef b) {
  double x, y;
  if (const_value(a, x) && const_value(b, y) && y != 0)
    return iconst(static_cast<int64_t>(x) % static_cast<int64_t>(y));
  if (is_const(b, 1)) return iconst(0);
  auto e = make(ExprKind::IMod, DType::I64);
  const_cast<Expr*>(e.get())->args = {std::move(a), std::move(b)};
  return e;
}

int64_t eval_index(const ExprRef& e, const std::vector<int64_t>& params) {
  switch (e->kind) {
    case ExprKind::Const: return static_cast<int64_t>(e->value);
    case ExprKind::Param: return params.at(static_cast<size_t>(e->index));
    case ExprKind::IDiv:
    case ExprKind::IMod: {
      int64_t a = eval_index(e->args[0], params), b = eval_index(e->args[1], params);
      if (b == 0) return 0;
      return e->kind == ExprKind::IDiv ? a / b : a % b;
    }
    case ExprKind::Op:
      if (e->args.size() == 2) {
        int64_t a = eval_index(e->args[0], params), b = eval_index(e->args[1], params);
        if (e->op == Op::Add) return a + b;
        if (e->op == Op::Sub) return a - b;
        if (e->op == Op::Mul) return a * b;
      }
      break;
    default: break;
  }
  throw InternalError("eval_index: not a host-evaluable integer expression");
}

int64_t outer_points(const Kernel& k, const std::vector<int64_t>& params) {
  int64_t n = 1;
  for (const auto& o : k.outer) n *= eval_index(o, params);
  return n;
}

const char* kernel_kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::Pointwise: return "pointwise";
    case KernelKind::Row: return "row";
    case KernelKind::Column: return "column";
    case KernelKind::Global: return "global";
    case KernelKind::Contraction: return "contraction";
    case KernelKind::Segment: return "segment";
  }
  return "?";
}

const char* acc_kind_name(AccKind k) {
  switch (k) {
    case AccKind::Sum: return "sum";
    case AccKind::Prod: return "prod";
    case AccKind::Max: return "max";
    case AccKind::Min: return "min";
    case AccKind::ArgMax: return "argmax";
    case AccKind::ArgMin: return "argmin";
  }
  return "?";
}

AccKind acc_kind(Op reduce_op) {
  switch (reduce_op) {
    case Op::ReduceSum:
    case Op::SegmentSum: return AccKind::Sum;
    case Op::ReduceProd: return AccKind::Prod;
    case Op::ReduceMax:
    case Op::SegmentMax: return AccKind::Max;
    case Op::ReduceMin: return AccKind::Min;
    case Op::ArgMax: return AccKind::ArgMax;
    case Op::ArgMin: return AccKind::ArgMin;
    default: throw InternalError(std::string("acc_kind: not a reduction: ") + op_name(reduce_op));
  }
}

int Kernel::num_inputs() const {
  int n = 0;
  for (const auto& b : buffers) n += b.output ? 0 : 1;
  return n;
}
int Kernel::num_outputs() const { return static_cast<int>(buffers.size()) - num_inputs(); }
int64_t Kernel::reduce_numel() const {
  int64_t n = 1;
  for (int64_t r : reduce) n *= r;
  return n;
}
bool Kernel::has_gather() const {
  std::unordered_set<const Expr*> seen[2];  // visited as a value / inside a load index
  std::function<bool(const ExprRef&, bool)> walk = [&](const ExprRef& e, bool in_index) -> bool {
    if (e->kind == ExprKind::Load && in_index) return true;
    if (!seen[in_index].insert(e.get()).second) return false;
    for (size_t i = 0; i < e->args.size(); ++i)
      if (walk(e->args[i], in_index || (e->kind == ExprKind::Load && i == 0))) return true;
    return false;
  };
  for (const auto& a : accs)
    if (walk(a.value, false)) return true;
  for (const auto& ph : phases)
    for (const auto& s : ph.stores)
      if (walk(s.index, true) || walk(s.value, false)) return true;
  return dynamic_reduce();
}

std::vector<int64_t> Kernel::param_values() const {
  std::vector<int64_t> v;
  v.reserve(params.size());
  for (const auto& p : params) v.push_back(p.value);
  return v;
}

namespace {

std::string fmt_const(double v, DType dt) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (!is_float(dt)) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Prints expressions; non-leaf subexpressions used more than once are bound to names (t0, t1,
// ...) on their own lines, so shared work is visible and the text stays linear in DAG size.
class Printer {
 public:
  Printer(const Kernel& k, std::ostringstream& os) : k_(k), os_(os) {}

  void count(const ExprRef& e) {
    if (++uses_[e.get()] > 1) return;
    for (const auto& a : e->args) count(a);
  }

  std::string str(const ExprRef& e, const std::string& indent) {
    std::string s;
    put(e, indent, s);
    return s;
  }

  // Appends the text of `e` to `out` (one growing string per line rather than a string per
  // subexpression: the kernel cache prints every kernel it looks up).
  void put(const ExprRef& e, const std::string& indent, std::string& out) {
    auto it = names_.find(e.get());
    if (it != names_.end()) {
      out += it->second;
      return;
    }
    const bool bind = uses_[e.get()] > 1 && e->kind != ExprKind::Const && e->kind != ExprKind::Var &&
                      e->kind != ExprKind::Param && e->kind != ExprKind::Acc;
    std::string own;
    std::string& s = bind ? own : out;
    switch (e->kind) {
      case ExprKind::Const: s += fmt_const(e->value, e->dtype); return;
      case ExprKind::Var: s.append(e->space == Space::Outer ? "o" : "r").append(std::to_string(e->index)); return;
      case ExprKind::Param: s.append("$").append(std::to_string(e->index)); return;
      case ExprKind::Acc: s += "acc" + std::to_string(e->index); return;
      case ExprKind::Load:
        s += "(load ";
        if (e->index >= 0 && e->index < static_cast<int>(k_.buffers.size())) {
          s += k_.buffers[e->index].name;
        } else {  // print_expr: no kernel
          s += "b";
          s += std::to_string(e->index);
        }
        s += "[";
        put(e->args[0], indent, s);
        s += "]";
        if (e->args.size() > 1) {
          s += " if ";
          put(e->args[1], indent, s);
        }
        s += ")";
        break;
      case ExprKind::IDiv:
      case ExprKind::IMod:
        s += e->kind == ExprKind::IDiv ? "(idiv " : "(imod ";
        put(e->args[0], indent, s);
        s += " ";
        put(e->args[1], indent, s);
        s += ")";
        break;
      case ExprKind::Rand:
        s += "(rand.";
        s += dtype_name(e->dtype);
        s += " ";
        put(e->args[0], indent, s);
        s += " ";
        put(e->args[1], indent, s);
        s += ")";
        break;
      case ExprKind::Op:
        s += "(";
        s += op_name(e->op);
        s += ".";
        s += dtype_name(e->dtype);
        for (const auto& a : e->args) {
          s += " ";
          put(a, indent, s);
        }
        s += ")";
        break;
    }
    if (bind) {
      std::string name = "t";
      name += std::to_string(next_++);
      os_ << indent << name << " = " << own << "\n";
      out += name;
      names_[e.get()] = std::move(name);
    }
  }

  void reset_scope() { names_.clear(); }

 private:
  const Kernel& k_;
  std::ostringstream& os_;
  std::unordered_map<const Expr*, int> uses_;
  std::unordered_map<const Expr*, std::string> names_;
  int next_ = 0;
};

}  // namespace

std::string print_kernel(const Kernel& k) {
  std::ostringstream os;
  os << "kernel " << k.name << " (" << kernel_kind_name(k.kind) << ")\n";
  os << "  buffers:";
  for (const auto& b : k.buffers) os << " " << b.name << ":" << dtype_name(b.dtype);
  os << "\n  params:";
  for (size_t i = 0; i < k.params.size(); ++i) os << " $" << i << "=" << k.params[i].name;
  os << "\n  outer: [";
  Printer pr(k, os);
  for (const auto& a : k.accs) pr.count(a.value);
  for (const auto& ph : k.phases)
    for (const auto& s : ph.stores) {
      pr.count(s.index);
      pr.count(s.value);
    }
  if (k.dynamic_reduce()) {
    pr.count(k.reduce_begin);
    pr.count(k.reduce_end);
  }
  for (size_t i = 0; i < k.outer.size(); ++i) os << (i ? ", " : "") << pr.str(k.outer[i], "");
  os << "]  reduce: [";
  for (size_t i = 0; i < k.reduce.size(); ++i) os << (i ? ", " : "") << k.reduce[i];
  if (k.dynamic_reduce()) os << "r0 in " << pr.str(k.reduce_begin, "  ") << " .. " << pr.str(k.reduce_end, "  ");
  os << "]\n";
  for (size_t p = 0; p < k.phases.size(); ++p) {
    const Phase& ph = k.phases[p];
    // Bindings are scoped per phase: a value computed in one loop is recomputed in the next.
    pr.reset_scope();
    os << "  phase " << p << (ph.over_reduce ? " over reduce" : " once") << ":\n";
    for (int a : ph.accs) {
      const Accumulator& ac = k.accs.at(a);
      std::string v = pr.str(ac.value, "    ");
      os << "    acc" << a << " = " << acc_kind_name(ac.kind) << "." << dtype_name(ac.dtype) << " " << v << "\n";
    }
    for (const auto& s : ph.stores) {
      std::string idx = pr.str(s.index, "    ");
      std::string val = pr.str(s.value, "    ");
      os << "    store " << k.buffers.at(s.buffer).name << "[" << idx << "] = " << val << "\n";
    }
  }
  return os.str();
}

std::string print_expr(const ExprRef& e) {
  static const Kernel none;
  std::ostringstream unused;  // no bindings: nothing was counted, so nothing is shared
  Printer pr(none, unused);
  return pr.str(e, "");
}

void verify_kernel(const Kernel& k) {
  auto fail = [&](const std::string& why) {
    throw InternalError("kernel IR verification failed: " + why + "\n" + print_kernel(k));
  };
  std::vector<int> acc_phase(k.accs.size(), -1);
  for (size_t p = 0; p < k.phases.size(); ++p)
    for (int a : k.phases[p].accs) {
      if (a < 0 || a >= static_cast<int>(k.accs.size())) fail("accumulator id out of range");
      if (!k.phases[p].over_reduce) fail("accumulator folded in a phase that does not loop over reduce");
      if (acc_phase[a] >= 0) fail("accumulator folded in two phases");
      acc_phase[a] = static_cast<int>(p);
    }
  for (size_t a = 0; a < k.accs.size(); ++a) {
    if (acc_phase[a] < 0) fail("accumulator acc" + std::to_string(a) + " is never folded");
    if (is_narrow(k.accs[a].dtype)) fail("accumulator acc" + std::to_string(a) + " is narrow (widen_narrow)");
  }
  std::function<void(const ExprRef&, int, bool)> check = [&](const ExprRef& e, int phase, bool in_reduce) {
    if (!e) fail("null expression");
    switch (e->kind) {
      case ExprKind::Var:
        if (e->space == Space::Reduce &&
            (!in_reduce || e->index >= (k.dynamic_reduce() ? 1 : static_cast<int>(k.reduce.size()))))
          fail("reduce index r" + std::to_string(e->index) + " used outside a reduce loop");
        if (e->space == Space::Outer && e->index >= static_cast<int>(k.outer.size()))
          fail("outer index o" + std::to_string(e->index) + " out of range");
        break;
      case ExprKind::Param:
        if (e->index < 0 || e->index >= static_cast<int>(k.params.size())) fail("param id out of range");
        break;
      case ExprKind::Acc:
        if (is_narrow(e->dtype)) fail(std::string("an accumulator read as ") + dtype_name(e->dtype));
        if (e->index < 0 || e->index >= static_cast<int>(k.accs.size())) fail("acc id out of range");
        if (acc_phase[e->index] >= phase) fail("acc" + std::to_string(e->index) + " read before its phase completes");
        break;
      case ExprKind::Load:
        if (e->index < 0 || e->index >= static_cast<int>(k.buffers.size()) || k.buffers[e->index].output)
          fail("load from a non-input buffer");
        if (k.buffers[e->index].dtype != e->dtype) fail("load dtype differs from its buffer's");
        if (e->args[0]->dtype != DType::I64) fail("load index is not i64");
        if (e->args.size() > 1 && e->args[1]->dtype != DType::Bool) fail("load mask is not bool");
        break;
      case ExprKind::Rand:
        if (!is_float(e->dtype)) fail("rand of a non-float dtype");
        if (e->args.size() != 2 || e->args[0]->dtype != DType::I64 || e->args[1]->dtype != DType::I64)
          fail("rand needs i64 seed and counter operands");
        break;
      case ExprKind::Op:  // narrow dtypes: computed in their compute type (widen_narrow.hpp)
        if (e->op != Op::Cast) {
          if (is_narrow(e->dtype)) fail(std::string(op_name(e->op)) + " computes in " + dtype_name(e->dtype));
          for (const auto& a : e->args)
            if (is_narrow(a->dtype)) fail(std::string(op_name(e->op)) + " has an operand of " + dtype_name(a->dtype));
        }
        break;
      case ExprKind::Const:
        if (is_narrow(e->dtype)) fail(std::string("a constant of ") + dtype_name(e->dtype));
        break;
      default: break;
    }
    for (const auto& a : e->args) check(a, phase, in_reduce);
  };
  for (const auto& o : k.outer) check(o, 0, false);
  if (k.dynamic_reduce()) {
    if (!k.reduce_end) fail("a dynamic reduce domain without an end");
    if (!k.reduce.empty()) fail("a dynamic reduce domain with compile-time extents");
    if (k.reduce_begin->dtype != DType::I64 || k.reduce_end->dtype != DType::I64)
      fail("dynamic reduce bounds are not i64");
    check(k.reduce_begin, 0, false);  // of the outer point only: no reduce var, no accumulator
    check(k.reduce_end, 0, false);
  }
  for (size_t p = 0; p < k.phases.size(); ++p) {
    const Phase& ph = k.phases[p];
    for (int a : ph.accs) check(k.accs[a].value, static_cast<int>(p), true);
    for (const auto& s : ph.stores) {
      if (s.buffer < 0 || s.buffer >= static_cast<int>(k.buffers.size()) || !k.buffers[s.buffer].output)
        fail("store to a non-output buffer");
      if (s.value->dtype != k.buffers[s.buffer].dtype) fail("stored value dtype differs from its buffer's");
      check(s.index, static_cast<int>(p), ph.over_reduce);
      check(s.value, static_cast<int>(p), ph.over_reduce);
    }
  }
}

}  // namespace kfuse::ir
