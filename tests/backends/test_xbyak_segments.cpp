// xbyak backend, segment kernels (embedding bags: jit/xbyak/segment.hpp): the backend takes the
// bag kernel (no fallback, explain names xbyak) and matches the fp64 reference for f32, f16,
// bf16, 8-bit and 4-bit tables; Sum, Mean, Max; per-sample weights; padding_idx; an epilogue;
// widths D in {1, 7, 8, 17, 64, 65, 200} (whole register blocks, a block of the rest, masked
// tails; a 4-bit row of odd D ends in a byte of one nibble); an empty bag (also the last), a
// one-id bag, repeated ids; ids changed after recording clamped into the table; 1 and 2 threads
// bitwise equal; the bits of the LLVM bag kernel (same fold order, FMA only where the IR says fma)
// when LLVM is built; a clean decline of near-miss nibble arithmetic; the
// AVX-512 code emitted (run only on an AVX-512 machine); the 8-bit table's scale and bias read
// through one prefetched pointer; 4-bit rows summed with other rows (the pairs' even / odd
// accumulation only when every row is a nibble row).
#include <kfuse/explain.hpp>
#include <kfuse/index_ops.hpp>
#include <kfuse/options.hpp>
#include <kfuse/profile.hpp>
#include <kfuse/quantize.hpp>
#include <kfuse/stats.hpp>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "../../jit/xbyak/segment.hpp"
#include "../../jit/xbyak/xbyak_backend.hpp"
#include "backend/backend.hpp"
#include "backend/gather_prefetch.hpp"
#include "runtime/plan.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

class XbyakSegments : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::find_backend("xbyak")) GTEST_SKIP() << "xbyak backend not built in or no AVX2";
    saved_ = options();
    use({"xbyak"});
  }
  void TearDown() override {
    if (detail::find_backend("xbyak")) set_options(saved_);
  }
  void use(std::vector<std::string> backends, int threads = 0) {
    Options o = saved_;
    o.backends = std::move(backends);
    if (threads > 0) o.num_threads = threads;
    set_options(o);
  }
  Options saved_;
};

constexpr int64_t kRows = 23, kIds = 40;
std::vector<double> bag_ids() { return random_ints(kIds, 61, 0, kRows - 1); }
// an empty bag, a one-id bag; `last_empty`: the last bag is empty too
std::vector<double> bag_offsets(bool last_empty) {
  return last_empty ? std::vector<double>{0, 5, 5, 12, 13, 33, 40} : std::vector<double>{0, 5, 5, 12, 13, 33, 39};
}

Tensor table_of(const std::string& format, int64_t D) {
  Tensor t = make_tensor(random_values(static_cast<size_t>(kRows * D), 70 + D, -1, 1), {kRows, D});
  if (format == "f16") return t.cast(DType::F16).eval().cast(DType::F32);
  if (format == "bf16") return t.cast(DType::BF16).eval().cast(DType::F32);
  if (format == "8-bit" || format == "4-bit") {
    QuantizedTable q = quantize_rowwise(t, format == "8-bit" ? 8 : 4);
    eval({q.values, q.scale_bias});
    return dequantize_rowwise(q);
  }
  return t;
}

struct Config {
  BagMode mode;
  bool weighted;
  std::optional<int64_t> pad;
  bool epilogue;
};

Tensor bag_of(const Tensor& table, const Config& c, bool last_empty) {
  const std::vector<double> offsets = bag_offsets(last_empty);
  Tensor y = embedding_bag(table, make_tensor(bag_ids(), {kIds}, DType::I64),
                           make_tensor(offsets, {static_cast<int64_t>(offsets.size())}, DType::I64), c.mode,
                           c.weighted ? make_tensor(random_values(kIds, 62, 0.5, 1.5), {kIds}) : Tensor(), c.pad);
  return c.epilogue ? relu(y * 2.0f + 0.25f) : y;
}

// Calls f with each segment kernel of y's plan (planned, not compiled), its xbyak plan and why
// xbyak declines it ("" when taken); returns how many there were.
size_t for_each_bag_analysis(
    const Tensor& y, const std::function<void(const ir::Kernel&, const detail::xb::Plan&, const std::string&)>& f) {
  auto plan = detail::make_plan({y.node()}, /*compile=*/false, options());
  size_t bags = 0;
  for (const auto& pk : plan->kernels) {
    const ir::Kernel& k = pk.lowered.kernel;
    if (k.kind != ir::KernelKind::Segment) continue;
    ++bags;
    detail::xb::Plan p;
    const std::string why = detail::xb::analyze(k, p);
    f(k, p, why);
  }
  return bags;
}

