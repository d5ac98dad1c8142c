#include "record.hpp"

#include "eval/reference_eval.hpp"
#include "graph/intern.hpp"

#include <algorithm>
#include <cstdio>

namespace kfuse::detail {

std::string describe(const Tensor& t) { return shape_str(t.shape()) + " " + dtype_name(t.dtype()); }

std::string describe_call(const char* op, const std::vector<Tensor>& args) {
  std::string s = std::string(op) + "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) s += ", ";
    s += args[i].defined() ? describe(args[i]) : std::string("<undefined>");
  }
  return s + ")";
}

void require_defined(const char* op, const Tensor& t) {
  if (!t.defined())
    throw UserError(std::string(op) +
                    ": an operand is an undefined (default-constructed) Tensor; create it with "
                    "from_vector, full, rand or another op first");
}

Device common_device(const char* op, const std::vector<Tensor>& args) {
  Device d = args.empty() ? Device::cpu() : args[0].device();
  for (const auto& t : args)
    if (t.device() != d)
      throw UserError(std::string(op) + ": operands live on different devices (" + d.str() + " and " +
                      t.device().str() + "); move them to one device with .to(device) first");
  return d;
}

Shape broadcast_shapes(const char* op, const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  size_t n = std::max(sa.size(), sb.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < sa.size() ? sa[sa.size() - 1 - i] : 1;
    int64_t db = i < sb.size() ? sb[sb.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) {
      throw UserError(std::string(op) + ": cannot broadcast " + shape_str(sa) + " " + dtype_name(a.dtype()) + " with " +
                      shape_str(sb) + " " + dtype_name(b.dtype()) + ": dimension -" + std::to_string(i + 1) + " is " +
                      std::to_string(da) + " vs " + std::to_string(db) +
                      "; sizes must be equal or 1 (reshape or expand an operand)");
    }
    out[n - 1 - i] = da == 1 ? db : da;
  }
  // Operands of at most kMaxNumel elements can still broadcast to more ([n, 1] with [1, n]).
  if (!shape_fits(out)) throw_bad_shape(describe_call(op, {a, b}), out);
  return out;
}

Tensor broadcast_to_shape(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Tensor r = t;
  if (r.ndim() < static_cast<int64_t>(shape.size())) {
    Shape s(shape.size() - r.shape().size(), 1);
    s.insert(s.end(), r.shape().begin(), r.shape().end());
    r = r.reshape(s);
  }
  return r.shape() == shape ? r : r.expand(shape);
}

Tensor make_const(double value, DType dtype, const Shape& shape, Device dev) {
  // Normalise the value to the dtype so equal constants intern to one node.
  double v = value;
  if (dtype == DType::Bool) v = value != 0.0 ? 1.0 : 0.0;
  else if (is_integer(dtype)) {
    int64_t i = 0;
    convert_to(&value, DType::F64, &i, DType::I64, 1);
    if (dtype != DType::I64) {  // an integral value wraps (a constant 300 is 44 in u8)
      int64_t buf = 0;
      convert_to(&i, DType::I64, &buf, dtype, 1);
      convert_to(&buf, dtype, &i, DType::I64, 1);
    }
    v = static_cast<double>(i);
  } else if (dtype != DType::F64) {
    v = round_to_dtype(value, dtype);
  }
  // Looked up from borrowed parts: a constant recorded before (every `x * 1.5` in a loop)
  // allocates nothing.
  return Tensor(intern_node(NodeKey{Op::Const, dtype, dev, shape, {}, {}, std::span<const double>(&v, 1)}));
}

Tensor record(Op op, DType dtype, Shape shape, std::vector<Tensor> inputs, Attrs attrs) {
  if (!inputs.empty()) (void)inputs[0].device();  // throws UserError for an undefined operand
  std::vector<NodeRef> ins;
  ins.reserve(inputs.size());
  for (auto& t : inputs) ins.push_back(t.node());
  return record_nodes(op, dtype, std::move(shape), std::move(ins), std::move(attrs));
}

Tensor record_nodes(Op op, DType dtype, Shape shape, std::vector<NodeRef> inputs, Attrs attrs) {
  Device dev = inputs.empty() ? Device::cpu() : inputs[0]->device;
  return Tensor(make_node(op, dtype, std::move(shape), std::move(inputs), std::move(attrs), dev));
}

int64_t tensor_axis(const char* op, const Tensor& x, int64_t axis, bool new_axis) {
  int64_t n = x.ndim() + (new_axis ? 1 : 0);
  int64_t a = axis < 0 ? axis + n : axis;
  if (n == 0)
    throw UserError(describe_call(op, {x}) + ": axis " + std::to_string(axis) +
                    " is out of range: a tensor of rank 0 has no axes; reshape it to [1] first");
  if (a < 0 || a >= n)
    throw UserError(describe_call(op, {x}) + ": axis " + std::to_string(axis) +
                    " is out of range for a tensor of rank " + std::to_string(x.ndim()) +
                    (new_axis ? " (with the new axis)" : "") + "; use an axis in [" + std::to_string(-n) + ", " +
                    std::to_string(n - 1) + "]");
  return a;
}

std::string num_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::vector<int64_t> normalize_axes(const char* op, const Axes& axes, const Tensor& x) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t i = 0; i < x.ndim(); ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) {
    int64_t n = tensor_axis(op, x, a);
    if (std::find(out.begin(), out.end(), n) != out.end())
      throw UserError(describe_call(op, {x}) + ": axis " + std::to_string(a) + " is given twice (axes " +
                      shape_str(axes) + "); list each axis once");
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Tensor cast_if_needed(const Tensor& t, DType dt) { return t.dtype() == dt ? t : t.cast(dt); }

}  // namespace kfuse::detail
