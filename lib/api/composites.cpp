// Composite ops, written once in terms of primitives. They need no backend code: the fusion
// partitioner turns each into one kernel.
#include <algorithm>

#include "eval/check_labels.hpp"
#include "eval/reference_eval.hpp"
#include "graph/intern.hpp"
#include "record.hpp"

namespace kfuse {
using namespace detail;

namespace {
bool numpy_compatible(const Shape& a, const Shape& b) {
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    int64_t x = a[a.size() - i], y = b[b.size() - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}
Tensor float_input(const char* op, const Tensor& x) {
  require_defined(op, x);
  return is_float(x.dtype()) ? x : x.cast(kDefaultFloat);
}
}  // namespace

Tensor softmax(const Tensor& x_in, int64_t axis) {
  Tensor x = float_input("softmax", x_in);
  int64_t a = x.ndim() == 0 ? normalize_axis("softmax", axis, 1) : tensor_axis("softmax", x, axis);
  if (x.ndim() == 0) return ones({}, x.dtype());
  Tensor e = exp(x - max(x, a, true));
  return e / sum(e, a, true);
}

Tensor log_softmax(const Tensor& x_in, int64_t axis) {
  Tensor x = float_input("log_softmax", x_in);
  int64_t a = x.ndim() == 0 ? normalize_axis("log_softmax", axis, 1) : tensor_axis("log_softmax", x, axis);
  if (x.ndim() == 0) return zeros({}, x.dtype());
  Tensor s = x - max(x, a, true);
  return s - log(sum(exp(s), a, true));
}

Tensor layer_norm(const Tensor& x_in, Shape normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  Tensor x = float_input("layer_norm", x_in);
  int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool ok = k >= 1 && k <= x.ndim();
  for (int64_t i = 0; ok && i < k; ++i) ok = x.shape()[x.ndim() - k + i] == normalized_shape[i];
  if (!ok)
    throw UserError("layer_norm(" + describe(x) + ", normalized_shape " + shape_str(normalized_shape) +
                    "): the normalized shape must equal the trailing dimensions of the input");
  for (const Tensor* p : {&weight, &bias})
    if (p->defined() && p->shape() != normalized_shape)
      throw UserError("layer_norm(" + describe(x) + "): weight/bias has shape " + shape_str(p->shape()) +
                      ", expected the normalized shape " + shape_str(normalized_shape));
  Axes axes;
  for (int64_t i = x.ndim() - k; i < x.ndim(); ++i) axes.push_back(i);
  Tensor xc = x - mean(x, axes, true);
  Tensor y = xc * rsqrt(mean(square(xc), axes, true) + eps);
  if (weight.defined()) y = y * weight.cast(y.dtype());
  if (bias.defined()) y = y + bias.cast(y.dtype());
  return y;
}

Tensor rms_norm(const Tensor& x_in, const Tensor& weight, double eps) {
  Tensor x = float_input("rms_norm", x_in);
  if (x.ndim() == 0) throw UserError("rms_norm(" + describe(x) + "): needs at least one dimension");
  if (weight.defined() && weight.shape() != Shape{x.shape().back()})
    throw UserError("rms_norm(" + describe(x) + "): weight has shape " + shape_str(weight.shape()) + ", expected [" +
                    std::to_string(x.shape().back()) + "]");
  Tensor y = x * rsqrt(mean(square(x), -1, true) + eps);
  if (weight.defined()) y = y * weight.cast(y.dtype());
  return y;
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels_in, int64_t ignore_index) {
  Tensor logits = float_input("cross_entropy", logits_in);
  require_defined("cross_entropy", labels_in);
  if (logits.ndim() != 2 || labels_in.ndim() != 1 || labels_in.shape()[0] != logits.shape()[0] ||
      !is_integer(labels_in.dtype()))
    throw UserError(describe_call("cross_entropy", {logits, labels_in}) +
                    ": expects logits [B, C] and integer labels [B]");
  const int64_t b = logits.shape()[0], c = logits.shape()[1];
  // A label outside [0, C) would silently pick nothing: computed labels are checked now, lazy
  // ones by a CheckLabels host step when they are evaluated (before any kernel reads them).
  const Node& ln = *labels_in.node();
  Tensor labels = labels_in;
  if (auto st = ln.op == Op::Buffer ? ln.storage : ln.realized())
    check_class_labels(storage_values(*st), c, ignore_index);
  else
    labels = Tensor(make_node(Op::CheckLabels, labels_in.dtype(), labels_in.shape(), {labels_in.node()},
                              Attrs{{c, ignore_index}, {}}, labels_in.device()));
  // The label picks its logit through a one-hot mask: this keeps the whole loss a row
  // reduction that fuses with log_softmax (no gather kernel). An ignored label outside [0, C)
  // matches no class; one inside must be masked out.
  Tensor column = labels.reshape({b, 1});
  Tensor onehot = eq(arange(0, static_cast<double>(c), 1, labels.dtype()).reshape({1, c}), column);
  if (ignore_index >= 0 && ignore_index < c) onehot = logical_and(onehot, column != static_cast<double>(ignore_index));
  Tensor picked = sum(where(onehot, log_softmax(logits, 1), zeros({}, logits.dtype())), 1);
  // The mean over the rows that count (0 / 0 = NaN when none does, as PyTorch).
  Tensor counted = sum(labels != static_cast<double>(ignore_index)).cast(logits.dtype());
  return neg(sum(picked) / counted);
}

Tensor normalize(const Tensor& x_in, int64_t axis, double eps) {
  Tensor x = float_input("normalize", x_in);
  if (x.ndim() > 0) tensor_axis("normalize", x, axis);  // name this op in axis errors
  Tensor n = sqrt(sum(square(x), Axes{axis}, true));
  return x / maximum(n, eps);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  require_defined("matmul", a);
  require_defined("matmul", b);
  common_device("matmul", {a, b});
  if (a.ndim() < 1 || b.ndim() < 1)
    throw UserError(describe_call("matmul", {a, b}) + ": operands must have at least one dimension");
  if (a.dtype() == DType::Bool || b.dtype() == DType::Bool)
    throw UserError(describe_call("matmul", {a, b}) + ": bool operands are not supported; cast them first");
  // The common case, two matrices of one dtype, interned from borrowed parts (the general path
  // below builds six shapes and an input vector: half of a small matmul's recording time).
  if (a.ndim() == 2 && b.ndim() == 2 && a.dtype() == b.dtype() && a.shape()[1] == b.shape()[0]) {
    const int64_t out[2] = {a.shape()[0], b.shape()[1]};
    if (shape_fits(out)) {
      NodeRef in[2] = {a.node(), b.node()};
      return Tensor(intern_node(NodeKey{Op::Matmul, a.dtype(), in[0]->device, out, in, {}, {}}, in));
    }
  }
  Tensor A = a.ndim() == 1 ? a.reshape({1, a.shape()[0]}) : a;
  Tensor B = b.ndim() == 1 ? b.reshape({b.shape()[0], 1}) : b;
  int64_t k1 = A.shape().back(), k2 = B.shape()[B.ndim() - 2];
  if (k1 != k2)
    throw UserError(describe_call("matmul", {a, b}) + ": inner dimensions differ (" + std::to_string(k1) + " vs " +
                    std::to_string(k2) +
                    "); the last axis of the first operand must equal the second-to-last of the "
                    "second (transpose one operand?)");
  DType dt = promote_types(A.dtype(), B.dtype());
  // Broadcast the batch dims.
  Shape ba(A.shape().begin(), A.shape().end() - 2), bb(B.shape().begin(), B.shape().end() - 2);
  if (!numpy_compatible(ba, bb))
    throw UserError(describe_call("matmul", {a, b}) + ": batch dimensions " + shape_str(ba) + " and " + shape_str(bb) +
                    " cannot broadcast; sizes must be equal or 1 (reshape or expand an operand)");
  Shape batch(std::max(ba.size(), bb.size()), 1);  // (its size is checked with the operands' below)
  for (size_t i = 0; i < batch.size(); ++i) {
    const int64_t da = i < ba.size() ? ba[ba.size() - 1 - i] : 1, db = i < bb.size() ? bb[bb.size() - 1 - i] : 1;
    batch[batch.size() - 1 - i] = da == 1 ? db : da;
  }
  Shape sa = batch, sb = batch;
  sa.push_back(A.shape()[A.ndim() - 2]);
  sa.push_back(k1);
  sb.push_back(k2);
  sb.push_back(B.shape().back());
  Shape out = batch;
  out.push_back(sa[sa.size() - 2]);
  out.push_back(sb.back());
  // The operands broadcast over the batch dims, and the result, may be too large even when the
  // operands are not.
  for (const Shape* s : {&sa, &sb, &out})
    if (!shape_fits(*s)) throw_bad_shape(describe_call("matmul", {a, b}), *s);
  Tensor ea = broadcast_to_shape(cast_if_needed(A, dt), sa);
  Tensor eb = broadcast_to_shape(cast_if_needed(B, dt), sb);
  Tensor r = record(Op::Matmul, dt, out, {ea, eb});
  if (a.ndim() == 1 || b.ndim() == 1) {
    Shape o = batch;
    if (a.ndim() > 1) o.push_back(sa[sa.size() - 2]);
    if (b.ndim() > 1) o.push_back(sb.back());
    r = r.reshape(o);
  }
  return r;
}

}  // namespace kfuse
