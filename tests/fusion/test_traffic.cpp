// explain()'s minimum traffic (lib/fusion/traffic.cpp), which the profiler and kfuse_compare divide
// by: inputs read through gathers count the elements the gathers can reach, not the whole table;
// every other input counts whole. Counted by hand here.
#include <kfuse/explain.hpp>
#include <kfuse/index_ops.hpp>
#include <kfuse/profile.hpp>
#include <kfuse/quantize.hpp>

#include "test_util.hpp"

namespace kfuse::test {
namespace {

Tensor rnd(Shape s, uint64_t seed) {
  return make_tensor(random_values(static_cast<size_t>(count_of(s)), seed, -1, 1), s);
}

Tensor ids_tensor(int64_t n, int64_t rows, uint64_t seed, Shape shape = {}) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<int64_t>((i * 7919 + seed * 104729) % static_cast<uint64_t>(rows));
  return Tensor::from_vector(v, shape.empty() ? Shape{n} : shape);
}

using RW = std::pair<int64_t, int64_t>;  // (read bytes, write bytes)

// The one kernel's reads and writes.
RW traffic(const Tensor& y) {
  Explanation ex = explain(y);
  EXPECT_EQ(ex.kernel_count(), 1u) << ex.text();
  if (ex.kernels.empty()) return {-1, -1};
  return {ex.kernels[0].read_bytes, ex.kernels[0].write_bytes};
}

constexpr int64_t R = 5000, C = 48, N = 300, B = 20;

TEST(Traffic, EmbeddingBagsReadTheRowsTheirIdsReach) {
  Tensor table = rnd({R, C}, 1), ids = ids_tensor(N, R, 2);
  std::vector<int64_t> offs;
  for (int64_t b = 0; b < B; ++b) offs.push_back(b * N / B);
  Tensor offsets = Tensor::from_vector(offs, {B});
  const int64_t index_bytes = 8 * (N + B), out_bytes = 4 * B * C;
  // f32: N rows of C floats (an id repeated counts again: the bound needs no look at the data).
  EXPECT_EQ(traffic(embedding_bag(table, ids, offsets)), RW(4 * N * C + index_bytes, out_bytes));
  // 8-bit: N rows of C bytes and of the f32 scale and bias, through dequantize_rowwise's casts,
  // column slices and broadcasts.
  QuantizedTable q8 = quantize_rowwise(table, 8);
  eval({q8.values, q8.scale_bias});
  EXPECT_EQ(traffic(embedding_bag(dequantize_rowwise(q8), ids, offsets)), RW(N * C + 8 * N + index_bytes, out_bytes));
  // 4-bit: the packed bytes ceil(C/2) per row, through the nibble picks (reshape, expand, slice).
  QuantizedTable q4 = quantize_rowwise(table, 4);
  eval({q4.values, q4.scale_bias});
  EXPECT_EQ(traffic(embedding_bag(dequantize_rowwise(q4), ids, offsets)),
            RW(N * (C / 2) + 8 * N + index_bytes, out_bytes));
}

TEST(Traffic, GathersAndIndexSelectsReadWhatTheirIndexReaches) {
  Tensor table = rnd({R, C}, 3), ids = ids_tensor(N, R, 4);
  // embedding with an element-wise consumer: N rows.
  EXPECT_EQ(traffic(embedding(table, ids) * 2.0), RW(4 * N * C + 8 * N, 4 * N * C));
  // gather along axis 0 with a [7, C] index: 7 positions per column.
  Tensor idx = ids_tensor(7 * C, R, 5, {7, C});
  EXPECT_EQ(traffic(gather(table, 0, idx)), RW(4 * 7 * C + 8 * 7 * C, 4 * 7 * C));
  // index_select of 9 columns: every row, 9 columns.
  EXPECT_EQ(traffic(index_select(table, 1, ids_tensor(9, C, 6))), RW(4 * R * 9 + 8 * 9, 4 * R * 9));
  // More ids than rows: never more than the table.
  Tensor many = ids_tensor(3 * R, R, 7);
  EXPECT_EQ(traffic(embedding(table, many)), RW(4 * R * C + 8 * 3 * R, 4 * 3 * R * C));
}

TEST(Traffic, InputsReadWholeCountOnce) {
  Tensor a = rnd({64, 33}, 8), b = rnd({33}, 9);
  // a broadcast operand is read once, at its own size
  EXPECT_EQ(traffic(relu(a + b)), RW(4 * (64 * 33 + 33), 4 * 64 * 33));
  // a transposed view and a reduction reach their whole input
  EXPECT_EQ(traffic(sum(transpose(a), 1)), RW(4 * 64 * 33, 4 * 33));
  // an input read twice (two uses) still counts once
  EXPECT_EQ(traffic(a * a + sin(a)), RW(4 * 64 * 33, 4 * 64 * 33));
}

TEST(Traffic, TheProfilerCountsTheSameBytesForABag) {
  Tensor table = rnd({R, C}, 10), ids = ids_tensor(N, R, 11);
  Tensor offsets = Tensor::from_vector(std::vector<int64_t>{0, 100, 200}, {3});
  Tensor y = embedding_bag(table, ids, offsets);
  const auto [reads, writes] = traffic(y);
  Profile p = profile([&] { y.eval(); });
  ASSERT_EQ(p.launches.size(), 1u);
  EXPECT_EQ(p.launches[0].read_bytes, static_cast<double>(reads));
  EXPECT_EQ(p.launches[0].write_bytes, static_cast<double>(writes));
}

}  // namespace
}  // namespace kfuse::test
