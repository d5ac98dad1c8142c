/** \file quantize.hpp
 * Row-wise quantised tables (embedding tables stored in 8 or 4 bits per value).
 *
 * Layout (README "Quantised tables"): a QuantizedTable holds two tensors, so every access is an
 * ordinary typed load and dequantisation is a lazy element-wise graph that fuses into its
 * consumer (an embedding bag reads the u8 row and the 8-byte scale/bias row it needs, nothing
 * else).
 *   values:     u8 [R, C] (8 bits) or u8 [R, ceil(C/2)] (4 bits: column 2j in the low nibble of
 *               byte j, column 2j+1 in the high nibble; the high nibble of an odd C's last
 *               byte is 0);
 *   scale_bias: f32 [R, 2]: scale = (max - min) / (2^bits - 1) and bias = min of the row (f16
 *               is accepted too: the 4-bit fused layout's).
 * Value q dequantises to q * scale + bias. Both functions are lazy, as every other op.
 *
 * The classic "fused rowwise" layouts (each row's codes followed by its scale and bias) are a
 * QuantizedTable too (pack_fused_rowwise, fused_rowwise_table): its two tensors are views of one
 * byte table (view_as_dtype for the scale/bias tail), so kernels see the same two-tensor form, and
 * a bag over it reads a row's codes and its scale and bias from the same or adjacent lines (8 bits:
 * 15-17% faster out of cache).
 */
#pragma once
#include <cstdint>

#include "kfuse/tensor.hpp"

namespace kfuse {

struct QuantizedTable {
  Tensor values;      ///< u8 [R, C] or, at 4 bits, u8 [R, ceil(C/2)]
  Tensor scale_bias;  ///< f32 [R, 2]: (scale, bias) per row
  int bits = 8;       ///< 8 or 4
  int64_t cols = 0;   ///< C, the dequantised width
};

/// Quantises each row of a float (or integer) table x [R, C] to `bits` = 8 or 4:
/// q = round_half_even((x - min) / scale) with min/max over the row, computed in f32. A constant
/// row has scale 0 and every q = 0 (it dequantises exactly). Round trip: |x - deq(q(x))| <=
/// scale/2 plus f32 rounding (a few ulps of |x|). A row holding a NaN or an infinity
/// dequantises to non-finite values, never to finite wrong ones.
QuantizedTable quantize_rowwise(const Tensor& x, int bits = 8);

/// The f32 table [R, C] that `q` encodes: values * scale + bias, element-wise (fuses into its
/// consumers, e.g. an embedding bag over the rows it picks).
Tensor dequantize_rowwise(const QuantizedTable& q);

/// The "fused rowwise" layouts of PyTorch and FBGEMM: each row its code bytes, then its scale,
/// then its bias (little-endian), no padding.
///   8 bits (quantized::embedding_bag_byte_prepack): u8 [R, C + 8], f32 scale and bias;
///   4 bits (quantized::embedding_bag_4bit_prepack): u8 [R, ceil(C/2) + 4], f16 scale and bias
///          (an f32 scale and bias are rounded to f16 here: the codes stay, the dequantised
///          values move by at most 15 * |scale| * 2^-11 + |bias| * 2^-11).
/// Evaluates `q` and copies it into that layout: an eager conversion, as PyTorch's prepack. A
/// bag over it reads each row's codes and its scale and bias from adjacent bytes (README
/// "Quantised tables").
Tensor pack_fused_rowwise(const QuantizedTable& q);

/// A fused-rowwise table (pack_fused_rowwise's, or PyTorch's prepacked bytes borrowed) as a
/// QuantizedTable read in place: `values` is a view of each row's code bytes and `scale_bias` a
/// view of its tail through view_as_dtype(packed, f32 or f16) (when the code bytes are a multiple
/// of the scale's size; otherwise the scale and bias are copied out once, the codes are still read
/// in place). `cols` (C) defaults to the code bytes (8 bits) or twice them (4 bits, as PyTorch);
/// pass it for an odd 4-bit width. dequantize_rowwise and embedding_bag work on it unchanged.
QuantizedTable fused_rowwise_table(const Tensor& packed, int bits = 8, int64_t cols = -1);

}  // namespace kfuse
