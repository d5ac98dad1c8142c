// Index ops (gather, index_select, embedding, embedding_bag) on every CPU backend and OpenCL:
// results against a naive loop here and the fp64 reference evaluator, the index error rule
// (realized ids at record time, lazy ids at eval), and the one-kernel fusion of embedding_bag
// with a dequantizing producer and an element-wise consumer.
#include <kfuse/cache.hpp>
#include <kfuse/explain.hpp>
#include <kfuse/index_ops.hpp>

#include <optional>

#include "forced_backend.hpp"
#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

using IndexOpsOn = ForcedBackend;

const std::vector<DType> kValueDtypes = {DType::F32, DType::F64, DType::I32, DType::I64,
                                         DType::U8,  DType::I8,  DType::F16, DType::BF16};

// Small integers: exact in every dtype, so every result is exact but float sums of many.
std::vector<double> table_values(int64_t n, uint64_t seed) { return random_ints(static_cast<size_t>(n), seed, 0, 100); }

void expect_matches(const Tensor& y, const std::vector<double>& expected, double tol = 0) {
  std::vector<double> got = values(y);
  EXPECT_TRUE(all_close(got, expected, tol, tol)) << explain(y).text();
  EXPECT_TRUE(all_close(got, reference_values(y), tol, tol));
}

// PyTorch's embedding_bag, in doubles. bags: (begin, end) into ids.
std::vector<double> naive_bag(const std::vector<double>& table, int64_t D, const std::vector<double>& ids,
                              const std::vector<std::pair<int64_t, int64_t>>& bags, BagMode mode,
                              const std::vector<double>& psw, std::optional<int64_t> pad) {
  std::vector<double> out;
  for (auto [b, e] : bags)
    for (int64_t d = 0; d < D; ++d) {
      double acc = mode == BagMode::Max ? -kInf : 0;
      int64_t n = 0;
      for (int64_t i = b; i < e; ++i) {
        auto id = static_cast<int64_t>(ids[i]);
        if (pad && id == *pad) continue;
        double v = table[id * D + d] * (psw.empty() ? 1.0 : psw[i]);
        acc = mode == BagMode::Max ? std::max(acc, v) : acc + v;
        ++n;
      }
      if (n == 0) acc = 0;
      else if (mode == BagMode::Mean) acc /= static_cast<double>(n);
      out.push_back(acc);
    }
  return out;
}

TEST_P(IndexOpsOn, GatherAlongEachAxis) {
  auto xv = random_values(5 * 7 * 3, 1);
  Tensor x = make_tensor(xv, {5, 7, 3});
  auto xs = stored_values(xv, DType::F32);
  for (int64_t axis = 0; axis < 3; ++axis) {
    SCOPED_TRACE(axis);
    Shape is = {4, 6, 2};
    is[axis] = 9;  // larger than x along the gather axis, smaller elsewhere
    const int64_t size = Shape{5, 7, 3}[axis];
    auto iv = random_ints(static_cast<size_t>(count_of(is)), 10 + axis, 0, size - 1);
    std::vector<double> expected = generate(is, [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> src = i;
      src[axis] = static_cast<int64_t>(iv[ravel(i, is)]);
      return xs[ravel(src, {5, 7, 3})];
    });
    for (DType it : {DType::I32, DType::I64}) expect_matches(gather(x, axis - 3, make_tensor(iv, is, it)), expected);
  }
}

TEST_P(IndexOpsOn, IndexSelectAndEmbeddingEveryDtype) {
  const int64_t R = 7, D = 5;
  auto tv = table_values(R * D, 2);
  std::vector<double> ids = {3, 0, 6, 3, 3, 1};  // repeated ids
  for (DType vt : kValueDtypes)
    for (DType it : {DType::I32, DType::I64}) {
      SCOPED_TRACE(std::string(dtype_name(vt)) + " ids " + dtype_name(it));
      Tensor table = make_tensor(tv, {R, D}, vt);
      std::vector<double> rows;
      for (double id : ids)
        for (int64_t d = 0; d < D; ++d) rows.push_back(tv[static_cast<int64_t>(id) * D + d]);
      Tensor e = embedding(table, make_tensor(ids, {2, 3}, it));
      EXPECT_EQ(e.shape(), (Shape{2, 3, D}));
      EXPECT_EQ(e.dtype(), vt);
      expect_matches(e, rows);
      // columns of the table: index_select along axis 1
      std::vector<double> cols = generate({R, 3}, [&](const std::vector<int64_t>& i) {
        return tv[i[0] * D + std::vector<int64_t>{4, 0, 4}[i[1]]];
      });
      expect_matches(index_select(table, 1, make_tensor({4, 0, 4}, {3}, it)), cols);
    }
}

