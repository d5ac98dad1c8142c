// Views and data movement: reshape (with -1), permute/transpose, expand/broadcast_to, slice
// (start/stop/step, negative and clamped bounds), squeeze/unsqueeze/flatten, concat and pad,
// checked element by element against index arithmetic written here. Views move values without
// arithmetic, so every comparison is exact.
#include <kfuse/explain.hpp>

#include "backend/backend.hpp"
#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

std::vector<double> iota_values(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i) * 1.5 - 7.0;
  return v;
}

TEST(Views, ReshapeKeepsRowMajorOrder) {
  auto v = iota_values(24);
  Tensor x = make_tensor(v, {2, 3, 4});
  expect_tensor(x.reshape({4, -1}), {4, 6}, DType::F32, v);
  expect_tensor(reshape(x, {-1}), {24}, DType::F32, v);
  expect_tensor(x.reshape({2, -1, 3}), {2, 4, 3}, DType::F32, v);
  expect_tensor(x.reshape({1, 24, 1}), {1, 24, 1}, DType::F32, v);
  expect_tensor(make_tensor({5}, {1}).reshape({}), {}, DType::F32, {5});
  expect_tensor(make_tensor({5}, {}).reshape({-1}), {1}, DType::F32, {5});
  expect_tensor(make_tensor({}, {0, 3}).reshape({3, -1, 2}), {3, 0, 2}, DType::F32, {});
  // reshape of a non-contiguous view reads its logical (row-major) order
  expect_tensor(make_tensor(v, {4, 6}).transpose().reshape({-1}), {24}, DType::F32, transposed(v, 4, 6));
  // reshape of a reshape, and of integers
  expect_tensor(x.reshape({6, 4}).reshape({3, 8}), {3, 8}, DType::F32, v);
  auto iv = random_ints(6, 81, -9, 9);
  expect_tensor(make_tensor(iv, {6}, DType::I64).reshape({3, 2}), {3, 2}, DType::I64, iv);
}

// A reshape inside a fused kernel indexes each run of dims whose products match on its own
// (lower_group.cpp reshape_groups): splits, merges, kept dims and size-1 dims, with arithmetic
// after the view so it is read by a kernel, not copied. Exact against index arithmetic.
TEST(Views, ReshapeRunsSplitMergeAndKeepDims) {
  auto v = iota_values(4 * 6 * 5);
  struct Case {
    Shape from, to;
  };
  for (const Case& c : std::vector<Case>{{{4, 6, 5}, {2, 2, 3, 2, 5}},  // splits, last dim kept
                                         {{2, 2, 3, 2, 5}, {4, 6, 5}},  // merges
                                         {{24, 5}, {4, 6, 5}},          // split, kept
                                         {{4, 30}, {4, 6, 5}},          // kept, split
                                         {{4, 6, 5}, {4, 30}},          // kept, merge
                                         {{4, 6, 5}, {2, 2, 30}},       // split, merge
                                         {{4, 1, 30}, {4, 6, 5, 1}},    // size-1 dims on both sides
                                         {{120}, {4, 6, 5}},            // one input dim
                                         {{4, 6, 5}, {8, 15}}}) {       // no shorter run
    SCOPED_TRACE(::testing::PrintToString(c.from) + " -> " + ::testing::PrintToString(c.to));
    Tensor y = reshape(make_tensor(v, c.from) * 2.0 + 1.0, c.to) * 0.5;
    std::vector<double> want(v.size());
    for (size_t i = 0; i < v.size(); ++i) want[i] = (v[i] * 2.0 + 1.0) * 0.5;
    expect_tensor(y, c.to, DType::F32, want);
    // and of a stored tensor read in place, then permuted (attention's head split)
    if (c.to.size() == 5) {
      Tensor z = permute(reshape(make_tensor(v, c.from), c.to), {0, 2, 1, 3, 4}) + 0.0;
      std::vector<double> wz = generate({2, 3, 2, 2, 5}, [&](const std::vector<int64_t>& i) {
        return v[static_cast<size_t>(ravel({i[0], i[2], i[1], i[3], i[4]}, c.to))];
      });
      expect_tensor(z, {2, 3, 2, 2, 5}, DType::F32, wz);
    }
  }
}

