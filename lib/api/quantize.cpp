// quantize_rowwise / dequantize_rowwise (include/kfuse/quantize.hpp): both are lazy graphs of
// existing element-wise ops, reductions and views, so dequantisation fuses into whatever reads
// it (an embedding bag reads only the rows it picks).
//
// 4-bit packing uses exact f32 arithmetic instead of bit operations: a byte b <= 255 is exact in
// f32, b * 2^-4 is exact, so floor(b / 16) and b - 16 * floor(b / 16) are the high and low
// nibble with no rounding, and lo + 16 * hi packs them. That needs no new op in every backend,
// and inside a fused kernel it costs about what a shift and a mask cost.
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
  Tensor q = clamp(round(t), 0.0, levels);
  if (bits == 4) {
    // Interleave neighbouring columns: byte j = q[2j] + 16 * q[2j + 1].
    if (cols % 2 != 0) q = pad(q, {{0, 0}, {0, 1}});
    Tensor pairs = reshape(q, {rows, (cols + 1) / 2, 2});
    Tensor lo = slice(pairs, {Range::all(), Range::all(), Range{0, 1}});
    Tensor hi = slice(pairs, {Range::all(), Range::all(), Range{1, 2}});
    q = reshape(lo + hi * 16.0, {rows, (cols + 1) / 2});
  }
  return QuantizedTable{q.cast(DType::U8), concat({scale, mn}, 1), bits, cols};
}

Tensor dequantize_rowwise(const QuantizedTable& q) {
  require_defined("dequantize_rowwise", q.values);
  require_defined("dequantize_rowwise", q.scale_bias);
  check_bits("dequantize_rowwise", q.bits);
  const Tensor& v = q.values;
  const Tensor& sb = q.scale_bias;
  const bool values_ok =
      v.dtype() == DType::U8 && v.ndim() == 2 && q.cols >= 1 && v.shape()[1] == packed_width(q.cols, q.bits);
  const bool sb_ok = sb.dtype() == DType::F32 && sb.ndim() == 2 && v.ndim() == 2 && sb.shape()[0] == v.shape()[0] &&
                     sb.shape()[1] == 2;
  if (!values_ok || !sb_ok)
    throw UserError(describe_call("dequantize_rowwise", {v, sb}) + " with bits " + std::to_string(q.bits) + ", cols " +
                    std::to_string(q.cols) + ": expects u8 values [R, " +
                    (q.bits == 8 ? std::string("cols") : std::string("ceil(cols/2)")) +
                    "] and f32 scale_bias [R, 2], as quantize_rowwise makes them");
  const int64_t rows = v.shape()[0];
  Tensor vals;
  if (q.bits == 8) {
    vals = v.cast(DType::F32);
  } else {
    // Column c reads byte c / 2 through views of the stored tensor (they fold into the load's
    // index; views of a computed value would end the kernel), then picks its nibble with the
    // column's parity, computed from the column index: no extra tensor is read.
    const int64_t width = v.shape()[1];
    Tensor bytes =
        slice(reshape(expand(unsqueeze(v, 2), {rows, width, 2}), {rows, 2 * width}), {Range::all(), Range{0, q.cols}})
            .cast(DType::F32);
    Tensor col = arange(0, static_cast<double>(q.cols), 1, DType::F32);
    Tensor odd = col - floor(col * 0.5) * 2.0;
    Tensor hi = floor(bytes * 0.0625);
    Tensor lo = bytes - hi * 16.0;
    vals = lo + odd * (hi - lo);
  }
  return vals * column(sb, 0) + column(sb, 1);
}

}  // namespace kfuse