// for_each_bag_analysis of kernels that must analyse.
size_t for_each_bag_kernel(const Tensor& y, const std::function<void(const ir::Kernel&, const detail::xb::Plan&)>& f) {
  return for_each_bag_analysis(y, [&](const ir::Kernel& k, const detail::xb::Plan& p, const std::string& why) {
    EXPECT_EQ(why, "");
    f(k, p);
  });
}

// y (a fresh copy of an evaluated expression: explain reports the kernel it ran) ran on `backend`.
void expect_backend(const Tensor& y, const std::string& backend) {
  Explanation ex = explain(y);
  ASSERT_EQ(ex.kernel_count(), 1u) << ex.text();
  EXPECT_EQ(ex.kernels[0].backend, backend) << ex.text();
}

TEST_F(XbyakSegments, BagsOfEveryFormatModeAndWidthRunOnXbyak) {
  const auto pad = static_cast<int64_t>(bag_ids()[6]);
  const std::vector<Config> all = {{BagMode::Sum, false, {}, false}, {BagMode::Mean, false, {}, false},
                                   {BagMode::Max, false, {}, false}, {BagMode::Sum, true, {}, true},
                                   {BagMode::Sum, true, pad, false}, {BagMode::Mean, false, pad, true},
                                   {BagMode::Max, false, pad, true}};
  const std::vector<Config> some = {{BagMode::Sum, true, pad, true}, {BagMode::Max, false, {}, false}};
  for (const std::string format : {"f32", "f16", "bf16", "8-bit", "4-bit"})
    for (const Config& c : format == "f32" ? all : some)
      for (int64_t D : format == "f32" ? std::vector<int64_t>{1, 7, 8, 17, 64, 65, 200} : std::vector<int64_t>{7, 65})
        for (bool last_empty : {false, true}) {
          if (last_empty && D != 65) continue;
          SCOPED_TRACE(format + " mode " + std::to_string(static_cast<int>(c.mode)) + (c.weighted ? " weighted" : "") +
                       (c.pad ? " pad" : "") + (c.epilogue ? " epilogue" : "") + " D " + std::to_string(D) +
                       (last_empty ? " last bag empty" : ""));
          Tensor y = bag_of(table_of(format, D), c, last_empty);
          reset_counters();
          const std::vector<double> got = values(y);
          EXPECT_EQ(counters().fallbacks, 0u) << "xbyak declined the bag";
          expect_backend(bag_of(table_of(format, D), c, last_empty), "xbyak");
          EXPECT_TRUE(all_close(got, reference_values(y), 1e-5, 1e-6));
        }
}

// Borrowed ids changed after the bag was recorded (and checked): the kernel still clamps each id
// into the table, on the out-of-line path of its clamp (a negative id reads row 0, a too large
// one the last row), never a row outside it.
TEST_F(XbyakSegments, IdsChangedAfterRecordingAreClampedIntoTheTable) {
  for (const std::string format : {"f32", "8-bit"}) {
    SCOPED_TRACE(format);
    Tensor table = table_of(format, 64);
    std::vector<int64_t> ids(kIds);
    for (int64_t i = 0; i < kIds; ++i) ids[static_cast<size_t>(i)] = i % kRows;
    const std::vector<double> offsets = bag_offsets(false);
    Tensor off = make_tensor(offsets, {static_cast<int64_t>(offsets.size())}, DType::I64);
    Tensor y = embedding_bag(table, Tensor::borrow(ids.data(), {kIds}), off);
    std::vector<int64_t> clamped = ids;
    for (int64_t i = 0; i < kIds; i += 3) {
      ids[static_cast<size_t>(i)] = i % 2 ? -1000 - i : kRows + i;
      clamped[static_cast<size_t>(i)] = i % 2 ? 0 : kRows - 1;
    }
    reset_counters();
    const std::vector<float> got = y.eval().to_vector<float>();
    EXPECT_EQ(counters().fallbacks, 0u);
    const std::vector<float> want =
        embedding_bag(table, Tensor::from_vector<int64_t>(clamped, {kIds}), off).eval().to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  }
}

