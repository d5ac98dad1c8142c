// Every reduction (sum, prod, max, min, argmax, argmin, mean, var, std with corrections,
// logsumexp) over every axis combination of an odd 3-D shape, with keepdim on and off, against
// a reducer written here; plus empty tensors (NumPy semantics), NaN/Inf, integer and bool
// inputs, and non-contiguous inputs.
//
// Tolerances (f32): sum and mean get the worst-case bound of sequential f32 accumulation,
// 4 * eps * n * max|x| absolute; prod n * 2 * eps relative; var/std/logsumexp 1e-5 relative plus
// 1e-6 absolute (they are composites of several rounded ops); max, min, argmax, argmin are exact.
// f64: 1e-12 relative.
#include <algorithm>
#include <cmath>

#include "backend/backend.hpp"
#include "test_util.hpp"

using namespace kfuse;
using namespace kfuse::test;

namespace {

// The elements of `v` grouped by output position (row-major within each group).
struct Grouped {
  Shape kept;     // keepdim shape
  Shape dropped;  // keepdim=false shape
  std::vector<std::vector<double>> groups;
};

Grouped group_by(const std::vector<double>& v, const Shape& s, Axes axes) {
  for (auto& a : axes) a = a < 0 ? a + static_cast<int64_t>(s.size()) : a;
  if (axes.empty())
    for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) axes.push_back(i);
  auto reduced = [&](int64_t d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); };
  Grouped g;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) {
    g.kept.push_back(reduced(d) ? 1 : s[d]);
    if (!reduced(d)) g.dropped.push_back(s[d]);
  }
  g.groups.resize(static_cast<size_t>(count_of(g.kept)));
  for (int64_t i = 0; i < count_of(s); ++i) {
    auto idx = unravel(i, s);
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
      if (reduced(d)) idx[d] = 0;
    g.groups[ravel(idx, g.kept)].push_back(v[i]);
  }
  return g;
}

double sum_of(const std::vector<double>& g) {
  double s = 0;
  for (double x : g) s += x;
  return s;
}
double prod_of(const std::vector<double>& g) {
  double p = 1;
  for (double x : g) p *= x;
  return p;
}
double mean_of(const std::vector<double>& g) { return sum_of(g) / static_cast<double>(g.size()); }
double var_of(const std::vector<double>& g, int64_t correction) {
  double m = mean_of(g), ss = 0;
  for (double x : g) ss += (x - m) * (x - m);
  return ss / static_cast<double>(std::max<int64_t>(0, static_cast<int64_t>(g.size()) - correction));
}
// NaN wins; otherwise the largest (smallest).
double extreme_of(const std::vector<double>& g, bool largest) {
  double e = g[0];
  for (double x : g) {
    if (std::isnan(x)) return x;
    if (largest ? x > e : x < e) e = x;
  }
  return e;
}
// Index of the first extreme; the first NaN counts as the extreme.
double arg_extreme_of(const std::vector<double>& g, bool largest) {
  size_t k = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return static_cast<double>(i);
    if (largest ? g[i] > g[k] : g[i] < g[k]) k = i;
  }
  return static_cast<double>(k);
}
double logsumexp_of(const std::vector<double>& g) {
  double m = extreme_of(g, true), s = 0;
  for (double x : g) s += std::exp(x - m);
  return m + std::log(s);
}

std::vector<double> reduce_each(const Grouped& g, const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> out;
  for (const auto& grp : g.groups) out.push_back(f(grp));
  return out;
}

const std::vector<Axes> kAxisSets = {{}, {0}, {1}, {-1}, {0, 2}, {-3, -2}, {2, 0, 1}};

