// quantize_rowwise / dequantize_rowwise: the layout, the fp64 oracle written out here (scale,
// bias, q, the dequantised values), the documented round-trip bound, constant and non-finite
// rows, record-time errors, and that dequantisation is one fused kernel on every CPU backend.
#include <kfuse/explain.hpp>
#include <kfuse/index_ops.hpp>
#include <kfuse/quantize.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "forced_backend.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

// A [rows, cols] table whose rows span very different ranges (and one constant row).
std::vector<double> table_values(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<double> v = random_values(static_cast<size_t>(rows * cols), seed);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double& x = v[static_cast<size_t>(r * cols + c)];
      x = stored_as(r == 2 ? 0.75 : x * std::ldexp(1.0, static_cast<int>(r % 9) - 4) + 0.1 * static_cast<double>(r),
                    DType::F32);
    }
  return v;
}

// The bytes of packed 4-bit rows, unpacked to one value per column.
std::vector<double> unpack4(const std::vector<double>& bytes, int64_t rows, int64_t cols) {
  const int64_t width = (cols + 1) / 2;
  std::vector<double> q(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      auto b = static_cast<int>(bytes[static_cast<size_t>(r * width + c / 2)]);
      q[static_cast<size_t>(r * cols + c)] = c % 2 == 0 ? b & 15 : b >> 4;
    }
  return q;
}

class Quantize : public ForcedBackend {};

