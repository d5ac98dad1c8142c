// Narrow storage streams on the xbyak backend (jit/xbyak/narrow.cpp): pointwise, row and global
// kernels reading and writing u8/i8/f16/bf16 and bool buffers compile on xbyak (no fallback)
// and give the LLVM backend's bits (both compute in f32 and round where the IR says), on odd
// sizes (masked tails), size 1, empty, broadcasts, and rows long enough for the online softmax.
// AVX-512 machines run these kernels' AVX2 code (the zmm emitter declines narrow streams and the
// backend emits ymm code for them), so no kernel falls back there either.
#include <kfuse/quantize.hpp>

#include <cmath>

#include "xbyak_checks.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

// Values with the specials every conversion must carry: NaN, infinities, f16 overflow and
// subnormals, f16/bf16 ties.
std::vector<double> special_values(size_t n, uint64_t seed) {
  std::vector<double> v = random_values(n, seed, -3, 3);
  const double specials[] = {kNaN,       kInf,           -kInf,   65520,       1e5,
                             3e-5,       -6e-8,          -0.0,    1 + 0x1p-11, 1 + 3 * 0x1p-11,
                             1 + 0x1p-8, 1 + 3 * 0x1p-8, 0x1p-126};
  for (size_t i = 0; i < n && i < std::size(specials); ++i) v[i * 7 % n] = specials[i];
  return v;
}

class XbyakNarrow : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::find_backend("xbyak")) GTEST_SKIP() << "no xbyak backend";
  }
  static void check(const std::function<std::vector<Tensor>()>& make, bool bitwise, double tol) {
    check_on_xbyak(make, bitwise, tol);
  }
};

TEST_F(XbyakNarrow, PointwiseLoadsAndStoresOfEveryNarrowType) {
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {8}, {9}, {0, 5}, {5, 19}, {3, 100}, {2, 1031}}) {
    SCOPED_TRACE(shape_str(s));
    const auto n = static_cast<size_t>(count_of(s));
    const std::vector<double> xv = special_values(std::max<size_t>(n, 1), 1), yv = random_values(n, 2, 0.5, 2);
    check(
        [&] {
          Tensor h = make_tensor({xv.begin(), xv.begin() + static_cast<std::ptrdiff_t>(n)}, s, DType::F16);
          Tensor b = make_tensor({xv.begin(), xv.begin() + static_cast<std::ptrdiff_t>(n)}, s, DType::BF16);
          Tensor y = make_tensor(yv, s, DType::F32);
          Tensor u = make_tensor(random_ints(n, 3, 0, 255), s, DType::U8);
          Tensor i = make_tensor(random_ints(n, 4, -128, 127), s, DType::I8);
          return std::vector<Tensor>{h + h * 0.5,                   // f16 -> f16, two roundings
                                     relu(b) * 3.0,                 // bf16 -> bf16
                                     h.cast(DType::F32) * y,        // f16 -> f32
                                     b.cast(DType::F32) + y,        // bf16 -> f32
                                     u.cast(DType::F32) * 0.5 + y,  // u8 -> f32
                                     i.cast(DType::F32) - y,        // i8 -> f32
                                     (y * 3.0).cast(DType::F16),    // f32 -> f16
                                     (y - 1.0).cast(DType::BF16),   // f32 -> bf16
                                     h.cast(DType::BF16),           // f16 -> bf16
                                     b.cast(DType::F16),            // bf16 -> f16
                                     u.cast(DType::F16) + h,        // u8 -> f16
                                     maximum(h, b.cast(DType::F16))};
        },
        true, 1e-2);
  }
}

TEST_F(XbyakNarrow, BroadcastsAndSingleElements) {
  for (int64_t c : {1, 7, 64, 77}) {
    SCOPED_TRACE(c);
    check(
        [&] {
          Tensor x = make_tensor(random_values(static_cast<size_t>(5 * c), 5), {5, c}, DType::F32);
          Tensor row = make_tensor(special_values(static_cast<size_t>(c), 6), {1, c}, DType::F16);
          Tensor col = make_tensor(random_values(5, 7), {5, 1}, DType::BF16);  // one element per row
          Tensor one = make_tensor({2.5}, {}, DType::F16);
          return std::vector<Tensor>{x * row + col, (x * col).cast(DType::F16), row * one, one + one};
        },
        true, 1e-2);
  }
}

TEST_F(XbyakNarrow, RowAndGlobalReductions) {
  for (const Shape& s : std::vector<Shape>{{1, 1}, {3, 7}, {4, 100}, {2, 1000}, {3, 4099}}) {
    SCOPED_TRACE(shape_str(s));
    const auto n = static_cast<size_t>(count_of(s));
    check(
        [&] {
          Tensor h = make_tensor(random_values(n, 8, -4, 4), s, DType::F16);
          Tensor b = make_tensor(random_values(n, 9, -4, 4), s, DType::BF16);
          Tensor u = make_tensor(random_ints(n, 10, 0, 255), s, DType::U8);
          return std::vector<Tensor>{softmax(h, -1),
                                     log_softmax(b, -1),
                                     sum(h, 1),
                                     max(b, 1),
                                     mean(u.cast(DType::F32), 1),
                                     sum(h.cast(DType::F32)),
                                     layer_norm(h, {s[1]}),
                                     softmax(h.cast(DType::F32), -1).cast(DType::BF16)};
        },
        false, 2e-2);
  }
}