// The head split of attention, [B*S, H*D] -> [B, S, H, D] then permuted, is affine in every
// index (no idiv/imod by a row length), so the xbyak backend takes its kernel.
TEST(Views, HeadSplitReshapeStaysAffineForXbyak) {
  if (!detail::find_backend("xbyak")) GTEST_SKIP() << "xbyak is not built in or unavailable";
  auto v = iota_values(6 * 5 * 4 * 8);
  Tensor x = make_tensor(v, {6 * 5, 4 * 8});
  auto y = [&] { return relu(permute(reshape(x, {6, 5, 4, 8}), {0, 2, 1, 3}) * 2.0); };
  const std::vector<double> got = values(y());  // (held results stay realized: explain the next one)
  Explanation ex = explain(y());
  ASSERT_EQ(ex.kernel_count(), 1u) << ex.text();
  EXPECT_EQ(ex.kernels[0].backend, "xbyak") << ex.text();
  expect_tensor(make_tensor(got, {6, 4, 5, 8}), {6, 4, 5, 8}, DType::F32,
                generate({6, 4, 5, 8}, [&](const std::vector<int64_t>& i) {
                  return std::max(0.0, 2.0 * v[static_cast<size_t>(ravel({i[0], i[2], i[1], i[3]}, {6, 5, 4, 8}))]);
                }));
}

// Merging attention's heads back, [B, H, S, D] -> permute -> [B, S, H*D]: a kernel whose outputs
// are reshapes that merge dims iterates over the reshapes' input shape and stores at the same
// row-major offsets (lower_group.cpp outputs_merge_one_shape), so its loads stay affine and
// xbyak takes it; also with a second output and with arithmetic before the reshape.
TEST(Views, MergeHeadsReshapeRunsOverItsInputShape) {
  auto v = iota_values(3 * 4 * 5 * 6);
  Tensor o = make_tensor(v, {3, 4, 5, 6});  // [B, H, S, D]
  auto merged = [&](const Tensor& t) { return reshape(permute(t, {0, 2, 1, 3}), {3, 5, 24}); };
  auto want = [&](double scale) {
    return generate({3, 5, 24}, [&](const std::vector<int64_t>& i) {
      return scale * v[static_cast<size_t>(ravel({i[0], i[2] / 6, i[1], i[2] % 6}, {3, 4, 5, 6}))];
    });
  };
  auto y = [&] { return merged(o); };
  const std::vector<double> got = values(y());
  expect_tensor(make_tensor(got, {3, 5, 24}), {3, 5, 24}, DType::F32, want(1.0));
  Explanation ex = explain(y());
  ASSERT_EQ(ex.kernel_count(), 1u) << ex.text();
  if (detail::find_backend("xbyak")) { EXPECT_EQ(ex.kernels[0].backend, "xbyak") << ex.text(); }
  // two outputs merged alike, one computed before its reshape
  Tensor a = merged(o), b = merged(o * 3.0);
  eval({a, b});
  expect_tensor(a, {3, 5, 24}, DType::F32, want(1.0));
  expect_tensor(b, {3, 5, 24}, DType::F32, want(3.0));
}

TEST(Views, PermuteAndTranspose) {
  auto v = iota_values(60);
  const Shape s = {3, 4, 5};
  Tensor x = make_tensor(v, s, DType::F64);
  for (const Axes& p : std::vector<Axes>{{2, 0, 1}, {1, 2, 0}, {0, 2, 1}, {-1, 0, -2}, {0, 1, 2}}) {
    SCOPED_TRACE(shape_str(p));
    Axes np = p;
    for (auto& a : np) a = a < 0 ? a + 3 : a;
    Shape out = {s[np[0]], s[np[1]], s[np[2]]};
    auto e = generate(out, [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> src(3);
      for (int k = 0; k < 3; ++k) src[np[k]] = i[k];
      return v[ravel(src, s)];
    });
    expect_tensor(x.permute(p), out, DType::F64, e);
    expect_tensor(permute(x, p), out, DType::F64, e);
  }
  // transpose swaps the last two axes by default; any pair otherwise
  auto e = generate({3, 5, 4}, [&](const std::vector<int64_t>& i) { return v[ravel({i[0], i[2], i[1]}, s)]; });
  expect_tensor(x.transpose(), {3, 5, 4}, DType::F64, e);
  auto e02 = generate({5, 4, 3}, [&](const std::vector<int64_t>& i) { return v[ravel({i[2], i[1], i[0]}, s)]; });
  expect_tensor(transpose(x, 0, 2), {5, 4, 3}, DType::F64, e02);
  expect_tensor(x.transpose(2, 0), {5, 4, 3}, DType::F64, e02);
  // transposing twice is the identity; a 1-D transpose is the tensor itself
  expect_tensor(x.transpose().transpose(), s, DType::F64, v);
  expect_tensor(make_tensor({1, 2}, {2}).transpose(), {2}, DType::F32, {1, 2});
}