// Scale and bias against fp64, q against round((x - bias) / scale) in fp64 (a near-tie may
// round either way in f32), and |x - deq(q(x))| <= scale/2 + 4e-6 max|row| (README).
void check_round_trip(int bits, int64_t rows, int64_t cols) {
  SCOPED_TRACE("bits " + std::to_string(bits) + ", [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  const std::vector<double> x = table_values(rows, cols, 7 + static_cast<uint64_t>(cols));
  QuantizedTable q = quantize_rowwise(make_tensor(x, {rows, cols}), bits);
  ASSERT_EQ(q.values.dtype(), DType::U8);
  ASSERT_EQ(q.values.shape(), (Shape{rows, bits == 8 ? cols : (cols + 1) / 2}));
  ASSERT_EQ(q.scale_bias.shape(), (Shape{rows, 2}));
  ASSERT_EQ(q.cols, cols);
  const std::vector<double> bytes = values(q.values), sb = values(q.scale_bias), deq = values(dequantize_rowwise(q));
  const std::vector<double> qv = bits == 8 ? bytes : unpack4(bytes, rows, cols);
  const double levels = bits == 8 ? 255 : 15;
  if (bits == 4 && cols % 2 != 0) {
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_LT(bytes[static_cast<size_t>(r * ((cols + 1) / 2) + cols / 2)], 16)
          << "odd column's pad nibble, row " << r;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    auto row = x.begin() + r * cols;
    const double mn = *std::min_element(row, row + cols), mx = *std::max_element(row, row + cols);
    double big = 0;
    for (int64_t c = 0; c < cols; ++c) big = std::max(big, std::fabs(row[c]));
    const double scale = sb[static_cast<size_t>(2 * r)], bias = sb[static_cast<size_t>(2 * r + 1)];
    EXPECT_EQ(bias, mn) << "row " << r;
    EXPECT_NEAR(scale, (mx - mn) / levels, 2.5e-7 * (mx - mn) / levels) << "row " << r;
    for (int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<size_t>(r * cols + c);
      const double t = scale > 0 ? (x[i] - mn) / scale : 0;
      const bool near_tie = std::fabs(t - std::floor(t) - 0.5) < 1e-4;
      if (!near_tie) { EXPECT_EQ(qv[i], std::nearbyint(t)) << "row " << r << " col " << c; }
      EXPECT_NEAR(deq[i], qv[i] * scale + bias, 1.2e-7 * (std::fabs(qv[i] * scale) + std::fabs(deq[i])));
      EXPECT_LE(std::fabs(x[i] - deq[i]), scale / 2 + 4e-6 * big) << "row " << r << " col " << c;
    }
  }
}

TEST_P(Quantize, EightBitRoundTripWithinHalfAScale) { check_round_trip(8, 23, 64); }
TEST_P(Quantize, FourBitRoundTripWithinHalfAScaleEvenAndOddWidths) {
  check_round_trip(4, 23, 64);
  check_round_trip(4, 11, 7);
  check_round_trip(4, 5, 1);
}

// A hand-made table (not produced by quantize_rowwise): dequantisation against the fp64
// reference evaluator and against q * scale + bias written out, as one kernel; the compiled
// backends bit for bit against std::fma in f32.
TEST_P(Quantize, DequantizeMatchesTheFp64ReferenceInOneKernel) {
  const int64_t rows = 9, cols = 13;
  for (int bits : {8, 4}) {
    const int64_t width = bits == 8 ? cols : (cols + 1) / 2;
    std::vector<double> bytes = random_ints(static_cast<size_t>(rows * width), 3, 0, 255);
    if (bits == 4)
      for (int64_t r = 0; r < rows; ++r) {
        double& last = bytes[static_cast<size_t>(r * width + width - 1)];
        last = std::fmod(last, 16);  // the pad nibble of an odd width is 0
      }
    std::vector<double> sb = random_values(static_cast<size_t>(rows * 2), 4, -3, 3);
    QuantizedTable q{make_tensor(bytes, {rows, width}, DType::U8), make_tensor(sb, {rows, 2}), bits, cols};
    Tensor y = dequantize_rowwise(q);
    Explanation ex = explain(y);
    EXPECT_EQ(ex.kernel_count(), 1u) << ex.text();
    const std::vector<double> got = values(y), ref = reference_values(y);
    const std::vector<double> qv = bits == 8 ? bytes : unpack4(bytes, rows, cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const auto u = static_cast<size_t>(i);
      const double want = qv[u] * stored_as(sb[static_cast<size_t>(2 * (i / cols))], DType::F32) +
                          stored_as(sb[static_cast<size_t>(2 * (i / cols) + 1)], DType::F32);
      EXPECT_NEAR(ref[u], want, 1e-12) << "bits " << bits << " element " << i;
      EXPECT_NEAR(got[u], want, 2.4e-7 * (std::fabs(want) + 1)) << "bits " << bits << " element " << i;
      // The compiled backends round once, in f32: fma(q, scale, bias) (README "Quantised tables").
      if (GetParam() != "reference") {
        const float f = std::fma(static_cast<float>(qv[u]), static_cast<float>(sb[static_cast<size_t>(2 * (i / cols))]),
                                 static_cast<float>(sb[static_cast<size_t>(2 * (i / cols) + 1)]));
        EXPECT_EQ(got[u], static_cast<double>(f)) << "bits " << bits << " element " << i;
      }
    }
  }
}

TEST_P(Quantize, ConstantRowsAreExactAndNonFiniteRowsStayNonFinite) {
  const std::vector<double> x = {3, 3, 3, 3, kNaN, 1, 2, 3, 1, kInf, 2, 3, -1, 0, 1, 2};
  for (int bits : {8, 4}) {
    QuantizedTable q = quantize_rowwise(make_tensor(x, {4, 4}), bits);
    const std::vector<double> d = values(dequantize_rowwise(q));
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(d[static_cast<size_t>(c)], 3) << "constant row, bits " << bits;
      EXPECT_TRUE(std::isnan(d[static_cast<size_t>(4 + c)])) << "NaN row, bits " << bits << " col " << c;
      EXPECT_FALSE(std::isfinite(d[static_cast<size_t>(8 + c)])) << "inf row, bits " << bits << " col " << c;
    }
    EXPECT_EQ(d[12], -1);
    EXPECT_EQ(d[15], 2);
  }
}

// The quantised bag: embedding_bag over the dequantised table, with per-sample weights and an
// element-wise epilogue, is ONE kernel that reads only the bags' rows of the u8 table and their
// scale/bias, and matches fp64 bags of q * scale + bias written out here.
void check_weighted_bag(int64_t cols, int form);

// Forms: 8 and 4 bits as quantize_rowwise makes them, and in the fused rowwise layouts (-8, -4):
// cols 9 copies the scale and bias out (8 bits: 9 code bytes; 4 bits: 5), cols 16 reads them
// through view_as_dtype.
QuantizedTable table_form(const Tensor& x, int form) {
  if (form < 0) {
    const int64_t cols = x.shape()[1];
    return fused_rowwise_table(pack_fused_rowwise(quantize_rowwise(x, -form)), -form, cols);
  }
  return quantize_rowwise(x, form);
}

