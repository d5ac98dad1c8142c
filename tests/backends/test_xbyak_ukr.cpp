// xbyak GEMM microkernels (jit/xbyak/gemm_kernel.cpp): the full tiles are generated with their
// set, every smaller tile on first use, once per process whichever thread asks. What they compute
// is checked through the contraction kernels (test_xbyak_gemm.cpp).
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "../../jit/xbyak/gemm.hpp"
#include "kfuse/error.hpp"

namespace kfuse::xbt {
namespace {

using detail::xb::Isa;

// Threads asking for tiles not generated yet all get the one kernel of each (first in this file:
// in a process of their own, as ctest runs them, none of these tiles exists yet).
TEST(XbyakMicrokernels, ConcurrentFirstUseGeneratesOnce) {
  const auto& u = detail::xb::gemm_ukrs(Isa::Avx512);
  constexpr int kThreads = 4;
  std::vector<std::vector<detail::xb::UkrFn>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = u.mr; r >= 1; --r) got[t].push_back(u.packed_tile(r, 1));
    });
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(got[t], got[0]);
}

// The AVX-512 microkernels are only run where the CPU has AVX-512; everywhere every tile is at
// least assembled here, so that an encoding xbyak rejects fails here rather than on such a machine.
TEST(XbyakMicrokernels, EveryTileAssembles) {
  for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
    const auto& u = detail::xb::gemm_ukrs(isa);
    EXPECT_EQ(u.mr, isa == Isa::Avx512 ? 14 : 6);
    EXPECT_EQ(u.nr, isa == Isa::Avx512 ? 32 : 16);
    ASSERT_TRUE(u.packed && u.direct);
    EXPECT_EQ(u.packed_tile(u.mr, u.nr / u.w), u.packed);
    EXPECT_EQ(u.direct_tile(u.mr, u.nr / u.w), u.direct);
    for (int r = 1; r <= u.mr; ++r)
      for (int v = 1; v <= u.nr / u.w; ++v) {
        using detail::xb::UkrForm;
        const auto direct = u.direct_tile(r, v), packed = u.packed_tile(r, v),
                   packed_b = u.tile(UkrForm::PackedB, r, v);
        EXPECT_TRUE(direct && packed && packed_b && direct != packed && packed_b != packed && packed_b != direct)
            << r << " x " << v;
        EXPECT_EQ(u.direct_tile(r, v), direct) << "generated again";
        EXPECT_TRUE(u.direct_streaming(r, v)) << r << " x " << v;
      }
    for (int r = 1; r <= u.mr; ++r)  // the masked tails of a part-vector, narrow ones on AVX-512
      for (bool narrow : {false, isa == Isa::Avx512})
        EXPECT_TRUE(u.direct_tail(r, narrow) && u.packed_tail(r, narrow) &&
                    u.tail(detail::xb::UkrForm::PackedB, r, narrow))
            << r << (narrow ? " narrow" : "");
  }
  // A tile past the set's rows is an internal error, never a call through a null pointer.
  EXPECT_THROW(detail::xb::gemm_ukrs(Isa::Avx2).direct_tile(7, 1), BackendError);
}

}  // namespace
}  // namespace kfuse::xbt