// Every bag on one thread or split over two: the same bits (a bag runs whole on one thread).
TEST_F(XbyakSegments, ThreadCountsAreBitwiseEqual) {
  const Config c{BagMode::Sum, true, {}, true};
  for (const std::string format : {"f32", "8-bit"}) {
    SCOPED_TRACE(format);
    Tensor table = table_of(format, 65);
    use({"xbyak"}, 1);
    const std::vector<float> one = bag_of(table, c, false).eval().to_vector<float>();
    use({"xbyak"}, 2);
    const std::vector<float> two = bag_of(table, c, false).eval().to_vector<float>();
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
  }
}

// Each column folds its ids in order with separate multiplies and adds (the dequantisation is
// its explicit fma), as the LLVM bag kernel does: weighted f32, 8-bit and 4-bit bags give LLVM's
// bits (register blocks and masked tails alike).
TEST_F(XbyakSegments, BitwiseEqualToTheLlvmBagKernel) {
  if (!detail::find_backend("llvm")) GTEST_SKIP() << "llvm backend not built in";
  for (const std::string format : {"f32", "8-bit", "4-bit"})
    for (int64_t D : {17, 64}) {
      SCOPED_TRACE(format + " D " + std::to_string(D));
      Tensor table = table_of(format, D);
      const Config c{BagMode::Sum, true, {}, false};
      use({"xbyak"});
      Tensor yx = bag_of(table, c, true);
      const std::vector<float> xb = yx.eval().to_vector<float>();
      expect_backend(bag_of(table, c, true), "xbyak");
      use({"llvm"});
      Tensor yl = bag_of(table, c, true);
      const std::vector<float> ll = yl.eval().to_vector<float>();
      expect_backend(bag_of(table, c, true), "llvm");
      ASSERT_EQ(xb.size(), ll.size());
      EXPECT_EQ(std::memcmp(xb.data(), ll.data(), xb.size() * sizeof(float)), 0);
    }
}

// 4-bit tables (a nibble row: W / 2 bytes per vector of W columns) run on xbyak, no fallback:
// every width (odd D: the row's last byte holds one nibble, and a masked tail must not read
// past it; 32, 64, 192: a rest of whole vectors, which AVX-512 runs unmasked, decoding them in
// pairs; 65, 200: pairs, then a masked vector; 17: one whole and one masked vector, no pair;
// 300: a second block, its bytes from the row's middle), an empty bag (also the last),
// weighted, Mean and Max bags with padding.
TEST_F(XbyakSegments, FourBitBagsRunOnXbyak) {
  const auto pad = static_cast<int64_t>(bag_ids()[6]);
  const std::vector<Config> configs = {
      {BagMode::Sum, true, {}, false}, {BagMode::Mean, false, pad, true}, {BagMode::Max, false, {}, false}};
  for (int64_t D : {1, 7, 8, 17, 32, 64, 65, 192, 200, 300})
    for (size_t i = 0; i < configs.size(); ++i) {
      const Config& c = configs[i];
      const bool last_empty = i == 0;
      SCOPED_TRACE("4-bit mode " + std::to_string(static_cast<int>(c.mode)) + " D " + std::to_string(D));
      Tensor table = table_of("4-bit", D);
      Tensor y = bag_of(table, c, last_empty);
      reset_counters();
      const std::vector<double> got = values(y);
      EXPECT_EQ(counters().fallbacks, 0u) << "xbyak declined the 4-bit bag";
      expect_backend(bag_of(table, c, last_empty), "xbyak");
      EXPECT_TRUE(all_close(got, reference_values(y), 1e-5, 1e-6));
    }
}

// AVX-512 accumulates a pair of nibble vectors as its even and its odd columns and interleaves
// them after the walk, when every row the bag reads is a nibble row: two 4-bit tables summed row
// by row take that form, a 4-bit table beside an f32 one (its row in column order) the paired
// decode in column order. Both against the reference, at widths of pairs, pairs and a masked
// vector, and a second block.
TEST_F(XbyakSegments, NibbleRowsBesideOtherRowsKeepTheirColumns) {
  for (int64_t D : {32, 64, 65, 300}) {
    SCOPED_TRACE("D " + std::to_string(D));
    const Tensor four = table_of("4-bit", D), other4 = table_of("4-bit", D) * 0.5f + 0.125f;
    const Tensor f32 = make_tensor(random_values(static_cast<size_t>(kRows * D), 90 + D, -1, 1), {kRows, D});
    for (const Tensor& table : {four + other4, four - f32}) {
      const Config c{BagMode::Sum, true, {}, true};
      Tensor y = bag_of(table, c, false);
      reset_counters();
      const std::vector<double> got = values(y);
      EXPECT_EQ(counters().fallbacks, 0u) << "xbyak declined the bag";
      // (sums of up to 20 weighted rows of two tables, |values| up to ~2: f32 roundings of 1e-6)
      EXPECT_TRUE(all_close(got, reference_values(y), 1e-5, 1e-5));
    }
  }
}

