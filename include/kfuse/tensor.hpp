/** \file tensor.hpp
 * The lazy tensor API. Every function records a node; nothing is computed until eval(),
 * to_vector(), item() or data() needs a result. Invalid ops throw UserError when recorded.
 */
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "kfuse/error.hpp"
#include "kfuse/node.hpp"

namespace kfuse {

class Tensor;
using Axes = std::vector<int64_t>;

/// One (start, stop, step) per axis; Python semantics: negative indices count from the end,
/// out-of-range bounds are clamped, step > 0. `Range::all()` keeps an axis whole.
struct Range {
  int64_t start = 0;
  std::optional<int64_t> stop;  ///< empty: to the end
  int64_t step = 1;
  static Range all() { return Range{}; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(NodeRef n) : node_(std::move(n)) {}

  // ---- creation ----
  /// Copies `numel(shape)` elements from `data`.
  template <typename T>
  static Tensor from_data(const T* data, Shape shape) {
    return from_bytes(data, dtype_v<T>, std::move(shape));
  }
  template <typename T>
  static Tensor from_vector(const std::vector<T>& v, Shape shape) {
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<uint8_t> b(v.begin(), v.end());
      return from_bytes(b.data(), DType::Bool, check_count(v.size(), std::move(shape)));
    } else {
      return from_bytes(v.data(), dtype_v<T>, check_count(v.size(), std::move(shape)));
    }
  }
  static Tensor from_bytes(const void* data, DType dtype, Shape shape);
  /// Wraps `data` without copying. Lifetime contract: `data` must stay valid and unchanged
  /// until every tensor computed from it has been evaluated (results never alias it).
  template <typename T>
  static Tensor borrow(T* data, Shape shape) {
    return borrow_bytes(data, dtype_v<T>, std::move(shape));
  }
  static Tensor borrow_bytes(void* data, DType dtype, Shape shape);

