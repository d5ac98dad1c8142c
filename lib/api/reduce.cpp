// Recording of reductions. Primitive reduction nodes keep the reduced dims with size 1; a
// reshape drops them when keepdim is false. mean, var, std and logsumexp are composites.
#include <algorithm>
#include <cmath>
#include <limits>

#include "record.hpp"

namespace kfuse {
using namespace detail;

namespace {

Shape kept_shape(const Shape& s, const std::vector<int64_t>& axes) {
  Shape out = s;
  for (int64_t a : axes) out[a] = 1;
  return out;
}

Shape dropped_shape(const Shape& s, const std::vector<int64_t>& axes) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) out.push_back(s[i]);
  return out;
}

Tensor finish(const Tensor& r, const Shape& in, const std::vector<int64_t>& axes, bool keepdim) {
  return keepdim ? r : r.reshape(dropped_shape(in, axes));
}

// A primitive reduction with keepdim semantics.
Tensor reduce(Op op, const char* name, const Tensor& x, const Axes& axes_in, bool keepdim) {
  require_defined(name, x);
  auto axes = normalize_axes(name, axes_in, x);
  bool needs_elements = op == Op::ReduceMax || op == Op::ReduceMin || op == Op::ArgMax || op == Op::ArgMin;
  if (needs_elements) {
    for (int64_t a : axes)
      if (x.shape()[a] == 0)
        throw UserError(describe_call(name, {x}) + ": cannot reduce over axis " + std::to_string(a) +
                        " of size 0 (the result has no identity); slice or pad to a non-empty axis first");
  }
  DType dt = x.dtype();
  Tensor in = x;
  if (op == Op::ReduceSum || op == Op::ReduceProd) {
    // Integer and bool sums and products accumulate in i64 (as torch): the cast means no backend
    // ever folds bools (a prod of bools is 1 exactly when all are true).
    if (!is_float(dt)) {
      dt = DType::I64;
      in = cast_if_needed(x, DType::I64);
    }
  } else if (op == Op::ArgMax || op == Op::ArgMin) {
    dt = DType::I64;
  }
  Attrs at;
  at.ints = axes;
  Tensor r = record(op, dt, kept_shape(x.shape(), axes), {in}, at);
  return finish(r, x.shape(), axes, keepdim);
}

int64_t reduced_count(const Shape& s, const std::vector<int64_t>& axes) {
  int64_t n = 1;
  for (int64_t a : axes) n *= s[a];
  return n;
}

void require_float(const char* name, const Tensor& x) {
  require_defined(name, x);
  if (!is_float(x.dtype()))
    throw UserError(describe_call(name, {x}) + ": " + name +
                    " needs a floating-point input; cast it first, e.g. x.cast(DType::F32)");
}

}  // namespace

Tensor sum(const Tensor& x, Axes axes, bool keepdim) { return reduce(Op::ReduceSum, "sum", x, axes, keepdim); }
Tensor prod(const Tensor& x, Axes axes, bool keepdim) { return reduce(Op::ReduceProd, "prod", x, axes, keepdim); }
Tensor max(const Tensor& x, Axes axes, bool keepdim) { return reduce(Op::ReduceMax, "max", x, axes, keepdim); }
Tensor min(const Tensor& x, Axes axes, bool keepdim) { return reduce(Op::ReduceMin, "min", x, axes, keepdim); }
Tensor argmax(const Tensor& x, Axes axes, bool keepdim) { return reduce(Op::ArgMax, "argmax", x, axes, keepdim); }
Tensor argmin(const Tensor& x, Axes axes, bool keepdim) { return reduce(Op::ArgMin, "argmin", x, axes, keepdim); }

Tensor mean(const Tensor& x, Axes axes_in, bool keepdim) {
  require_float("mean", x);
  auto axes = normalize_axes("mean", axes_in, x);
  int64_t n = reduced_count(x.shape(), axes);
  // Empty reductions give NaN (0/0), as in NumPy.
  Tensor s = sum(x, axes, true);
  Tensor m = n == 0 ? s * std::numeric_limits<double>::quiet_NaN() : s * (1.0 / static_cast<double>(n));
  return finish(m, x.shape(), axes, keepdim);
}

Tensor var(const Tensor& x, Axes axes_in, int64_t correction, bool keepdim) {
  require_float("var", x);
  auto axes = normalize_axes("var", axes_in, x);
  if (correction < 0)
    throw UserError(describe_call("var", {x}) + ": correction " + std::to_string(correction) +
                    " is negative; use 0 (population) or 1 (sample)");
  int64_t n = reduced_count(x.shape(), axes);
  Tensor d = x - mean(x, axes, true);
  // The divisor is max(0, n - correction) (as torch): n <= correction divides by zero, giving NaN
  // (all deviations zero, and for an empty reduction) or inf.
  double denom = static_cast<double>(std::max<int64_t>(0, n - correction));
  Tensor ss = sum(square(d), axes, true);
  Tensor v = denom > 0 ? ss * (1.0 / denom) : ss / denom;
  return finish(v, x.shape(), axes, keepdim);
}

Tensor std(const Tensor& x, Axes axes, int64_t correction, bool keepdim) {
  require_float("std", x);
  return sqrt(var(x, axes, correction, keepdim));
}

Tensor logsumexp(const Tensor& x_in, Axes axes_in, bool keepdim) {
  require_defined("logsumexp", x_in);
  Tensor x = is_float(x_in.dtype()) ? x_in : x_in.cast(kDefaultFloat);
  auto axes = normalize_axes("logsumexp", axes_in, x);
  if (reduced_count(x.shape(), axes) == 0)  // the sum of no terms is 0, its log -inf
    return finish(full(kept_shape(x.shape(), axes), -std::numeric_limits<double>::infinity(), x.dtype()), x.shape(),
                  axes, keepdim);
  // m + log(sum(exp(x - m))), with m replaced by 0 where it is infinite so that all -inf rows
  // give -inf and +inf rows give +inf (as torch.logsumexp).
  Tensor m = max(x, axes, true);
  Tensor ms = where(abs(m) == std::numeric_limits<double>::infinity(), zeros({}, x.dtype()), m);
  Tensor r = log(sum(exp(x - ms), axes, true)) + ms;
  return finish(r, x.shape(), axes, keepdim);
}

}  // namespace kfuse
