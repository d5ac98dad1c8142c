// Math functions of the LLVM backend: SLEEF 3.5 (libsleef.so.3), chosen once for the host ISA:
// the 16-wide avx512f variants (f32; 8-wide for f64) on AVX-512 hosts, 8-wide avx2 (4-wide f64)
// on AVX2+FMA hosts, 4-wide sse2 (2-wide f64) otherwise.
//
// Generated code calls a small internal SCALAR wrapper per function (kf_expf, kf_exp, ...) that
// broadcasts its argument, calls the ONE vector variant of the tier and returns lane 0; a VecDesc
// entry (LLVM 19's own tables know neither SLEEF on x86 nor 16-wide libmvec, TOOLCHAIN.md
// section 2) lets the loop vectoriser call that same vector variant directly. Hence every
// element is computed by the same code whether it falls in a vector body or in a scalar
// remainder, and a kernel's result does not depend on how the outer domain is chunked over
// threads. (SLEEF's scalar purecfma and its vector variants differ in the last bit for
// log/log2/sin/cos, measured; tests/backends/test_llvm_math.cpp checks the bitwise identity.)
//
// Accuracy: the u10 variants are documented by SLEEF as <= 1.0 ULP; the measured maxima are in
// README "LLVM backend" and enforced by test_llvm_math.cpp.
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

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
  const char* suffix;
  int f32_width, f64_width;
};

Variant variant(MathLib::Tier t) {
  switch (t) {
    case MathLib::Tier::AVX512: return {"u10avx512f", 16, 8};
    case MathLib::Tier::AVX2: return {"u10avx2", 8, 4};
    case MathLib::Tier::SSE2: break;
  }
  return {"u10sse2", 4, 2};
}

