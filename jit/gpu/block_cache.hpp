// A caching allocator of device memory for a backend whose device work runs in order on ONE
// queue (the OpenCL backend's in-order command queue; a CUDA stream when the driver has no
// stream-ordered pool). Freed blocks are kept, by size class, and handed out again; a freed
// block may still be in use by work queued before the free, but whatever the next owner
// enqueues runs after that work on the same queue, so reuse needs no synchronisation.
//
// Size classes: 256 bytes, then steps of 1/8 of a power of two (at most 12.5% unused); a
// request is served only by a block of exactly its class. Cached bytes are bounded by a limit;
// past it freed blocks go back to the driver. When the driver is out of memory, the cache is
// emptied and the allocation tried once more.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kfuse/device.hpp"

namespace kfuse::detail::gpu {

class BlockCache {
 public:
  /// `alloc` returns a driver allocation of exactly `bytes` or null when out of memory (other
  /// failures throw); `release` returns one to the driver.
  BlockCache(std::function<void*(size_t bytes)> alloc, std::function<void(void*)> release, size_t limit_bytes);
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  /// The size class of a request (what take() reserves and give() must be passed back).
  static size_t size_class(size_t bytes);

  /// A block of size_class(bytes) bytes; throws BackendError when the device is out of memory.
  void* take(size_t bytes);
  /// Returns a block from take(bytes) (the same `bytes`).
  void give(void* block, size_t bytes);
  /// Returns every cached block to the driver.
  void release_cached();

  /// Driver calls and reuses so far, bytes held by live blocks and by the cache.
  DeviceMemoryStats stats() const;
  /// Counts one host wait for the device (the backend calls it where it blocks).
  void count_sync();

 private:
  std::function<void*(size_t)> alloc_;
  std::function<void(void*)> release_;
  size_t limit_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  DeviceMemoryStats st_;
};

}  // namespace kfuse::detail::gpu
