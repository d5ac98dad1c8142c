// Pass: exact algebraic simplification (see simplify_algebra.hpp). Two tables: identity
// elements of binary ops (data only), and structural rules (one small function each).
#include "simplify_algebra.hpp"

#include <cmath>

#include "rewrite.hpp"

namespace kfuse::detail {

namespace {

// `x op c` (const_side 1) or `c op x` (const_side 0) is x when c == identity.
struct IdentityElement {
  Op op;
  int const_side;
  double identity;
};

constexpr IdentityElement kIdentities[] = {
    {Op::Mul, 1, 1.0}, {Op::Mul, 0, 1.0},  // x*1, 1*x
    {Op::Div, 1, 1.0},                     // x/1
    {Op::Add, 1, 0.0}, {Op::Add, 0, 0.0},  // x+0, 0+x (either zero; -0 + +0 is +0)
    {Op::Sub, 1, 0.0},                     // x-0
    {Op::Pow, 1, 1.0},                     // pow(x, 1) (IEEE: exact, NaN stays NaN)
};

// x can stand for n: same dtype and shape (rules never insert casts or broadcasts).
bool can_replace(const Node& n, const NodeRef& x) { return x->dtype == n.dtype && x->shape == n.shape; }

NodeRef identity_element_rule(const NodeRef& n) {
  for (const auto& id : kIdentities) {
    if (id.op != n->op) continue;
    auto c = const_value(*n->inputs[id.const_side]);
    const NodeRef& x = n->inputs[1 - id.const_side];
    if (c && *c == id.identity && can_replace(*n, x)) return x;
  }
  return nullptr;
}

// The input of `n` when it is open and has op `op`.
const Node* open_input(const NodeRef& n, Op op) {
  const Node& x = *n->inputs[0];
  return x.op == op && is_open(x) ? &x : nullptr;
}

// f(f(x)) -> x
NodeRef involution_rule(const NodeRef& n) {
  const Node* inner = open_input(n, n->op);
  return inner && can_replace(*n, inner->inputs[0]) ? inner->inputs[0] : nullptr;
}

// f(f(x)) -> f(x)
NodeRef idempotent_rule(const NodeRef& n) { return open_input(n, n->op) ? n->inputs[0] : nullptr; }

// op(x, x) -> x (and where(c, x, x) -> x)
NodeRef same_operands_rule(const NodeRef& n) {
  const NodeRef& a = n->inputs[n->inputs.size() - 2];
  const NodeRef& b = n->inputs[n->inputs.size() - 1];
  return a == b && can_replace(*n, a) ? a : nullptr;
}

// pow(x, 2) -> square(x), pow(x, -1) -> reciprocal(x): one rounding of x*x or 1/x is the
// correctly rounded power itself, so the value is the same (a vector pow is within an ulp of
// it), and a multiply or a divide replaces a pow, a log and an exp per element (the LLVM backend's
// SLEEF pow: ~5 ns per element on Zen 3; the xbyak backend has no pow and declined such kernels).
NodeRef small_power_rule(const NodeRef& n) {
  auto c = const_value(*n->inputs[1]);
  const NodeRef& x = n->inputs[0];
  if (!c || !can_replace(*n, x)) return nullptr;
  if (*c == 2.0) return make_node(Op::Square, n->dtype, n->shape, {x}, {}, n->device);
  if (*c == -1.0) return make_node(Op::Recip, n->dtype, n->shape, {x}, {}, n->device);
  return nullptr;
}

// Every value of `from` is exactly representable in `mid` (and keeps its meaning).
bool lossless(DType from, DType mid) {
  if (from == mid || from == DType::Bool) return true;
  if (from == DType::I32) return mid == DType::I64 || mid == DType::F64;
  if (from == DType::F32) return mid == DType::F64;
  return false;
}

NodeRef cast_rule(const NodeRef& n) {
  const NodeRef& x = n->inputs[0];
  if (x->dtype == n->dtype) return x;
  const Node* inner = open_input(n, Op::Cast);
  if (inner && lossless(inner->inputs[0]->dtype, inner->dtype))
    return make_node(Op::Cast, n->dtype, n->shape, {inner->inputs[0]}, {}, n->device);
  return nullptr;
}

struct Rule {
  const char* name;
  Op op;
  NodeRef (*apply)(const NodeRef&);
};

constexpr Rule kRules[] = {
    {"x*1 -> x", Op::Mul, identity_element_rule},
    {"x/1 -> x", Op::Div, identity_element_rule},
    {"x+0 -> x", Op::Add, identity_element_rule},
    {"x-0 -> x", Op::Sub, identity_element_rule},
    {"pow(x,1) -> x", Op::Pow, identity_element_rule},
    {"pow(x,2) -> square x, pow(x,-1) -> reciprocal x", Op::Pow, small_power_rule},
    {"neg(neg x) -> x", Op::Neg, involution_rule},
    {"not(not b) -> b", Op::Not, involution_rule},
    {"abs(abs x) -> abs x", Op::Abs, idempotent_rule},
    {"relu(relu x) -> relu x", Op::Relu, idempotent_rule},
    {"floor(floor x) -> floor x", Op::Floor, idempotent_rule},
    {"ceil(ceil x) -> ceil x", Op::Ceil, idempotent_rule},
    {"round(round x) -> round x", Op::Round, idempotent_rule},
    {"cast(x) -> x, cast(cast x) -> cast x", Op::Cast, cast_rule},
    {"where(c,x,x) -> x", Op::Where, same_operands_rule},
    {"maximum(x,x) -> x", Op::Maximum, same_operands_rule},
    {"minimum(x,x) -> x", Op::Minimum, same_operands_rule},
    {"and(b,b) -> b", Op::And, same_operands_rule},
    {"or(b,b) -> b", Op::Or, same_operands_rule},
};

}  // namespace

std::vector<NodeRef> simplify_algebra(const std::vector<NodeRef>& roots) {
  return rewrite_bottom_up(roots, [](const NodeRef& n) -> NodeRef {
    for (const auto& r : kRules)
      if (r.op == n->op)
        if (NodeRef out = r.apply(n)) return out;
    return nullptr;
  });
}

}  // namespace kfuse::detail
