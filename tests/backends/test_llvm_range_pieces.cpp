// LLVM backend: pointwise kernels whose innermost index is compared with constants (a concat
// along the last axis, a pad, a one-hot column) run each row as one loop per piece between the
// constants, with the stores folded for the piece (plan_row_pieces in row_pieces.cpp,
// ir::fold_var_range), and kernels with a strided or data-indexed innermost load vectorise
// without gathers (prefers_no_gather, row_pieces.cpp). Checked through the API on the LLVM
// backend alone: the values of concats of 2-5 inputs of odd widths (widths 1 and 0 among them),
// pads on either side, a concat fused with arithmetic, i32 and f64 data, 1-3 threads; launch
// chunks starting and ending anywhere in a row (sequential chunks of 1, 7 and 13 points give the
// bits of one launch); and, in the compiled LLVM IR, that a concat's pieces read with plain
// vector loads (no masked gathers) and that a step-2 slice takes the prefer-no-gather attribute
// while a plain copy does not; and that 17 equal parts concatenated along rows (17 stores per
// point) vectorise, their points' loop declared parallel.
#include <kfuse/options.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "runtime/plan.hpp"
#include "test_llvm_util.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

class LlvmRangePieces : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!detail::find_backend("llvm")) GTEST_SKIP() << "llvm backend not built in";
    saved_ = options();
  }
  void TearDown() override {
    if (detail::find_backend("llvm")) set_options(saved_);
  }
  // The LLVM backend alone, on `threads` threads, launches in sequential chunks of `chunk`
  // outer points (0: the pool's split; Options::llvm_launch_chunk).
  void use_llvm(int threads, int64_t chunk = 0) {
    Options o = saved_;
    o.backends = {"llvm"};
    o.num_threads = threads;
    o.llvm_launch_chunk = chunk;
    set_options(o);
  }
  Options saved_;
};

// The LLVM IR of the single kernel of y's plan (compiled here, not through the cache).
std::string llvm_source_of(const Tensor& y) {
  auto plan = detail::make_plan({y.node()}, /*compile=*/false, options());
  EXPECT_EQ(plan->kernels.size(), 1u);
  if (plan->kernels.empty()) return "";
  const ir::Kernel& k = plan->kernels[0].lowered.kernel;
  return llvmt::compile_with(*llvmt::llvm_backend(), k)->source;
}

TEST_F(LlvmRangePieces, ConcatsAndPadsMatchTheReference) {
  struct Case {
    std::vector<int64_t> widths;
    int64_t rows;
    DType dt;
  };
  const std::vector<Case> cases = {{{512, 512}, 9, DType::F32},         {{341, 341, 341}, 7, DType::F32},
                                   {{1, 63, 2, 0, 65}, 11, DType::F32}, {{7}, 5, DType::F32},
                                   {{13, 1}, 33, DType::I32},           {{17, 40, 3}, 6, DType::F64},
                                   {{1, 1, 1, 1, 1}, 257, DType::F32}};
  for (int threads : {1, 2, 3}) {
    use_llvm(threads);
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << "threads " << threads << " rows " << c.rows << " widths "
                                        << ::testing::PrintToString(c.widths) << " " << dtype_name(c.dt));
      std::vector<Tensor> parts;
      uint64_t seed = 5;
      for (int64_t w : c.widths)
        parts.push_back(
            make_tensor(random_ints(static_cast<size_t>(c.rows * w), seed++, -1000, 1000), {c.rows, w}, c.dt));
      Tensor y = concat(parts, 1);
      EXPECT_TRUE(all_close(values(y), reference_values(y), 0, 0));
      // fused with arithmetic on both sides of a cut, and a pad of the result
      Tensor z = pad(concat(parts, 1) * 3 + 1, {{1, 0}, {2, 5}}, -7);
      EXPECT_TRUE(all_close(values(z), reference_values(z), 0, 0));
    }
  }
}

