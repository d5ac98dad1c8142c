// f32 uniform random numbers on the xbyak backend (jit/xbyak/random.cpp): rand and what fuses
// with it compile on xbyak (no fallback) and give the reference's values exactly (the counter
// hash of lib/core/random.hpp is integer arithmetic and its conversion is exact), so LLVM's
// bits too: odd sizes (masked tails), size 1, empty, rand broadcast across rows (the counter
// constant along a column), seeds 0 and near 2^64, and a rand inside a row kernel.
#include <kfuse/options.hpp>

#include "xbyak_checks.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

class XbyakRandom : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::find_backend("xbyak")) GTEST_SKIP() << "no xbyak backend";
  }
};

TEST_F(XbyakRandom, UniformValuesAndWhatFusesWithThem) {
  for (const Shape& s : std::vector<Shape>{{1}, {7}, {8}, {9}, {0, 5}, {5, 19}, {3, 100}, {2, 1031}}) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{42}, ~uint64_t{0} - 5}) {
      SCOPED_TRACE(shape_str(s) + " seed " + std::to_string(seed));
      const auto n = static_cast<size_t>(count_of(s));
      check_on_xbyak([&] { return std::vector<Tensor>{rand(s, seed), rand(s, seed) * 2.0 - 1.0}; }, true, 0);
      check_on_xbyak(  // dropout: the f32 product differs from the fp64 reference by its rounding
          [&] {
            Tensor x = make_tensor(random_values(n, 1), s, DType::F32);
            return std::vector<Tensor>{where(rand(s, seed + 1) > 0.25, x * (1 / 0.75), zeros({}, DType::F32))};
          },
          true, 1e-6);
    }
  }
}

TEST_F(XbyakRandom, BroadcastAndInsideRows) {
  for (int64_t c : {1, 7, 64, 77}) {
    SCOPED_TRACE(c);
    check_on_xbyak(
        [&] {
          Tensor x = make_tensor(random_values(static_cast<size_t>(6 * c), 2), {6, c}, DType::F32);
          Tensor row = expand(rand({1, c}, 7), {6, c});  // the same row of values in every row
          Tensor col = expand(rand({6, 1}, 8), {6, c});  // one value per row: constant along it
          return std::vector<Tensor>{x + row, x * col, max(rand({6, c}, 10), 1)};
        },
        true, 1e-6);
    check_on_xbyak(  // (sums: the backends' summation orders differ in the last bits)
        [&] {
          Tensor x = make_tensor(random_values(static_cast<size_t>(6 * c), 2), {6, c}, DType::F32);
          return std::vector<Tensor>{sum(x * rand({6, c}, 9), 1), softmax(rand({6, c}, 11), -1)};
        },
        false, 1e-5);
  }
}

}  // namespace
