// LLVM backend, segment kernels (embedding_bag with offsets): the column-tile lowering of a bag
// (jit/llvm/column_tiles.cpp, Lowerer::tile_segment in lower_kernel.cpp: the ids walked once per
// tile of columns, rows read as vectors, rows prefetched ahead) against the fp64 reference
// evaluator and a naive bag. Each format and configuration asserts that its kernel plans column
// tiles (a segment kernel took none before).
//
// Covered: widths D = 1 (1-lane tiles), 7, 33, 64, 100 on f32 (two of them on the narrow formats:
// each configuration is a compile); empty bags (also the last), a one-id bag, repeated ids; Sum, Mean and
// Max, per-sample weights, padding_idx; f32, f16, 8-bit and 4-bit tables; forced 4-lane tiles
// (several tiles per bag, a 1-lane tail); bitwise equal results whatever the split of the
// outer points over threads (chunks that cut bags in the middle of their columns; for 4-bit
// tables, lane pairs that start at odd columns); and register
// blocks (D = 16, 64, 128) bitwise equal to the generic tile (D + 1).
#include <kfuse/index_ops.hpp>
#include <kfuse/options.hpp>
#include <kfuse/quantize.hpp>
#include <kfuse/stats.hpp>

#include <cstring>
#include <optional>

#include "runtime/plan.hpp"
#include "test_llvm_util.hpp"
#include "test_util.hpp"

