// Kernel-IR Rand -> LLVM: the counter hash of lib/core/random.hpp in i64 arithmetic (LLVM
// integers carry no sign, so add/mul/xor/lshr are the wrapping u64 operations of the reference),
// then the exact conversion to [0, 1). The seed half of the hash does not depend on the point,
// so LICM computes it once per launch; the loop vectoriser widens the rest.
#include <llvm/IR/Constants.h>

#include "core/random.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

llvm::Value* ExprEmitter::emit_rand(const ir::Expr& e) {
  auto mix = [&](llvm::Value* x) {  // mix64
    x = b_.CreateXor(x, b_.CreateLShr(x, 30));
    x = b_.CreateMul(x, b_.getInt64(kMixMul1));
    x = b_.CreateXor(x, b_.CreateLShr(x, 27));
    x = b_.CreateMul(x, b_.getInt64(kMixMul2));
    return b_.CreateXor(x, b_.CreateLShr(x, 31));
  };
  llvm::Value* seed = convert(emit(e.args.at(0)), e.args[0]->dtype, DType::I64);
  llvm::Value* counter = convert(emit(e.args.at(1)), e.args[1]->dtype, DType::I64);
  llvm::Value* bits = mix(b_.CreateXor(mix(b_.CreateAdd(seed, b_.getInt64(kSeedGamma))), counter));
  // The top 24 (f32) or 53 (f64) bits convert exactly, and the power-of-two scale is exact.
  const bool f32 = e.dtype == DType::F32;
  llvm::Type* t = reg_type(b_.getContext(), e.dtype);
  llvm::Value* top = b_.CreateUIToFP(b_.CreateLShr(bits, f32 ? 40 : 11), t);
  return b_.CreateFMul(top, llvm::ConstantFP::get(t, f32 ? 0x1p-24 : 0x1p-53));
}

}  // namespace kfuse::detail::llvmjit
