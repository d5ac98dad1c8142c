// Recording of views and data movement: reshape, permute, expand, slice, squeeze/unsqueeze,
// flatten, concat and pad. All of them fold into index arithmetic inside fused kernels.
#include <algorithm>
#include <limits>

#include "record.hpp"

namespace kfuse {
using namespace detail;

Tensor reshape(const Tensor& x, Shape shape) {
  require_defined("reshape", x);
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0)
        throw UserError("reshape(" + describe(x) + ") to " + shape_str(shape) +
                        ": only one dimension can be -1 (inferred); give the others explicitly");
      infer = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      throw UserError("reshape(" + describe(x) + ") to " + shape_str(shape) + ": dimension " + std::to_string(i) +
                      " is negative; sizes must be >= 0, or -1 for one inferred dimension");
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      known = std::numeric_limits<int64_t>::max();  // the shape is too large: refused below
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      throw UserError("reshape(" + describe(x) + ") to " + shape_str(shape) + ": cannot infer the -1 dimension: " +
                      std::to_string(x.numel()) + " elements are not a multiple of " + std::to_string(known));
    shape[infer] = x.numel() / known;
  }
  // Before shape_numel, which must not overflow: [2^32, 2^32] would count 0 elements.
  if (!shape_fits(shape)) throw_bad_shape(describe_call("reshape", {x}), shape);
  if (shape_numel(shape) != x.numel())
    throw UserError("reshape(" + describe(x) + ") to " + shape_str(shape) +
                    ": size mismatch: " + std::to_string(x.numel()) + " elements cannot be viewed as " +
                    std::to_string(shape_numel(shape)) + "; the product of the new shape must equal the old one");
  if (shape == x.shape()) return x;
  // reshape of reshape is one reshape (keeps the graph small; a pass does the same for graphs
  // built by other means).
  const Node& n = *x.node();
  if (n.op == Op::Reshape && !n.realized()) return record(Op::Reshape, x.dtype(), shape, {Tensor(n.inputs[0])});
  return record(Op::Reshape, x.dtype(), shape, {x});
}

Tensor permute(const Tensor& x, Axes perm) {
  require_defined("permute", x);
  if (static_cast<int64_t>(perm.size()) != x.ndim())
    throw UserError("permute(" + describe(x) + ") with " + shape_str(perm) + ": the permutation has " +
                    std::to_string(perm.size()) + " axes but the tensor has rank " + std::to_string(x.ndim()) +
                    "; list every axis once");
  std::vector<bool> seen(perm.size(), false);
  Shape out(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    int64_t a = tensor_axis("permute", x, perm[i]);
    if (seen[a])
      throw UserError("permute(" + describe(x) + ") with " + shape_str(perm) + ": axis " + std::to_string(a) +
                      " appears twice; list every axis once");
    seen[a] = true;
    perm[i] = a;
    out[i] = x.shape()[a];
  }
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
  if (identity) return x;
  Attrs at;
  at.ints = perm;
  return record(Op::Permute, x.dtype(), out, {x}, at);
}

Tensor transpose(const Tensor& x, int64_t a, int64_t b) {
  require_defined("transpose", x);
  if (x.ndim() < 2 && a == -2 && b == -1) return x;
  Axes p(x.ndim());
  for (int64_t i = 0; i < x.ndim(); ++i) p[i] = i;
  std::swap(p[tensor_axis("transpose", x, a)], p[tensor_axis("transpose", x, b)]);
  return permute(x, p);
}

Tensor expand(const Tensor& x, Shape shape) {
  require_defined("expand", x);
  if (shape.size() < x.shape().size())
    throw UserError("expand(" + describe(x) + ") to " + shape_str(shape) +
                    ": the target has fewer dimensions than the tensor; expand can only add or grow dimensions");
  size_t lead = shape.size() - x.shape().size();
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t have = i < lead ? 1 : x.shape()[i - lead];
    if (shape[i] == -1) shape[i] = have;
    if (shape[i] < 0)
      throw UserError("expand(" + describe(x) + ") to " + shape_str(shape) + ": dimension " + std::to_string(i) +
                      " is negative; sizes must be >= 0, or -1 to keep a dimension");
    if (have != shape[i] && have != 1)
      throw UserError("expand(" + describe(x) + ") to " + shape_str(shape) + ": dimension " + std::to_string(i) +
                      " has size " + std::to_string(have) + ", which is not 1 and differs from " +
                      std::to_string(shape[i]) + "; only size-1 dimensions can be expanded");
  }
  // A view of few elements can still describe too many for the kernels' index arithmetic.
  if (!shape_fits(shape)) throw_bad_shape(describe_call("expand", {x}), shape);
  if (shape == x.shape()) return x;
  Tensor in = x;
  if (lead) {
    Shape s(lead, 1);
    s.insert(s.end(), x.shape().begin(), x.shape().end());
    in = x.reshape(s);
    if (in.shape() == shape) return in;
  }
  return record(Op::Expand, x.dtype(), shape, {in});
}

Tensor broadcast_to(const Tensor& x, Shape shape) { return expand(x, std::move(shape)); }

