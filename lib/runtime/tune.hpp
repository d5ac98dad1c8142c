// Measured selection (README "Profiling", docs/profiling.md): KFUSE_TUNE=1 times, on the first
// use of a CPU kernel (zero-filled buffers of its real sizes), every form it could run in: each
// CPU backend that accepts it, each variant of that backend's code (CompiledKernel::variants, e.g.
// the xbyak GEMM's packed or direct path) and, for a short kernel on a multi-thread pool, the
// fastest of those on one thread. The fastest is remembered per kernel key in <cache dir>/tune.json,
// so later processes start with that choice (tuning or not). Without a remembered choice the
// static one stays (the order of the backend chain, variant 0, the pool) and nothing is timed.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace kfuse::detail {

/// One form of a kernel: backend, variant (an index into CompiledKernel::variants(), 0 the
/// static one) and thread count (1, or 0 for the pool).
struct TuneChoice {
  std::string backend;  ///< "": no choice
  int variant = 0;
  std::string variant_name;  ///< "" when the kernel has one form
  int threads = 0;
  /// "xbyak", "xbyak/packed", "xbyak/direct 1 thread": how tune.json and kfuse-cache name it.
  std::string label() const;
};

struct TuneResult {
  TuneChoice winner;
  std::vector<std::pair<std::string, double>> seconds;  ///< per candidate label: best run
};

/// The key of a kernel's choice: its IR, dtypes, device, the candidate backends and the pool's
/// thread count (a one-thread choice is relative to it).
std::string tune_key(const std::string& ir_text, const std::string& dtypes, Device device,
                     const std::vector<std::shared_ptr<Backend>>& chain);
/// The remembered choice for `key` (backend "" when none; reads tune.json of opts.cache_dir once
/// per process and cache dir).
TuneChoice tuned_choice(const std::string& key, const Options& opts);
/// Whether KFUSE_TUNE=1.
bool tuning_enabled();
/// Times every form of `compiled` (kernels by backend name, in the chain's order) on buffers of
/// `buffer_numel` elements and remembers the fastest under `key` (`ir_digest`: cache::ir_digest)
/// in opts.cache_dir.
TuneResult tune_and_remember(const std::string& key, const std::string& ir_digest, const ir::Kernel& k,
                             const std::vector<int64_t>& buffer_numel,
                             const std::vector<std::pair<std::string, std::shared_ptr<CompiledKernel>>>& compiled,
                             const Options& opts);
/// `ck` running in the form `c` chose (itself when that is the static form, or when `c` names a
/// variant it does not have: a table written by another version).
std::shared_ptr<CompiledKernel> apply_choice(const std::shared_ptr<CompiledKernel>& ck, const TuneChoice& c);
/// Forgets the in-process table (tests: the next lookup reads tune.json as a new process would).
void reset_tune_state();

}  // namespace kfuse::detail