  // ---- properties (available without evaluation) ----
  bool defined() const { return node_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  int64_t ndim() const { return static_cast<int64_t>(shape().size()); }
  int64_t numel() const { return shape_numel(shape()); }
  int64_t size(int64_t axis) const;
  Device device() const;
  const NodeRef& node() const { return node_; }

  // ---- results ----
  /// Computes this tensor (no-op when already computed).
  const Tensor& eval() const;
  /// Pointer to the computed, contiguous, row-major data (evaluates first).
  const void* data() const;
  template <typename T>
  const T* data_ptr() const {
    check_dtype(dtype_v<T>, "data_ptr");
    return static_cast<const T*>(data());
  }
  /// The elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;
  /// The single element of a one-element tensor, converted to T.
  template <typename T>
  T item() const;
  /// `tensor([[...]], shape=[2, 3], dtype=f32)`; evaluates.
  std::string to_string() const;

  // ---- method forms ----
  Tensor reshape(Shape s) const;
  Tensor permute(Axes perm) const;
  Tensor transpose(int64_t a = -2, int64_t b = -1) const;
  Tensor expand(Shape s) const;
  Tensor slice(const std::vector<Range>& ranges) const;
  Tensor squeeze(std::optional<int64_t> axis = std::nullopt) const;
  Tensor unsqueeze(int64_t axis) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor cast(DType t) const;
  /// A copy of this tensor's value on device `d` (evaluates first). Throws BackendUnavailable
  /// when no backend for `d` can run here. Ops whose operands live on different devices are
  /// refused when recorded.
  Tensor to(Device d) const;

 private:
  static Shape check_count(size_t n, Shape shape);
  void check_dtype(DType t, const char* what) const;
  std::vector<double> values_as_double() const;
  NodeRef node_;
};

// ---- creation ----
Tensor full(Shape shape, double value, DType dtype = DType::F32);
Tensor zeros(Shape shape, DType dtype = DType::F32);
Tensor ones(Shape shape, DType dtype = DType::F32);
Tensor scalar(double value, DType dtype = DType::F32);
/// [start, stop) with `step`; dtype i64 unless given.
Tensor arange(double start, double stop, double step = 1, DType dtype = DType::I64);
Tensor arange(int64_t stop);
/// `count` points from start to stop inclusive.
Tensor linspace(double start, double stop, int64_t count, DType dtype = DType::F32);
/// Uniform in [0, 1). Counter-based (a hash of (seed, element index)): values never depend on
/// evaluation order or thread count.
Tensor rand(Shape shape, uint64_t seed, DType dtype = DType::F32);
/// Standard normal (Box-Muller over two counter-based uniforms).
Tensor randn(Shape shape, uint64_t seed, DType dtype = DType::F32);

// ---- element-wise ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
/// Bitwise ops (README "Ops"): integer operands promoted as for arithmetic, the result in that
/// dtype; on bool tensors and/or/xor/not are the logical ops; float operands are refused (cast
/// them to an integer dtype). Shifts take integers only: shift_right is arithmetic (u8:
/// logical), and a count outside [0, bits of the dtype) gives 0 (left) or the sign fill (right),
/// as PyTorch on CPU. A scalar operand takes the tensor's dtype and must be one of its values.
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& x);
Tensor shift_left(const Tensor& a, const Tensor& count);
Tensor shift_right(const Tensor& a, const Tensor& count);
Tensor bitwise_and(const Tensor& a, int64_t b);
Tensor bitwise_or(const Tensor& a, int64_t b);
Tensor bitwise_xor(const Tensor& a, int64_t b);
Tensor shift_left(const Tensor& a, int64_t count);
Tensor shift_right(const Tensor& a, int64_t count);
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor exp2(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
/// GELU; `approximate_tanh` selects the tanh form, otherwise the exact erf form.
Tensor gelu(const Tensor& x, bool approximate_tanh = false);
Tensor silu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
/// Rounds half to even (as torch.round).
Tensor round(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
/// Fused multiply-add a * b + c, broadcast and promoted as arithmetic (bool refused). Floats are
/// rounded once (std::fma; f16/bf16 compute in f32, then round to the dtype), so the result can
/// differ from (a * b) + c in the last bit; integers wrap like + and *. An element-wise `a * b + c`
/// is a multiply and an add on every backend (no contraction), so fma() is how a kernel asks for
/// one rounding and one FMA instruction.
Tensor fma(const Tensor& a, const Tensor& b, const Tensor& c);
Tensor cast(const Tensor& x, DType t);

// scalar forms (the scalar is "weak": it does not widen the tensor's dtype within a category)
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);

// ---- reductions (empty axes = all axes, `{}` included; negative axes allowed) ----
/// A single reduction axis: any integer type but bool. The single-axis overloads are templates
/// so that a braced `{}` cannot bind to them (it would convert to axis 0): `sum(x, {}, true)`
/// means all axes, as `sum(x)` does.
template <typename I>
concept AxisIndex = std::is_integral_v<I> && !std::is_same_v<I, bool>;

Tensor sum(const Tensor& x, Axes axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, Axes axes = {}, bool keepdim = false);
Tensor prod(const Tensor& x, Axes axes = {}, bool keepdim = false);
Tensor max(const Tensor& x, Axes axes = {}, bool keepdim = false);
Tensor min(const Tensor& x, Axes axes = {}, bool keepdim = false);
/// Index (i64) of the first maximum within the reduced axes, counted row-major over them.
Tensor argmax(const Tensor& x, Axes axes = {}, bool keepdim = false);
Tensor argmin(const Tensor& x, Axes axes = {}, bool keepdim = false);
Tensor var(const Tensor& x, Axes axes = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, Axes axes = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, Axes axes, bool keepdim = false);

// The single-axis forms: fn(x, axis, keepdim) is fn(x, {axis}, keepdim).
#define KFUSE_SINGLE_AXIS_REDUCTION(fn)                      \
  template <AxisIndex I>                                     \
  Tensor fn(const Tensor& x, I axis, bool keepdim = false) { \
    return fn(x, Axes{static_cast<int64_t>(axis)}, keepdim); \
  }
KFUSE_SINGLE_AXIS_REDUCTION(sum)
KFUSE_SINGLE_AXIS_REDUCTION(mean)
KFUSE_SINGLE_AXIS_REDUCTION(prod)
KFUSE_SINGLE_AXIS_REDUCTION(max)
KFUSE_SINGLE_AXIS_REDUCTION(min)
KFUSE_SINGLE_AXIS_REDUCTION(argmax)
KFUSE_SINGLE_AXIS_REDUCTION(argmin)
KFUSE_SINGLE_AXIS_REDUCTION(logsumexp)
#undef KFUSE_SINGLE_AXIS_REDUCTION
template <AxisIndex I>
Tensor var(const Tensor& x, I axis, int64_t correction = 1, bool keepdim = false) {
  return var(x, Axes{static_cast<int64_t>(axis)}, correction, keepdim);
}
template <AxisIndex I>
Tensor std(const Tensor& x, I axis, int64_t correction = 1, bool keepdim = false) {
  return std(x, Axes{static_cast<int64_t>(axis)}, correction, keepdim);
}

// ---- views and data movement ----
Tensor reshape(const Tensor& x, Shape shape);
Tensor permute(const Tensor& x, Axes perm);
Tensor transpose(const Tensor& x, int64_t a = -2, int64_t b = -1);
Tensor expand(const Tensor& x, Shape shape);
Tensor broadcast_to(const Tensor& x, Shape shape);
Tensor slice(const Tensor& x, const std::vector<Range>& ranges);
Tensor squeeze(const Tensor& x, std::optional<int64_t> axis = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t axis);
Tensor flatten(const Tensor& x, int64_t start = 0, int64_t end = -1);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis);
/// The bytes of `x` read as `dtype` (PyTorch's x.view(dtype)): the last axis holds
/// size * sizeof(x's dtype) / sizeof(dtype) elements, each sizeof(dtype) consecutive bytes in the
/// machine's (little-endian) order; the other axes stay. Zero-copy: `x` is evaluated (a CPU tensor)
/// and the result is a stored tensor aliasing its memory (kept alive; a borrowed x keeps
/// borrow's lifetime contract). UserError for a device tensor, a 0-d tensor, bool on either side,
/// or a last axis whose bytes do not divide into whole `dtype` elements.
Tensor view_as_dtype(const Tensor& x, DType dtype);
/// `pads` holds (before, after) per axis, starting at the first axis.
Tensor pad(const Tensor& x, const std::vector<std::pair<int64_t, int64_t>>& pads, double value = 0);

// ---- composites (decomposed into primitives; fusion makes each one kernel) ----
Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
/// Normalises over the trailing dims given by `normalized_shape`.
Tensor layer_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight = {}, double eps = 1e-6);
/// Mean cross entropy of logits [B, C] against integer labels [B], over the rows whose label is
/// not ignore_index (as PyTorch; NaN when every row is ignored). A label outside [0, C) that is
/// not ignore_index is a UserError: at record time when the labels are already computed, else
/// thrown by the eval that computes them.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index = -100);
/// x / max(||x||_p, eps) along `axis` (p = 2).
Tensor normalize(const Tensor& x, int64_t axis = -1, double eps = 1e-12);