TEST(Views, ExpandAndBroadcastTo) {
  auto v = random_values(3, 82);
  auto sv = stored_values(v, DType::F32);
  Tensor x = make_tensor(v, {3, 1});
  auto e = generate({2, 3, 4}, [&](const std::vector<int64_t>& i) { return sv[i[1]]; });
  expect_tensor(x.expand({2, 3, 4}), {2, 3, 4}, DType::F32, e);
  expect_tensor(broadcast_to(x, {2, 3, 4}), {2, 3, 4}, DType::F32, e);
  expect_tensor(expand(x, {-1, 5}), {3, 5}, DType::F32,
                generate({3, 5}, [&](const std::vector<int64_t>& i) { return sv[i[0]]; }));
  expect_tensor(x.expand({3, 0}), {3, 0}, DType::F32, {});
  expect_tensor(make_tensor({2.5}, {}).expand({2, 2}), {2, 2}, DType::F32, {2.5, 2.5, 2.5, 2.5});
  expect_tensor(x.expand({3, 1}), {3, 1}, DType::F32, sv);
  // expand of a transposed view: [1, 3]^T = [3, 1] -> [3, 2]
  expect_tensor(make_tensor(v, {1, 3}).transpose().expand({3, 2}), {3, 2}, DType::F32,
                generate({3, 2}, [&](const std::vector<int64_t>& i) { return sv[i[0]]; }));
}

TEST(Views, SliceWithStartStopStepAndNegativeBounds) {
  auto v = iota_values(70);
  const Shape s = {7, 10};
  Tensor x = make_tensor(v, s);
  struct Case {
    Range r0, r1;
    std::vector<int64_t> rows, cols;
  };
  const std::vector<Case> cases = {
      {Range::all(), Range{2, 5}, {0, 1, 2, 3, 4, 5, 6}, {2, 3, 4}},
      {Range{1, 6, 2}, Range{0, std::nullopt, 3}, {1, 3, 5}, {0, 3, 6, 9}},
      {Range{-3}, Range{-4, -1}, {4, 5, 6}, {6, 7, 8}},
      {Range{0, 100}, Range{-10, 100, 4}, {0, 1, 2, 3, 4, 5, 6}, {0, 4, 8}},  // stop clamps
      {Range{5, 2}, Range::all(), {}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},        // empty: stop < start
      {Range{6, 7}, Range{9, std::nullopt, 5}, {6}, {9}},
      {Range{0, -8}, Range{7}, {}, {7, 8, 9}},  // stop before the start
      {Range{7}, Range{10}, {}, {}},            // start at the end
  };
  for (const auto& c : cases) {
    Shape out = {static_cast<int64_t>(c.rows.size()), static_cast<int64_t>(c.cols.size())};
    auto e = generate(out, [&](const std::vector<int64_t>& i) { return v[c.rows[i[0]] * 10 + c.cols[i[1]]]; });
    SCOPED_TRACE(shape_str(out));
    expect_tensor(x.slice({c.r0, c.r1}), out, DType::F32, e);
  }
  // fewer ranges than axes keep the trailing axes whole
  expect_tensor(slice(x, {Range{5}}), {2, 10}, DType::F32, {v.begin() + 50, v.end()});
  // a step beyond the size takes the start only (the count's rounding once overflowed to 0)
  expect_tensor(slice(x, {Range{2, std::nullopt, INT64_MAX}, Range{1, 9, INT64_MAX - 1}}), {1, 1}, DType::F32,
                {v[2 * 10 + 1]});
  // a slice of a slice, and of a transposed view
  // rows 1, 3, 5 then every other one of those from the second: row 3 only
  expect_tensor(x.slice({Range{1, std::nullopt, 2}}).slice({Range{1, std::nullopt, 2}, Range{8}}), {1, 2}, DType::F32,
                {v[3 * 10 + 8], v[3 * 10 + 9]});
  auto tv = transposed(v, 7, 10);  // [10, 7]
  expect_tensor(x.transpose().slice({Range{-2}, Range{0, 7, 3}}), {2, 3}, DType::F32,
                {tv[8 * 7 + 0], tv[8 * 7 + 3], tv[8 * 7 + 6], tv[9 * 7 + 0], tv[9 * 7 + 3], tv[9 * 7 + 6]});
}

TEST(Views, SqueezeUnsqueezeFlatten) {
  auto v = iota_values(6);
  Tensor x = make_tensor(v, {1, 2, 1, 3});
  expect_tensor(x.squeeze(), {2, 3}, DType::F32, v);
  expect_tensor(squeeze(x, 0), {2, 1, 3}, DType::F32, v);
  expect_tensor(x.squeeze(-2), {1, 2, 3}, DType::F32, v);
  expect_tensor(make_tensor({4}, {1, 1}).squeeze(), {}, DType::F32, {4});
  expect_tensor(x.unsqueeze(0), {1, 1, 2, 1, 3}, DType::F32, v);
  expect_tensor(unsqueeze(x, -1), {1, 2, 1, 3, 1}, DType::F32, v);
  expect_tensor(make_tensor({4}, {}).unsqueeze(0), {1}, DType::F32, {4});
  expect_tensor(x.flatten(), {6}, DType::F32, v);
  expect_tensor(flatten(x, 1, 2), {1, 2, 3}, DType::F32, v);
  expect_tensor(x.flatten(-2), {1, 2, 3}, DType::F32, v);
  expect_tensor(make_tensor({4}, {}).flatten(), {1}, DType::F32, {4});
  expect_tensor(make_tensor({}, {2, 0, 3}).flatten(1), {2, 0}, DType::F32, {});
  // flatten of a transposed view
  expect_tensor(make_tensor(v, {2, 3}).transpose().flatten(), {6}, DType::F32, transposed(v, 2, 3));
}

