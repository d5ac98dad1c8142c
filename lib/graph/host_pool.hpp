// The host memory pool behind Storage::allocate: freed blocks are kept by size class and handed
// out again, so the intermediates of one evaluation reuse the memory of those freed before them
// (liveness-based reuse) and repeated evaluations do not pay fresh page faults for large outputs
// (PERFORMANCE.md lesson 4). Bounded by Options::pool_max_bytes (default an eighth of the
// physical memory): past it, a freed block displaces cached blocks of other sizes, or goes back
// to the system when it is bigger than the bound itself.
// Disabled under AddressSanitizer, so that use-after-free stays detectable.
#pragma once
#include <cstddef>
#include <memory>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// 64-byte aligned (4096 from 64 KiB: host_pool.cpp), at least `bytes` (rounded up to the
/// block's size class).
void* pool_alloc(size_t bytes);
void pool_free(void* p, size_t bytes);
/// Bytes currently held for reuse.
size_t pool_cached_bytes();

/// An empty Storage, its block recycled per thread like the nodes' (lib/graph/node.cpp):
/// every evaluation makes one for its result and every Tensor::borrow one for its input.
std::shared_ptr<Storage> make_storage();

}  // namespace kfuse::detail
