// The "llvm" backend: kernel IR -> LLVM IR -> O3 -> ELF object -> ORC LLJIT (jit_session.cpp).
//
// Host side of a launch: the outer extents are evaluated from Kernel::outer with the launch's
// params, and the flattened outer domain is split over the CPU pool (parallel_for) with a grain
// that gives each chunk about 32K reduce-or-store points of work. Reductions never cross outer
// points, so results do not depend on the chunking. Split global reductions (LaunchPlan) run
// fixed-size reduce blocks in parallel and combine them in block order (also chunk-independent).
//
// CompiledKernel fields: source = the LLVM IR AFTER O3 (what was compiled, vectorised loops
// visible), binary = the ELF relocatable object, which load() links without running LLVM codegen.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <vector>

#include "backend/thread_pool.hpp"
#include "backend/factories.hpp"
#include "kfuse/error.hpp"
#include "kfuse/options.hpp"
#include "llvm_jit.hpp"

namespace kfuse::detail {

namespace {

using namespace llvmjit;

class LlvmKernel final : public CompiledKernel {
 public:
  LlvmKernel(const ir::Kernel& k, const LaunchPlan& plan, int64_t chunk, std::shared_ptr<LoadedCode> code)
      : outer_(k.outer),
        nbuf_(k.buffers.size()),
        nparams_(k.params.size()),
        plan_(plan),
        chunk_(chunk),
        code_(std::move(code)) {
    main_ = reinterpret_cast<MainFn>(code_->symbol(kMainName));
    if (plan_.row_block > 0) {
      row_main_ = reinterpret_cast<RowMainFn>(code_->symbol(kMainName));
      const void* bytes = code_->symbol(kScratchName);
      if (!bytes) throw BackendError("llvm: row-blocked kernel object lacks kf_scratch");
      scratch_bytes_ = *static_cast<const int64_t*>(bytes);
    }
    if (plan_.split) {
      part_ = reinterpret_cast<PartFn>(code_->symbol(kPartName));
      fin_ = reinterpret_cast<FinFn>(code_->symbol(kFinName));
    }
    if (!main_ || (plan_.split && (!part_ || !fin_))) throw BackendError("llvm: kernel object lacks its entry points");
  }

  void run(const ir::LaunchArgs& a) const override {
    if (a.buffers.size() != nbuf_ || a.params.size() < nparams_)
      throw InternalError("llvm: launch arguments do not match the kernel's buffers/params");
    int64_t total = 1;
    for (const auto& o : outer_) total *= ir::eval_index(o, a.params);
    if (total <= 0) return;
    void* const* bufs = a.buffers.data();
    const int64_t* params = a.params.data();
    const int64_t chunk = chunk_;
    if (plan_.split) {
      std::vector<int64_t> partials(static_cast<size_t>(plan_.nblocks * plan_.nacc));
      void* p = partials.data();
      if (chunk > 0) {
        for (int64_t b = 0; b < plan_.nblocks; b += chunk)
          part_(bufs, params, b, std::min(b + chunk, plan_.nblocks), p);
      } else {
        parallel_for(plan_.nblocks, 1, [&](int64_t b, int64_t e) { part_(bufs, params, b, e, p); });
      }
      fin_(bufs, params, p, plan_.nblocks);
      return;
    }
    // kf_main over [b, e); a row-blocked one with this thread's scratch
    auto f = [&](void* const* bufs_, const int64_t* params_, int64_t b, int64_t e) {
      if (plan_.row_block == 0) return main_(bufs_, params_, b, e);
      thread_local std::vector<std::max_align_t> scratch;
      const size_t n =
          (static_cast<size_t>(scratch_bytes_) + 2 * sizeof(std::max_align_t) + 64) / sizeof(std::max_align_t);
      if (scratch.size() < n) scratch.resize(n);
      auto p = (reinterpret_cast<uintptr_t>(scratch.data()) + 63) / 64 * 64;
      row_main_(bufs_, params_, b, e, reinterpret_cast<void*>(p));
    };
    if (chunk > 0) {
      for (int64_t b = 0; b < total; b += chunk) f(bufs, params, b, std::min(b + chunk, total));
      return;
    }
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / plan_.work_per_point);
    const int64_t mr = plan_.row_block;  // (row-blocked kernels have rows and columns)
    const int64_t cols = mr > 0 ? std::max<int64_t>(1, ir::eval_index(outer_.back(), a.params)) : 1;
    const int64_t rows = total / cols;
    if (mr > 0 && total > grain && rows >= 2 * mr) {
      // Chunks of whole blocks of rows: a chunk that starts inside a row runs it as column
      // tiles, and every chunk reads (or packs) all of B for its rows, so a short chunk pays
      // that for a few rows (results do not depend on the split; the speed does). Two per
      // thread, for balance, only when each has kTwoChunkRows rows or more (B's copy is then a
      // few % of a chunk's arithmetic); otherwise one per thread. Zen 3, f64, 2 threads, in
      // turn: [64,1024]x[1024,1024] 29-36 -> 44-50 GFLOP/s (minima), [256,2048]x[2048,2048]
      // 47-64 -> 63-71; one thread made two chunks and packed B twice. Under two blocks of rows
      // (a GEMV) the points are split as usual.
      constexpr int64_t kTwoChunkRows = 256;
      const int64_t per_thread = rows >= 2 * kTwoChunkRows * num_threads() && num_threads() > 1 ? 2 : 1;
      const int64_t nchunks = per_thread * num_threads();
      const int64_t per = std::max<int64_t>(1, (rows + nchunks - 1) / nchunks);
      const int64_t step = (per + mr - 1) / mr * mr;
      parallel_for((rows + step - 1) / step, 1,
                   [&](int64_t b, int64_t e) { f(bufs, params, b * step * cols, std::min(e * step, rows) * cols); });
      return;
    }
    parallel_for(total, grain, [&](int64_t b, int64_t e) { f(bufs, params, b, e); });
  }

