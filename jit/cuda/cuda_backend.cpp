// The CUDA backend: kernel IR -> CUDA C++ (jit/gpu renderer) -> NVRTC (CUBIN for the device's
// arch, or PTX for the newest arch NVRTC knows when the device is newer) -> cuModuleLoadData ->
// cuLaunchKernel on the device's stream.
#include <dlfcn.h>
#include <nvrtc.h>

#include <chrono>
#include <mutex>

#include "../gpu/gpu_render.hpp"
#include "backend/factories.hpp"
#include "cuda_driver.hpp"
#include "cuda_runtime.hpp"
#include "kfuse/error.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail {

namespace {

// libnvrtc dlopens libnvrtc-builtins.so.<major>.<minor> by name and has no RUNPATH, so the
// lookup fails on machines without an ld.so.conf entry for the toolkit. Preloading it (RTLD_GLOBAL)
// from libnvrtc's own directory makes that dlopen find the loaded copy.
void preload_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    int major = 0, minor = 0;
    nvrtcVersion(&major, &minor);
    const std::string file = "libnvrtc-builtins.so." + std::to_string(major) + "." + std::to_string(minor);
    Dl_info info{};
    std::vector<std::string> dirs;
    if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) && info.dli_fname) {
      std::string p = info.dli_fname;
      auto slash = p.rfind('/');
      if (slash != std::string::npos) dirs.push_back(p.substr(0, slash));
    }
    dirs.push_back(KFUSE_CUDA_LIBDIR);
    for (const auto& d : dirs)
      if (dlopen((d + "/" + file).c_str(), RTLD_NOW | RTLD_GLOBAL)) return;
    log("backend", "cuda: could not preload " + file + "; relying on the loader's search path");
  });
}