// A launch chunk may start and end anywhere in a row: a 3-D concat along the last axis and a
// one-hot compare (o == c, cuts at c and c + 1) launched in sequential chunks of 1, 7 and 13
// points (rows of 11 cut at every column) give the bits of one whole launch.
TEST_F(LlvmRangePieces, PiecesAreChunkIndependent) {
  const Tensor a = make_tensor(random_values(3 * 37 * 5, 1), {3, 37, 5});
  const Tensor b = make_tensor(random_values(3 * 37 * 6, 2), {3, 37, 6});
  const Tensor r = make_tensor(random_values(7 * 11, 3), {7, 11});
  auto cat = [&] { return concat({a, b}, 2); };
  auto hot = [&] { return eq(arange(11), scalar(4, DType::I64)) + r; };
  use_llvm(1);
  const std::vector<double> whole_cat = values(cat()), whole_hot = values(hot());
  EXPECT_TRUE(all_close(whole_cat, reference_values(cat()), 0, 0));
  EXPECT_TRUE(all_close(whole_hot, reference_values(hot()), 1e-6, 0));  // (1 + x rounds to f32)
  for (int64_t chunk : {1, 7, 13})
    for (int threads : {1, 2}) {
      use_llvm(threads, chunk);
      EXPECT_EQ(values(cat()), whole_cat) << "chunk " << chunk << " threads " << threads;
      EXPECT_EQ(values(hot()), whole_hot) << "chunk " << chunk << " threads " << threads;
    }
}

// More cuts than kMaxRowCuts (row_pieces.cpp): the kernel keeps its masked row loop (still correct).
TEST_F(LlvmRangePieces, ManyInputsKeepTheMaskedLoop) {
  use_llvm(2);
  std::vector<Tensor> parts;
  for (int i = 0; i < 12; ++i) parts.push_back(make_tensor(random_values(4 * 3, 40 + i), {4, 3}));
  Tensor y = concat(parts, 1);
  EXPECT_TRUE(all_close(values(y), reference_values(y), 0, 0));
}

TEST_F(LlvmRangePieces, ConcatPiecesReadWithoutGathersAndStridedLoadsPreferNoGather) {
  use_llvm(1);
  const Tensor a = make_tensor(random_values(64 * 512, 1), {64, 512});
  const Tensor b = make_tensor(random_values(64 * 512, 2), {64, 512});
  const std::string cat = llvm_source_of(concat({a, b}, 1));
  EXPECT_EQ(cat.find("llvm.masked.gather"), std::string::npos) << cat;
  EXPECT_EQ(cat.find("llvm.masked.load"), std::string::npos) << cat;
  EXPECT_EQ(cat.find("prefer-no-gather"), std::string::npos);
  const Tensor wide = make_tensor(random_values(64 * 1024, 3), {64, 1024});
  const std::string step2 = llvm_source_of(slice(wide, {Range::all(), Range{0, 1024, 2}}) + 0.0);
  EXPECT_NE(step2.find("+prefer-no-gather"), std::string::npos);
  EXPECT_EQ(step2.find("llvm.masked.gather"), std::string::npos) << step2;
  EXPECT_EQ(llvm_source_of(wide * 2.0).find("prefer-no-gather"), std::string::npos);
}

// A concat of 17 equal parts along rows stores every part per point (lower_group.cpp): 17 stores
// into one buffer at offsets of a run-time stride. The points' loop is declared parallel
// (flat_range), so the vectoriser needs no run-time alias checks between them: without the
// declaration it left the loop scalar (scalar stores only).
TEST_F(LlvmRangePieces, EqualPartsAlongRowsVectoriseAsParallelPoints) {
  use_llvm(1);
  std::vector<Tensor> parts;
  for (int i = 0; i < 17; ++i) parts.push_back(make_tensor(random_values(5 * 64, 60 + i), {5, 1, 64}));
  const std::string src = llvm_source_of(concat(parts, 1));
  EXPECT_NE(src.find("llvm.loop.parallel_accesses"), std::string::npos) << src;
  EXPECT_NE(src.find("store <"), std::string::npos) << src;
}

}  // namespace
}  // namespace kfuse::test