TEST(Reduce, EveryReductionOverEveryAxisSet) {
  const Shape s = {3, 5, 7};
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dtype_name(dt));
    auto v = stored_values(random_values(105, 71), dt);
    auto pv = stored_values(random_values(105, 72, 0.5, 1.5), dt);  // products stay well scaled
    Tensor x = make_tensor(v, s, dt), px = make_tensor(pv, s, dt);
    bool f32 = dt == DType::F32;
    for (const Axes& axes : kAxisSets) {
      for (bool keep : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "axes " << shape_str(axes) << " keepdim " << keep);
        Grouped g = group_by(v, s, axes), pg = group_by(pv, s, axes);
        const Shape& out = keep ? g.kept : g.dropped;
        double n = static_cast<double>(g.groups[0].size());
        double sum_atol = f32 ? 4 * kF32Eps * n * 2.0 : 1e-12 * n;
        double rel = f32 ? 1e-5 : 1e-12;
        expect_tensor(sum(x, axes, keep), out, dt, reduce_each(g, sum_of), 0, sum_atol);
        expect_tensor(mean(x, axes, keep), out, dt, reduce_each(g, mean_of), 0, sum_atol / n + 1e-7);
        expect_tensor(prod(px, axes, keep), out, dt, reduce_each(pg, prod_of), f32 ? 2 * kF32Eps * n : 1e-12);
        expect_tensor(max(x, axes, keep), out, dt, reduce_each(g, [](auto& gr) { return extreme_of(gr, true); }));
        expect_tensor(min(x, axes, keep), out, dt, reduce_each(g, [](auto& gr) { return extreme_of(gr, false); }));
        expect_tensor(argmax(x, axes, keep), out, DType::I64,
                      reduce_each(g, [](auto& gr) { return arg_extreme_of(gr, true); }));
        expect_tensor(argmin(x, axes, keep), out, DType::I64,
                      reduce_each(g, [](auto& gr) { return arg_extreme_of(gr, false); }));
        for (int64_t corr : {0, 1, 2}) {
          auto ve = reduce_each(g, [corr](auto& gr) { return var_of(gr, corr); });
          expect_tensor(var(x, axes, corr, keep), out, dt, ve, rel, 1e-6);
          for (auto& e : ve) e = std::sqrt(e);
          expect_tensor(kfuse::std(x, axes, corr, keep), out, dt, ve, rel, 1e-6);
        }
        expect_tensor(logsumexp(x, axes, keep), out, dt, reduce_each(g, logsumexp_of), rel, 1e-6);
      }
    }
  }
}

TEST(Reduce, SingleAxisOverloadsAndDefaults) {
  auto v = stored_values(random_values(12, 73), DType::F32);
  Tensor x = make_tensor(v, {4, 3});
  Grouped g = group_by(v, {4, 3}, {1});
  double atol = 4 * kF32Eps * 3 * 2;
  expect_tensor(sum(x, int64_t{-1}), {4}, DType::F32, reduce_each(g, sum_of), 0, atol);
  expect_tensor(mean(x, int64_t{1}, true), {4, 1}, DType::F32, reduce_each(g, mean_of), 0, atol);
  expect_tensor(max(x, int64_t{1}), {4}, DType::F32, reduce_each(g, [](auto& gr) { return extreme_of(gr, true); }));
  expect_tensor(min(x, int64_t{1}), {4}, DType::F32, reduce_each(g, [](auto& gr) { return extreme_of(gr, false); }));
  expect_tensor(logsumexp(x, int64_t{1}), {4}, DType::F32, reduce_each(g, logsumexp_of), 1e-5, 1e-6);
  // var/std default to the sample variance (correction 1) over all axes
  Grouped all = group_by(v, {4, 3}, {});
  expect_tensor(var(x), {}, DType::F32, {var_of(all.groups[0], 1)}, 1e-5, 1e-6);
  expect_tensor(kfuse::std(x), {}, DType::F32, {std::sqrt(var_of(all.groups[0], 1))}, 1e-5, 1e-6);
  // a size-1 reduced axis is the identity (argmax 0)
  expect_tensor(sum(make_tensor(v, {12, 1}), 1), {12}, DType::F32, v);
  expect_tensor(argmax(make_tensor(v, {12, 1}), {1}), {12}, DType::I64, std::vector<double>(12, 0.0));
}

