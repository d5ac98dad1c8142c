// Storage-only dtypes (u8, i8, f16, bf16) in the kernel IR: every kernel computes on them in
// their compute type (i32 or f32) and rounds each op's result back, which is PyTorch's eager
// semantics (f16 + f16 computes in f32 and rounds; u8 + u8 wraps at 256). Applied by the
// lowering to every kernel, so a backend only implements, for a narrow dtype N:
//   - Load of an N buffer, giving the value in compute_type(N);
//   - Cast to N (from any dtype: round to N, the value stays in compute_type(N) registers;
//     from f64/i64 it converts to compute_type(N) first) and Cast from N (from the
//     compute_type(N) value); Cast(C, x) with x of N and C = compute_type(N) is a no-op;
//   - Store of an N value into an N buffer (exact: the value is already representable).
// After the pass, N appears only on Load, Cast and Store values (verify_kernel checks it);
// accumulators over N values use compute_type(N) (a sum of f16 adds in f32, as PyTorch does).
#pragma once
#include "ir/kernel.hpp"

namespace kfuse::ir {

/// Rewrites `k` in place as described above; returns whether anything changed.
bool widen_narrow(Kernel& k);

}  // namespace kfuse::ir