TEST_P(IndexOpsOn, EdgeShapesAndViews) {
  // size-1 table, empty ids, a 0-d id
  Tensor one = make_tensor({2.5, -1}, {1, 2});
  expect_matches(embedding(one, make_tensor({0, 0, 0}, {3}, DType::I64)), {2.5, -1, 2.5, -1, 2.5, -1});
  Tensor none = embedding(one, make_tensor({}, {0}, DType::I64));
  EXPECT_EQ(none.shape(), (Shape{0, 2}));
  EXPECT_TRUE(values(none).empty());
  expect_matches(embedding(one, make_tensor({0}, {}, DType::I32)), {2.5, -1});
  // an empty table with no ids
  EXPECT_EQ(embedding(zeros({0, 3}), make_tensor({}, {0, 4}, DType::I64)).shape(), (Shape{0, 4, 3}));
  // a non-contiguous table: the transpose of [D, R] and a strided slice
  auto tv = random_values(4 * 9, 3);
  auto ts = stored_values(tv, DType::F32);
  Tensor t = make_tensor(tv, {4, 9}).transpose(0, 1).slice({Range{1, std::nullopt, 2}});  // [4, 4]: rows 1,3,5,7
  std::vector<double> ids = {3, 0, 2, 2};
  std::vector<double> expected;
  for (double id : ids)
    for (int64_t d = 0; d < 4; ++d) expected.push_back(ts[d * 9 + (1 + 2 * static_cast<int64_t>(id))]);
  expect_matches(embedding(t, make_tensor(ids, {4}, DType::I64)), expected);
}

TEST_P(IndexOpsOn, EmbeddingBagWithOffsets) {
  const int64_t R = 9, D = 3;
  auto tv = table_values(R * D, 4);
  std::vector<double> ids = {1, 4, 4, 0, 8, 2, 4, 7, 5, 1, 3};  // N = 11, repeated ids
  std::vector<double> offsets = {0, 3, 3, 7, 10};               // an empty bag, a one-id bag at the end
  std::vector<std::pair<int64_t, int64_t>> bags = {{0, 3}, {3, 3}, {3, 7}, {7, 10}, {10, 11}};
  auto psw = random_values(ids.size(), 5, 0.5, 1.5);
  auto psw_s = stored_values(psw, DType::F32);
  for (DType vt : kValueDtypes) {
    Tensor table = make_tensor(tv, {R, D}, vt);
    // Both id dtypes with one value dtype (each combination is a compile: keeps the test cheap).
    for (DType it : vt == DType::F32 ? std::vector<DType>{DType::I32, DType::I64} : std::vector<DType>{DType::I32})
      for (BagMode mode : {BagMode::Sum, BagMode::Mean, BagMode::Max})
        for (std::optional<int64_t> pad : {std::optional<int64_t>{}, std::optional<int64_t>{4}}) {
          SCOPED_TRACE(std::string(dtype_name(vt)) + " ids " + dtype_name(it) + " mode " +
                       std::to_string(static_cast<int>(mode)) + (pad ? " pad" : ""));
          Tensor y = embedding_bag(table, make_tensor(ids, {11}, it), make_tensor(offsets, {5}, it), mode, {}, pad);
          EXPECT_EQ(y.shape(), (Shape{5, D}));
          const double tol = mode == BagMode::Mean || vt == DType::F16 || vt == DType::BF16 ? 1e-2 : 0;
          expect_matches(y, naive_bag(tv, D, ids, bags, mode, {}, pad), tol);
        }
    if (!is_float(vt)) continue;
    SCOPED_TRACE(std::string(dtype_name(vt)) + " weighted");
    Tensor y = embedding_bag(table, make_tensor(ids, {11}, DType::I64), make_tensor(offsets, {5}, DType::I64),
                             BagMode::Sum, make_tensor(psw, {11}, vt), -5);  // padding_idx -5 = row 4
    expect_matches(y, naive_bag(tv, D, ids, bags, BagMode::Sum, stored_values(psw_s, vt), 4), 1e-2);
  }
}