// A 4-bit table's dequantisation as lib/api/quantize.cpp writes it, with the parts a nibble
// row's proof checks made adjustable: the column's parity (arange from `start`), the shift per
// odd column (1 << shl) and the mask.
Tensor nibble_table(const QuantizedTable& q, double start, int shl, int mask) {
  const Tensor& v = q.values;
  const int64_t rows = v.shape()[0], width = v.shape()[1];
  Tensor bytes =
      slice(reshape(expand(unsqueeze(v, 2), {rows, width, 2}), {rows, 2 * width}), {Range::all(), Range{0, q.cols}});
  Tensor s = (arange(start, start + static_cast<double>(q.cols), 1, DType::I32) & 1) << shl;
  Tensor vals = ((bytes >> s) & mask).cast(DType::F32);
  return vals * slice(q.scale_bias, {Range::all(), Range{0, 1}}) + slice(q.scale_bias, {Range::all(), Range{1, 2}});
}

// Nibble arithmetic that is not exactly column c's nibble (shift by 2 or 8, mask 7, the parity
// of c + 1) is declined with a reason (the bag then runs on the next backend, right), while the
// form quantize.cpp records (shift 4, mask 15, parity of c) is taken.
TEST_F(XbyakSegments, NearMissNibbleArithmeticIsDeclined) {
  Tensor t = make_tensor(random_values(static_cast<size_t>(kRows * 17), 90, -1, 1), {kRows, 17});
  QuantizedTable q = quantize_rowwise(t, 4);
  eval({q.values, q.scale_bias});
  struct Case {
    double start;
    int shl, mask;
    const char* why;  // "" when taken
  };
  const char* shift = "the shift is not 4 * (column & 1)";
  for (const Case& c : {Case{0, 2, 15, ""}, Case{2, 2, 15, ""}, Case{0, 1, 15, shift}, Case{0, 3, 15, shift},
                        Case{0, 2, 7, "the mask is not 15"}, Case{1, 2, 15, shift}}) {
    SCOPED_TRACE("start " + std::to_string(c.start) + " shl " + std::to_string(c.shl) + " mask " +
                 std::to_string(c.mask));
    Tensor y = bag_of(nibble_table(q, c.start, c.shl, c.mask), {BagMode::Sum, true, {}, false}, false);
    const size_t bags =
        for_each_bag_analysis(y, [&](const ir::Kernel&, const detail::xb::Plan& p, const std::string& why) {
          if (*c.why == 0) {
            EXPECT_EQ(why, "");
            // an integer arange lowers to i64 arithmetic cast to i32 (lib/fusion/lower_group.cpp),
            // whose wrap keeps the parity: no column limit to prove (a float arange's steps have one)
            ASSERT_TRUE(p.segment);
            EXPECT_EQ(p.segment->max_columns, INT64_MAX);
          } else {
            EXPECT_NE(why.find("not a 4-bit table's nibble"), std::string::npos) << why;
            EXPECT_NE(why.find(c.why), std::string::npos) << why;
          }
        });
    EXPECT_EQ(bags, 1u);
    if (detail::find_backend("llvm")) {
      use({"xbyak", "llvm"});
      EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-5, 1e-6));
      use({"xbyak"});
    }
  }
}

// The AVX-512 code of every format (16-vector blocks, k-masked narrow tails) is emitted even
// where the CPU cannot run it (xbyak rejects bad operand forms while emitting); it runs in the
// tests above on an AVX-512 machine.
TEST_F(XbyakSegments, Avx512CodeIsEmittedForEveryFormat) {
  for (const std::string format : {"f32", "f16", "bf16", "8-bit", "4-bit"}) {
    SCOPED_TRACE(format);
    Tensor y = bag_of(table_of(format, 65), {BagMode::Mean, false, 3, true}, true);
    EXPECT_EQ(for_each_bag_kernel(y,
                                  [](const ir::Kernel& k, const detail::xb::Plan& p) {
                                    for (auto isa : {detail::xb::Isa::Avx512, detail::xb::Isa::Avx2})
                                      EXPECT_GT(detail::xb::emit(k, p, isa).code_bytes, 0u)
                                          << detail::xb::isa_name(isa);
                                  }),
              1u);
  }
}

