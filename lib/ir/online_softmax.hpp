// Online softmax: the two row loops of a softmax-family kernel (a Max accumulator m over v, then
// a Sum accumulator s over exp(v - m)) folded into one loop by a backend that keeps a running
// maximum and rescales the running sum when the maximum grows (Milakov & Gimelshein 2018).
//
// The kernel IR keeps the two-phase form (it is the semantics and the cache key's input); this
// matcher tells a backend that the pair may be computed in one pass over the row. Long rows then
// read memory once for both accumulators instead of twice (log_softmax [1024,32000]).
#pragma once
#include "expr_util.hpp"
#include "kernel.hpp"

namespace kfuse::ir {

struct OnlineExpSum {
  int phase = -1;  ///< the Max phase; phase + 1 is the Sum phase; -1: no match
  int max_acc = -1, sum_acc = -1;
  ExprRef value;  ///< v (as written in the Max phase)
};

/// The first pair of consecutive reduce phases of the form
///   phase p:     acc m = max.f32 v            (nothing else)
///   phase p + 1: acc s = sum.f32 exp(v - m)   (nothing else; v structurally equal)
/// Semantics a backend must keep: m is the NaN-propagating maximum of v, and s = sum(exp(v - m))
/// with that final m (so s is NaN when m is NaN or infinite, as the two loops would give).
OnlineExpSum find_online_exp_sum(const Kernel& k);

}  // namespace kfuse::ir