// Batches differ in their id count: the bag's end is the ids extent, a launch parameter, so the
// second and third batches reuse the first batch's kernel (each used to compile its own: the
// last bag's end was a recorded constant).
TEST_P(IndexOpsOn, EmbeddingBagBatchesOfAnyIdCountShareOneKernel) {
  const int64_t R = 9, D = 5;
  auto tv = table_values(R * D, 6);
  Tensor table = make_tensor(tv, {R, D}, DType::F32);
  auto run = [&](const std::vector<double>& ids, const std::vector<double>& offsets) {
    std::vector<std::pair<int64_t, int64_t>> bags;
    for (size_t b = 0; b < offsets.size(); ++b)
      bags.push_back({static_cast<int64_t>(offsets[b]), b + 1 < offsets.size() ? static_cast<int64_t>(offsets[b + 1])
                                                                               : static_cast<int64_t>(ids.size())});
    Tensor y = embedding_bag(table, make_tensor(ids, {static_cast<int64_t>(ids.size())}, DType::I64),
                             make_tensor(offsets, {static_cast<int64_t>(offsets.size())}, DType::I64));
    expect_matches(y, naive_bag(tv, D, ids, bags, BagMode::Sum, {}, {}));
  };
  run({1, 4, 4, 0, 8, 2, 4, 7, 5, 1, 3}, {0, 3, 3, 7});
  const uint64_t compiles = cache_stats().compiles;
  run({2, 2, 6, 0, 8, 1, 3}, {0, 1, 1, 5});                     // fewer ids, an empty bag
  run({8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 1, 2, 3}, {0, 4, 9, 13});  // more ids, an empty last bag
  EXPECT_EQ(cache_stats().compiles, compiles);
}

TEST_P(IndexOpsOn, EmbeddingBagFixedSizeBags) {
  const int64_t R = 6, D = 4;
  auto tv = random_values(R * D, 6);
  auto ts = stored_values(tv, DType::F32);
  std::vector<double> ids = {0, 5, 5, 2, 3, 3, 1, 1, 1};  // [3, 3]
  std::vector<std::pair<int64_t, int64_t>> bags = {{0, 3}, {3, 6}, {6, 9}};
  for (BagMode mode : {BagMode::Sum, BagMode::Mean, BagMode::Max})
    for (std::optional<int64_t> pad : {std::optional<int64_t>{}, std::optional<int64_t>{1}})
      expect_matches(embedding_bag(make_tensor(tv, {R, D}), make_tensor(ids, {3, 3}, DType::I32), {}, mode, {}, pad),
                     naive_bag(ts, D, ids, bags, mode, {}, pad), 1e-6);
  // bags of no ids, and no bags
  expect_matches(embedding_bag(make_tensor(tv, {R, D}), make_tensor({}, {2, 0}, DType::I64), {}, BagMode::Max),
                 std::vector<double>(8, 0));
  EXPECT_EQ(embedding_bag(make_tensor(tv, {R, D}), make_tensor({}, {0}, DType::I64), make_tensor({}, {0}, DType::I64))
                .shape(),
            (Shape{0, D}));
  // an empty table: every bag is empty
  expect_matches(embedding_bag(zeros({0, 2}), make_tensor({}, {0}, DType::I64), make_tensor({0, 0}, {2}, DType::I64),
                               BagMode::Mean),
                 std::vector<double>(4, 0));
}

