// Measured selection (README "Profiling"): when several CPU backends accept a kernel, KFUSE_TUNE=1
// times each on the first use of the kernel (zero-filled buffers of its real sizes, runs for
// ~20 ms per candidate, or one run of a slower one) and remembers the fastest per kernel key in <cache dir>/tune.json, so
// later processes start with that choice (tuning or not). Without a remembered choice the static
// order of the backend chain stays.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace kfuse::detail {

struct TuneResult {
  std::string winner;
  std::vector<std::pair<std::string, double>> seconds;  ///< per candidate backend: best run
};

/// The key of a kernel's choice: its IR, dtypes, device and the candidate backends.
std::string tune_key(const std::string& ir_text, const std::string& dtypes, Device device,
                     const std::vector<std::shared_ptr<Backend>>& chain);
/// The remembered winner for `key`, or "" (reads tune.json once per process and cache dir).
std::string tuned_choice(const std::string& key);
/// Whether KFUSE_TUNE=1.
bool tuning_enabled();
/// Times `candidates` (compiled kernels, by backend name) on buffers of `buffer_numel`
/// elements and remembers the fastest under `key`.
TuneResult tune_and_remember(const std::string& key, const ir::Kernel& k, const std::vector<int64_t>& buffer_numel,
                             const std::vector<std::pair<std::string, std::shared_ptr<CompiledKernel>>>& candidates);
/// Forgets the in-process table (tests: the next lookup reads tune.json as a new process would).
void reset_tune_state();

}  // namespace kfuse::detail
