// quantize_rowwise / dequantize_rowwise (include/kfuse/quantize.hpp): both are lazy graphs of
// existing element-wise ops, reductions and views, so dequantisation fuses into whatever reads
// it (an embedding bag reads only the rows it picks).
//
// pack_fused_rowwise / fused_rowwise_table: the fused layouts (codes, then scale and bias, per
// row) are an eager copy one way and views the other (view_as_dtype for the scale/bias tail).
//
// 4-bit codes are packed and picked with integer bit ops (lo | hi << 4; (byte >> 4 * (c & 1)) &
// 15). They replaced an exact f32 form (floor(b / 16), b - 16 * floor(b / 16), lo + 16 * hi)
// written when kfuse had no bit ops: the same bytes, but the float pick cost a conversion, a
// floor, three multiplies and a blend per value. In the LLVM bag the pick now vectorises to a
// shift and a mask; the byte loads at column / 2 are still scalar (the vectoriser sees a
// gather), docs/llvm-backend.md.
#include <cstring>
#include <string>

#include "kfuse/quantize.hpp"
#include "record.hpp"

namespace kfuse {
using namespace detail;

namespace {

void check_bits(const char* op, int bits) {
  if (bits != 8 && bits != 4)
    throw UserError(std::string(op) + ": bits = " + std::to_string(bits) + " is not supported; pass 8 or 4");
}

// Bytes per row of the stored values for `cols` dequantised columns.
int64_t packed_width(int64_t cols, int bits) { return bits == 8 ? cols : (cols + 1) / 2; }

// Column `c` of a [R, 1]-column view of the [R, 2] scale/bias tensor.
Tensor column(const Tensor& sb, int64_t c) { return slice(sb, {Range::all(), Range{c, c + 1}}); }

// The two tensors of `q` as quantize_rowwise makes them, else a UserError naming `op`.
void check_table(const char* op, const QuantizedTable& q) {
  require_defined(op, q.values);
  require_defined(op, q.scale_bias);
  check_bits(op, q.bits);
  const Tensor& v = q.values;
  const Tensor& sb = q.scale_bias;
  const bool values_ok =
      v.dtype() == DType::U8 && v.ndim() == 2 && q.cols >= 1 && v.shape()[1] == packed_width(q.cols, q.bits);
  const bool sb_ok = (sb.dtype() == DType::F32 || sb.dtype() == DType::F16) && sb.ndim() == 2 && v.ndim() == 2 &&
                     sb.shape()[0] == v.shape()[0] && sb.shape()[1] == 2;
  if (!values_ok || !sb_ok)
    throw UserError(describe_call(op, {v, sb}) + " with bits " + std::to_string(q.bits) + ", cols " +
                    std::to_string(q.cols) + ": expects u8 values [R, " +
                    (q.bits == 8 ? std::string("cols") : std::string("ceil(cols/2)")) +
                    "] and f32 (or f16) scale_bias [R, 2], as quantize_rowwise or fused_rowwise_table make them");
}

}  // namespace

QuantizedTable quantize_rowwise(const Tensor& x_in, int bits) {
  require_defined("quantize_rowwise", x_in);
  check_bits("quantize_rowwise", bits);
  if (x_in.ndim() != 2 || x_in.shape()[1] < 1 || x_in.dtype() == DType::Bool)
    throw UserError("quantize_rowwise(" + describe(x_in) +
                    "): expects a numeric table [R, C] with C >= 1; reshape it to 2-D (or cast bool to f32)");
  // Scale and bias are stored in f32, so the whole computation is f32 (f64 tables round first).
  Tensor x = cast_if_needed(x_in, DType::F32);
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  const double levels = bits == 8 ? 255.0 : 15.0;
  Tensor mn = min(x, 1, true), mx = max(x, 1, true);
  Tensor scale = (mx - mn) / levels;
  // A constant row has scale 0: its values are all q = 0 (exactly `bias`), never 0/0. A NaN
  // scale also takes this branch and dequantises to NaN through scale and bias.
  Tensor t = where(scale > 0.0, (x - mn) / scale, zeros({}, DType::F32));
  // The codes are integers in [0, levels] (or NaN for a row holding one, which converts to some
  // byte: such a row dequantises through its NaN scale and bias, whatever the byte).
  Tensor q = clamp(round(t), 0.0, levels).cast(DType::U8);
  if (bits == 4) {
    // Interleave neighbouring columns: byte j = q[2j] | q[2j + 1] << 4.
    if (cols % 2 != 0) q = pad(q, {{0, 0}, {0, 1}});
    Tensor pairs = reshape(q, {rows, (cols + 1) / 2, 2});
    Tensor lo = slice(pairs, {Range::all(), Range::all(), Range{0, 1}});
    Tensor hi = slice(pairs, {Range::all(), Range::all(), Range{1, 2}});
    q = reshape(lo | (hi << 4), {rows, (cols + 1) / 2});
  }
  return QuantizedTable{q, concat({scale, mn}, 1), bits, cols};
}

Tensor dequantize_rowwise(const QuantizedTable& q) {
  check_table("dequantize_rowwise", q);
  const Tensor& v = q.values;
  const Tensor& sb = q.scale_bias;
  const int64_t rows = v.shape()[0];
  Tensor vals;
  if (q.bits == 8) {
    vals = v.cast(DType::F32);
  } else {
    // Column c reads byte c / 2 through views of the stored tensor (they fold into the load's
    // index; views of a computed value would end the kernel), then shifts its nibble down by
    // 4 * (c & 1), the column's parity computed from the column index: no extra tensor is read.
    // In i32 (u8 >> i32 promotes), the byte's compute type in every kernel.
    const int64_t width = v.shape()[1];
    Tensor bytes =
        slice(reshape(expand(unsqueeze(v, 2), {rows, width, 2}), {rows, 2 * width}), {Range::all(), Range{0, q.cols}});
    Tensor shift = (arange(0, static_cast<double>(q.cols), 1, DType::I32) & 1) << 2;
    vals = ((bytes >> shift) & 15).cast(DType::F32);
  }
  // One rounding (fma): a bag then spends an FMA per vector of a row on dequantisation, not a
  // multiply and an add (every backend computes fma alike; a * b + c is never contracted).
  // (An f16 scale and bias, the 4-bit fused layout's, are widened exactly.)
  return fma(vals, cast_if_needed(column(sb, 0), DType::F32), cast_if_needed(column(sb, 1), DType::F32));
}

Tensor pack_fused_rowwise(const QuantizedTable& q) {
  check_table("pack_fused_rowwise", q);
  // PyTorch's layouts: 8 bits with an f32 scale and bias, 4 bits with f16 ones (rounded here).
  const DType sb_dt = q.bits == 8 ? DType::F32 : DType::F16;
  const Tensor sb_t = cast_if_needed(q.scale_bias, sb_dt);
  eval({q.values, sb_t});
  const int64_t rows = q.values.shape()[0], width = q.values.shape()[1];
  const auto tail = static_cast<int64_t>(2 * dtype_size(sb_dt)), stride = width + tail;
  const auto* v = static_cast<const uint8_t*>(q.values.data());
  const auto* sb = static_cast<const uint8_t*>(sb_t.data());
  auto st = Storage::allocate(DType::U8, rows * stride);  // (written in place: one copy of the table)
  auto* packed = static_cast<uint8_t*>(st->data);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = packed + r * stride;
    std::memcpy(row, v + r * width, static_cast<size_t>(width));
    std::memcpy(row + width, sb + r * tail, static_cast<size_t>(tail));
  }
  return Tensor(make_buffer_node(std::move(st), {rows, stride}));
}