// Bad indices never read: realized ones fail at record time, lazy ones when evaluated.
TEST_P(IndexOpsOn, OutOfRangeIndicesAreUserErrors) {
  Tensor table = make_tensor(random_values(12, 7), {4, 3});
  auto expect_error = [](const std::function<void()>& fn, const std::vector<std::string>& parts) {
    try {
      fn();
      ADD_FAILURE() << "no error";
    } catch (const UserError& e) {
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  Tensor bad = make_tensor({1, 4, 0}, {3}, DType::I64), neg = make_tensor({0, -1}, {2}, DType::I32);
  expect_error([&] { embedding(table, bad); }, {"embedding", "index 4", "position [1]", "[0, 4)"});
  expect_error([&] { index_select(table, 1, neg); }, {"index_select", "index -1", "position [1]", "[0, 3)"});
  expect_error(
      [&] {
        gather(table, 0, make_tensor({0, 1, 2, 3, 9, 0}, {2, 3}, DType::I64));
      },
      {"gather", "index 9", "position [1, 1]"});
  expect_error([&] { embedding_bag(table, bad, make_tensor({0}, {1}, DType::I64)); }, {"embedding_bag", "index 4"});
  expect_error(
      [&] {
        embedding_bag(table, make_tensor({0, 1}, {2}, DType::I64), make_tensor({0, 3}, {2}, DType::I64));
      },
      {"embedding_bag", "offset 3", "[0, 2]"});
  expect_error(
      [&] {
        embedding_bag(table, make_tensor({0, 1}, {2}, DType::I64), make_tensor({1, 2}, {2}, DType::I64));
      },
      {"embedding_bag", "first offset must be 0"});
  // Known ids are scanned in blocks of 4096: a bad id deep in a later block, of either sign.
  for (double v : {-3.0, 4.0}) {
    std::vector<double> many(9000, 2);
    many[8999] = v;
    expect_error([&] { embedding(table, make_tensor(many, {9000}, DType::I32)); },
                 {"embedding", "index " + std::to_string(static_cast<int>(v)), "position [8999]"});
  }
  // A bad id past the scan's vector bodies, in its tail (tests/unit/test_index_scan.cpp sweeps
  // every position with every ISA).
  for (DType dt : {DType::I32, DType::I64}) {
    std::vector<double> ids(21, 3);
    ids[20] = 4;
    expect_error([&] { embedding(table, make_tensor(ids, {21}, dt)); }, {"embedding", "index 4", "position [20]"});
  }
  // Lazy ids: the same checks when the graph runs.
  Tensor lazy_bad = (bad + 1) - 1, lazy_neg = (neg + 1) - 1;
  expect_error([&] { embedding(table, lazy_bad).eval(); }, {"embedding", "index 4", "position [1]", "[0, 4)"});
  expect_error([&] { (relu(index_select(table, 1, lazy_neg)) * 2).eval(); }, {"index_select", "index -1"});
  expect_error(
      [&] {
        embedding_bag(table, make_tensor({0, 1}, {2}, DType::I64), (make_tensor({0, 2}, {2}, DType::I64) + 1) - 0)
            .eval();
      },
      {"embedding_bag", "offset"});
  expect_error(
      [&] {
        embedding_bag(table, lazy_bad, make_tensor({0, 2}, {2}, DType::I64), BagMode::Max).eval();
      },
      {"embedding_bag", "index 4"});
  // The same lazy ids, in range, evaluate.
  expect_matches(embedding(table, (make_tensor({3, 0}, {2}, DType::I64) + 1) - 1), [&] {
    auto t = values(table);
    return std::vector<double>{t[9], t[10], t[11], t[0], t[1], t[2]};
  }());
}

// (GPU backends run only tensors on their device: GpuDeviceIndexOps below.)
INSTANTIATE_TEST_SUITE_P(Backends, IndexOpsOn, ::testing::Values("reference", "llvm", "xbyak"),
                         [](const auto& info) { return info.param; });

// A dequantized table (u8 rows * scale + bias) gathered by bags, scaled, shifted and rectified:
// the gather pulls its index into the producer's loads and the epilogue runs on each bag's
// result, so the whole expression is one kernel.
TEST(IndexOpsFusion, DequantizedEmbeddingBagWithEpilogueIsOneKernel) {
  const int64_t R = 50, D = 16, N = 40, B = 7;
  auto q = random_ints(R * D, 8, 0, 255);
  auto scale = random_values(R, 9, 0.01, 0.1), bias = random_values(R, 10, -1, 1);
  Tensor table = make_tensor(q, {R, D}, DType::U8).cast(DType::F32) * make_tensor(scale, {R}).reshape({R, 1}) +
                 make_tensor(bias, {R}).reshape({R, 1});
  auto idv = random_ints(N, 11, 0, R - 1);
  Tensor ids = make_tensor(idv, {N}, DType::I64);
  Tensor offsets = make_tensor({0, 5, 5, 12, 20, 33, 39}, {B}, DType::I64);
  Tensor psw = make_tensor(random_values(N, 15, 0.5, 1.5), {N});
  Tensor w = make_tensor(random_values(D, 12), {D}), b = make_tensor(random_values(D, 13), {D});
  const auto pad = static_cast<int64_t>(idv[7]);  // an id that occurs
  // Every mode with and without padding_idx (Sum also with per-sample weights): the padding mask
  // and the bag bounds feed both the value fold and the id count, yet all stay in the one kernel.
  for (BagMode mode : {BagMode::Sum, BagMode::Mean, BagMode::Max})
    for (std::optional<int64_t> p : {std::optional<int64_t>{}, std::optional<int64_t>{pad}}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(mode)) + (p ? " pad" : ""));
      auto bag = [&] {
        return relu(embedding_bag(table, ids, offsets, mode, mode == BagMode::Sum ? psw : Tensor(), p) * w + b);
      };
      Explanation ex = explain(bag());
      EXPECT_EQ(ex.kernel_count(), 1u) << ex.text();
      EXPECT_NE(ex.text().find("[segment]"), std::string::npos) << ex.text();
      EXPECT_TRUE(all_close(values(bag()), reference_values(bag()), 1e-5, 1e-5)) << ex.text();
      // xbyak (first in the default order where it is built) takes the bag kernel.
      Explanation ran = explain(bag());
      ASSERT_EQ(ran.kernel_count(), 1u);
      if (detail::find_backend("xbyak")) { EXPECT_EQ(ran.kernels[0].backend, "xbyak"); }
      EXPECT_NE(ran.kernels[0].backend, "");
    }
  // fixed-size bags and plain embeddings fuse the same way
  Tensor ids2 = make_tensor(random_ints(N, 14, 0, R - 1), {5, 8}, DType::I32);
  for (const Tensor& y :
       {relu(embedding_bag(table, ids2, {}, BagMode::Sum) * w + b),
        relu(embedding_bag(table, ids2, {}, BagMode::Mean, {}, pad) * w + b), relu(embedding(table, ids2) * w)}) {
    Explanation ex = explain(y);
    EXPECT_EQ(ex.kernel_count(), 1u) << ex.text();
    EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-5, 1e-5)) << ex.text();
  }
}