TEST_P(Quantize, WeightedBagOfTheDequantizedTableWithEpilogueIsOneKernel) {
  for (int64_t cols : {9, 16})
    for (int form : {8, 4, -8, -4}) check_weighted_bag(cols, form);
}

void check_weighted_bag(int64_t cols, int form) {
  SCOPED_TRACE("cols " + std::to_string(cols) + ", form " + std::to_string(form));
  const int64_t rows = 50;
  const int bits = form < 0 ? -form : form;
  const std::vector<double> x = table_values(rows, cols, 11);
  const std::vector<double> ids = {3, 7, 7, 49, 0, 12, 3, 8, 8, 8, 31};
  const std::vector<double> offsets = {0, 3, 3, 6};  // bag 1 is empty, the last bag runs to the end
  const std::vector<double> psw = random_values(ids.size(), 5, 0.5, 1.5);
  const std::vector<double> w = random_values(static_cast<size_t>(cols), 6),
                            b = random_values(static_cast<size_t>(cols), 7);
  {
    QuantizedTable q = table_form(make_tensor(x, {rows, cols}), form);
    eval({q.values, q.scale_bias});
    const std::vector<double> deq = values(dequantize_rowwise(q));
    Tensor y = relu(embedding_bag(dequantize_rowwise(q), make_tensor(ids, {11}, DType::I64),
                                  make_tensor(offsets, {4}, DType::I64), BagMode::Sum, make_tensor(psw, {11})) *
                        make_tensor(w, {cols}) +
                    make_tensor(b, {cols}));
    Explanation ex = explain(y);
    EXPECT_EQ(ex.kernel_count(), 1u) << ex.text();
    const std::vector<double> got = values(y);
    for (int64_t bag = 0; bag < 4; ++bag) {
      const auto end = static_cast<size_t>(bag + 1 < 4 ? offsets[static_cast<size_t>(bag + 1)] : 11);
      for (int64_t c = 0; c < cols; ++c) {
        double s = 0, mag = 0;
        for (auto i = static_cast<size_t>(offsets[static_cast<size_t>(bag)]); i < end; ++i) {
          const double v =
              deq[static_cast<size_t>(static_cast<int64_t>(ids[i]) * cols + c)] * stored_as(psw[i], DType::F32);
          s += v;
          mag += std::fabs(v);
        }
        const double wc = stored_as(w[static_cast<size_t>(c)], DType::F32),
                     bc = stored_as(b[static_cast<size_t>(c)], DType::F32);
        const double want = std::max(0.0, s * wc + bc);
        EXPECT_NEAR(got[static_cast<size_t>(bag * cols + c)], want, 8e-7 * (mag * std::fabs(wc) + std::fabs(bc)) + 1e-7)
            << "bits " << bits << " bag " << bag << " col " << c;
      }
    }
  }
}

