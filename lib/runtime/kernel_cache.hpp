// The in-process kernel cache: compiled kernels keyed by backend target + canonical kernel IR.
// Concurrent requests for one key compile once (single flight); a failed compile is not cached.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "kfuse/device.hpp"

namespace kfuse::detail {

struct CompiledRef {
  std::shared_ptr<CompiledKernel> kernel;
  std::string backend;
};

/// Compiles `k` with the first backend of the chain for `device` that accepts it, through the
/// cache. Declines and compiler failures are logged (channel `backend`) and counted as fallbacks.
CompiledRef compile_kernel(const ir::Kernel& k, Device device);

}  // namespace kfuse::detail