TEST(Views, ConcatAlongAnyAxisWithPromotion) {
  auto a = random_values(6, 83), b = random_values(9, 84);
  auto sa = stored_values(a, DType::F32);
  Tensor ta = make_tensor(a, {2, 3}), tb = make_tensor(b, {3, 3}, DType::F64);
  // axis 0: [2, 3] f32 ++ [3, 3] f64 ++ [0, 3] -> [5, 3] f64
  std::vector<double> e0 = sa;
  e0.insert(e0.end(), b.begin(), b.end());
  expect_tensor(concat({ta, tb, make_tensor({}, {0, 3})}, 0), {5, 3}, DType::F64, e0);
  // axis -1: [2, 3] ++ [2, 1] i32 ++ transposed [2, 2] -> [2, 6] f32
  auto c = random_values(4, 85);
  auto sc = stored_values(c, DType::F32);
  Tensor tc = make_tensor(c, {2, 2}).transpose();
  auto e1 = generate({2, 6}, [&](const std::vector<int64_t>& i) {
    if (i[1] < 3) return sa[i[0] * 3 + i[1]];
    if (i[1] == 3) return static_cast<double>(i[0] + 10);
    return sc[(i[1] - 4) * 2 + i[0]];
  });
  expect_tensor(concat({ta, make_tensor({10, 11}, {2, 1}, DType::I32), tc}, -1), {2, 6}, DType::F32, e1);
  // a single tensor; integers; all parts empty
  expect_tensor(concat({ta}, 1), {2, 3}, DType::F32, sa);
  expect_tensor(concat({make_tensor({1, 2}, {2}, DType::I64), make_tensor({3}, {1}, DType::I32)}, 0), {3}, DType::I64,
                {1, 2, 3});
  expect_tensor(concat({make_tensor({}, {0, 2}), make_tensor({}, {0, 2})}, 0), {0, 2}, DType::F32, {});
  expect_tensor(concat({make_tensor({}, {2, 0}), make_tensor({}, {2, 0})}, 1), {2, 0}, DType::F32, {});
}

TEST(Views, PadWithAValue) {
  auto v = random_values(6, 86);
  auto sv = stored_values(v, DType::F32);
  Tensor x = make_tensor(v, {2, 3});
  // (1, 0) rows, (2, 1) columns -> [3, 6]
  auto e = generate({3, 6}, [&](const std::vector<int64_t>& i) {
    int64_t r = i[0] - 1, c = i[1] - 2;
    return (r >= 0 && r < 2 && c >= 0 && c < 3) ? sv[r * 3 + c] : -1.5;
  });
  expect_tensor(pad(x, {{1, 0}, {2, 1}}, -1.5), {3, 6}, DType::F32, e);
  // pairs for the first axes only; zero by default
  auto e2 = generate(
      {5, 3}, [&](const std::vector<int64_t>& i) { return i[0] >= 1 && i[0] < 3 ? sv[(i[0] - 1) * 3 + i[1]] : 0.0; });
  expect_tensor(pad(x, {{1, 2}}), {5, 3}, DType::F32, e2);
  expect_tensor(pad(x, {{0, 0}, {0, 0}}), {2, 3}, DType::F32, sv);
  // integers, an empty input, NaN and Inf as pad values
  expect_tensor(pad(make_tensor({7, 8}, {2}, DType::I32), {{1, 1}}, 3), {4}, DType::I32, {3, 7, 8, 3});
  expect_tensor(pad(make_tensor({}, {0}), {{2, 0}}, 4), {2}, DType::F32, {4, 4});
  expect_tensor(pad(make_tensor({1}, {1}), {{1, 1}}, kNaN), {3}, DType::F32, {kNaN, 1, kNaN});
  expect_tensor(pad(make_tensor({1}, {1}), {{0, 1}}, -kInf), {2}, DType::F32, {1, -kInf});
  // pad of a transposed view
  expect_tensor(pad(make_tensor({1, 2, 3, 4}, {2, 2}).transpose(), {{0, 0}, {1, 0}}), {2, 3}, DType::F32,
                {0, 1, 3, 0, 2, 4});
}

}  // namespace
