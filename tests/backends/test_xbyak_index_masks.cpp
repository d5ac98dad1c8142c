// Comparisons of index expressions and loads under them on the xbyak backend
// (jit/xbyak/index_masks.cpp): concat, pad and masks built from positions compile on xbyak (no
// fallback) and give the LLVM backend's bits and the reference's values, at odd sizes (masked
// tails), size 1, empty parts, boundaries that fall inside a vector, at its edges and beyond the
// row, and conditions along the row (coefficient 1, -1) or across rows (coefficient 0).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "xbyak_checks.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

class XbyakIndexMasks : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::find_backend("xbyak")) GTEST_SKIP() << "no xbyak backend";
  }
  static void check(const std::function<std::vector<Tensor>()>& make, double tol, bool bitwise = true) {
    check_on_xbyak(make, bitwise, tol);
  }
  static Tensor input(int64_t rows, int64_t cols, uint64_t seed) {
    return make_tensor(random_values(static_cast<size_t>(rows * cols), seed), {rows, cols}, DType::F32);
  }
};

TEST_F(XbyakIndexMasks, ConcatAlongTheRow) {
  // widths whose boundaries fall inside a vector, on its edges, and parts of width 0 and 1
  const std::vector<std::vector<int64_t>> widths = {{100, 37}, {8, 8}, {1, 1}, {3, 0, 5}, {0, 9}, {13, 1, 7, 16}};
  for (int64_t rows : {1, 3, 17}) {
    for (const auto& w : widths) {
      SCOPED_TRACE(::testing::Message() << rows << " rows, widths " << ::testing::PrintToString(w));
      check(
          [&] {
            std::vector<Tensor> parts;
            for (size_t i = 0; i < w.size(); ++i) parts.push_back(input(rows, w[i], 10 + i));
            std::vector<Tensor> computed;
            for (size_t i = 0; i < parts.size(); ++i) computed.push_back(i % 2 ? parts[i] * 2.0 : relu(parts[i]));
            return std::vector<Tensor>{concat(parts, 1), concat(computed, 1) + 1.0};
          },
          1e-6);
    }
  }
}

TEST_F(XbyakIndexMasks, PadAndConcatAcrossRows) {
  for (int64_t cols : {1, 7, 8, 29}) {
    SCOPED_TRACE(cols);
    check(
        [&] {
          Tensor a = input(5, cols, 20), b = input(3, cols, 21);
          return std::vector<Tensor>{pad(a, {{0, 0}, {3, 5}}),         // both sides
                                     pad(a, {{0, 0}, {0, 11}}, -2.5),  // past a vector
                                     pad(a, {{2, 1}, {9, 0}}),         // rows and columns
                                     concat({a, b}, 0) * 3.0,          // across rows: all lanes or none
                                     pad(a, {{1, 2}, {0, 0}}, 7.0)};
        },
        1e-6);
  }
}

TEST_F(XbyakIndexMasks, MasksFromPositions) {
  for (int64_t n : {1, 5, 8, 19, 40}) {
    SCOPED_TRACE(n);
    check(
        [&] {
          Tensor x = input(n, n, 30);
          Tensor i = reshape(arange(n), {n, 1}), j = reshape(arange(n), {1, n});
          return std::vector<Tensor>{where(j <= i, x, zeros({}, DType::F32)),  // lower triangle
                                     where(j == i, x, x * 0.5),                // diagonal
                                     where(j != i + 2, x, -x),                 // an off-diagonal
                                     where(i - j > 3, x, x + 1.0),
                                     where(logical_or(logical_not(j < i), j == 0), x, -x)};
        },
        1e-6);
    check(
        [&] {  // causal softmax: the mask inside a row kernel's loops
          Tensor x = input(n, n, 31);
          Tensor i = reshape(arange(n), {n, 1}), j = reshape(arange(n), {1, n});
          const double inf = std::numeric_limits<double>::infinity();
          return std::vector<Tensor>{softmax(where(j <= i, x, full({}, -inf, DType::F32)), -1)};
        },
        1e-5, false);
  }
}

// A mask from positions after a matmul (causal attention scores) and a concat of a matmul's
// result: the GEMM epilogue runs the same row code.
TEST_F(XbyakIndexMasks, AfterAMatmul) {
  for (int64_t n : {1, 9, 33}) {
    SCOPED_TRACE(n);
    check(
        [&] {
          Tensor q = input(n, 16, 40), kt = input(16, n, 41), v = input(n, 5, 42);
          Tensor i = reshape(arange(n), {n, 1}), j = reshape(arange(n), {1, n});
          const double inf = std::numeric_limits<double>::infinity();
          Tensor scores = where(j <= i, matmul(q, kt) * 0.25, full({}, -inf, DType::F32));
          return std::vector<Tensor>{scores, softmax(scores, -1), concat({matmul(q, kt), v}, 1)};
        },
        1e-4, false);
  }
}

// concat({a, b}, 0): for the first rows of the result, the load from b addresses the rows before
// b's first row, and for the last rows the load from a those after a's last row. Such vectors lie
// wholly outside their input and must read nothing: a masked load with no lane set does not
// fault, but where its address lies in no accessible page it takes a microcode assist on every
// call (AMD Zen 3: 65x slower). Here an inaccessible region lies between a and b: the kernel must
// run about as fast as with a and b adjacent, and give their values.
TEST_F(XbyakIndexMasks, VectorsWhollyOutsideAnInputReadNothing) {
  constexpr int64_t rows = 512, cols = 1024, n = rows * cols;
  constexpr size_t bytes = n * sizeof(float);
  auto* region =
      static_cast<char*>(mmap(nullptr, 3 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(static_cast<void*>(region), MAP_FAILED);
  ASSERT_EQ(mprotect(region + bytes, bytes, PROT_NONE), 0);  // a, nothing, b
  auto* ga = reinterpret_cast<float*>(region);
  auto* gb = reinterpret_cast<float*>(region + 2 * bytes);
  std::vector<float> adjacent(2 * n);  // a, b
  for (int64_t i = 0; i < n; ++i) {
    ga[i] = adjacent[i] = static_cast<float>(i % 101);
    gb[i] = adjacent[n + i] = static_cast<float>(i % 103) + 0.5f;
  }
  Options saved = options(), o = saved;
  o.backends = {"xbyak"};
  o.num_threads = 1;
  set_options(o);
  reset_counters();
  // Seconds of one evaluation (borrowed anew: a new graph each time); the two layouts are timed
  // in turn, the fastest of 11 of each kept, so that a burst of load on a shared host (a build
  // beside the tests) slows both series alike rather than all of one.
  auto once = [&](float* a, float* b, bool check) {
    Tensor y = concat({Tensor::borrow(a, {rows, cols}), Tensor::borrow(b, {rows, cols})}, 0);
    const auto t0 = std::chrono::steady_clock::now();
    y.eval();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (check) { EXPECT_TRUE(std::equal(adjacent.begin(), adjacent.end(), y.data_ptr<float>())); }
    return s;
  };
  double together = 1e30, apart = 1e30;
  for (int r = 0; r < 11; ++r) {
    together = std::min(together, once(adjacent.data(), adjacent.data() + n, r == 0));
    apart = std::min(apart, once(ga, gb, r == 0));
  }
  EXPECT_EQ(counters().fallbacks, 0u);
  set_options(saved);
  munmap(region, 3 * bytes);
  EXPECT_LT(apart, 4 * together + 1e-3) << "a and b apart: " << apart * 1e3 << " ms, adjacent: " << together * 1e3
                                        << " ms";
}

}  // namespace