// The same ops on a GPU device (OpenCL: PoCL on CPU-only machines; CUDA where there is a GPU): the
// GPU renderer's gather loads and one-thread-per-bag segment kernels against the fp64 reference of
// the host expression, and the index check of computed ids before a device kernel reads them.
class GpuDeviceIndexOps : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuDeviceIndexOps, GatherAndEveryBagModeMatchTheReference) {
  const Device dev = GetParam() == "cuda" ? Device::cuda() : Device::opencl();
  if (!device_usable(dev)) GTEST_SKIP() << "no " << GetParam() << " device on this machine";
  const int64_t R = 20, D = 5, N = 17;
  Tensor q = make_tensor(random_ints(R * D, 20, 0, 255), {R, D}, DType::U8),
         scale = make_tensor(random_values(R, 21), {R});
  auto idv = random_ints(N, 22, 0, R - 1);
  Tensor ids = make_tensor(idv, {N}, DType::I32), offsets = make_tensor({0, 4, 4, 9, 16}, {5}, DType::I32);
  Tensor psw = make_tensor(random_values(N, 23, 0.5, 1.5), {N}), w = make_tensor(random_values(D, 24), {D});
  auto table = [&](const Tensor& qq, const Tensor& sc) { return qq.cast(DType::F32) * sc.reshape({R, 1}); };
  Tensor qd = q.to(dev), scd = scale.to(dev), idsd = ids.to(dev), offd = offsets.to(dev), pswd = psw.to(dev),
         wd = w.to(dev);
  const auto pad = static_cast<int64_t>(idv[3]);
  // (A few combinations: each is a device compile.)
  for (auto [mode, p] : {std::pair{BagMode::Sum, std::optional<int64_t>{pad}},
                         {BagMode::Mean, std::optional<int64_t>{pad}},
                         {BagMode::Max, std::optional<int64_t>{}},
                         {BagMode::Max, std::optional<int64_t>{pad}}}) {
    SCOPED_TRACE(std::to_string(static_cast<int>(mode)) + (p ? " pad" : ""));
    const bool weighted = mode == BagMode::Sum;
    auto bag = [&] {
      return relu(embedding_bag(table(qd, scd), idsd, offd, mode, weighted ? pswd : Tensor(), p) * wd);
    };
    Tensor h = relu(embedding_bag(table(q, scale), ids, offsets, mode, weighted ? psw : Tensor(), p) * w);
    EXPECT_EQ(bag().device(), dev);
    EXPECT_TRUE(all_close(values(bag()), reference_values(h), 1e-5, 1e-5)) << explain(bag()).text();
    // The structure again (the evaluated node is gone): explain() names the backend that ran it.
    Explanation ex = explain(bag());
    ASSERT_EQ(ex.kernel_count(), 1u) << ex.text();
    EXPECT_EQ(ex.kernels[0].backend, GetParam()) << ex.text();
  }
  Tensor gi = make_tensor(random_ints(4 * D, 25, 0, R - 1), {4, D}, DType::I64);
  EXPECT_TRUE(all_close(values(gather(table(qd, scd), 0, gi.to(dev)) + 1.0),
                        reference_values(gather(table(q, scale), 0, gi) + 1.0), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(values(embedding(table(qd, scd), idsd.reshape({N, 1}))),
                        reference_values(embedding(table(q, scale), ids.reshape({N, 1}))), 1e-6, 1e-6));
  // Computed ids out of range: the check runs before the device kernel reads them.
  try {
    embedding(table(qd, scd), (idsd + static_cast<double>(R)) - 0.0).eval();
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("embedding: index"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, GpuDeviceIndexOps, ::testing::Values("opencl", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