Tensor slice(const Tensor& x, const std::vector<Range>& ranges) {
  require_defined("slice", x);
  if (static_cast<int64_t>(ranges.size()) > x.ndim())
    throw UserError("slice(" + describe(x) + "): " + std::to_string(ranges.size()) +
                    " ranges given for a tensor of rank " + std::to_string(x.ndim()) + "; give at most one per axis");
  Shape out = x.shape();
  Attrs at;
  bool full = true;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    int64_t n = x.shape()[i];
    Range r = i < static_cast<int64_t>(ranges.size()) ? ranges[i] : Range::all();
    if (r.step <= 0)
      throw UserError("slice(" + describe(x) + "): step " + std::to_string(r.step) + " on axis " + std::to_string(i) +
                      " must be positive; negative steps (reversal) are not supported, use a step >= 1");
    auto clampi = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
    int64_t start = clampi(r.start);
    int64_t stop = r.stop ? clampi(*r.stop) : n;
    if (r.start < -n || r.start > n)
      throw UserError("slice(" + describe(x) + "): start " + std::to_string(r.start) + " on axis " + std::to_string(i) +
                      " is out of bounds for size " + std::to_string(n) + "; use a start in [" + std::to_string(-n) +
                      ", " + std::to_string(n) + "]");
    int64_t count = stop > start ? (stop - start - 1) / r.step + 1 : 0;  // no overflow for a huge step
    out[i] = count;
    at.ints.push_back(start);
    at.ints.push_back(r.step);
    full &= start == 0 && r.step == 1 && count == n;
  }
  if (full) return x;
  return record(Op::Slice, x.dtype(), out, {x}, at);
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> axis) {
  require_defined("squeeze", x);
  Shape out;
  if (axis) {
    int64_t a = tensor_axis("squeeze", x, *axis);
    if (x.shape()[a] != 1)
      throw UserError("squeeze(" + describe(x) + "): axis " + std::to_string(*axis) + " has size " +
                      std::to_string(x.shape()[a]) + ", not 1; only size-1 axes can be squeezed");
    out = x.shape();
    out.erase(out.begin() + a);
  } else {
    for (int64_t d : x.shape())
      if (d != 1) out.push_back(d);
  }
  return reshape(x, out);
}

Tensor unsqueeze(const Tensor& x, int64_t axis) {
  require_defined("unsqueeze", x);
  int64_t a = tensor_axis("unsqueeze", x, axis, true);
  Shape out = x.shape();
  out.insert(out.begin() + a, 1);
  return reshape(x, out);
}

Tensor flatten(const Tensor& x, int64_t start, int64_t end) {
  require_defined("flatten", x);
  if (x.ndim() == 0) return reshape(x, {1});
  int64_t s = tensor_axis("flatten", x, start);
  int64_t e = tensor_axis("flatten", x, end);
  if (s > e)
    throw UserError("flatten(" + describe(x) + "): start axis " + std::to_string(start) + " comes after end axis " +
                    std::to_string(end) + "; pass start <= end");
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= x.shape()[i];
  out.push_back(m);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, out);
}

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  if (xs.empty()) throw UserError("concat: no tensors given; pass at least one");
  for (const auto& t : xs) require_defined("concat", t);
  common_device("concat", xs);
  const Tensor& f = xs[0];
  int64_t a = tensor_axis("concat", f, axis);
  DType dt = f.dtype();
  Shape out = f.shape();
  out[a] = 0;
  for (const auto& t : xs) {
    if (t.ndim() != f.ndim())
      throw UserError(describe_call("concat", xs) + ": all tensors must have the same rank; reshape them first");
    for (int64_t i = 0; i < f.ndim(); ++i)
      if (i != a && t.shape()[i] != f.shape()[i])
        throw UserError(describe_call("concat", xs) + ": sizes differ on axis " + std::to_string(i) + " (" +
                        std::to_string(f.shape()[i]) + " vs " + std::to_string(t.shape()[i]) +
                        "); all axes but the concatenation axis must match");
    if (__builtin_add_overflow(out[a], t.shape()[a], &out[a]))
      out[a] = std::numeric_limits<int64_t>::max();  // refused below
    dt = promote_types(dt, t.dtype());
  }
  if (!shape_fits(out)) throw_bad_shape(describe_call("concat", xs), out);
  std::vector<Tensor> parts;
  for (const auto& t : xs)
    if (t.shape()[a] > 0) parts.push_back(cast_if_needed(t, dt));
  if (parts.empty()) return full(out, 0, dt);
  if (parts.size() == 1) return parts[0];
  Attrs at;
  at.ints.push_back(a);
  return record(Op::Concat, dt, out, parts, at);
}

Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& pads, double value) {
  require_defined("pad", x);
  if (static_cast<int64_t>(pads.size()) > x.ndim())
    throw UserError("pad(" + describe(x) + "): " + std::to_string(pads.size()) + " (before, after) pairs for rank " +
                    std::to_string(x.ndim()) + "; give at most one pair per axis");
  Shape out = x.shape();
  Attrs at;
  bool none = true;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    auto p = i < static_cast<int64_t>(pads.size()) ? pads[i] : std::pair<int64_t, int64_t>{0, 0};
    if (p.first < 0 || p.second < 0)
      throw UserError("pad(" + describe(x) + "): negative padding (" + std::to_string(p.first) + ", " +
                      std::to_string(p.second) + ") on axis " + std::to_string(i) +
                      "; pads must be >= 0 (use slice to remove elements)");
    if (__builtin_add_overflow(out[i], p.first, &out[i]) || __builtin_add_overflow(out[i], p.second, &out[i]))
      out[i] = std::numeric_limits<int64_t>::max();  // refused below
    at.ints.push_back(p.first);
    at.ints.push_back(p.second);
    none &= p.first == 0 && p.second == 0;
  }
  if (none) return x;
  if (!shape_fits(out)) throw_bad_shape(describe_call("pad", {x}), out);
  at.reals.push_back(value);
  return record(Op::Pad, x.dtype(), out, {x}, at);
}

}  // namespace kfuse
