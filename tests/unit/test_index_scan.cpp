// The vector scan of known indices (lib/eval/index_scan.hpp) with every ISA this CPU has: one bad
// index at every position of every length up to 40 (vector bodies of 4, 8 or 16 and their
// tails), of each kind (negative, == size, the dtype's minimum), i32 and i64; the edges of the
// valid range pass; a bad index deep in a later block of 4096.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "eval/index_scan.hpp"

namespace kfuse::detail {
namespace {

std::vector<ScanIsa> isas() {
  std::vector<ScanIsa> v = {ScanIsa::Scalar};
  if (__builtin_cpu_supports("avx2")) v.push_back(ScanIsa::Avx2);
  if (__builtin_cpu_supports("avx512f")) v.push_back(ScanIsa::Avx512);
  return v;
}

template <typename T>
void sweep(ScanIsa isa) {
  const int64_t size = 4;
  for (int n = 1; n <= 40; ++n) {
    std::vector<T> ok(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ok[static_cast<size_t>(i)] = i % 2 ? size - 1 : 0;
    EXPECT_TRUE(all_in_range(ok.data(), n, size, isa)) << static_cast<int>(isa) << " n=" << n;
    for (int p = 0; p < n; ++p)
      for (T bad : {T{-1}, T{size}, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()}) {
        std::vector<T> ids = ok;
        ids[static_cast<size_t>(p)] = bad;
        EXPECT_FALSE(all_in_range(ids.data(), n, size, isa))
            << static_cast<int>(isa) << " " << sizeof(T) * 8 << "-bit n=" << n << " bad " << bad << " at " << p;
      }
  }
  std::vector<T> many(9000, 2);
  EXPECT_TRUE(all_in_range(many.data(), 9000, size, isa));
  many[8999] = -3;
  EXPECT_FALSE(all_in_range(many.data(), 9000, size, isa));
  EXPECT_TRUE(all_in_range(many.data(), 0, size, isa));  // empty
}

TEST(IndexScan, EveryPositionOfEveryLengthWithEveryIsa) {
  for (ScanIsa isa : isas()) {
    sweep<int64_t>(isa);
    sweep<int32_t>(isa);
  }
}

// An i32 index against a size past 2^31 (the AVX-512 compare caps the limit at 2^31): every
// non-negative i32 passes, every negative one fails.
TEST(IndexScan, I32AgainstSizesPastTheirRange) {
  const int64_t huge = int64_t{1} << 40;
  for (ScanIsa isa : isas()) {
    std::vector<int32_t> ids(19, std::numeric_limits<int32_t>::max());
    EXPECT_TRUE(all_in_range(ids.data(), 19, huge, isa));
    ids[17] = -1;
    EXPECT_FALSE(all_in_range(ids.data(), 19, huge, isa));
  }
}

}  // namespace
}  // namespace kfuse::detail
