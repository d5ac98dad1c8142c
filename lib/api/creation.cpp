// Creation of tensors: host data (copied or borrowed), constants, ranges and random numbers.
#include <cmath>
#include <cstring>

#include "graph/host_pool.hpp"
#include "record.hpp"

namespace kfuse {
using namespace detail;

Shape Tensor::check_count(size_t n, Shape shape) {
  check_shape("from_vector", shape);
  if (static_cast<int64_t>(n) != shape_numel(shape))
    throw UserError("from_vector: " + std::to_string(n) + " values cannot fill shape " + shape_str(shape) + " (" +
                    std::to_string(shape_numel(shape)) + " elements); pass exactly that many values");
  return shape;
}

Tensor Tensor::from_bytes(const void* data, DType dtype, Shape shape) {
  check_shape("from_data", shape);
  auto st = Storage::allocate(dtype, shape_numel(shape));
  if (st->bytes()) {
    if (!data) throw UserError("from_data: null data pointer for " + shape_str(shape) + "; pass a valid buffer");
    std::memcpy(st->data, data, st->bytes());
  }
  return Tensor(make_buffer_node(std::move(st), std::move(shape)));
}

Tensor Tensor::borrow_bytes(void* data, DType dtype, Shape shape) {
  check_shape("borrow", shape);
  auto st = make_storage();
  st->dtype = dtype;
  st->numel = shape_numel(shape);
  st->data = data;
  if (!data && st->numel)
    throw UserError("borrow: null data pointer for " + shape_str(shape) + "; pass a valid buffer");
  return Tensor(make_buffer_node(std::move(st), std::move(shape)));
}

Tensor view_as_dtype(const Tensor& x, DType dtype) {
  require_defined("view_as_dtype", x);
  const std::string call = "view_as_dtype(" + describe(x) + ", " + dtype_name(dtype) + ")";
  if (x.device() != Device::cpu())
    throw UserError(call + ": the tensor lives on " + x.device().str() +
                    "; view its bytes on the host (.to(Device::cpu()))");
  if (x.dtype() == DType::Bool || dtype == DType::Bool)
    throw UserError(call + ": bool is not a byte view (its bytes must be 0 or 1); cast to or from u8 instead");
  if (x.ndim() == 0) throw UserError(call + ": a 0-d tensor has no last axis to view; reshape it to [1] first");
  const auto from = static_cast<int64_t>(dtype_size(x.dtype())), to = static_cast<int64_t>(dtype_size(dtype));
  const int64_t bytes = x.shape().back() * from;
  if (bytes % to != 0)
    throw UserError(call + ": the last axis holds " + std::to_string(bytes) + " bytes, not a whole number of " +
                    std::to_string(to) + "-byte elements; slice or pad it to a multiple of " + std::to_string(to) +
                    " bytes");
  x.eval();
  const Node& n = *x.node();
  std::shared_ptr<Storage> src = n.op == Op::Buffer ? n.storage : n.realized();
  if (!src) throw InternalError(call + ": evaluated tensor without storage");
  auto st = make_storage();
  st->dtype = dtype;
  st->numel = static_cast<int64_t>(src->bytes()) / to;
  st->data = src->data;
  st->owner = src;  // keeps x's memory (and whatever keeps that alive)
  Shape shape = x.shape();
  shape.back() = bytes / to;
  return Tensor(make_buffer_node(std::move(st), std::move(shape)));
}

namespace {
// full and its spellings; errors name the one that was called.
Tensor filled(const char* op, const Shape& shape, double value, DType dtype) {
  check_shape(op, shape);
  return make_const(value, dtype, shape);
}

// The message of an arange or linspace with more than kMaxNumel elements.
std::string too_many(double count) {
  return ": " + num_str(count) + " elements are more than 2^53 (" + std::to_string(kMaxNumel) +
         ", the most a tensor may have); use fewer points";
}
}  // namespace

Tensor full(Shape shape, double value, DType dtype) { return filled("full", shape, value, dtype); }
Tensor zeros(Shape shape, DType dtype) { return filled("zeros", shape, 0.0, dtype); }
Tensor ones(Shape shape, DType dtype) { return filled("ones", shape, 1.0, dtype); }
Tensor scalar(double value, DType dtype) { return filled("scalar", {}, value, dtype); }

Tensor arange(double start, double stop, double step, DType dtype) {
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop))
    throw UserError("arange(" + num_str(start) + ", " + num_str(stop) + ", " + num_str(step) +
                    "): bounds and step must be finite and step non-zero");
  double n = std::ceil((stop - start) / step);  // +inf when stop - start overflows
  if (n > static_cast<double>(kMaxNumel))
    throw UserError("arange(" + num_str(start) + ", " + num_str(stop) + ", " + num_str(step) + ")" + too_many(n));
  int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  Attrs at;
  at.reals = {start, step};
  return Tensor(make_node(Op::Iota, dtype, {count}, {}, at));
}
Tensor arange(int64_t stop) { return arange(0.0, static_cast<double>(stop), 1.0, DType::I64); }

Tensor linspace(double start, double stop, int64_t count, DType dtype) {
  if (count < 0) throw UserError("linspace: count " + std::to_string(count) + " is negative; pass count >= 0");
  if (count > kMaxNumel) throw UserError("linspace" + too_many(static_cast<double>(count)));
  Attrs at;
  at.reals = {start, count > 1 ? (stop - start) / static_cast<double>(count - 1) : 0.0};
  return Tensor(make_node(Op::Iota, dtype, {count}, {}, at));
}

namespace {
Tensor random(const char* name, Shape shape, uint64_t seed, DType dtype, int kind) {
  check_shape(name, shape);
  if (!is_float(dtype))
    throw UserError(std::string(name) + ": dtype " + dtype_name(dtype) + " is not a float type; use f32 or f64");
  Attrs at;
  at.ints = {static_cast<int64_t>(seed), kind};
  return Tensor(make_node(Op::Rand, dtype, std::move(shape), {}, at));
}
}  // namespace

Tensor rand(Shape shape, uint64_t seed, DType dtype) { return random("rand", std::move(shape), seed, dtype, 0); }
Tensor randn(Shape shape, uint64_t seed, DType dtype) { return random("randn", std::move(shape), seed, dtype, 1); }

}  // namespace kfuse
