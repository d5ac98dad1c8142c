// Composite ops in primitive ops (see decompose.hpp).
#include "decompose.hpp"

#include <unordered_map>

#include "kfuse/error.hpp"
#include "math_constants.hpp"

namespace kfuse::ir {

namespace {

struct Builder {
  DType dt;
  ExprRef c(double v) const { return constant(v, dt); }
  ExprRef un(Op o, ExprRef a) const { return op(o, dt, {std::move(a)}); }
  ExprRef bin(Op o, ExprRef a, ExprRef b) const { return op(o, dt, {std::move(a), std::move(b)}); }
  ExprRef mul(ExprRef a, ExprRef b) const { return bin(Op::Mul, std::move(a), std::move(b)); }
  ExprRef add(ExprRef a, ExprRef b) const { return bin(Op::Add, std::move(a), std::move(b)); }
  ExprRef where(ExprRef cond, ExprRef a, ExprRef b) const {
    return op(Op::Where, dt, {std::move(cond), std::move(a), std::move(b)});
  }
  ExprRef cmp(Op o, ExprRef a, double v) const { return op(o, DType::Bool, {std::move(a), c(v)}); }
  // f32 constants are the float literals xbyak uses; f64 ones the double values.
  double k(float f32, double f64) const { return dt == DType::F32 ? static_cast<double>(f32) : f64; }

  // exp(v) where the caller multiplies it by at most |x| (silu, gelu): 0 below kExpNormalLo,
  // where it would be subnormal (math_constants.hpp), and exp's argument clamped there so that
  // no lane computes a subnormal it then discards.
  ExprRef exp_flush_tiny(const ExprRef& v, double lo) const {
    return where(cmp(Op::Lt, v, lo), c(0), un(Op::Exp, bin(Op::Maximum, v, c(lo))));
  }
  ExprRef sigmoid(const ExprRef& x, bool flush_tiny = false) const {
    ExprRef nz = un(Op::Neg, un(Op::Abs, x));
    ExprRef e = flush_tiny ? exp_flush_tiny(nz, k(mathc::kExpNormalLo, mathc::kExpNormalLoD)) : un(Op::Exp, nz);
    ExprRef r = un(Op::Recip, add(c(1), e));
    return where(cmp(Op::Lt, x, 0), mul(e, r), r);
  }
  ExprRef gelu_tanh(const ExprRef& x) const {
    using namespace mathc;
    const double two_kc = k(2.0f * kGeluTanhK * kGeluTanhC, 2 * kGeluTanhKD * kGeluTanhCD);
    const double two_k = k(2.0f * kGeluTanhK, 2 * kGeluTanhKD);
    return mul(sigmoid(mul(x, add(mul(c(two_kc), mul(x, x)), c(two_k))), true), x);
  }
  ExprRef gelu_erf(const ExprRef& x) const {
    using namespace mathc;
    if (dt != DType::F32) return mul(mul(c(0.5), x), add(c(1), un(Op::Erf, mul(x, c(kSqrtHalfD)))));
    ExprRef a = bin(Op::Minimum, mul(un(Op::Abs, x), c(kSqrtHalfF)), c(kErfcClamp));
    ExprRef t = un(Op::Recip, add(mul(a, c(0.5)), c(1)));
    ExprRef p = c(kErfcC[0]);
    for (int i = 1; i < 10; ++i) p = add(mul(p, t), c(kErfcC[i]));
    ExprRef h = mul(mul(exp_flush_tiny(bin(Op::Sub, p, mul(a, a)), mathc::kGeluErfExpLo), t), c(0.5));
    return mul(where(cmp(Op::Le, x, 0), h, bin(Op::Sub, c(1), h)), x);
  }
};

}  // namespace

bool is_composite(Op o) { return o == Op::Sigmoid || o == Op::Silu || o == Op::GeluTanh || o == Op::GeluErf; }

ExprRef decompose_op(Op o, const ExprRef& x) {
  if (x->dtype != DType::F32 && x->dtype != DType::F64)
    throw InternalError(std::string("decompose_op: ") + op_name(o) + " of " + dtype_name(x->dtype));
  Builder b{x->dtype};
  switch (o) {
    case Op::Sigmoid: return b.sigmoid(x);
    case Op::Silu: return b.mul(x, b.sigmoid(x, true));
    case Op::GeluTanh: return b.gelu_tanh(x);
    case Op::GeluErf: return b.gelu_erf(x);
    default: throw InternalError(std::string("decompose_op: not a composite op: ") + op_name(o));
  }
}

void decompose_composites(Kernel& k) {
  std::unordered_map<const Expr*, ExprRef> memo;
  auto rewrite = [&](auto& self, const ExprRef& e) -> ExprRef {
    if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
    std::vector<ExprRef> args;
    bool changed = false;
    for (const auto& a : e->args) {
      args.push_back(self(self, a));
      changed |= args.back() != a;
    }
    ExprRef r = e;
    if (changed) {
      auto c = std::make_shared<Expr>(*e);
      c->args = std::move(args);
      r = c;
    }
    if (r->kind == ExprKind::Op && is_composite(r->op) && (r->dtype == DType::F32 || r->dtype == DType::F64))
      r = decompose_op(r->op, r->args[0]);
    memo.emplace(e.get(), r);
    return r;
  };
  for (auto& a : k.accs) a.value = rewrite(rewrite, a.value);
  for (auto& ph : k.phases)
    for (auto& s : ph.stores) s.value = rewrite(rewrite, s.value);
}

}  // namespace kfuse::ir