// Casts to u8/i8 truncate toward zero to i32 and wrap (NaN and out of range: INT32_MIN, whose
// low byte is 0): the specials, values just inside and outside both ranges, negative fractions.
TEST_F(XbyakNarrow, ByteStoresTruncateAndWrap) {
  const double edges[] = {kNaN,  kInf,   -kInf,  255.9, 256.0,  256.5, -0.9,  -1.0,         -1.5,         127.9,
                          128.0, -128.9, -129.0, 300.7, -300.7, 1e10,  -1e10, 2147483520.0, -2147483648.0};
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {8}, {9}, {0, 5}, {5, 19}, {2, 1031}}) {
    SCOPED_TRACE(shape_str(s));
    const auto n = static_cast<size_t>(count_of(s));
    std::vector<double> xv = random_values(n, 11, -400, 400), qv = random_ints(n, 15, -1200, 1200);
    for (size_t i = 0; i < n && i < std::size(edges); ++i) xv[i * 5 % n] = edges[i];
    for (double& v : qv) v *= 0.25;  // (quarters: the f32 arithmetic below is exact, as the reference's)
    check(
        [&] {
          Tensor x = make_tensor(xv, s, DType::F32);
          Tensor h = make_tensor(random_values(n, 12, -300, 300), s, DType::F16);
          Tensor u = make_tensor(random_ints(n, 13, 0, 255), s, DType::U8);
          Tensor i = make_tensor(random_ints(n, 14, -128, 127), s, DType::I8);
          Tensor q = make_tensor(qv, s, DType::F32);
          return std::vector<Tensor>{x.cast(DType::U8),  // f32 -> u8
                                     x.cast(DType::I8),  // f32 -> i8
                                     h.cast(DType::U8),  // f16 -> u8
                                     u.cast(DType::I8),  // u8 -> i8 (wraps)
                                     i.cast(DType::U8),  // i8 -> u8 (wraps)
                                     (q * 0.5 + u.cast(DType::F32)).cast(DType::U8)};
        },
        true, 0);
  }
}

// Scalar stores of u8/i8 (one per row, one per kernel) and the 8-bit row-wise quantisation, whose
// row kernel ends in a u8 store (codes are compared with a tolerance of one: the reference
// computes (x - min) / scale in f64).
TEST_F(XbyakNarrow, ByteStoresOfRowsAndQuantisedTables) {
  for (const Shape& s : std::vector<Shape>{{1, 1}, {3, 7}, {4, 64}, {5, 100}, {2, 1031}}) {
    SCOPED_TRACE(shape_str(s));
    const auto n = static_cast<size_t>(count_of(s));
    check(
        [&] {
          Tensor x = make_tensor(random_values(n, 15, -3, 3), s, DType::F32);
          QuantizedTable q = quantize_rowwise(x, 8);
          return std::vector<Tensor>{q.values, (sum(x, 1) * 10.0).cast(DType::I8), max(x).cast(DType::U8)};
        },
        true, 1.0);
  }
}

// bool buffers: stored as bytes 0/1, held as lane masks (narrow.cpp). Comparisons and logical ops
// stored as bool, bool inputs read as conditions, operands and values, broadcast along the row
// and across rows, in rows with a reduction, at odd sizes (masked byte tails), size 1 and empty.
TEST_F(XbyakNarrow, BoolBuffersAreLaneMasks) {
  for (const Shape& s : std::vector<Shape>{{1, 1}, {1, 7}, {2, 8}, {3, 9}, {0, 5}, {5, 19}, {2, 1031}}) {
    SCOPED_TRACE(shape_str(s));
    const int64_t rows = s[0], cols = s[1];
    const auto n = static_cast<size_t>(rows * cols);
    check(
        [&] {
          Tensor x = make_tensor(n ? special_values(n, 16) : std::vector<double>{}, s, DType::F32);
          Tensor y = make_tensor(random_values(n, 17, -3, 3), s, DType::F32);
          Tensor m = make_tensor(random_ints(n, 18, 0, 1), s, DType::Bool);
          Tensor row = make_tensor(random_ints(static_cast<size_t>(cols), 19, 0, 1), {1, cols}, DType::Bool);
          Tensor col = make_tensor(random_ints(static_cast<size_t>(rows), 20, 0, 1), {rows, 1}, DType::Bool);
          return std::vector<Tensor>{x < y,                                    // f32 compare -> bool
                                     logical_and(m, x > 0.0),                  // bool in, bool out
                                     logical_not(m),                           // bool -> bool
                                     where(m, x, y),                           // bool condition
                                     m.cast(DType::F32) * y,                   // bool -> f32
                                     where(logical_or(row, col), y, x * 2.0),  // broadcast bools
                                     m == (y > 0.0)};                          // compare bools
        },
        true, 0);
    check(  // in a row reduction (the backends sum in different orders)
        [&] {
          Tensor y = make_tensor(random_values(n, 17, -3, 3), s, DType::F32);
          Tensor m = make_tensor(random_ints(n, 18, 0, 1), s, DType::Bool);
          return std::vector<Tensor>{sum(where(m, y, zeros({}, DType::F32)), 1), max(m.cast(DType::F32) * y, 1)};
        },
        false, 1e-5);
  }
}

}  // namespace
