// The ORC session of the LLVM backend (TOOLCHAIN.md section 2 recipe):
//   - one LLJIT per process (JITLink), host CPU and features detected at run time;
//   - kernels are compiled to ELF relocatable objects by our own TargetMachine (the object bytes
//     are the disk-cache binary) and linked with LLJIT::addObjectFile, so Backend::load() runs
//     no LLVM codegen at all;
//   - every kernel gets its own JITDylib (its entry points have fixed names; the same kernel
//     may be loaded twice), whose resources are freed when the kernel is destroyed;
//   - SLEEF and libm symbols resolve through DynamicLibrarySearchGenerators on the main JITDylib.
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <atomic>
#include <chrono>
#include <mutex>

#include "kfuse/error.hpp"
#include "llvm_jit.hpp"

#ifndef KFUSE_LLVM_VERSION_STRING
#define KFUSE_LLVM_VERSION_STRING "19"
#endif

namespace kfuse::detail::llvmjit {

namespace {

std::string to_string(llvm::Error err) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << err;
  return os.str();
}

template <typename T>
T unwrap(llvm::Expected<T> v, const char* what) {
  if (!v) throw BackendError(std::string("llvm: ") + what + ": " + to_string(v.takeError()));
  return std::move(*v);
}

void check(llvm::Error err, const char* what) {
  if (err) throw BackendError(std::string("llvm: ") + what + ": " + to_string(std::move(err)));
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

class Session;

class Loaded final : public LoadedCode {
 public:
  Loaded(std::shared_ptr<Session> s, llvm::orc::JITDylib* jd) : s_(std::move(s)), jd_(jd) {}
  ~Loaded() override;
  void* symbol(const std::string& name) const override {
    auto it = syms_.find(name);
    return it == syms_.end() ? nullptr : it->second;
  }
  std::unordered_map<std::string, void*> syms_;

 private:
  std::shared_ptr<Session> s_;
  llvm::orc::JITDylib* jd_;
};

class Session final : public JitSession, public std::enable_shared_from_this<Session> {
 public:
  void init(bool avx2_only) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    auto jtmb = unwrap(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
    // KFUSE_ISA=avx2 (Options::isa): code for the AVX2 tier on an AVX-512 host, as the xbyak
    // backend does, so one machine runs both tiers' code (its tests, its speed). The disabled
    // features are appended after the host's, and the later one wins.
    auto feats = llvm::sys::getHostCPUFeatures();
    if (avx2_only)
      for (auto& f : feats)
        if (f.getKey().starts_with("avx512") || f.getKey() == "evex512" || f.getKey().starts_with("avx10")) {
          f.setValue(false);
          jtmb.getFeatures().AddFeature(f.getKey(), false);
        }
    jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    jtmb.setRelocationModel(llvm::Reloc::PIC_);
    jtmb.setCodeModel(llvm::CodeModel::Small);
    tm_ = unwrap(jtmb.createTargetMachine(), "creating the target machine");
    jit_ = unwrap(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(), "creating LLJIT");
    const char prefix = tm_->createDataLayout().getGlobalPrefix();
    auto& main = jit_->getMainJITDylib();
    main.addGenerator(
        unwrap(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix), "process symbols"));
    main.addGenerator(unwrap(llvm::orc::DynamicLibrarySearchGenerator::Load("libsleef.so.3", prefix),
                             "loading libsleef.so.3 (install libsleef3)"));

    auto has = [&](const char* f) {
      auto it = feats.find(f);
      return it != feats.end() && it->second;
    };
    math_ = detect_math_lib(has("avx512f"), has("avx2"), has("fma"));
    target_ = tm_->getTargetTriple().getArchName().str() + " " + tm_->getTargetCPU().str();
    for (const char* f : {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512fp16", "avx512bf16", "avx2", "fma"})
      if (has(f)) target_ += std::string(" +") + f;
    static const char* tiers[] = {"sse2", "avx2", "avx512"};
    target_ += std::string(" llvm") + KFUSE_LLVM_VERSION_STRING + " sleef-" + tiers[static_cast<int>(math_.tier)];
  }

  const std::string& target() const override { return target_; }
  const MathLib& math() const override { return math_; }

  std::vector<uint8_t> compile(const ir::Kernel& k, const LaunchPlan& plan, std::string* ir_text, double* lower_ms,
                               double* opt_ms) override {
    std::lock_guard<std::mutex> lk(compile_mu_);  // one TargetMachine: one codegen at a time
    auto t0 = std::chrono::steady_clock::now();
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::Module> m = lower_kernel(k, plan, ctx, math_, *tm_);
    std::string diag;
    llvm::raw_string_ostream dos(diag);
    if (llvm::verifyModule(*m, &dos)) {
      std::string text;
      llvm::raw_string_ostream tos(text);
      m->print(tos, nullptr);
      throw BackendError("llvm: generated IR does not verify: " + dos.str(), dos.str() + "\n" + tos.str());
    }
    if (lower_ms) *lower_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    optimize_module(*m, *tm_, math_);
    if (opt_ms) *opt_ms = ms_since(t0);
    if (ir_text) {
      ir_text->clear();
      llvm::raw_string_ostream tos(*ir_text);
      m->print(tos, nullptr);
    }
    llvm::SmallVector<char, 0> obj;
    llvm::raw_svector_ostream os(obj);
    llvm::legacy::PassManager pm;
    if (tm_->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
      throw BackendError("llvm: the target cannot emit object files");
    pm.run(*m);
    return std::vector<uint8_t>(obj.begin(), obj.end());
  }

  std::shared_ptr<LoadedCode> load(const std::vector<uint8_t>& object,
                                   const std::vector<std::string>& symbols) override {
    std::string name = "kf" + std::to_string(next_id_++);
    auto jde = jit_->createJITDylib(name);
    if (!jde) throw BackendError("llvm: creating a JITDylib: " + to_string(jde.takeError()));
    llvm::orc::JITDylib& jd = *jde;
    jd.addToLinkOrder(jit_->getMainJITDylib());
    auto loaded = std::make_shared<Loaded>(shared_from_this(), &jd);  // removes jd on failure too
    auto buf = llvm::MemoryBuffer::getMemBufferCopy(
        llvm::StringRef(reinterpret_cast<const char*>(object.data()), object.size()), name);
    check(jit_->addObjectFile(jd, std::move(buf)), "adding the kernel object");
    for (const auto& s : symbols) {
      auto addr = unwrap(jit_->lookup(jd, s), "linking the kernel");
      loaded->syms_[s] = addr.toPtr<void*>();
    }
    return loaded;
  }

  void remove(llvm::orc::JITDylib* jd) {
    if (llvm::Error err = jit_->getExecutionSession().removeJITDylib(*jd)) llvm::consumeError(std::move(err));
  }

 private:
  std::unique_ptr<llvm::TargetMachine> tm_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  MathLib math_;
  std::string target_;
  std::mutex compile_mu_;
  std::atomic<uint64_t> next_id_{0};
};

Loaded::~Loaded() { s_->remove(jd_); }

}  // namespace

std::shared_ptr<JitSession> JitSession::create(bool avx2_only) {
  auto s = std::make_shared<Session>();
  s->init(avx2_only);
  return s;
}

}  // namespace kfuse::detail::llvmjit
