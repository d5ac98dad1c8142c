// Fuzzers against the fp64 reference evaluator, on the default backend chain (and, through the
// xbyak.avx2_differential ctest, on xbyak's AVX2 code): random matmuls with their operands' views,
// prologues and epilogues, evaluated together with the bare product; random embedding bags over
// every table kind; random op chains with hostile arguments. Drawing combinations reaches what
// hand-picked cases miss: with its fix reverted, each of these fails on its default seeds: a
// scratch C read at the wrong stride (GEMV rows with two outputs), a folded batch launch reading
// the first batch's rows, a planning crash on a reduction of a 0-d tensor.
//
// A few hundred seeds run in CI; KFUSE_FUZZ_SEEDS=<first>:<count> runs others (sweeps: a few
// thousand seeds take minutes). A failure names its seed: rerun it with KFUSE_FUZZ_SEEDS=<seed>:1.
//
// Tolerances: a product y = sum_k a_k b_k gets 4 K eps (sum_k |a_k b_k|) + 2 eps |y| (each product
// and addition rounds once, in any order), the bound computed by the oracle as matmul(|a|, |b|);
// an epilogue (Lipschitz constant <= 1.2) twice that plus 8 eps |z| + 1e-6 (its math's error).
// A bag gets 4 eps (sum of |weighted rows| + |y|) with eps that of the table's storage type (bf16
// and f16 products round per term, as op-by-op evaluation would). Op chains, whose values pass
// through casts to 8- and 16-bit types, get 3e-2 relative (they check structure: indices, rows,
// shapes, errors, not rounding; steps whose result jumps with the rounding of f16 values, argmax
// and casts of f16 values to integers, are left out).
#include <kfuse/index_ops.hpp>
#include <kfuse/quantize.hpp>

#include <array>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

#include "test_util.hpp"

