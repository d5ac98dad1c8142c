// Math functions of the LLVM backend: SLEEF 3.5 (libsleef.so.3), chosen once for the host ISA.
//
// Generated code calls the SCALAR variant by name (e.g. Sleef_expf1_u10purecfma); the loop and
// SLP vectorisers replace it by the 8- or 16-wide variant through VecDesc entries registered in
// the TargetLibraryInfo (LLVM 19's built-in tables know neither SLEEF on x86 nor 16-wide
// libmvec, TOOLCHAIN.md section 2). All variants of one tier use the same algorithm with FMA,
// so an element's value does not depend on whether it fell in a vector body or in a scalar
// remainder; a kernel's result therefore does not depend on how the outer domain was chunked
// over threads (tests/backends/test_llvm_math.cpp checks this bitwise).
//
// Accuracy: the u10 variants are documented by SLEEF as <= 1.0 ULP; the measured maxima are in
// README "LLVM backend" and enforced by test_llvm_math.cpp.
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/Module.h>

#include <deque>
#include <mutex>

#include "kfuse/error.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

namespace {

const char* const kNames[] = {"exp", "log", "tanh", "erf", "sin", "cos", "pow", "expm1", "log1p", "exp2", "log2"};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(MathFn::Count_));

int arity(MathFn f) { return f == MathFn::Pow ? 2 : 1; }

struct Variant {
  const char* scalar_suffix;
  const char* vec_suffix[2];  // narrower, wider
  int f32_width[2];
  int f64_width[2];
};

Variant variant(MathLib::Tier t) {
  switch (t) {
    case MathLib::Tier::AVX512: return {"u10purecfma", {"u10avx2", "u10avx512f"}, {8, 16}, {4, 8}};
    case MathLib::Tier::AVX2: return {"u10purecfma", {"u10avx2", "u10avx2"}, {8, 8}, {4, 4}};
    case MathLib::Tier::SSE2: break;
  }
  return {"u10purec", {"u10sse2", "u10sse2"}, {4, 4}, {2, 2}};
}

std::string sleef_name(MathFn f, bool f64, int width, const char* suffix) {
  return std::string("Sleef_") + kNames[static_cast<int>(f)] + (f64 ? "d" : "f") + std::to_string(width) + "_" +
         suffix;
}

// VecDesc holds StringRefs: the strings live here for the life of the process.
std::deque<std::string>& name_store() {
  static std::deque<std::string> s;
  return s;
}

}  // namespace

const char* math_fn_name(MathFn f) { return kNames[static_cast<int>(f)]; }

MathLib detect_math_lib(bool avx512f, bool avx2, bool fma) {
  MathLib m;
  if (avx512f && avx2 && fma) m.tier = MathLib::Tier::AVX512;
  else if (avx2 && fma) m.tier = MathLib::Tier::AVX2;
  else m.tier = MathLib::Tier::SSE2;
  return m;
}

int MathLib::vector_bits() const {
  switch (tier) {
    case Tier::AVX512: return 512;
    case Tier::AVX2: return 256;
    case Tier::SSE2: break;
  }
  return 128;
}

std::string MathLib::scalar_name(MathFn f, bool f64) const { return sleef_name(f, f64, 1, variant(tier).scalar_suffix); }

void MathLib::add_vector_functions(llvm::TargetLibraryInfoImpl& tlii) const {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  static std::vector<llvm::VecDesc> descs[3];
  auto& d = descs[static_cast<int>(tier)];
  if (d.empty()) {
    Variant v = variant(tier);
    auto keep = [](std::string s) -> llvm::StringRef { return name_store().emplace_back(std::move(s)); };
    for (int fi = 0; fi < static_cast<int>(MathFn::Count_); ++fi) {
      auto f = static_cast<MathFn>(fi);
      for (bool f64 : {false, true}) {
        llvm::StringRef scalar = keep(scalar_name(f, f64));
        for (int w = 0; w < 2; ++w) {
          int width = f64 ? v.f64_width[w] : v.f32_width[w];
          if (w == 1 && width == (f64 ? v.f64_width[0] : v.f32_width[0])) continue;
          std::string abi = "_ZGV_LLVM_N" + std::to_string(width) + (arity(f) == 2 ? "vv" : "v");
          d.emplace_back(scalar, keep(sleef_name(f, f64, width, v.vec_suffix[w])),
                         llvm::ElementCount::getFixed(width), false, keep(abi));
        }
      }
    }
  }
  tlii.addVectorizableFunctions(d);
}

llvm::Value* MathLib::call(Builder& b, MathFn f, bool f64, const std::vector<llvm::Value*>& args) const {
  llvm::Module* m = b.GetInsertBlock()->getModule();
  llvm::Type* t = f64 ? b.getDoubleTy() : b.getFloatTy();
  std::vector<llvm::Type*> ps(arity(f), t);
  auto* fty = llvm::FunctionType::get(t, ps, false);
  llvm::FunctionCallee callee = m->getOrInsertFunction(scalar_name(f, f64), fty);
  auto* fn = llvm::cast<llvm::Function>(callee.getCallee());
  if (fn->empty() && !fn->hasFnAttribute(llvm::Attribute::NoUnwind)) {
    // Pure functions: the vectoriser may widen them and LICM may hoist them.
    fn->setDoesNotThrow();
    fn->setDoesNotAccessMemory();
    fn->setWillReturn();
    fn->setNoSync();
    fn->setDoesNotFreeMemory();
  }
  auto* ci = b.CreateCall(callee, args);
  ci->setDoesNotThrow();
  ci->setDoesNotAccessMemory();
  ci->setTailCall(false);
  return ci;
}

}  // namespace kfuse::detail::llvmjit