// A braced `{}` is an empty axis list (all axes), never axis 0: it used to bind to the
// single-axis overloads (an int64_t initialised from {}), so sum(x, {}, true) on [4, 6] gave
// [1, 6]. One check per reduction, then the other spellings still pick what they name.
TEST(Reduce, BracedEmptyAxesMeanAllAxes) {
  auto v = stored_values(random_values(24, 77), DType::F32);
  Tensor x = make_tensor(v, {4, 6});
  const Shape one{1, 1}, none{};
  EXPECT_EQ(sum(x, {}, true).shape(), one);
  EXPECT_EQ(sum(x, {}).shape(), none);
  EXPECT_EQ(mean(x, {}, true).shape(), one);
  EXPECT_EQ(prod(x, {}, true).shape(), one);
  EXPECT_EQ(max(x, {}, true).shape(), one);
  EXPECT_EQ(min(x, {}, true).shape(), one);
  EXPECT_EQ(argmax(x, {}, true).shape(), one);
  EXPECT_EQ(argmin(x, {}).shape(), none);
  EXPECT_EQ(logsumexp(x, {}, true).shape(), one);
  EXPECT_EQ(var(x, {}, 1, true).shape(), one);
  EXPECT_EQ(kfuse::std(x, {}, 0, true).shape(), one);
  // the value too: all 24 elements
  Grouped all = group_by(v, {4, 6}, {});
  expect_tensor(sum(x, {}, true), one, DType::F32, {sum_of(all.groups[0])}, 0, 4 * kF32Eps * 24 * 2);
  expect_tensor(argmax(x, {}, true), one, DType::I64, {arg_extreme_of(all.groups[0], true)});
  // single axes of any integer type (prod, var and std have them too), lists, and Axes{}
  EXPECT_EQ(sum(x, 1).shape(), Shape{4});
  EXPECT_EQ(sum(x, -1, true).shape(), (Shape{4, 1}));
  EXPECT_EQ(max(x, int64_t{0}).shape(), Shape{6});
  EXPECT_EQ(argmin(x, size_t{1}).shape(), Shape{4});
  EXPECT_EQ(prod(x, 0, true).shape(), (Shape{1, 6}));
  EXPECT_EQ(var(x, 1).shape(), Shape{4});
  EXPECT_EQ(kfuse::std(x, -2, 1, true).shape(), (Shape{1, 6}));
  EXPECT_EQ(sum(x, {0, 1}).shape(), none);
  EXPECT_EQ(sum(x, {1}, true).shape(), (Shape{4, 1}));
  EXPECT_EQ(mean(x, Axes{}, true).shape(), one);
  EXPECT_EQ(sum(x, std::vector<int64_t>{}).shape(), none);
}

// A 0-d tensor reduces over no axis (its one element), and what follows the reduction fuses with
// it. The partitioner's rows-across-memory rule took the largest reduced axis of an empty list
// (a wild read: a segfault in planning, found by a fuzzer of hostile op chains).
TEST(Reduce, ZeroDimensionalInputsThenElementwise) {
  for (bool stored : {true, false}) {
    Tensor x = stored ? make_tensor({1.5}, {}) : full({}, 1.5);
    expect_tensor(sum(x, Axes{}) * 2.0, {}, DType::F32, {3.0});
    expect_tensor(mean(x, Axes{}, true).cast(DType::F64), {}, DType::F64, {1.5});
    expect_tensor(max(x) + 1.0, {}, DType::F32, {2.5});
    expect_tensor(exp(x - logsumexp(x, {})), {}, DType::F32, {1.0}, 0, 1e-6);
  }
}

TEST(Reduce, ArgExtremesTakeTheFirstAndCountRowMajorOverTheReducedAxes) {
  Tensor t = make_tensor({3, 1, 3, 1, 0, 0}, {6});
  expect_tensor(argmax(t), {}, DType::I64, {0});
  expect_tensor(argmin(t), {}, DType::I64, {4});
  // [2, 2, 3]: reduce axes {0, 2}; within a group the index is i0 * 3 + i2
  auto v = random_values(12, 74);
  Grouped g = group_by(v, {2, 2, 3}, {0, 2});
  expect_tensor(argmax(make_tensor(v, {2, 2, 3}, DType::F64), {0, 2}), {2}, DType::I64,
                reduce_each(g, [](auto& gr) { return arg_extreme_of(gr, true); }));
}

TEST(Reduce, NonContiguousInputs) {
  auto v = stored_values(random_values(35, 75), DType::F32);
  double atol = 4 * kF32Eps * 7 * 2;
  // sum over axis 0 of a transposed [5, 7] -> [7, 5]: the row sums of the original
  Grouped rows = group_by(v, {5, 7}, {1});
  expect_tensor(sum(make_tensor(v, {5, 7}).transpose(), 0), {5}, DType::F32, reduce_each(rows, sum_of), 0, atol);
  // max over a strided slice: columns 0, 3, 6 of each row
  auto sv = generate({5, 3}, [&](const std::vector<int64_t>& i) { return v[i[0] * 7 + i[1] * 3]; });
  Grouped sg = group_by(sv, {5, 3}, {1});
  expect_tensor(max(make_tensor(v, {5, 7}).slice({Range::all(), Range{0, std::nullopt, 3}}), -1), {5}, DType::F32,
                reduce_each(sg, [](auto& gr) { return extreme_of(gr, true); }));
  // mean over an expanded axis is the value itself; sum is 4x
  Tensor e = make_tensor({v.begin(), v.begin() + 7}, {7, 1}).expand({7, 4});
  expect_tensor(mean(e, 1), {7}, DType::F32, {v.begin(), v.begin() + 7}, 2e-7);
  auto four = std::vector<double>(v.begin(), v.begin() + 7);
  for (auto& x : four) x *= 4;
  expect_tensor(sum(e, 1), {7}, DType::F32, four, 2e-7);
}

