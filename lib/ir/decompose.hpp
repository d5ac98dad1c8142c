// The composite element-wise ops (sigmoid, silu, gelu in its erf and tanh forms) written in
// primitive ops: THE one definition of their math. The LLVM and GPU backends run this pass
// before lowering; xbyak keeps fused injectors that evaluate the same formulas with the same
// constants (lib/ir/math_constants.hpp), so every backend computes the same function
// (tests/backends/test_ulp_table.cpp measures each one; docs/fusion-and-ir.md has the table).
//
// Forms (computed in the op's dtype, f32 or f64; chosen for no overflow and no cancellation):
//   sigmoid(x)   = x < 0 ? e * r : r,  e = exp(-|x|), r = 1 / (1 + e)   (exp never overflows,
//                  the subnormal tail for x << 0 is kept)
//   silu(x)      = x * sigmoid(x)
//   gelu_tanh(x) = x * sigmoid(x * (2k + 2kc x^2)), k = sqrt(2/pi), c = 0.044715: the same as
//                  0.5 x (1 + tanh(k (x + c x^3))) without its cancellation for x << 0
//   gelu_erf(x)  f32: x * (x <= 0 ? h : 1 - h), h = erfc(a) / 2, a = min(|x| / sqrt2, 12), with
//                  erfc(a) = t exp(C(t) - a^2), t = 1 / (1 + a/2) (math_constants.hpp): no
//                  cancellation of 1 + erf(x / sqrt2) for x << 0;
//                f64: 0.5 x (1 + erf(x / sqrt2)), the reference's own formula (the erfc fit is
//                  f32-accurate only); it cancels below x = -5 (absolute error < 1e-16 |x|).
#pragma once
#include "kernel.hpp"

namespace kfuse::ir {

/// Whether decompose_op lowers `op` (Sigmoid, Silu, GeluTanh, GeluErf).
bool is_composite(Op op);
/// op(x) in primitive ops of x's dtype (f32 or f64).
ExprRef decompose_op(Op op, const ExprRef& x);
/// Rewrites every composite op of the kernel's values into primitives (shared subexpressions
/// stay shared). The kernel's print, and so its cache key, is that of the composite form.
void decompose_composites(Kernel& k);

}  // namespace kfuse::ir
