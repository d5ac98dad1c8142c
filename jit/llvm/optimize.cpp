// The O3 pipeline of the LLVM backend: new pass manager, loop vectorisation, the host
// TargetMachine's cost model, and a TargetLibraryInfo that knows the SLEEF vector variants
// (registered programmatically: the -vector-library cl::opt is process-global, TOOLCHAIN.md).
//
// No SLP vectorisation: LLVM 19's SLP vectoriser miscompiled a fully unrolled 5-row column
// kernel (randn over [5, 1], its column max, an fma with an input), gathering the input's rows
// in one lane order and storing the results in another (rows 1 and 3 exchanged; test
// LlvmColumnGraphs.UnrolledShortColumnsKeepTheirRows). The kernels' loops are the loop
// vectoriser's work, and the transposes' 8 x 8 register tiles are explicit vectors
// (transpose_tiles.cpp): without SLP, softmax, layer_norm, element-wise chains, sums and
// softmax/argmax/std over axis 0, transposes ([4096,1024], [512,128,64] batched), f64 and i32
// chains, the f32 and f64 GEMMs and the 8-bit bag measured the same (Xeon, 1 thread).
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
  pto.SLPVectorization = false;
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