TEST(Reduce, EmptyTensorsFollowNumPy) {
  Tensor e = make_tensor({}, {0});
  expect_tensor(sum(e), {}, DType::F32, {0.0});
  expect_tensor(prod(e), {}, DType::F32, {1.0});
  expect_tensor(mean(e), {}, DType::F32, {kNaN});
  expect_tensor(var(e), {}, DType::F32, {kNaN});
  expect_tensor(var(e, {}, 0), {}, DType::F32, {kNaN});
  expect_tensor(kfuse::std(e), {}, DType::F32, {kNaN});
  expect_tensor(logsumexp(e, 0), {}, DType::F32, {-kInf});
  EXPECT_THROW(max(e), UserError);
  EXPECT_THROW(min(e), UserError);
  EXPECT_THROW(argmax(e), UserError);
  EXPECT_THROW(argmin(e), UserError);
  // [3, 0]: reducing the empty axis gives identities; reducing the other gives an empty result
  Tensor z = make_tensor({}, {3, 0});
  expect_tensor(sum(z, 1), {3}, DType::F32, {0, 0, 0});
  expect_tensor(sum(z, 1, true), {3, 1}, DType::F32, {0, 0, 0});
  expect_tensor(prod(z, {1}), {3}, DType::F32, {1, 1, 1});
  expect_tensor(mean(z, 1), {3}, DType::F32, {kNaN, kNaN, kNaN});
  expect_tensor(sum(z, 0), {0}, DType::F32, {});
  expect_tensor(max(z, 0), {0}, DType::F32, {});
  expect_tensor(argmin(z, {0}), {0}, DType::I64, {});
  // integer and bool sums of nothing are an i64 zero
  expect_tensor(sum(make_tensor({}, {0}, DType::I32)), {}, DType::I64, {0});
  expect_tensor(sum(make_tensor({}, {2, 0}, DType::Bool), 1), {2}, DType::I64, {0, 0});
}

TEST(Reduce, NanAndInfPropagate) {
  // NaN anywhere (first, middle, last) wins in sum, max, min and argmax/argmin (first NaN)
  for (int pos : {0, 2, 4}) {
    std::vector<double> v = {1, -3, 7, 2, -kInf};
    v[pos] = kNaN;
    for (DType dt : {DType::F32, DType::F64}) {
      Tensor t = make_tensor(v, {5}, dt);
      expect_tensor(sum(t), {}, dt, {kNaN});
      expect_tensor(max(t), {}, dt, {kNaN});
      expect_tensor(min(t), {}, dt, {kNaN});
      expect_tensor(prod(t), {}, dt, {kNaN});
      expect_tensor(mean(t), {}, dt, {kNaN});
      expect_tensor(logsumexp(t, 0), {}, dt, {kNaN});
      expect_tensor(argmax(t), {}, DType::I64, {static_cast<double>(pos)});
      expect_tensor(argmin(t), {}, DType::I64, {static_cast<double>(pos)});
    }
  }
  Tensor inf = make_tensor({1, kInf, -2}, {3});
  expect_tensor(sum(inf), {}, DType::F32, {kInf});
  expect_tensor(max(inf), {}, DType::F32, {kInf});
  expect_tensor(argmax(inf), {}, DType::I64, {1});
  expect_tensor(sum(make_tensor({kInf, -kInf}, {2})), {}, DType::F32, {kNaN});
  expect_tensor(min(make_tensor({1, -kInf, -kInf}, {3})), {}, DType::F32, {-kInf});
  expect_tensor(argmin(make_tensor({1, -kInf, -kInf}, {3})), {}, DType::I64, {1});
  // logsumexp: a +inf term gives +inf; all -inf gives -inf (not NaN)
  expect_tensor(logsumexp(make_tensor({1, kInf, -kInf}, {3}), 0), {}, DType::F32, {kInf});
  expect_tensor(logsumexp(make_tensor({-kInf, -kInf}, {1, 2}), 1), {1}, DType::F32, {-kInf});
  // var over a row holding inf is NaN (inf - inf)
  expect_tensor(var(make_tensor({1, kInf, 2}, {3})), {}, DType::F32, {kNaN});
}

