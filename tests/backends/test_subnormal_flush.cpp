// silu, gelu and gelu_tanh never compute a subnormal exp (lib/ir/math_constants.hpp,
// kExpNormalLo): below it exp is 0, since its product with x is below 1e-36 anyway, and subnormal
// operands cost a microcode assist each on AMD cores (2x on gelu_tanh of inputs in [-40, 40]).
// Checked on the CPU backends present by running each op over large-magnitude inputs twice, with
// the MXCSR's flush-to-zero and denormals-are-zero flags off and on: any subnormal intermediate
// that reached a result would come out differently. (sigmoid and exp keep their subnormal
// results: not tested here.)
#include <gtest/gtest.h>
#include <xmmintrin.h>

#include <cstring>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "ir/kernel.hpp"
#include "kfuse/options.hpp"

namespace kfuse::test {
namespace {

using namespace kfuse::ir;

// MXCSR FTZ (bit 15) and DAZ (bit 6) set for the scope.
struct FlushToZero {
  unsigned saved = _mm_getcsr();
  FlushToZero() { _mm_setcsr(saved | 0x8040u); }
  ~FlushToZero() { _mm_setcsr(saved); }
};

// op(x) on `be`, run twice: without and with FTZ/DAZ.
std::pair<std::vector<float>, std::vector<float>> run_twice(detail::Backend& be, Op o, const std::vector<float>& x) {
  Kernel k;
  k.name = "k_flush";
  k.kind = KernelKind::Pointwise;
  k.buffers = {{"in0", DType::F32, false}, {"out0", DType::F32, true}};
  k.params = {{"outer0", static_cast<int64_t>(x.size())}};
  k.outer = {param(0)};
  Phase ph;
  ph.stores.push_back({1, var(Space::Outer, 0), op(o, DType::F32, {load(0, DType::F32, var(Space::Outer, 0))})});
  k.phases.push_back(ph);
  auto ck = be.compile(k);
  EXPECT_TRUE(ck.kernel) << ck.declined;
  std::vector<float> plain(x.size()), flushed(x.size());
  if (!ck.kernel) return {plain, flushed};
  LaunchArgs a{{const_cast<float*>(x.data()), plain.data()}, k.param_values()};
  ck.kernel->run(a);
  FlushToZero ftz;
  a.buffers[1] = flushed.data();
  ck.kernel->run(a);
  return {plain, flushed};
}

TEST(SubnormalFlush, SiluAndGelusComputeNoSubnormalExp) {
  const Options saved = options();
  Options o = saved;
  o.num_threads = 1;  // (the kernels run on this thread, under its MXCSR)
  set_options(o);
  std::vector<float> x;
  for (float v = 8.0f; v < 120.0f; v *= 1.0137f) {
    x.push_back(v);
    x.push_back(-v);
  }
  size_t ran = 0;
  for (const char* name : {"xbyak", "llvm"}) {
    auto be = detail::find_backend(name);
    if (!be) continue;
    ++ran;
    for (Op op : {Op::Silu, Op::GeluTanh, Op::GeluErf}) {
      const auto [plain, flushed] = run_twice(*be, op, x);
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_EQ(std::memcmp(&plain[i], &flushed[i], 4), 0)
            << name << " " << op_name(op) << "(" << x[i] << "): " << plain[i] << " without FTZ/DAZ, " << flushed[i]
            << " with: a subnormal intermediate";
    }
  }
  set_options(saved);
  if (ran == 0) GTEST_SKIP() << "no CPU backend with compiled kernels";
}

}  // namespace
}  // namespace kfuse::test