std::string sleef_name(MathFn f, bool f64, int width, const char* suffix) {
  return std::string("Sleef_") + kNames[static_cast<int>(f)] + (f64 ? "d" : "f") + std::to_string(width) + "_" + suffix;
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

std::string MathLib::scalar_name(MathFn f, bool f64) const {
  return std::string("kf_") + kNames[static_cast<int>(f)] + (f64 ? "" : "f");
}

std::string MathLib::vector_name(MathFn f, bool f64) const {
  Variant v = variant(tier);
  return sleef_name(f, f64, f64 ? v.f64_width : v.f32_width, v.suffix);
}

int MathLib::width(bool f64) const {
  Variant v = variant(tier);
  return f64 ? v.f64_width : v.f32_width;
}

void MathLib::add_vector_functions(llvm::TargetLibraryInfoImpl& tlii) const {
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  static std::vector<llvm::VecDesc> descs[3];
  auto& d = descs[static_cast<int>(tier)];
  if (d.empty()) {
    auto keep = [](std::string s) -> llvm::StringRef { return name_store().emplace_back(std::move(s)); };
    for (int fi = 0; fi < static_cast<int>(MathFn::Count_); ++fi) {
      auto f = static_cast<MathFn>(fi);
      for (bool f64 : {false, true}) {
        int w = width(f64);
        std::string abi = "_ZGV_LLVM_N" + std::to_string(w) + (arity(f) == 2 ? "vv" : "v");
        std::string vname = vector_name(f, f64) + (f == MathFn::Sin || f == MathFn::Cos ? "_kf" : "");
        d.emplace_back(keep(scalar_name(f, f64)), keep(vname), llvm::ElementCount::getFixed(w), false, keep(abi));
      }
    }
  }
  tlii.addVectorizableFunctions(d);
}

namespace {
void set_pure(llvm::Function* fn) {
  fn->setDoesNotThrow();
  fn->setDoesNotAccessMemory();
  fn->setWillReturn();
  fn->setNoSync();
  fn->setDoesNotFreeMemory();
}

// SLEEF's vector sin/cos take a fast argument reduction only when EVERY lane is below a range
// (TRIGRANGEMAX2: 125 for f32, 15 for f64) and a more precise one for all lanes otherwise, so a
// lane's result would depend on its neighbours (and on the thread chunking). This internal
// wrapper (<variant>_kf, the vectoriser's target for sin/cos) calls the variant directly when all lanes are in range,
// else once per lane on a splat: each element's value then depends on the element alone.
llvm::Function* lane_uniform_trig(llvm::Module& m, llvm::Function* sleef, bool f64, int bits) {
  const std::string name = sleef->getName().str() + "_kf";
  if (llvm::Function* f = m.getFunction(name)) return f;
  llvm::LLVMContext& c = m.getContext();
  auto* vt = llvm::cast<llvm::FixedVectorType>(sleef->getReturnType());
  const unsigned w = vt->getNumElements();
  auto* fn = llvm::Function::Create(sleef->getFunctionType(), llvm::Function::InternalLinkage, name, m);
  set_pure(fn);
  fn->addFnAttr(llvm::Attribute::NoInline);  // must survive until the vectoriser calls it
  // Address "taken": keeps GlobalOpt from giving it fastcc, since the vectoriser's calls use the
  // C convention (a mismatch is UB, and LLVM then deletes the vector loop as unreachable).
  llvm::appendToCompilerUsed(m, {fn});
  fn->addFnAttr("prefer-vector-width", std::to_string(bits));
  fn->addFnAttr("min-legal-vector-width", std::to_string(bits));
  auto* entry = llvm::BasicBlock::Create(c, "entry", fn);
  auto* fast = llvm::BasicBlock::Create(c, "fast", fn);
  auto* slow = llvm::BasicBlock::Create(c, "slow", fn);
  Builder b(entry);
  llvm::Value* x = fn->getArg(0);
  llvm::Value* ax = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
  llvm::Value* lim = llvm::ConstantFP::get(vt, f64 ? 15.0 : 125.0);
  llvm::Value* all = b.CreateAndReduce(b.CreateFCmpOLT(ax, lim));
  b.CreateCondBr(all, fast, slow);
  b.SetInsertPoint(fast);
  auto* r = b.CreateCall(sleef, {x});
  r->setDoesNotAccessMemory();
  b.CreateRet(r);
  b.SetInsertPoint(slow);
  llvm::Value* out = llvm::PoisonValue::get(vt);
  for (unsigned i = 0; i < w; ++i) {
    auto* ri = b.CreateCall(sleef, {b.CreateVectorSplat(w, b.CreateExtractElement(x, uint64_t{i}))});
    ri->setDoesNotAccessMemory();
    out = b.CreateInsertElement(out, b.CreateExtractElement(ri, uint64_t{0}), uint64_t{i});
  }
  b.CreateRet(out);
  return fn;
}
}  // namespace

llvm::Value* MathLib::call(Builder& b, MathFn f, bool f64, const std::vector<llvm::Value*>& args) const {
  llvm::Module* m = b.GetInsertBlock()->getModule();
  llvm::LLVMContext& c = m->getContext();
  llvm::Type* t = f64 ? llvm::Type::getDoubleTy(c) : llvm::Type::getFloatTy(c);
  const int w = width(f64);
  llvm::Type* vt = llvm::FixedVectorType::get(t, w);
  const std::string sname = scalar_name(f, f64);
  llvm::Function* wrapper = m->getFunction(sname);
  if (!wrapper) {
    // kf_<fn>(x) = <vector variant>(splat x)[0]
    auto* vfty = llvm::FunctionType::get(vt, std::vector<llvm::Type*>(arity(f), vt), false);
    auto* vfn = llvm::cast<llvm::Function>(m->getOrInsertFunction(vector_name(f, f64), vfty).getCallee());
    set_pure(vfn);
    if (f == MathFn::Sin || f == MathFn::Cos) vfn = lane_uniform_trig(*m, vfn, f64, vector_bits());
    auto* fty = llvm::FunctionType::get(t, std::vector<llvm::Type*>(arity(f), t), false);
    wrapper = llvm::Function::Create(fty, llvm::Function::InternalLinkage, sname, m);
    set_pure(wrapper);
    wrapper->addFnAttr(llvm::Attribute::NoInline);
    // Address "taken": every call passing the same constant (pow(x, 3.0)) had let IPSCCP fold it
    // into the body and dead-argument elimination drop the parameter, leaving a kf_powf(float)
    // that matches no vector variant: the loop ran one scalar call per element, 40 ns each
    // against 5 with the vector variant (Zen 3).
    llvm::appendToCompilerUsed(*m, {wrapper});
    const std::string bits = std::to_string(vector_bits());
    wrapper->addFnAttr("prefer-vector-width", bits);
    wrapper->addFnAttr("min-legal-vector-width", bits);
    Builder wb(llvm::BasicBlock::Create(c, "entry", wrapper));
    std::vector<llvm::Value*> vargs;
    for (auto& a : wrapper->args()) vargs.push_back(wb.CreateVectorSplat(w, &a));
    auto* vc = wb.CreateCall(vfn, vargs);
    vc->setDoesNotThrow();
    vc->setDoesNotAccessMemory();
    wb.CreateRet(wb.CreateExtractElement(vc, uint64_t{0}));
  }
  auto* ci = b.CreateCall(wrapper, args);
  ci->setDoesNotThrow();
  ci->setDoesNotAccessMemory();
  return ci;
}

}  // namespace kfuse::detail::llvmjit