TEST(Reduce, IntegerAndBoolInputs) {
  // integer sums and products accumulate in i64: no i32 overflow
  Tensor big = make_tensor({1 << 30, 1 << 30, 1 << 30, 1 << 30, 5}, {5}, DType::I32);
  expect_tensor(sum(big), {}, DType::I64, {4294967301.0});
  expect_tensor(prod(make_tensor({65536, 65536, 3}, {3}, DType::I32)), {}, DType::I64, {12884901888.0});
  auto v = random_ints(24, 76, -50, 50);
  Grouped g = group_by(v, {2, 3, 4}, {1});
  for (DType dt : {DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = make_tensor(v, {2, 3, 4}, dt);
    expect_tensor(sum(t, 1), {2, 4}, DType::I64, reduce_each(g, sum_of));
    expect_tensor(prod(t, {1}), {2, 4}, DType::I64, reduce_each(g, prod_of));
    expect_tensor(max(t, 1), {2, 4}, dt, reduce_each(g, [](auto& gr) { return extreme_of(gr, true); }));
    expect_tensor(min(t, 1), {2, 4}, dt, reduce_each(g, [](auto& gr) { return extreme_of(gr, false); }));
    expect_tensor(argmax(t, {1}), {2, 4}, DType::I64,
                  reduce_each(g, [](auto& gr) { return arg_extreme_of(gr, true); }));
    // logsumexp of integers computes in f32
    expect_tensor(logsumexp(t, 1), {2, 4}, DType::F32, reduce_each(g, logsumexp_of), 1e-5, 1e-6);
  }
  // bool: sum counts (i64), max is "any", min is "all"
  Tensor b = make_tensor({1, 0, 1, 0, 0, 0}, {2, 3}, DType::Bool);
  expect_tensor(sum(b), {}, DType::I64, {2});
  expect_tensor(sum(b, 1), {2}, DType::I64, {2, 0});
  expect_tensor(max(b, 1), {2}, DType::Bool, {1, 0});
  expect_tensor(min(b, 0), {3}, DType::Bool, {0, 0, 0});
  expect_tensor(argmax(b, {1}), {2}, DType::I64, {0, 0});
}

// prod of bools is "all" as an i64 (as sum of bools counts), on every CPU backend: it was refused
// ("prod is not defined on bool") although sums and products of bools return i64.
TEST(Reduce, ProdOfBoolIsI64OnEveryBackend) {
  const Options saved = options();
  for (const char* name : {"reference", "llvm", "xbyak"}) {
    if (!detail::find_backend(name)) continue;  // not built in
    SCOPED_TRACE(name);
    Options o = saved;
    o.backends = {name};
    set_options(o);
    reset_counters();
    Tensor b = make_tensor({1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1, 1}, {3, 4}, DType::Bool);
    expect_tensor(prod(b, 1), {3}, DType::I64, {0, 1, 0});
    expect_tensor(prod(b, {0}, true), {1, 4}, DType::I64, {1, 0, 0, 1});
    expect_tensor(prod(b), {}, DType::I64, {0});
    expect_tensor(prod(b, {}, true), {1, 1}, DType::I64, {0});
    // the backend computed them (xbyak may hand some kernels on, as in the differential tests)
    if (std::string(name) != "xbyak") { EXPECT_EQ(counters().fallbacks, 0u); }
  }
  set_options(saved);
}

TEST(Reduce, VarianceCorrectionAtOrBeyondTheCount) {
  // divisor max(0, n - correction): 0/0 -> NaN, positive/0 -> inf (as torch)
  expect_tensor(var(make_tensor({4.0}, {1})), {}, DType::F32, {kNaN});
  expect_tensor(var(make_tensor({1, 3}, {2}), {}, 2), {}, DType::F32, {kInf});
  expect_tensor(var(make_tensor({1, 3}, {2}), {}, 5), {}, DType::F32, {kInf});
  expect_tensor(var(make_tensor({2, 2}, {2}), {}, 2), {}, DType::F32, {kNaN});
  expect_tensor(var(make_tensor({1, 3}, {2}), {}, 0), {}, DType::F32, {1.0});
}

}  // namespace
