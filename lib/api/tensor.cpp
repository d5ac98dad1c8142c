// Tensor handle methods: properties, results, printing, and element conversion.
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <limits>
#include <sstream>

#include "../runtime/execute.hpp"
#include "record.hpp"

namespace kfuse {
using namespace detail;

namespace {
const Node& node_of(const Tensor& t, const char* what) {
  if (!t.defined()) throw UserError(std::string(what) + ": the Tensor is undefined (default-constructed)");
  return *t.node();
}
}  // namespace

const Shape& Tensor::shape() const { return node_of(*this, "shape").shape; }
DType Tensor::dtype() const { return node_of(*this, "dtype").dtype; }
Device Tensor::device() const { return node_of(*this, "device").device; }
int64_t Tensor::size(int64_t axis) const { return shape()[tensor_axis("size", *this, axis)]; }

const Tensor& Tensor::eval() const {
  node_of(*this, "eval");
  if (!node_->is_realized()) execute(&node_, 1);
  return *this;
}

void eval(const std::vector<Tensor>& ts) {
  std::vector<NodeRef> roots;
  for (const auto& t : ts) {
    if (!node_of(t, "eval").is_realized()) roots.push_back(t.node());
  }
  if (!roots.empty()) execute(roots);
}

const void* Tensor::data() const {
  eval();
  auto r = node_->realized();
  if (r->device != Device::cpu())
    throw UserError("data: the tensor lives on " + r->device.str() + "; copy it to the host with .to(Device::cpu())");
  return r->data;
}

void Tensor::check_dtype(DType t, const char* what) const {
  if (dtype() != t)
    throw UserError(std::string(what) + ": the tensor has dtype " + dtype_name(dtype()) + ", not " + dtype_name(t) +
                    "; use to_vector<T>() to convert, or cast() first");
}

Tensor Tensor::reshape(Shape s) const { return kfuse::reshape(*this, std::move(s)); }
Tensor Tensor::permute(Axes p) const { return kfuse::permute(*this, std::move(p)); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return kfuse::transpose(*this, a, b); }
Tensor Tensor::expand(Shape s) const { return kfuse::expand(*this, std::move(s)); }
Tensor Tensor::slice(const std::vector<Range>& r) const { return kfuse::slice(*this, r); }
Tensor Tensor::squeeze(std::optional<int64_t> a) const { return kfuse::squeeze(*this, a); }
Tensor Tensor::unsqueeze(int64_t a) const { return kfuse::unsqueeze(*this, a); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return kfuse::flatten(*this, s, e); }
Tensor Tensor::cast(DType t) const { return kfuse::cast(*this, t); }

Tensor Tensor::to(Device d) const {
  node_of(*this, "to");
  if (d == device()) return *this;
  return transfer(*this, d);
}

std::string Tensor::to_string() const {
  std::vector<double> v = to_vector<double>();
  std::ostringstream os;
  os << "tensor(";
  const Shape& s = shape();
  auto fmt = [&](double x) {
    std::ostringstream e;
    if (dtype() == DType::Bool) e << (x != 0 ? "true" : "false");
    else if (!is_float(dtype())) e << static_cast<int64_t>(x);
    else if (std::isnan(x)) e << "nan";
    else if (std::isinf(x)) e << (x > 0 ? "inf" : "-inf");
    else e << std::setprecision(6) << x;
    return e.str();
  };
  // Nested brackets, eliding the middle of long dimensions as "...".
  std::function<void(size_t, int64_t)> rec = [&](size_t d, int64_t off) {
    if (d == s.size()) {
      os << fmt(v[off]);
      return;
    }
    int64_t stride = 1;
    for (size_t k = d + 1; k < s.size(); ++k) stride *= s[k];
    const std::string sep = d + 1 == s.size() ? ", " : ",\n" + std::string(8 + d, ' ');
    os << "[";
    for (int64_t i = 0; i < s[d]; ++i) {
      if (s[d] > 8 && i == 3) {  // "a, b, c, ..., x, y, z"
        os << sep << "...";
        i = s[d] - 3;
      }
      if (i) os << sep;
      rec(d + 1, off + i * stride);
    }
    os << "]";
  };
  rec(0, 0);
  os << ", shape=" << shape_str(s) << ", dtype=" << dtype_name(dtype()) << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

namespace detail {

namespace {
template <typename T>
double load_as_double(const void* p, int64_t i) {
  return static_cast<double>(static_cast<const T*>(p)[i]);
}

// float -> integer: truncation; NaN and out-of-range give the minimum (x86 cvtt semantics,
// without the undefined behaviour of a C++ cast).
template <typename I>
I float_to_int(double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = -lo;  // 2^31 or 2^63, exactly representable
  if (!(v >= lo && v < hi)) return std::numeric_limits<I>::min();
  return static_cast<I>(v);
}

template <typename S, typename D>
void convert_typed(const S* src, D* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D> && !std::is_same_v<D, uint8_t>) {
      dst[i] = float_to_int<D>(static_cast<double>(src[i]));
    } else if constexpr (std::is_same_v<D, uint8_t>) {  // bool
      dst[i] = src[i] != S(0) ? 1 : 0;
    } else if constexpr (std::is_integral_v<S> && std::is_integral_v<D>) {
      dst[i] = static_cast<D>(static_cast<std::make_unsigned_t<D>>(src[i]));  // wraps
    } else {
      dst[i] = static_cast<D>(src[i]);
    }
  }
}

template <typename S>
void convert_from(const S* src, void* dst, DType dt, int64_t n) {
  switch (dt) {
    case DType::Bool: return convert_typed(src, static_cast<uint8_t*>(dst), n);
    case DType::I32: return convert_typed(src, static_cast<int32_t*>(dst), n);
    case DType::I64: return convert_typed(src, static_cast<int64_t*>(dst), n);
    case DType::F32: return convert_typed(src, static_cast<float*>(dst), n);
    case DType::F64: return convert_typed(src, static_cast<double*>(dst), n);
  }
}
}  // namespace

void convert_to(const void* src, DType src_t, void* dst, DType dst_t, int64_t n) {
  if (src_t == dst_t) {
    if (n) std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_t));
    return;
  }
  switch (src_t) {
    case DType::Bool: return convert_from(static_cast<const uint8_t*>(src), dst, dst_t, n);
    case DType::I32: return convert_from(static_cast<const int32_t*>(src), dst, dst_t, n);
    case DType::I64: return convert_from(static_cast<const int64_t*>(src), dst, dst_t, n);
    case DType::F32: return convert_from(static_cast<const float*>(src), dst, dst_t, n);
    case DType::F64: return convert_from(static_cast<const double*>(src), dst, dst_t, n);
  }
}

}  // namespace detail
}  // namespace kfuse
