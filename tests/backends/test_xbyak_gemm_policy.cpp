// The xbyak GEMM's choice of loop per block (jit/xbyak/gemm_policy.cpp, gemm_path): the rules that
// do not depend on measured thresholds, pinned, so that moving or restructuring the policy cannot
// change them unnoticed (every path gives the same bits, so the GEMM's result tests would not see
// a block taking another path: only its speed would). Sizes are chosen far from the cache-size
// thresholds of the host running the test.
#include <gtest/gtest.h>

#include <ostream>

#include "../../jit/xbyak/gemm.hpp"
#include "kfuse/profile.hpp"
#include "test_xbyak_util.hpp"

namespace kfuse::detail::xb {
// (GoogleTest prints a path by its name)
inline void PrintTo(GemmPath p, std::ostream* os) {
  static const char* const names[] = {"Gemv", "GemvT", "Swapped", "Direct", "Packed", "DotRows", "DotCols"};
  *os << names[static_cast<int>(p)];
}
}  // namespace kfuse::detail::xb

namespace kfuse::xbt {
namespace {

using detail::xb::gemm_path;
using detail::xb::GemmPath;
using detail::xb::GemmPathQuery;

// An f32 x f32 block of m x n over K, B contiguous along N (x @ W), nothing forced.
GemmPathQuery plain(int64_t m, int64_t n, int64_t K) {
  return {0, true, true, true, false, true, detail::xb::DotKind::None, DType::F32, 4, m, n, K, 512};
}

TEST(XbyakGemmPolicy, PathsOfTheRulesWithoutThresholds) {
  const int64_t l2 = probe::cache_sizes().l2;
  const int64_t big = 4096;  // [4096,4096] f32 operands: 64 MiB, past half of any L2
  ASSERT_GT(big * big * 4, l2);
  for (Isa isa : isas()) {
    SCOPED_TRACE(detail::xb::isa_name(isa));
    const detail::xb::Ukrs& u = detail::xb::gemm_ukrs(isa);
    // Forced packing, and operands the in-place paths cannot read (a prologue or a converted A).
    GemmPathQuery q = plain(1, big, big);
    q.forced = 1;
    EXPECT_EQ(gemm_path(u, q), GemmPath::Packed);
    q = plain(1, big, big);
    q.gemv_ok = false;
    EXPECT_EQ(gemm_path(u, q), GemmPath::Packed);
    // One or two rows: the GEMV, whatever the size.
    EXPECT_EQ(gemm_path(u, plain(1, big, big)), GemmPath::Gemv);
    EXPECT_EQ(gemm_path(u, plain(2, 16, 16)), GemmPath::Gemv);
    // A problem within half of L2 reads its f32 operands in place; not when either is converted.
    EXPECT_EQ(gemm_path(u, plain(48, 48, 48)), GemmPath::Direct);
    q = plain(48, 48, 48);
    q.plain = false;
    EXPECT_EQ(gemm_path(u, q), GemmPath::Packed);
    // Forced direct, at any size, where B is contiguous along N.
    q = plain(big, big, big);
    q.forced = 2;
    EXPECT_EQ(gemm_path(u, q), GemmPath::Direct);
    // A big square problem packs.
    EXPECT_EQ(gemm_path(u, plain(big, big, big)), GemmPath::Packed);
    // Narrow B past L2: in place on AMD's AVX-512 (by rows of tiles), packed elsewhere.
    const bool narrow_direct = u.w == 16 && detail::xb::direct_gemm_past_l2();
    EXPECT_EQ(gemm_path(u, plain(big, 64, big)), narrow_direct ? GemmPath::Direct : GemmPath::Packed);
    EXPECT_EQ(gemm_path(u, plain(big, detail::xb::kDirectNarrowColumns + 32, big)), GemmPath::Packed);
    // B contiguous along K (x @ W^T): a few rows sweep W transposed in registers; up to
    // kSwappedRows rows past half of L2 run as W x^T; more pack.
    GemmPathQuery t = plain(detail::xb::kGemvRows, big, big);
    t.b_unit_n = false;
    t.b_unit_k = true;
    EXPECT_EQ(gemm_path(u, t), GemmPath::GemvT);
    t.m = detail::xb::kSwappedRows;
    EXPECT_EQ(gemm_path(u, t), GemmPath::Swapped);
    t.m = detail::xb::kSwappedRows + 1;
    EXPECT_EQ(gemm_path(u, t), GemmPath::Packed);
    // B strided both ways (a view): packed.
    q = plain(8, big, big);
    q.b_unit_n = false;
    EXPECT_EQ(gemm_path(u, q), GemmPath::Packed);
  }
}

// u8 x i8 (the VNNI kernels) with A and B both along K: the dot-rows kernels up to 16 rows
// whatever W's size, up to kDotRowsLimit past half of L2; with B along N the dot-cols kernels
// past half of L2; more rows, a transposed A (or forced packing) pack.
// The packed path reads an f32 A in place (UkrForm::PackedB) on the AVX-512 kernels while its
// tiles keep all but two rows of MR (the rows an L1 set holds: gemm_direct_tile_rows); the AVX2
// kernels always pack it.
TEST(XbyakGemmPolicy, PackedPathReadsAInPlaceOnTheZmmKernels) {
  using detail::xb::gemm_packs_a;
  for (Isa isa : isas()) {
    SCOPED_TRACE(detail::xb::isa_name(isa));
    const detail::xb::Ukrs& u = detail::xb::gemm_ukrs(isa);
    const bool zmm = u.w == 16;
    EXPECT_EQ(gemm_packs_a(u, u.mr), !zmm);
    EXPECT_EQ(gemm_packs_a(u, u.mr - 2), !zmm);
    EXPECT_TRUE(gemm_packs_a(u, u.mr - 3));
    EXPECT_TRUE(gemm_packs_a(u, 1));
  }
  // Rows 4 KiB apart: 12 of 14 on a 48 KiB L1 (in place), 8 on a 32 KiB one (packed).
  EXPECT_EQ(detail::xb::gemm_direct_tile_rows(4096, 14, 48 << 10), 12);
  EXPECT_EQ(detail::xb::gemm_direct_tile_rows(4096, 14, 32 << 10), 8);
}

TEST(XbyakGemmPolicy, QuantisedLinearLayersReadBothOperandsInPlace) {
  const int64_t big = 4096;
  const detail::xb::Ukrs& u = detail::xb::gemm_ukrs(Isa::Avx512);
  auto quads = [](int64_t m, int64_t n, int64_t K) {
    GemmPathQuery q{0, false, false, false, true, true, detail::xb::DotKind::U8S8, DType::I8, 1, m, n, K, 512};
    return q;
  };
  EXPECT_EQ(gemm_path(u, quads(1, 8, 8)), GemmPath::DotRows);
  EXPECT_EQ(gemm_path(u, quads(16, 16, 16)), GemmPath::DotRows);
  EXPECT_EQ(gemm_path(u, quads(17, 16, 16)), GemmPath::Packed);
  EXPECT_EQ(gemm_path(u, quads(detail::xb::kDotRowsLimit, big, big)), GemmPath::DotRows);
  EXPECT_EQ(gemm_path(u, quads(detail::xb::kDotRowsLimit + 1, big, big)), GemmPath::Packed);
  GemmPathQuery q = quads(4, big, big);
  q.a_unit_k = false;
  EXPECT_EQ(gemm_path(u, q), GemmPath::Packed);
  // W stored [K, N] past half of L2: the dot-cols kernels up to kDotColsLimit rows.
  q = quads(4, big, big);
  q.b_unit_k = false;
  q.b_unit_n = true;
  EXPECT_EQ(gemm_path(u, q), GemmPath::DotCols);
  q.m = detail::xb::kDotColsLimit + 1;
  EXPECT_EQ(gemm_path(u, q), GemmPath::Packed);
  q = quads(4, 8, 8);
  q.b_unit_k = false;
  q.b_unit_n = true;
  EXPECT_EQ(gemm_path(u, q), GemmPath::Packed);
  q = quads(4, big, big);
  q.forced = 1;
  EXPECT_EQ(gemm_path(u, q), GemmPath::Packed);
}

}  // namespace
}  // namespace kfuse::xbt