namespace kfuse::test::llvmt {
namespace {

using LlvmSegments = LlvmOnly;

// The tile widths the segment kernels of y's plan take (there must be one).
std::vector<int64_t> segment_tiles(const Tensor& y) {
  auto plan = detail::make_plan({y.node()}, /*compile=*/false, options());
  std::vector<int64_t> tiles;
  for (const auto& pk : plan->kernels)
    if (pk.lowered.kernel.kind == ir::KernelKind::Segment)
      tiles.push_back(detail::llvmjit::plan_column_tile(pk.lowered.kernel));
  EXPECT_EQ(tiles.size(), 1u) << "one segment kernel";
  return tiles;
}

// Bags over N = 40 ids of R = 23 rows: repeated ids, an empty bag, a one-id bag; `last_empty`
// ends with an empty bag instead of a full one.
constexpr int64_t kRows = 23, kIds = 40;
std::vector<double> bag_ids() { return random_ints(kIds, 31, 0, kRows - 1); }
std::vector<double> bag_offsets(bool last_empty) {
  return last_empty ? std::vector<double>{0, 5, 5, 12, 13, 33, 40} : std::vector<double>{0, 5, 5, 12, 13, 33, 39};
}

// PyTorch's embedding_bag in doubles over `table` [R, D] (values as stored).
std::vector<double> naive_bag(const std::vector<double>& table, int64_t D, const std::vector<double>& ids,
                              const std::vector<double>& offsets, BagMode mode, const std::vector<double>& psw,
                              std::optional<int64_t> pad) {
  std::vector<double> out;
  for (size_t b = 0; b < offsets.size(); ++b) {
    const auto lo = static_cast<int64_t>(offsets[b]);
    const auto hi = b + 1 < offsets.size() ? static_cast<int64_t>(offsets[b + 1]) : static_cast<int64_t>(ids.size());
    for (int64_t d = 0; d < D; ++d) {
      double acc = mode == BagMode::Max ? -kInf : 0;
      int64_t n = 0;
      for (int64_t i = lo; i < hi; ++i) {
        const auto id = static_cast<int64_t>(ids[i]);
        if (pad && id == *pad) continue;
        const double v = table[id * D + d] * (psw.empty() ? 1.0 : psw[i]);
        acc = mode == BagMode::Max ? std::max(acc, v) : acc + v;
        ++n;
      }
      out.push_back(n == 0 ? 0 : mode == BagMode::Mean ? acc / static_cast<double>(n) : acc);
    }
  }
  return out;
}

struct Config {
  BagMode mode;
  bool weighted;
  std::optional<int64_t> pad;
};

// The table of width D in one storage format, as the lazy f32 expression a bag reads.
Tensor table_of(const std::string& format, int64_t D) {
  Tensor t = make_tensor(random_values(static_cast<size_t>(kRows * D), 40 + D, -1, 1), {kRows, D});
  if (format == "f16") return t.cast(DType::F16).eval().cast(DType::F32);
  if (format == "8-bit" || format == "4-bit") {
    QuantizedTable q = quantize_rowwise(t, format == "8-bit" ? 8 : 4);
    eval({q.values, q.scale_bias});
    return dequantize_rowwise(q);
  }
  return t;
}

TEST_F(LlvmSegments, BagsOfEveryFormatModeAndWidthTakeColumnTiles) {
  const std::vector<double> ids = bag_ids();
  const auto psw = random_values(kIds, 32, 0.5, 1.5);
  const auto pad = static_cast<int64_t>(ids[6]);  // an id that occurs
  const std::vector<Config> all = {{BagMode::Sum, false, {}}, {BagMode::Mean, false, {}}, {BagMode::Max, false, {}},
                                   {BagMode::Sum, true, {}},  {BagMode::Sum, true, pad},  {BagMode::Mean, false, pad},
                                   {BagMode::Max, false, pad}};
  // (every configuration is a compile: f32 takes them all, the narrow formats a few)
  const std::vector<Config> some = {{BagMode::Mean, false, pad}, {BagMode::Max, false, {}}};
  const std::vector<Config> weighted = {{BagMode::Sum, true, pad}};
  for (const std::string format : {"f32", "f16", "8-bit", "4-bit"})
    for (const Config& c : format == "f32" ? all : format == "f16" ? weighted : some)
      for (int64_t D : format == "f32"     ? std::vector<int64_t>{1, 7, 33, 64, 100}
                       : format == "4-bit" ? std::vector<int64_t>{1, 33, 64}  // odd widths: a half-used last byte
                                           : std::vector<int64_t>{7, 64})
        for (bool last_empty : {false, true}) {
          SCOPED_TRACE(format + " mode " + std::to_string(static_cast<int>(c.mode)) + (c.weighted ? " weighted" : "") +
                       (c.pad ? " pad" : "") + " D " + std::to_string(D) + (last_empty ? " last bag empty" : ""));
          const std::vector<double> offsets = bag_offsets(last_empty);
          const auto B = static_cast<int64_t>(offsets.size());
          Tensor table = table_of(format, D);
          Tensor y = embedding_bag(table, make_tensor(ids, {kIds}, DType::I64), make_tensor(offsets, {B}, DType::I64),
                                   c.mode, c.weighted ? make_tensor(psw, {kIds}) : Tensor(), c.pad);
          if (D == 64 && !last_empty) {  // (the plan of each format and configuration once)
            for (int64_t tile : segment_tiles(y)) EXPECT_GT(tile, 0) << "the bag takes column tiles";
          }
          reset_counters();
          const std::vector<double> got = values(y);
          EXPECT_EQ(counters().fallbacks, 0u);
          EXPECT_TRUE(all_close(got, reference_values(y), 1e-5, 1e-6));
          const std::vector<double> tv = values(table);  // the dequantised values
          EXPECT_TRUE(all_close(got,
                                naive_bag(tv, D, ids, offsets, c.mode,
                                          c.weighted ? stored_values(psw, DType::F32) : std::vector<double>{}, c.pad),
                                1e-5, 1e-6));
        }
}

// Tiles narrower than a bag's width (forced 4 lanes: D = 33 is 8 tiles and a 1-lane tail, each
// walking the bag's ids again) give the same values. (Sum as well as Mean: a lane folded twice
// doubles a Mean's sum and its count alike.)
TEST_F(LlvmSegments, NarrowTilesWalkEachBagPerTile) {
  const std::vector<double> ids = bag_ids(), offsets = bag_offsets(false);
  Options o = options();  // (LlvmOnly restores the options)
  o.llvm_column_tile = 4;
  set_options(o);
  for (const std::string format : {"f32", "4-bit"})
    for (BagMode mode : {BagMode::Mean, BagMode::Sum}) {
      SCOPED_TRACE(format + " mode " + std::to_string(static_cast<int>(mode)));
      Tensor y = embedding_bag(table_of(format, 33), make_tensor(ids, {kIds}, DType::I64),
                               make_tensor(offsets, {7}, DType::I64), mode, {}, static_cast<int64_t>(ids[6]));
      for (int64_t tile : segment_tiles(y)) EXPECT_GT(tile, 0) << "tiled (at the forced width of 4)";
      EXPECT_TRUE(all_close(values(y), reference_values(y), 1e-5, 1e-6));
    }
}

// A bag's columns may be split over threads (the outer domain is flat: chunks of 1, 7 or 50
// points cut bags anywhere): every split gives the bits of the whole launch. (4-bit: tiles
// that start at odd columns, whose lane pairs straddle two bytes, lower_kernel.cpp lane_pairs.)
TEST_F(LlvmSegments, ThreadSplitsAreBitwiseEqual) {
  const std::vector<double> ids = bag_ids(), offsets = bag_offsets(false);
  const auto psw = random_values(kIds, 33, 0.5, 1.5);
  for (const std::string format : {"f32", "8-bit", "4-bit"}) {
    SCOPED_TRACE(format);
    Tensor table = table_of(format, 33);
    auto bag = [&] {
      return embedding_bag(table, make_tensor(ids, {kIds}, DType::I64), make_tensor(offsets, {7}, DType::I64),
                           BagMode::Sum, make_tensor(psw, {kIds}));
    };
    const std::vector<float> whole = bag().eval().to_vector<float>();
    for (int64_t chunk : {1, 7, 50}) {
      Options o = options();  // (LlvmOnly restores the options)
      o.llvm_launch_chunk = chunk;
      set_options(o);
      const std::vector<float> split = bag().eval().to_vector<float>();
      ASSERT_EQ(split.size(), whole.size());
      EXPECT_EQ(std::memcmp(split.data(), whole.data(), whole.size() * sizeof(float)), 0) << "chunk " << chunk;
    }
  }
}

// Register blocks (tile_segment): a bag whose width is a multiple of the block (D = 64: one
// block, D = 128: two) or a narrower block (D = 16) keeps its accumulators in registers, any
// other width takes the generic tile. A table of width D + 1 whose first D columns are the
// D-wide table's (its last column repeats column 0, so an 8-bit row quantises alike) runs the
// generic path over the same columns: both must give the same bits, with per-sample weights,
// empty bags (also the last), a one-id bag and repeated ids; so must launches whose chunks
// split a bag's columns.
TEST_F(LlvmSegments, RegisterBlocksGiveTheBitsOfTheGenericTile) {
  const std::vector<double> ids = bag_ids();
  const auto psw = random_values(kIds, 34, 0.5, 1.5);
  struct Case {
    std::string format;
    int64_t D;
  };
  for (const Case& c : {Case{"f32", 64}, Case{"f32", 128}, Case{"f32", 16}, Case{"f16", 64}, Case{"8-bit", 64}}) {
    SCOPED_TRACE(c.format + " D " + std::to_string(c.D));
    const auto narrow = random_values(static_cast<size_t>(kRows * c.D), 50 + c.D, -1, 1);
    std::vector<double> wide;
    for (int64_t r = 0; r < kRows; ++r) {
      wide.insert(wide.end(), narrow.begin() + r * c.D, narrow.begin() + (r + 1) * c.D);
      wide.push_back(narrow[r * c.D]);
    }
    auto bag = [&](const std::vector<double>& values, int64_t width) {
      Tensor t = make_tensor(values, {kRows, width});
      if (c.format == "f16") t = t.cast(DType::F16).eval().cast(DType::F32);
      if (c.format == "8-bit") {
        QuantizedTable q = quantize_rowwise(t, 8);
        eval({q.values, q.scale_bias});
        t = dequantize_rowwise(q);
      }
      const std::vector<double> offsets = bag_offsets(/*last_empty=*/true);
      return embedding_bag(t, make_tensor(ids, {kIds}, DType::I64),
                           make_tensor(offsets, {static_cast<int64_t>(offsets.size())}, DType::I64), BagMode::Sum,
                           make_tensor(psw, {kIds}))
          .eval()
          .to_vector<float>();
    };
    const std::vector<float> fast = bag(narrow, c.D), generic = bag(wide, c.D + 1);
    const size_t B = fast.size() / static_cast<size_t>(c.D);
    ASSERT_EQ(generic.size(), B * static_cast<size_t>(c.D + 1));
    for (size_t b = 0; b < B; ++b)
      EXPECT_EQ(std::memcmp(&fast[b * c.D], &generic[b * (c.D + 1)], c.D * sizeof(float)), 0) << "bag " << b;
    if (c.D != 64) continue;
    // Thread chunks that cut a bag's columns: chunks of 16 points are 16-lane blocks; chunks of
    // 24 cut the bags into tiles of 8, 16 and 24 lanes (16-lane blocks among generic tiles).
    for (int64_t chunk : {16, 24}) {
      Options o = options();  // (LlvmOnly restores the options)
      o.llvm_launch_chunk = chunk;
      set_options(o);
      const std::vector<float> split = bag(narrow, c.D);
      o.llvm_launch_chunk = 0;
      set_options(o);
      ASSERT_EQ(split.size(), fast.size());
      EXPECT_EQ(std::memcmp(split.data(), fast.data(), fast.size() * sizeof(float)), 0) << "chunk " << chunk;
    }
  }
}

}  // namespace
}  // namespace kfuse::test::llvmt