// The 8-bit table's scale and bias (elements 2 * id and 2 * id + 1 of one buffer) share one
// pointer per id, and its line is prefetched ahead like the rows: without that prefetch every id
// of an out-of-cache bag waited a full miss on its scale (xbyak's 8-bit bag took 22 ms where
// LLVM's took 8, table [2M, 64]: docs/performance.md).
TEST_F(XbyakSegments, EightBitScaleAndBiasShareOnePrefetchedPointer) {
  Tensor y = bag_of(table_of("8-bit", 64), {BagMode::Sum, true, {}, false}, false);
  const size_t bags = for_each_bag_kernel(y, [](const ir::Kernel&, const detail::xb::Plan& p) {
    ASSERT_TRUE(p.segment);
    int rows = 0, scale_bias = 0;
    for (const auto& ptr : p.segment->ptrs) {
      if (ptr.row) {
        ++rows;
        EXPECT_TRUE(ptr.prefetch);
      } else if (ptr.dtype == DType::F32 && ptr.lo == 0 && ptr.hi == 1) {
        ++scale_bias;
        EXPECT_TRUE(ptr.prefetch) << "the gathered scale/bias line is prefetched";
      } else {
        EXPECT_FALSE(ptr.prefetch) << "the per-sample weights are read in order: no prefetch";
      }
    }
    EXPECT_EQ(rows, 1);
    EXPECT_EQ(scale_bias, 1);
    EXPECT_EQ(p.segment->ptrs.size(), 3u) << "u8 row, scale/bias, weights";
  });
  EXPECT_EQ(bags, 1u);
  EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-5, 1e-6));
}