 private:
  std::vector<ir::ExprRef> outer_;
  size_t nbuf_, nparams_;
  LaunchPlan plan_;
  int64_t chunk_;  ///< Options::llvm_launch_chunk (0: the pool's split)
  std::shared_ptr<LoadedCode> code_;
  MainFn main_ = nullptr;
  RowMainFn row_main_ = nullptr;  ///< kf_main of a row-blocked kernel (main_ is then unused)
  int64_t scratch_bytes_ = 0;     ///< its kf_scratch
  PartFn part_ = nullptr;
  FinFn fin_ = nullptr;
};

std::vector<std::string> entry_points(const LaunchPlan& plan) {
  if (plan.split) return {kMainName, kPartName, kFinName};
  if (plan.row_block > 0) return {kMainName, kScratchName};
  return {kMainName};
}

class LlvmBackend final : public Backend {
 public:
  explicit LlvmBackend(std::shared_ptr<JitSession> s) : s_(std::move(s)) {}
  std::string name() const override { return "llvm"; }
  std::string target() const override { return s_->target(); }
  int codegen_version() const override { return kLlvmCodegenVersion; }

  // The tile changes the code; the chunk what its launches do (each kernel keeps it).
  std::string options_key(const Options& o) const override {
    if (o.llvm_column_tile <= 0 && o.llvm_launch_chunk <= 0) return {};
    return "llvm_column_tile=" + std::to_string(o.llvm_column_tile) +
           ";llvm_launch_chunk=" + std::to_string(o.llvm_launch_chunk);
  }

  CompileResult compile(const ir::Kernel& k, const Options& o) override {
    auto t0 = std::chrono::steady_clock::now();
    LaunchPlan plan = launch_plan(k, o);
    std::string ir;
    double lower_ms = 0, opt_ms = 0;
    std::vector<uint8_t> obj = s_->compile(k, plan, &ir, &lower_ms, &opt_ms);
    auto ck = make(k, plan, o, obj);
    ck->source = std::move(ir);
    ck->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log("codegen", "llvm: " + k.name + " compiled in " + std::to_string(ck->compile_ms) + " ms (lower " +
                       std::to_string(lower_ms) + ", O3 " + std::to_string(opt_ms) + ", codegen+link " +
                       std::to_string(ck->compile_ms - lower_ms - opt_ms) + ")");
    return {ck, {}};
  }

  std::shared_ptr<CompiledKernel> load(const ir::Kernel& k, const std::vector<uint8_t>& binary,
                                       const Options& o) override {
    auto t0 = std::chrono::steady_clock::now();
    auto ck = make(k, launch_plan(k, o), o, binary);
    ck->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return ck;
  }

 private:
  // plan_launch with Options::llvm_column_tile in place of the automatic width of a tiled kernel.
  static LaunchPlan launch_plan(const ir::Kernel& k, const Options& o) {
    LaunchPlan plan = plan_launch(k);
    if (plan.column_tile > 0 && o.llvm_column_tile > 0) plan.column_tile = o.llvm_column_tile;
    return plan;
  }

  std::shared_ptr<LlvmKernel> make(const ir::Kernel& k, const LaunchPlan& plan, const Options& o,
                                   const std::vector<uint8_t>& obj) {
    auto ck = std::make_shared<LlvmKernel>(k, plan, o.llvm_launch_chunk, s_->load(obj, entry_points(plan)));
    ck->backend = name();
    ck->target = target();
    ck->source_kind = "llvm-ir";
    ck->binary = obj;
    ck->binary_kind = "elf-object";
    return ck;
  }

  std::shared_ptr<JitSession> s_;
};

}  // namespace

std::shared_ptr<Backend> make_llvm_backend(const Options& opts) {
  return std::make_shared<LlvmBackend>(JitSession::create(opts.isa == "avx2"));
}

}  // namespace kfuse::detail
