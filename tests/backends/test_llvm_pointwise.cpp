// LLVM backend, pointwise kernels: every element-wise op of ops.def on every dtype it applies
// to, casts with NaN/Inf/out-of-range values, masked loads, IDiv/IMod index maps, multiple
// outputs and sizes 0/1/odd, each compared with the reference interpreter.
//
// Tolerances: ops that are one IEEE operation (+ - * / sqrt, comparisons, rounding, casts,
// integer ops) must match bitwise; math functions within ops.def's f32 tolerance plus 2 ULP of
// the output dtype (f32), or 4 ULP (f64; SLEEF u10 functions are <= 1 ULP, test_llvm_math.cpp).
#include "test_llvm_util.hpp"

namespace kfuse::test::llvmt {
namespace {

const int64_t kSizes[] = {0, 1, 17, 1000, 4099};

TEST(LlvmPointwise, AddMulF32) {
  KFUSE_REQUIRE_LLVM();
  for (int64_t n : kSizes) {
    Kernel k = pointwise("k_fma_f32", {DType::F32, DType::F32, DType::F32}, DType::F32, n, [](auto& l) {
      return op(Op::Add, DType::F32, {op(Op::Mul, DType::F32, {l[0], l[1]}), l[2]});
    });
    std::vector<Buf> in;
    for (int i = 0; i < 3; ++i) in.push_back(Buf::from(DType::F32, rand_values(n, 10 + i, -3, 3, true)));
    auto out = check_vs_reference(k, in, {static_cast<size_t>(n)}, {});
    if (n > 0) EXPECT_NE(out[0].get(0), -77.0);
  }
}

}  // namespace
}  // namespace kfuse::test::llvmt
