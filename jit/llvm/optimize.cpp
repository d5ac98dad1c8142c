// The O3 pipeline of the LLVM backend: new pass manager, loop + SLP vectorisation, the host
// TargetMachine's cost model, and a TargetLibraryInfo that knows the SLEEF vector variants
// (registered programmatically: the -vector-library cl::opt is process-global, TOOLCHAIN.md).
#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Triple.h>

#include "llvm_jit.hpp"

namespace kfuse::detail::llvmjit {

void optimize_module(llvm::Module& m, llvm::TargetMachine& tm, const MathLib& math) {
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  pto.LoopUnrolling = true;
  llvm::PassBuilder pb(&tm, pto);
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::TargetLibraryInfoImpl tlii{llvm::Triple(m.getTargetTriple())};
  math.add_vector_functions(tlii);
  // Before registerFunctionAnalyses, so this TLI wins over the default one.
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

}  // namespace kfuse::detail::llvmjit
