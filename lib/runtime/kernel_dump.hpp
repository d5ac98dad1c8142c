// KFUSE_DUMP=DIR: every kernel a backend produces (compiled, or loaded from the disk cache) is
// written to DIR as its IR, its generated source and its binary, for reading and for tools
// (`kfuse-cache why --ir FILE` takes the IR file).
#pragma once
#include <string>

#include "backend/backend.hpp"
#include "cache/key.hpp"

namespace kfuse::detail {

/// Writes DIR/<stem>-<key>.ir, and .<source_kind> / .<binary_kind> when the kernel has
/// them. A failure to write is logged (channel "cache") and never fails the evaluation.
void dump_kernel(const std::string& dir, const cache::KernelKey& key, const std::string& ir_text,
                 const CompiledKernel& ck);

}  // namespace kfuse::detail
