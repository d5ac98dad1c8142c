// The narrow interface between the engine and its code generators. A backend sees kernel IR
// (lib/ir/kernel.hpp) and nothing else of the engine.
//
// Registration is explicit and ordered (registry.cpp): the order of Options::backends, or the
// default order (xbyak, llvm, then the reference interpreter last). The executor asks each
// backend in order; a backend that does not support a kernel DECLINES with a reason (logged on
// the `backend` channel), one whose compiler fails throws BackendError (logged with the
// compiler's log), and the next backend takes the kernel.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/kernel.hpp"
#include "kfuse/device.hpp"
#include "kfuse/node.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail {

class CompiledKernel {
 public:
  virtual ~CompiledKernel() = default;
  /// Runs the kernel over its whole outer domain (the backend parallelises as it sees fit,
  /// through parallel_for for CPU backends). Must be callable from several threads at once.
  virtual void run(const ir::LaunchArgs& args) const = 0;
  /// run() for the profiler, returning the kernel's seconds: the host clock around run() for
  /// synchronous (CPU) backends; GPU backends override it with device events.
  virtual double run_timed(const ir::LaunchArgs& args) const {
    auto t0 = std::chrono::steady_clock::now();
    run(args);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  /// Forms of this kernel that measured selection (KFUSE_TUNE) may choose between, by name; the
  /// first is what run() does (the static choice). Empty: one form. Each must compute the same
  /// values (they differ in blocking, packing or order of independent work, not in results).
  virtual std::vector<std::string> variants() const { return {}; }
  /// run() with form `v` (an index into variants()).
  virtual void run_variant(const ir::LaunchArgs& args, int /*v*/) const { run(args); }

  std::string backend;          ///< e.g. "llvm"
  std::string target;           ///< e.g. "x86_64 znver5 +avx512f" or "sm_90"
  std::string source;           ///< generated source text (LLVM IR, CUDA/OpenCL C, asm listing)
  std::string source_kind;      ///< "llvm-ir", "cuda", "opencl", "asm", ...
  std::vector<uint8_t> binary;  ///< serialised code for the disk cache (may be empty)
  std::string binary_kind;      ///< "elf-object", "x86-raw", "ptx", "cubin", ...
  double compile_ms = 0;
  /// The code runs each point's loads before that point's store and never reads an element after
  /// it was overwritten, as the IR reads: the runtime may then pass an output over a dying input
  /// that ir::may_write_in_place allows (a backend whose compiler assumes its buffers do not
  /// alias, LLVM's noalias, or that keeps partial results in its output, the GEMM's, says no).
  bool in_order_writes = false;
};

struct CompileResult {
  std::shared_ptr<CompiledKernel> kernel;  ///< null when declined
  std::string declined;                    ///< why the backend does not take this kernel
};

/// A default-constructed Options value (no environment): what compile(k) and load(k, binary) use.
const Options& default_options();

class Backend {
 public:
  virtual ~Backend() = default;
  /// "reference", "llvm", "xbyak", "opencl", "cuda".
  virtual std::string name() const = 0;
  /// Everything about the target that changes generated code (ISA features, GPU arch,
  /// compiler version); part of every cache key.
  virtual std::string target() const = 0;
  /// This backend's code generator version, part of every cache key: bump it whenever the code
  /// it generates may change for the same kernel IR and target (its history is in git log).
  /// Changes to shared lowering (lib/ir passes every backend runs) bump kCodegenVersion instead.
  virtual int codegen_version() const { return 1; }
  virtual Device device() const { return Device::cpu(); }
  /// The options that change this backend's code or kernels (its knobs, Options::gemm_path...)
  /// as text, part of the cache key; empty when none is set, so default keys stay the same.
  /// Throws UserError for a knob value it does not know.
  virtual std::string options_key(const Options& /*opts*/) const { return {}; }
  /// Compiles `k` under `opts` (passed down from where the evaluation started), or declines
  /// (CompileResult::declined) when unsupported. Throws BackendError (with the compiler's log)
  /// when the compiler itself fails.
  virtual CompileResult compile(const ir::Kernel& k, const Options& opts) = 0;
  /// Re-creates a kernel from CompiledKernel::binary (disk cache) under `opts` (the options the
  /// entry's key was made with). Null if unsupported.
  virtual std::shared_ptr<CompiledKernel> load(const ir::Kernel& /*k*/, const std::vector<uint8_t>& /*binary*/,
                                               const Options& /*opts*/) {
    return nullptr;
  }
  /// compile() and load() with default Options (tests and tools that compile one kernel by hand).
  CompileResult compile(const ir::Kernel& k) { return compile(k, default_options()); }
  std::shared_ptr<CompiledKernel> load(const ir::Kernel& k, const std::vector<uint8_t>& binary) {
    return load(k, binary, default_options());
  }
  /// Where the machine code is inside one of this backend's CompiledKernel::binary, for tools
  /// (`kfuse-cache show` disassembles it): offset, size and a one-line description. False when
  /// the binary is not framed code of this backend (the caller shows it whole).
  virtual bool code_range(const std::vector<uint8_t>& /*binary*/, size_t* /*offset*/, size_t* /*size*/,
                          std::string* /*what*/) const {
    return false;
  }

  // Memory of device(): GPU backends override these with device allocations and copies; the
  // defaults are host memory. Storage::data is what CompiledKernel::run receives.
  virtual std::shared_ptr<Storage> allocate(DType dtype, int64_t numel);
  virtual void copy_to_device(const Storage& dst, const void* host);
  virtual void copy_to_host(const Storage& src, void* host);
  /// Counters of device()'s memory; GPU backends report their allocator (default: "host").
  virtual DeviceMemoryStats memory_stats();
  /// Gives memory kept for reuse back to the driver, after the device's pending work.
  virtual void empty_cache() {}
  /// Waits for every kernel and copy enqueued on device() (CPU backends run synchronously).
  virtual void synchronize() {}
};

/// The backend that owns memory on `device`: the first built-in backend for it that starts,
/// whatever the options (memory must go back to its allocator after a set_options). Throws
/// BackendUnavailable, naming what is missing, when none is available.
std::shared_ptr<Backend> memory_backend(Device device);

/// The backends for `device` in preference order (Options::backends when set). Backends are
/// built once per process, from the options of the first call that needs each.
std::vector<std::shared_ptr<Backend>> backends_for(Device device, const Options& opts);
/// A backend by name (built from `opts` if it was not yet), or null when not built in / not
/// available.
std::shared_ptr<Backend> find_backend(const std::string& name, const Options& opts = default_options());
/// Names of every backend built into this library.
std::vector<std::string> builtin_backend_names();

}  // namespace kfuse::detail