namespace kfuse::test {
namespace {

// The seeds to run: [first, first + count), `count` by default, or KFUSE_FUZZ_SEEDS.
std::pair<uint64_t, uint64_t> seeds(uint64_t first, uint64_t count) {
  return seed_range("KFUSE_FUZZ_SEEDS", first, count);
}

Tensor stored_randn(std::mt19937_64& r, const Shape& s) {
  std::normal_distribution<double> nd(0, 1);
  std::vector<double> v(static_cast<size_t>(count_of(s)));
  for (auto& x : v) x = nd(r);
  return make_tensor(v, s);
}

// got within tol(i) of the oracle's values for `t`; the message names what and where.
::testing::AssertionResult within(const std::vector<double>& got, const Tensor& t,
                                  const std::function<double(size_t, double)>& tol) {
  const std::vector<double> ref = reference_values(t);
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << ref.size();
  for (size_t i = 0; i < ref.size(); ++i)
    if (!(std::fabs(got[i] - ref[i]) <= tol(i, ref[i])))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", reference " << ref[i]
                                           << " (tolerance " << tol(i, ref[i]) << ")";
  return ::testing::AssertionSuccess();
}

// ---- matmuls ----

int64_t draw_dim(std::mt19937_64& r) {
  const int c = static_cast<int>(r() % 10);
  if (c < 2) return static_cast<int64_t>(1 + r() % 4);
  if (c < 7) return static_cast<int64_t>(1 + r() % 70);
  return static_cast<int64_t>(1 + r() % 300);
}

// A [batch..., rows, cols] operand: stored transposed, or as a column slice of a wider matrix.
Tensor draw_operand(std::mt19937_64& r, int64_t batch, int64_t rows, int64_t cols) {
  const bool t = r() % 3 == 0, sliced = r() % 4 == 0;
  const int64_t R = t ? cols : rows, C = t ? rows : cols, wide = sliced ? C + 1 + static_cast<int64_t>(r() % 5) : C;
  Shape s = batch ? Shape{batch, R, wide} : Shape{R, wide};
  Tensor x = stored_randn(r, s);
  if (sliced) {
    const int64_t off = static_cast<int64_t>(r() % static_cast<uint64_t>(wide - C + 1));
    std::vector<Range> rg(batch ? 2 : 1, Range::all());
    rg.push_back(Range{off, off + C, 1});
    x = x.slice(rg);
  }
  return t ? x.transpose() : x;
}

TEST(Fuzz, MatmulsWithEpiloguesAndTheirProduct) {
  const Options saved = options();
  const auto [first, end] = seeds(0, 150);
  for (uint64_t seed = first; seed < end; ++seed) {
    std::mt19937_64 r(seed);
    int64_t M = draw_dim(r), N = draw_dim(r), K = draw_dim(r);
    if (r() % 20 == 0) M = 0;
    const int64_t batch = r() % 4 == 0 ? static_cast<int64_t>(1 + r() % 3) : 0;
    const bool b_broadcast = batch && r() % 2;  // B 2-D: the batch dims fold into M
    Tensor a = draw_operand(r, batch, M, K), b = draw_operand(r, b_broadcast ? 0 : batch, K, N);
    switch (r() % 5) {  // an element-wise producer of an operand (fuses into its packing)
      case 1: a = relu(a) * 2.0 + 0.5; break;
      case 2: b = tanh(b); break;
      case 3: b = b.cast(DType::BF16); break;  // bf16 weights read in place
      default: break;
    }
    Tensor bias = stored_randn(r, {N});
    Tensor y = matmul(a, b);
    Tensor z;
    switch (r() % 4) {
      case 0: z = relu(y + bias); break;
      case 1: z = gelu(y + bias, true); break;
      case 2: z = y * 0.5; break;
      default: z = silu(y); break;
    }
    Options o = saved;
    o.num_threads = static_cast<int>(1 + r() % 2);
    set_options(o);
    const bool both = r() % 2;  // the product too: one kernel with two outputs
    SCOPED_TRACE("seed " + std::to_string(seed) + " (KFUSE_FUZZ_SEEDS=" + std::to_string(seed) +
                 ":1): " + shape_str(a.shape()) + " @ " + shape_str(b.shape()) + (both ? ", product too" : "") + ", " +
                 std::to_string(o.num_threads) + " threads");
    if (both) eval({y, z});
    const std::vector<double> gz = values(z);
    const std::vector<double> bound = reference_values(matmul(abs(a.cast(DType::F32)), abs(b.cast(DType::F32))));
    const double eps = 0x1p-24;
    auto tol_y = [&](size_t i, double ref) {
      return 4 * static_cast<double>(K) * eps * bound[i] + 2 * eps * std::fabs(ref);
    };
    if (both) { EXPECT_TRUE(within(values(y), y, tol_y)) << "the product"; }
    EXPECT_TRUE(within(gz, z, [&](size_t i, double ref) {
      return 2 * tol_y(i, ref) + 8 * eps * std::fabs(ref) + 1e-6;
    })) << "the epilogue";
    if (::testing::Test::HasFailure()) break;
  }
  set_options(saved);
}

// ---- embedding bags ----

TEST(Fuzz, EmbeddingBagsOverEveryTableKind) {
  const Options saved = options();
  const auto [first, end] = seeds(0, 80);
  for (uint64_t seed = first; seed < end; ++seed) {
    std::mt19937_64 r(seed);
    const int64_t R = static_cast<int64_t>(4 + r() % 300), D = static_cast<int64_t>(1 + r() % (r() % 4 ? 70 : 300));
    const int64_t B = r() % 10 == 0 ? 0 : static_cast<int64_t>(1 + r() % 40);
    Tensor t32 = stored_randn(r, {R, D});
    Tensor table;
    std::string kind;
    double eps = 0x1p-23;
    switch (r() % 6) {
      case 0: table = t32, kind = "f32"; break;
      case 1: table = make_tensor(values(t32), {R, D}, DType::F16), kind = "f16", eps = 0x1p-11; break;
      case 2: table = make_tensor(values(t32), {R, D}, DType::BF16), kind = "bf16", eps = 0x1p-8; break;
      case 3:
      case 4: {
        // quantised (the codes stored, as a model would load them: the oracle then dequantises
        // the same codes rather than re-quantising in fp64, whose ties may round otherwise)
        const int bits = r() % 2 ? 8 : 4;
        QuantizedTable q = quantize_rowwise(t32, bits);
        q.values = make_tensor(values(q.values), q.values.shape(), DType::U8);
        q.scale_bias = make_tensor(values(q.scale_bias), q.scale_bias.shape());
        table = dequantize_rowwise(q), kind = std::to_string(bits) + "-bit";
        break;
      }
      default: {
        QuantizedTable q = quantize_rowwise(t32, 8);
        Tensor packed = make_tensor(values(pack_fused_rowwise(q)), {R, D + 8}, DType::U8);
        table = dequantize_rowwise(fused_rowwise_table(packed, 8, D)), kind = "fused 8-bit";
        break;
      }
    }
    const BagMode mode = std::array{BagMode::Sum, BagMode::Mean, BagMode::Max}[r() % 3];
    const bool fixed = r() % 4 == 0;  // 2-D ids [B, L]
    const int64_t L = static_cast<int64_t>(1 + r() % 30);
    std::vector<double> ids, offsets;
    int64_t n = fixed ? B * L : 0;
    if (!fixed)
      for (int64_t i = 0; i < B; ++i) {
        offsets.push_back(static_cast<double>(n));
        n += r() % 5 == 0 ? 0 : static_cast<int64_t>(r() % 60);  // empty bags too
      }
    for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<double>(r() % 3 == 0 ? r() % 4 : r() % R));  // repeats
    const Shape id_shape = fixed ? Shape{B, L} : Shape{n};
    Tensor idt = make_tensor(ids, id_shape, DType::I64);
    Tensor offt = fixed ? Tensor() : make_tensor(offsets, {B}, DType::I64);
    Tensor w = mode == BagMode::Sum && r() % 2 ? stored_randn(r, id_shape) : Tensor();
    std::optional<int64_t> pad;
    if (r() % 4 == 0) pad = static_cast<int64_t>(r() % R);
    Tensor y = embedding_bag(table, idt, offt, mode, w, pad).cast(DType::F32);
    Tensor z;
    switch (r() % 3) {
      case 0: z = relu(y * 2.0 + 0.25); break;
      case 1: z = tanh(y) + y; break;
      default: z = softmax(y, -1); break;
    }
    Options o = saved;
    o.num_threads = static_cast<int>(1 + r() % 2);
    set_options(o);
    SCOPED_TRACE("seed " + std::to_string(seed) + " (KFUSE_FUZZ_SEEDS=" + std::to_string(seed) + ":1): " + kind +
                 " table [" + std::to_string(R) + ", " + std::to_string(D) + "], " + std::to_string(B) + " bags, " +
                 std::to_string(n) + " ids" + (w.defined() ? ", weighted" : "") + (pad ? ", padding_idx" : ""));
    eval({y, z});
    const std::vector<double> bound =
        reference_values(embedding_bag(abs(table.cast(DType::F32)), idt, offt, mode, w.defined() ? abs(w) : w, pad));
    double most = 0;
    for (double v : bound) most = std::max(most, v);
    EXPECT_TRUE(within(values(y), y, [&](size_t i, double ref) {
      return 4 * eps * (bound[i] + std::fabs(ref)) + 1e-6;
    })) << "the bag";
    EXPECT_TRUE(within(values(z), z, [&](size_t, double) { return 12 * eps * (most + 1) + 1e-5; })) << "its epilogue";
    if (::testing::Test::HasFailure()) break;
  }
  set_options(saved);
}

// ---- op chains with hostile arguments ----

// Axes that are usually valid and sometimes out of range; shapes with 0 and 1 extents.
struct Drawer {
  std::mt19937_64 r;
  int64_t dim() {
    const int c = static_cast<int>(r() % 8);
    return c == 0 ? 0 : c == 1 ? 1 : static_cast<int64_t>(1 + r() % 9);
  }
  Shape shape() {
    Shape s(r() % 4);
    for (auto& d : s) d = dim();
    return s;
  }
  int64_t axis(int64_t nd) {
    if (r() % 6 == 0 || nd == 0) return static_cast<int64_t>(r() % static_cast<uint64_t>(2 * nd + 3)) - nd - 1;
    return static_cast<int64_t>(r() % static_cast<uint64_t>(2 * nd)) - nd;
  }
  int64_t small(int64_t lo, int64_t n) { return lo + static_cast<int64_t>(r() % static_cast<uint64_t>(n)); }
};

Tensor index_tensor(Drawer& g, const Shape& s, int64_t hi) {
  std::vector<double> v(static_cast<size_t>(count_of(s)));
  for (auto& x : v) x = static_cast<double>(g.small(g.r() % 9 == 0 ? -3 : 0, hi + 1));  // out of range at times
  return make_tensor(v, s, DType::I64);
}

constexpr DType kDtypes[] = {DType::F32,  DType::F64, DType::I32, DType::I64, DType::F16,
                             DType::BF16, DType::U8,  DType::I8,  DType::Bool};

// One step of a chain, named for the failure message (a result node's op can be another's: a
// keepdim=false reduction ends in a reshape).
struct Step {
  const char* name;
  Tensor t;
};

Step chain_step(Drawer& g, const Tensor& a, const Tensor& b) {
  const int64_t nd = a.ndim();
  switch (g.r() % 30) {
    case 0: return {"add", a + b};
    case 1: return {"mul", a * b};
    case 2: return {"matmul", matmul(a, b)};
    case 3: return {"sum", sum(a, Axes{g.axis(nd)}, g.r() % 2)};
    case 4: return {"softmax", softmax(a, g.axis(nd))};
    case 5: return {"transpose", a.transpose(g.axis(nd), g.axis(nd))};
    case 6: return {"reshape", a.reshape(g.r() % 3 ? Shape{count_of(a.shape())} : g.shape())};
    case 7: return {"expand", a.expand(g.shape())};
    case 8: {
      std::vector<Range> rg;
      for (int64_t d = 0; d < nd; ++d) rg.push_back(Range{g.small(-2, 5), g.small(-2, 7), g.small(0, 3)});
      return {"slice", a.slice(rg)};
    }
    case 9: return {"layer_norm", layer_norm(a, nd ? Shape{a.shape().back()} : Shape{})};
    case 10: return {"max", max(a, Axes{g.axis(nd)})};
    case 11:
      return {"min", min(a, Axes{g.axis(nd)})};  // (not argmax: a near tie flips with the rounding of f16 values)
    case 12: return {"where", where(a > 0.0, a, b)};
    case 13: {
      // f16/bf16 values are not cast to an integer type: the oracle keeps them unrounded, and a
      // value within their rounding of an integer would truncate to its neighbour
      const DType to = kDtypes[g.r() % 9];
      const bool half = a.dtype() == DType::F16 || a.dtype() == DType::BF16;
      return {"cast", a.cast(half && !is_float(to) ? DType::F32 : to)};
    }
    case 14: return {"index_select", index_select(a, g.axis(nd), index_tensor(g, {3}, nd ? a.shape()[0] : 1))};
    case 15: return {"concat", concat({a, b}, g.axis(nd))};
    case 16: return {"squeeze", g.r() % 2 ? a.squeeze(g.axis(nd)) : a.squeeze()};
    case 17: return {"unsqueeze", a.unsqueeze(g.axis(nd + 1))};
    case 18: return {"log_softmax", log_softmax(a, g.axis(nd))};
    case 19: return {"mean", mean(a)};
    case 20: return {"permute", a.permute(Axes{g.small(0, 3), g.small(0, 3)})};
    case 21: return {"pad", pad(a, {{g.small(0, 3), g.small(0, 2)}})};
    case 22: return {"gather", gather(a, g.axis(nd), index_tensor(g, a.shape(), 4))};
    case 23: return {"embedding", embedding(a, index_tensor(g, {2}, 3))};
    case 24: return {"rms_norm", rms_norm(a)};
    case 25: return {"cross_entropy", cross_entropy(a, index_tensor(g, {nd ? a.shape()[0] : 1}, 3))};
    case 26: return {"var", var(a, Axes{g.axis(nd)}, g.small(0, 3))};
    case 27: return {"pow", pow(a, b)};
    case 28: return {"logsumexp", logsumexp(a, Axes{g.axis(nd)}, g.r() % 2)};
    default: return {"prod", prod(a, Axes{g.axis(nd)})};
  }
}

TEST(Fuzz, HostileOpChainsThrowUserErrorsOrMatchTheReference) {
  const auto [first, end] = seeds(0, 600);
  int ran = 0;
  for (uint64_t seed = first; seed < end; ++seed) {
    Drawer g{std::mt19937_64(seed)};
    std::vector<Tensor> pool;
    std::string ops;
    try {
      auto describe = [](const Tensor& t) { return shape_str(t.shape()) + " " + dtype_name(t.dtype()); };
      for (int i = 0; i < 2; ++i) {
        pool.push_back(stored_randn(g.r, g.shape()).cast(g.r() % 2 ? DType::F32 : kDtypes[g.r() % 9]));
        ops += "in" + std::to_string(i) + " " + describe(pool.back()) + ", ";
      }
      for (int i = 0, n = static_cast<int>(1 + g.r() % 6); i < n; ++i) {
        const Tensor &a = pool[g.r() % pool.size()], &b = pool[g.r() % pool.size()];
        Step st = chain_step(g, a, b);
        pool.push_back(st.t);
        ops += std::string(i ? ", " : "") + st.name + " " + describe(st.t);
      }
      Tensor out = pool.back().cast(DType::F64);
      const std::vector<double> got = values(out), ref = reference_values(out);
      ++ran;
      ASSERT_EQ(got.size(), ref.size()) << "seed " << seed << ": " << ops;
      const DType dt = pool.back().dtype();
      const double big = dt == DType::F16 ? 65504 : dt == DType::F64 ? 1.7e308 : 3.39e38;
      for (size_t i = 0; i < got.size(); ++i) {
        const double x = got[i], e = ref[i];
        if (x == e || (std::isnan(x) && std::isnan(e))) continue;
        if (std::isinf(x) && std::fabs(e) >= big && (x > 0) == (e > 0)) continue;  // overflow of the storage type
        ASSERT_LE(std::fabs(x - e), 3e-2 * (1 + std::fabs(e)))
            << "seed " << seed << " (KFUSE_FUZZ_SEEDS=" << seed << ":1), element " << i << ": got " << x
            << ", reference " << e << "; " << ops;
      }
    } catch (const UserError&) {
      // a clear refusal of a bad argument: what hostile arguments should get
    } catch (const std::exception& e) {
      FAIL() << "seed " << seed << " (KFUSE_FUZZ_SEEDS=" << seed << ":1): " << e.what() << " (ops " << ops << ")";
    }
  }
  EXPECT_GT(ran, static_cast<int>(end - first) / 10) << "too few chains were valid to check anything";
}

}  // namespace
}  // namespace kfuse::test