// ---- opaque ----
/// 2-D or batched matmul; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- evaluation ----
/// Evaluates several tensors at once, sharing their common work.
void eval(const std::vector<Tensor>& ts);

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);
Tensor operator^(const Tensor& a, const Tensor& b);
Tensor operator<<(const Tensor& a, const Tensor& count);
Tensor operator>>(const Tensor& a, const Tensor& count);
Tensor operator~(const Tensor& a);
Tensor operator&(const Tensor& a, int64_t b);
Tensor operator|(const Tensor& a, int64_t b);
Tensor operator^(const Tensor& a, int64_t b);
Tensor operator<<(const Tensor& a, int64_t count);
Tensor operator>>(const Tensor& a, int64_t count);
Tensor operator&(int64_t a, const Tensor& b);
Tensor operator|(int64_t a, const Tensor& b);
Tensor operator^(int64_t a, const Tensor& b);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- template definitions ----
namespace detail {
void convert_to(const void* src, DType src_t, void* dst, DType dst_t, int64_t n);
}
template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (device() != Device::cpu()) return to(Device::cpu()).to_vector<T>();
  eval();
  std::vector<T> out(static_cast<size_t>(numel()));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> tmp(out.size());
    detail::convert_to(data(), dtype(), tmp.data(), DType::Bool, numel());
    for (size_t i = 0; i < out.size(); ++i) out[i] = tmp[i] != 0;
  } else {
    detail::convert_to(data(), dtype(), out.data(), dtype_v<T>, numel());
  }
  return out;
}
template <typename T>
T Tensor::item() const {
  if (numel() != 1)
    throw UserError("item: the tensor has " + std::to_string(numel()) + " elements (shape " + shape_str(shape()) +
                    "); item() needs exactly one; use to_vector() or index first");
  return to_vector<T>()[0];
}

}  // namespace kfuse