// A bag's rows are prefetched into L2 when the walk's rows exceed a quarter of the L3, into L1
// when they fit it, and not at all when a table of rows alone fits the L2
// (backend/gather_prefetch.hpp: into L1 an out-of-cache bag ran 1.5-2x slower on Zen 4, into L2
// an in-cache one 10-25% slower; an f32 table in the L2 ran 5-20% faster with none, an 8-bit
// one, whose scale/bias is a line of its own, 3-5% slower). On an Intel core a big table whose
// walk reads at most 192 bytes per id stays in L1 (short rows: fewer lines in flight than the
// L1 takes, measured 1.1-1.3x faster there).
//
// The row width is a launch parameter, so the code holds a walk per block of columns: the full
// block (8 AVX2 or 16 AVX-512 vectors) and every smaller rest, down to one vector (32 bytes of
// f32 on AVX2). Each walk's table is the rows x ITS block's bytes, so one kernel can hold walks
// of both kinds: a table past L3 / 4 for a 256-byte block may be in the L3 for a 32-byte one.
// The cases pick their rows so that the answer is the same for every block the expectation
// covers: `big` is past L3 / 4 even for a 32-byte block; `mid` is past it for blocks of 256 bytes
// and more (every host: L2) and within it for 128 bytes (L1 where the policy says so; both ISAs
// hold a 128- and a 256-byte block). (An expectation of "no L1 prefetch" for a 64-column table
// failed on AMD hosts: its one-vector rest walk's table is in the L3, and takes L1 by design.)
// Counted in the code: the prefetches through rdx (prefetcht0 is 0F 18 /1, prefetcht1 0F 18 /2;
// [rdx], [rdx + disp8], [rdx + disp32]).
TEST_F(XbyakSegments, RowsArePrefetchedIntoL1OrL2ByTheTableSize) {
  auto count = [](const std::vector<uint8_t>& code, size_t n, uint8_t reg) {
    int c = 0;
    for (size_t i = 0; i + 2 < n; ++i)
      if (code[i] == 0x0F && code[i + 1] == 0x18)
        for (uint8_t mod : {0x00, 0x40, 0x80}) c += code[i + 2] == (mod | (reg << 3) | 2);
    return c;
  };
  const probe::CacheSizes& cs = probe::cache_sizes();
  const int64_t D = 8, Dw = 64;
  const int64_t big_rows = cs.l3 / 4 / 32 + 1024;   // rows x 32 bytes > L3 / 4
  const int64_t mid_rows = cs.l3 / 4 / 256 + 1024;  // rows x 256 > L3 / 4 >= rows x 128
  ASSERT_LE(mid_rows * 128, cs.l3 / 4);
  // (planned, never read: the pages are never touched)
  std::unique_ptr<float[]> big(new float[static_cast<size_t>(big_rows * D)]);
  std::unique_ptr<float[]> mid(new float[static_cast<size_t>(mid_rows * Dw)]);
  const bool intel = detail::short_rows_to_l1();
  const detail::GatherPrefetch mid_short = detail::gather_prefetch(mid_rows * 128, 128, true);
  struct Case {
    const char* what;
    Tensor table;
    int t0, t1;  // expected: 0 none, 1 some, -1 not checked
  };
  const std::vector<Case> cases = {
      {"f32 in the L2: none", table_of("f32", D), 0, 0},
      {"8-bit in the L2: L1 (its scale/bias line)", table_of("8-bit", D), 1, 0},
      {"f32 past L3 / 4 for every block: L2, and L1 for blocks of <= 192 bytes on Intel",
       Tensor::borrow(big.get(), {big_rows, D}), intel ? 1 : 0, 1},
      {"f32 past L3 / 4 for blocks of >= 256 bytes (L2), in the L3 for 128 (L1)",
       Tensor::borrow(mid.get(), {mid_rows, Dw}), mid_short.ahead > 0 && !mid_short.to_l2 ? 1 : -1, 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Tensor y = embedding_bag(c.table, make_tensor(bag_ids(), {kIds}, DType::I64),
                             make_tensor(bag_offsets(false), {7}, DType::I64));
    EXPECT_EQ(for_each_bag_kernel(y,
                                  [&](const ir::Kernel& k, const detail::xb::Plan& p) {
                                    for (auto isa : {detail::xb::Isa::Avx512, detail::xb::Isa::Avx2}) {
                                      const detail::xb::Code code = detail::xb::emit(k, p, isa);
                                      if (c.t0 >= 0) {
                                        EXPECT_EQ(count(code.bytes, code.code_bytes, 1) > 0, c.t0 > 0)
                                            << detail::xb::isa_name(isa);
                                      }
                                      if (c.t1 >= 0) {
                                        EXPECT_EQ(count(code.bytes, code.code_bytes, 2) > 0, c.t1 > 0)
                                            << detail::xb::isa_name(isa);
                                      }
                                    }
                                  }),
              1u);
  }
}

// The policy itself (backend/gather_prefetch.hpp), one source for both CPU backends: a big or
// unknown table takes L2, about 128 lines ahead (32 ids of 256 bytes or more, up to 64 ids of
// 128 bytes or fewer; 32 when the bytes are unknown), except rows of at most 192 bytes per id
// on an Intel core (L1, 16 ahead); a table in the caches L1 16 ahead; rows alone within the L2
// nothing.
TEST(GatherPrefetch, ShortRowsOfBigTablesStayInL1OnIntel) {
  const probe::CacheSizes& cs = probe::cache_sizes();
  const int64_t big = cs.l3 / 4 + 1;
  const bool intel = detail::short_rows_to_l1();
  for (int64_t table : {big, int64_t{-1}}) {
    const detail::GatherPrefetch narrow = detail::gather_prefetch(table, 136, false);
    EXPECT_EQ(narrow.ahead, intel ? 16 : 128 * 64 / 136);
    EXPECT_EQ(narrow.to_l2, !intel);
    const detail::GatherPrefetch at = detail::gather_prefetch(table, 192, true);
    EXPECT_EQ(at.to_l2, !intel);
    for (int64_t id_bytes : {int64_t{40}, int64_t{72}, int64_t{128}})
      EXPECT_EQ(detail::gather_prefetch(table, id_bytes, true).ahead, intel ? 16 : 64) << id_bytes;
    for (auto [id_bytes, ahead] : {std::pair<int64_t, int64_t>{193, 128 * 64 / 193}, {256, 32}, {512, 32}, {-1, 32}}) {
      const detail::GatherPrefetch wide = detail::gather_prefetch(table, id_bytes, true);
      EXPECT_EQ(wide.ahead, ahead) << id_bytes;
      EXPECT_TRUE(wide.to_l2) << id_bytes;
    }
  }
  const detail::GatherPrefetch cached = detail::gather_prefetch(cs.l2 * 2, 136, false);
  EXPECT_EQ(cached.ahead, 16);
  EXPECT_FALSE(cached.to_l2);
  EXPECT_EQ(detail::gather_prefetch(cs.l2 / 2, 64, true).ahead, 0);
}

}  // namespace
}  // namespace kfuse::test