void nvrtc_check(nvrtcResult rc, const char* what, const std::string& log = {}) {
  if (rc != NVRTC_SUCCESS)
    throw BackendError(std::string("NVRTC: ") + what + " failed: " + nvrtcGetErrorString(rc), log);
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<int> nvrtc_archs() {
  int n = 0;
  std::vector<int> v;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS) return v;
  v.resize(n);
  nvrtcGetSupportedArchs(v.data());
  return v;
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch, bool cubin) {
  preload_builtins();
  auto t0 = std::chrono::steady_clock::now();
  if (arch.rfind("sm_", 0) != 0) throw InternalError("nvrtc_compile: arch must look like sm_80, got " + arch);
  nvrtcProgram prog = nullptr;
  nvrtc_check(nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  NvrtcOutput out;
  auto run = [&](const std::string& arch_opt) {
    // --fmad=false: a * b + c is a multiply and an add, as on the CPU backends; kernels that
    // want one rounding say fma() (Op::Fma, the GEMM's multiply-accumulate).
    std::vector<std::string> opts = {arch_opt, "--std=c++17", "--fmad=false"};
    std::vector<const char*> o;
    for (const auto& s : opts) o.push_back(s.c_str());
    nvrtcResult rc = nvrtcCompileProgram(prog, static_cast<int>(o.size()), o.data());
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && log.back() == '\0') log.pop_back();
    out.log = log;
    if (rc != NVRTC_SUCCESS) {
      nvrtcDestroyProgram(&prog);
      throw BackendError("NVRTC: compiling " + name + " for " + arch + " failed: " + nvrtcGetErrorString(rc),
                         log + "\n---- source ----\n" + source);
    }
  };
  // NVRTC gives PTX for a virtual arch (compute_XX) and SASS for a real one (sm_XX).
  run(cubin ? "--gpu-architecture=" + arch : "--gpu-architecture=compute_" + arch.substr(3));
  size_t n = 0;
  if (cubin) {
    nvrtc_check(nvrtcGetCUBINSize(prog, &n), "nvrtcGetCUBINSize");
    out.cubin.resize(n);
    nvrtc_check(nvrtcGetCUBIN(prog, reinterpret_cast<char*>(out.cubin.data())), "nvrtcGetCUBIN");
  } else {
    nvrtc_check(nvrtcGetPTXSize(prog, &n), "nvrtcGetPTXSize");
    out.ptx.resize(n);
    nvrtc_check(nvrtcGetPTX(prog, out.ptx.data()), "nvrtcGetPTX");
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  }
  nvrtcDestroyProgram(&prog);
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

namespace {

class CudaKernel final : public CompiledKernel {
 public:
  CudaKernel(const ir::Kernel& k, gpu::Rendered r, int index, CUmodule mod)
      : k_(k), r_(std::move(r)), index_(index), mod_(mod) {
    const cuda::Driver& d = cuda::driver();
    for (const auto& s : r_.stages) {
      CUfunction f = nullptr;
      cuda::check(d.ModuleGetFunction(&f, mod_, s.entry.c_str()), "cuModuleGetFunction");
      fns_.push_back(f);
    }
  }
  ~CudaKernel() override {
    try {
      cuda::device(index_);
      cuda::driver().ModuleUnload(mod_);
    } catch (...) {}
  }

  void run(const ir::LaunchArgs& args) const override {
    if (args.buffers.size() != k_.buffers.size() || args.params.size() != k_.params.size())
      throw InternalError("CUDA: launch of " + k_.name + " with the wrong number of buffers or params");
    cuda::Dev& dev = cuda::device(index_);
    const cuda::Driver& d = cuda::driver();
    // Host time per launch is the cost of a small kernel: the argument arrays are per-thread
    // buffers reused from launch to launch (no allocation once they have grown).
    thread_local std::vector<int64_t> params;
    thread_local std::vector<CUdeviceptr> ptrs;
    thread_local std::vector<void*> kargs;
    params.assign(args.params.begin(), args.params.end());
    params.resize(std::max<size_t>(1, params.size()), 0);
    const int64_t outer = ir::outer_points(k_, args.params);
    if (outer <= 0) return;
    // Partials of split reductions: stream-ordered device memory, given back as soon as the
    // launches are queued (no synchronisation: whatever uses it next is queued after them).
    CUdeviceptr scratch = 0;
    const size_t scratch_bytes = static_cast<size_t>(outer * r_.split * r_.scratch_slots) * 8;
    if (r_.scratch_slots > 0)
      scratch = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(cuda::mem_take(index_, scratch_bytes)));
    ptrs.clear();
    kargs.clear();
    for (void* b : args.buffers) ptrs.push_back(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(b)));
    for (auto& p : ptrs) kargs.push_back(&p);
    kargs.push_back(params.data());
    kargs.push_back(&scratch);
    CUresult rc = CUDA_SUCCESS;
    for (size_t s = 0; s < r_.stages.size() && rc == CUDA_SUCCESS; ++s) {
      const gpu::Stage& st = r_.stages[s];
      const int64_t groups = gpu::groups_for(st, gpu::cuda_dialect(), gpu::stage_units(st, k_, args.params));
      rc = d.LaunchKernel(fns_[s], static_cast<unsigned>(groups), 1, 1, static_cast<unsigned>(st.block), 1, 1, 0,
                          dev.stream, kargs.data(), nullptr);
      if (rc == CUDA_SUCCESS) cuda::count_launch();
    }
    if (scratch) cuda::mem_give(index_, reinterpret_cast<void*>(static_cast<uintptr_t>(scratch)), scratch_bytes);
    cuda::check(rc, "cuLaunchKernel");
  }

  // Device time between events recorded on the stream before and after the launch.
  double run_timed(const ir::LaunchArgs& args) const override {
    cuda::Dev& dev = cuda::device(index_);
    const cuda::Driver& d = cuda::driver();
    CUevent ev[2] = {nullptr, nullptr};
    cuda::check(d.EventCreate(&ev[0], CU_EVENT_DEFAULT), "cuEventCreate");
    CUresult rc = d.EventCreate(&ev[1], CU_EVENT_DEFAULT);
    float ms = 0;
    try {
      cuda::check(rc, "cuEventCreate");
      cuda::check(d.EventRecord(ev[0], dev.stream), "cuEventRecord");
      run(args);
      cuda::check(d.EventRecord(ev[1], dev.stream), "cuEventRecord");
      cuda::check(d.EventSynchronize(ev[1]), "cuEventSynchronize");
      cuda::check(d.EventElapsedTime(&ms, ev[0], ev[1]), "cuEventElapsedTime");
    } catch (...) {
      for (CUevent e : ev)
        if (e) d.EventDestroy(e);
      throw;
    }
    for (CUevent e : ev) d.EventDestroy(e);
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  ir::Kernel k_;
  gpu::Rendered r_;
  int index_;
  CUmodule mod_;
  std::vector<CUfunction> fns_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : index_(index) {
    cuda::Dev& dev = cuda::device(index);  // throws BackendUnavailable
    // The device's arch when NVRTC knows it (CUBIN); otherwise PTX of the newest older arch,
    // JIT-compiled by the driver.
    int best = 0;
    for (int a : nvrtc_archs())
      if (a <= dev.arch) best = std::max(best, a);
    if (best == 0)
      throw BackendUnavailable("CUDA: NVRTC " + nvrtc_version() + " cannot target sm_" + std::to_string(dev.arch));
    arch_ = best;
    cubin_ = best == dev.arch;
    desc_ = dev.name;
  }
  std::string name() const override { return "cuda"; }
  std::shared_ptr<Storage> allocate(DType dtype, int64_t numel) override { return cuda_alloc(dtype, numel, index_); }
  DeviceMemoryStats memory_stats() override { return cuda::mem_stats(index_); }
  void empty_cache() override { cuda::mem_release_cached(index_); }
  void synchronize() override { cuda_synchronize(index_); }
  void copy_to_device(const Storage& dst, const void* host) override { cuda_copy_to_device(dst, host); }
  void copy_to_host(const Storage& src, void* host) override { cuda_copy_to_host(src, host); }
  int codegen_version() const override { return gpu::kRenderVersion; }
  std::string target() const override {
    return "sm_" + std::to_string(arch_) + (cubin_ ? " cubin" : " ptx") + " nvrtc " + nvrtc_version() + " driver " +
           std::to_string(cuda::driver().version);
  }
  Device device() const override { return Device::cuda(index_); }

  std::string options_key(const Options& o) const override { return gpu::render_options_key(o); }

  CompileResult compile(const ir::Kernel& k, const Options& o) override {
    auto t0 = std::chrono::steady_clock::now();
    gpu::Rendered r;
    std::string why;
    if (!gpu::try_render(k, gpu::cuda_dialect(), r, why, gpu::render_knobs(o))) return {nullptr, why};
    NvrtcOutput out = nvrtc_compile(r.source, r.stages.front().entry, "sm_" + std::to_string(arch_), cubin_);
    return {finish(k, std::move(r), cubin_ ? out.cubin : std::vector<uint8_t>(out.ptx.begin(), out.ptx.end()), t0), {}};
  }

  std::shared_ptr<CompiledKernel> load(const ir::Kernel& k, const std::vector<uint8_t>& binary,
                                       const Options& o) override {
    gpu::Rendered r;  // the launch plan (cheap; no compile)
    std::string why;
    if (!gpu::try_render(k, gpu::cuda_dialect(), r, why, gpu::render_knobs(o))) return nullptr;
    return finish(k, std::move(r), binary, std::chrono::steady_clock::now());
  }

 private:
  std::shared_ptr<CompiledKernel> finish(const ir::Kernel& k, gpu::Rendered r, std::vector<uint8_t> image,
                                         std::chrono::steady_clock::time_point t0) {
    cuda::device(index_);
    if (!cubin_) image.push_back(0);  // cuModuleLoadData wants NUL-terminated PTX
    CUmodule mod = nullptr;
    cuda::check(cuda::driver().ModuleLoadData(&mod, image.data()), "cuModuleLoadData");
    if (!cubin_) image.pop_back();
    auto ck = std::make_shared<CudaKernel>(k, r, index_, mod);
    ck->backend = name();
    ck->target = target();
    ck->source = r.source;
    ck->source_kind = "cuda";
    ck->binary = std::move(image);
    ck->binary_kind = cubin_ ? "cubin" : "ptx";
    ck->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log("codegen", "cuda: " + k.name + " strategy " + r.strategy + " on " + desc_ + ", " +
                       std::to_string(r.stages.size()) + " launch(es), " + std::to_string(ck->compile_ms) + " ms");
    return ck;
  }

  int index_;
  int arch_ = 80;
  bool cubin_ = true;
  std::string desc_;
};

}  // namespace

std::shared_ptr<Backend> make_cuda_backend(const Options&) {
  // Throws BackendUnavailable with the reason (no driver, stub library, no device); the registry
  // logs it on the `backend` channel and leaves CUDA out.
  return std::make_shared<CudaBackend>(0);
}

}  // namespace kfuse::detail