QuantizedTable fused_rowwise_table(const Tensor& packed, int bits, int64_t cols) {
  require_defined("fused_rowwise_table", packed);
  check_bits("fused_rowwise_table", bits);
  const DType sb_dt = bits == 8 ? DType::F32 : DType::F16;
  const auto tail = static_cast<int64_t>(2 * dtype_size(sb_dt));
  const int64_t width = packed.ndim() == 2 ? packed.shape()[1] - tail : 0;  // code bytes per row
  if (cols < 0) cols = bits == 8 ? width : 2 * width;
  const std::string layout =
      bits == 8 ? "C codes, an f32 scale, an f32 bias" : "ceil(C/2) code bytes, an f16 scale, an f16 bias";
  if (packed.dtype() != DType::U8 || packed.ndim() != 2 || width < 1 || packed_width(cols, bits) != width)
    throw UserError("fused_rowwise_table(" + describe(packed) + ", bits " + std::to_string(bits) + ", cols " +
                    std::to_string(cols) + "): expects u8 [R, " + (bits == 8 ? "C + 8" : "ceil(C/2) + 4") +
                    "] with C >= 1 (each row " + layout +
                    "), as pack_fused_rowwise or PyTorch's embedding_bag_byte_prepack / embedding_bag_4bit_prepack "
                    "make it");
  const int64_t rows = packed.shape()[0], elem = static_cast<int64_t>(dtype_size(sb_dt));
  Tensor values = slice(packed, {Range::all(), Range{0, width}});
  Tensor scale_bias;
  if (width % elem == 0) {
    // The whole table as [R, (width + tail) / elem] scale-bias elements: each row's are its last two.
    const int64_t at = width / elem;
    scale_bias = slice(view_as_dtype(packed, sb_dt), {Range::all(), Range{at, at + 2}});
  } else {
    // Not aligned to the scale's size: the tails are copied out once (a kernel loads whole elements).
    const auto* p = static_cast<const uint8_t*>(packed.data());
    auto st = Storage::allocate(sb_dt, rows * 2);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<uint8_t*>(st->data) + r * tail, p + r * (width + tail) + width,
                  static_cast<size_t>(tail));
    scale_bias = Tensor(make_buffer_node(std::move(st), {rows, 2}));
  }
  return QuantizedTable{values, scale_bias, bits, cols};
}

}  // namespace kfuse
