// rand / randn as kernel IR: the one definition every backend compiles (README "Random numbers").
//
// Uniform values are a single Rand expression (bit-exact on every backend). A normal value is
// Box-Muller over the f64 uniforms of counters 2i and 2i+1, written with ordinary f64 ops
// (neg, log1p, sqrt, cos, mul), exactly the formula of lib/core/random.hpp, then cast to the
// dtype: it matches the fp64 reference up to the backend's f64 log1p/cos error (a few ulp).
#pragma once
#include "kernel.hpp"

namespace kfuse::ir {

/// Element `counter` (i64) of rand (normal = false) or randn (normal = true) with seed `seed`
/// (i64, normally a Param), in dtype `dt` (f32 or f64).
ExprRef random_value(DType dt, bool normal, const ExprRef& seed, const ExprRef& counter);

}  // namespace kfuse::ir