// The fused rowwise layouts byte by byte (PyTorch's prepacked rows: code bytes, then the scale and
// the bias, little-endian; f32 at 8 bits, f16 at 4), read back in place as the same codes and
// scale/bias, and their dequantised tables bit for bit the two-tensor ones' (4 bits: with the
// scale and bias rounded to f16), for widths with and without an aligned tail.
TEST_P(Quantize, FusedRowsHoldCodesThenScaleAndBias) {
  for (int bits : {8, 4})
    for (int64_t cols : {1, 13, 16, 64}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + ", cols " + std::to_string(cols));
      const int64_t rows = 7, width = bits == 8 ? cols : (cols + 1) / 2, tail = bits == 8 ? 8 : 4;
      QuantizedTable q = quantize_rowwise(make_tensor(table_values(rows, cols, 21), {rows, cols}), bits);
      if (bits == 4) q.scale_bias = q.scale_bias.cast(DType::F16);  // what the layout stores
      Tensor packed = pack_fused_rowwise(q);
      ASSERT_EQ(packed.dtype(), DType::U8);
      ASSERT_EQ(packed.shape(), (Shape{rows, width + tail}));
      const auto* p = static_cast<const uint8_t*>(packed.data());
      const std::vector<double> codes = values(q.values), sb = values(q.scale_bias);
      for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = p + r * (width + tail);
        for (int64_t c = 0; c < width; ++c)
          EXPECT_EQ(row[c], codes[static_cast<size_t>(r * width + c)]) << "row " << r << " byte " << c;
        double scale, bias;
        if (bits == 8) {
          float f[2];
          std::memcpy(f, row + width, 8);
          scale = f[0], bias = f[1];
        } else {
          uint16_t h[2];
          std::memcpy(h, row + width, 4);
          scale = static_cast<double>(half::from_bits(h[0])), bias = static_cast<double>(half::from_bits(h[1]));
        }
        EXPECT_EQ(scale, sb[static_cast<size_t>(2 * r)]) << "row " << r;
        EXPECT_EQ(bias, sb[static_cast<size_t>(2 * r + 1)]) << "row " << r;
      }
      QuantizedTable f = fused_rowwise_table(packed, bits, cols);
      EXPECT_EQ(f.bits, bits);
      EXPECT_EQ(f.cols, cols);
      EXPECT_EQ(f.scale_bias.dtype(), q.scale_bias.dtype());
      EXPECT_EQ(values(f.values), codes);
      EXPECT_EQ(values(f.scale_bias), sb);
      EXPECT_EQ(values(dequantize_rowwise(f)), values(dequantize_rowwise(q)));
      Explanation ex = explain(dequantize_rowwise(f));
      EXPECT_EQ(ex.kernel_count(), 1u) << ex.text();
    }
  // PyTorch's default width: twice the code bytes at 4 bits
  QuantizedTable q4 = quantize_rowwise(make_tensor(table_values(3, 10, 5), {3, 10}), 4);
  EXPECT_EQ(fused_rowwise_table(pack_fused_rowwise(q4), 4).cols, 10);
}

INSTANTIATE_TEST_SUITE_P(Backends, Quantize, ::testing::Values("reference", "llvm", "xbyak"),
                         [](const auto& info) { return info.param; });

TEST(QuantizeErrors, BadArgumentsThrowAtRecordTime) {
  Tensor x = make_tensor(random_values(12, 1), {3, 4});
  EXPECT_THROW(quantize_rowwise(x, 3), UserError);
  EXPECT_THROW(quantize_rowwise(reshape(x, {12}), 8), UserError);
  EXPECT_THROW(quantize_rowwise(make_tensor({}, {3, 0}), 8), UserError);
  QuantizedTable q = quantize_rowwise(x, 4);
  try {
    dequantize_rowwise(QuantizedTable{q.values, q.scale_bias, 8, 4});
    ADD_FAILURE() << "a 4-bit table read as 8-bit was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("dequantize_rowwise([3, 2] u8, [3, 2] f32) with bits 8, cols 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(dequantize_rowwise(QuantizedTable{q.values, q.scale_bias.cast(DType::F64), 4, 4}), UserError);
  EXPECT_THROW(dequantize_rowwise(QuantizedTable{q.values, q.scale_bias, 4, 5}), UserError);
  // A fused table is u8 [R, C + 8] (8 bits) or [R, ceil(C/2) + 4] (4 bits) with C >= 1.
  EXPECT_THROW(fused_rowwise_table(make_tensor(random_ints(24, 2, 0, 255), {3, 8}, DType::U8)), UserError);
  EXPECT_THROW(fused_rowwise_table(make_tensor(random_ints(12, 2, 0, 255), {3, 4}, DType::U8), 4), UserError);
  EXPECT_THROW(fused_rowwise_table(make_tensor(random_ints(24, 2, 0, 255), {3, 8}, DType::U8), 4, 9), UserError);
  EXPECT_THROW(fused_rowwise_table(make_tensor(random_ints(24, 2, 0, 255), {3, 8}, DType::U8), 3), UserError);
  EXPECT_THROW(fused_rowwise_table(make_tensor(random_values(30, 2), {3, 10})), UserError);
  EXPECT_THROW(fused_rowwise_table(make_tensor(random_ints(30, 2, 0, 255), {30}, DType::U8)), UserError);
}

}  // namespace
}  // namespace kfuse::test
