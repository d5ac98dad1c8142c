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
// The C++ storage type of each dtype (bool is stored as one byte, 0 or 1).
template <DType D>
struct storage;
template <>
struct storage<DType::Bool> {
  using type = uint8_t;
};
template <>
struct storage<DType::I32> {
  using type = int32_t;
};
template <>
struct storage<DType::I64> {
  using type = int64_t;
};
template <>
struct storage<DType::F32> {
  using type = float;
};
template <>
struct storage<DType::F64> {
  using type = double;
};
template <>
struct storage<DType::U8> {
  using type = uint8_t;
};
template <>
struct storage<DType::I8> {
  using type = int8_t;
};
template <>
struct storage<DType::F16> {
  using type = half;
};
template <>
struct storage<DType::BF16> {
  using type = bfloat16;
};
template <DType D>
using storage_t = typename storage<D>::type;

// float -> integer: truncation; NaN and out-of-range give the minimum (x86 cvtt semantics,
// without the undefined behaviour of a C++ cast).
template <typename I>
I float_to_int(double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = -lo;  // 2^31 or 2^63, exactly representable
  if (!(v >= lo && v < hi)) return std::numeric_limits<I>::min();
  return static_cast<I>(v);
}

// A value as C++ arithmetic: f16/bf16 widen exactly to float, the rest are themselves.
template <typename T>
auto arith(T x) {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) return static_cast<float>(x);
  else return x;
}

// One element S -> D with the cast rules of README "Dtypes": -> bool tests != 0; float -> i64
// truncates (NaN/out of range: the minimum); float -> i32/u8/i8 goes through that rule for i32
// and then wraps; integer -> integer wraps; -> f16/bf16 rounds through f32.
template <DType S, DType D>
storage_t<D> convert_one(storage_t<S> x) {
  using Dt = storage_t<D>;
  const auto a = arith(x);
  if constexpr (D == DType::Bool) {
    return a != decltype(a)(0) ? 1 : 0;
  } else if constexpr (is_float(S) && !is_float(D)) {
    if constexpr (D == DType::I64) return float_to_int<int64_t>(static_cast<double>(a));
    else return static_cast<Dt>(static_cast<uint32_t>(float_to_int<int32_t>(static_cast<double>(a))));
  } else if constexpr (!is_float(S) && !is_float(D)) {
    return static_cast<Dt>(static_cast<std::make_unsigned_t<Dt>>(a));  // wraps
  } else if constexpr (D == DType::F16 || D == DType::BF16) {
    return Dt(static_cast<float>(a));
  } else {
    return static_cast<Dt>(a);
  }
}

template <DType S, DType D>
void convert_typed(const void* src, void* dst, int64_t n) {
  const auto* s = static_cast<const storage_t<S>*>(src);
  auto* d = static_cast<storage_t<D>*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = convert_one<S, D>(s[i]);
}

template <DType S>
void convert_from(const void* src, void* dst, DType dt, int64_t n) {
  switch (dt) {
#define KFUSE_X(e, nm, sz, c) \
  case DType::e: return convert_typed<S, DType::e>(src, dst, n);
    KFUSE_DTYPES(KFUSE_X)
#undef KFUSE_X
  }
}
}  // namespace

void convert_to(const void* src, DType src_t, void* dst, DType dst_t, int64_t n) {
  if (src_t == dst_t) {
    if (n) std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_t));
    return;
  }
  switch (src_t) {
#define KFUSE_X(e, nm, sz, c) \
  case DType::e: return convert_from<DType::e>(src, dst, dst_t, n);
    KFUSE_DTYPES(KFUSE_X)
#undef KFUSE_X
  }
}

}  // namespace detail
}  // namespace kfuse
