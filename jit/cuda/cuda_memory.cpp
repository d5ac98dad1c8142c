// Device memory for the CUDA backend. Preferred: the driver's stream-ordered allocator on the
// device's default memory pool (cuMemAllocAsync / cuMemFreeAsync on the device's one stream),
// with the pool's release threshold raised to "never", so freed memory stays in the pool and a
// steady-state evaluation makes no driver allocation, free or synchronisation; empty_cache()
// trims the pool. Fallback, for drivers older than 11.2 or devices without memory pools
// (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 0): the block cache of jit/gpu over cuMemAlloc /
// cuMemFree, safe because every kfuse launch and copy on a device runs on its one stream.
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "../gpu/block_cache.hpp"
#include "cuda_driver.hpp"
#include "kfuse/error.hpp"

namespace kfuse::detail::cuda {

namespace {

CUdeviceptr dptr(void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }
void* hptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

struct Memory {
  int index = 0;
  CUmemoryPool pool = nullptr;             // set: stream-ordered allocation
  std::unique_ptr<gpu::BlockCache> cache;  // otherwise
  std::mutex mu;
  DeviceMemoryStats st;   // pool path only (the block cache keeps its own)
  uint64_t reserved = 0;  // the pool's reserved bytes after the last allocation
};

void init_memory(Memory& m, int index) {
  m.index = index;
  Dev& dev = device(index);
  const Driver& d = driver();
  int pools = 0;
  if (d.MemAllocAsync && d.MemFreeAsync && d.DeviceGetDefaultMemPool && d.MemPoolSetAttribute &&
      d.DeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, dev.device) == CUDA_SUCCESS && pools &&
      d.DeviceGetDefaultMemPool(&m.pool, dev.device) == CUDA_SUCCESS) {
    cuuint64_t never = ~cuuint64_t{0};
    check(d.MemPoolSetAttribute(m.pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &never),
          "cuMemPoolSetAttribute (release threshold)");
    m.st.allocator = "cuMemAllocAsync pool";
    return;
  }
  m.pool = nullptr;
  CUcontext ctx = dev.ctx;
  m.cache = std::make_unique<gpu::BlockCache>(
      [ctx](size_t bytes) -> void* {
        const Driver& dr = driver();
        dr.CtxSetCurrent(ctx);
        CUdeviceptr p = 0;
        CUresult rc = dr.MemAlloc(&p, bytes);
        if (rc == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
        check(rc, "cuMemAlloc");
        return hptr(p);
      },
      [ctx](void* p) {
        const Driver& dr = driver();
        dr.CtxSetCurrent(ctx);
        dr.MemFree(dptr(p));
      },
      size_t{1} << 40);  // bounded by the device: on out-of-memory the cache is emptied and retried
}

Memory& memory(int index) {
  static std::mutex mu;
  // Never destroyed: tensors freed during static destruction still reach their device's memory.
  static auto& mems = *new std::vector<std::unique_ptr<Memory>>;
  std::lock_guard<std::mutex> lk(mu);
  if (index < 0) throw BackendUnavailable("CUDA: negative device index");
  if (mems.size() <= static_cast<size_t>(index)) mems.resize(index + 1);
  if (!mems[index]) {
    auto m = std::make_unique<Memory>();
    init_memory(*m, index);
    mems[index] = std::move(m);
  }
  return *mems[index];
}

}  // namespace

void* mem_take(int index, size_t bytes) {
  Memory& m = memory(index);
  Dev& dev = device(index);  // current on this thread
  if (!m.pool) return m.cache->take(bytes);
  const Driver& d = driver();
  CUdeviceptr p = 0;
  CUresult rc = d.MemAllocAsync(&p, bytes, dev.stream);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY && d.MemPoolTrimTo) {  // give the pool's free memory back, retry
    d.StreamSynchronize(dev.stream);
    d.MemPoolTrimTo(m.pool, 0);
    rc = d.MemAllocAsync(&p, bytes, dev.stream);
  }
  check(rc, "cuMemAllocAsync");
  cuuint64_t reserved = 0;
  if (d.MemPoolGetAttribute) d.MemPoolGetAttribute(m.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
  std::lock_guard<std::mutex> lk(m.mu);
  // The pool grew: the driver allocated; otherwise freed memory of the pool was reused.
  if (reserved > m.reserved) ++m.st.driver_allocs;
  else ++m.st.reuses;
  m.reserved = reserved;
  m.st.bytes_in_use += bytes;
  return hptr(p);
}

void mem_give(int index, void* p, size_t bytes) {
  Memory& m = memory(index);
  if (!m.pool) {
    m.cache->give(p, bytes);
    return;
  }
  Dev& dev = device(index);
  check(driver().MemFreeAsync(dptr(p), dev.stream), "cuMemFreeAsync");
  std::lock_guard<std::mutex> lk(m.mu);
  m.st.bytes_in_use -= bytes;
}

void count_sync(int index) {
  Memory& m = memory(index);
  if (!m.pool) {
    m.cache->count_sync();
    return;
  }
  std::lock_guard<std::mutex> lk(m.mu);
  ++m.st.host_syncs;
}

DeviceMemoryStats mem_stats(int index) {
  Memory& m = memory(index);
  if (!m.pool) return m.cache->stats();
  const Driver& d = driver();
  cuuint64_t reserved = 0, used = 0;
  if (d.MemPoolGetAttribute) {
    d.MemPoolGetAttribute(m.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
    d.MemPoolGetAttribute(m.pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
  }
  std::lock_guard<std::mutex> lk(m.mu);
  DeviceMemoryStats s = m.st;
  s.bytes_cached = reserved > used ? reserved - used : 0;
  return s;
}

void mem_release_cached(int index) {
  Memory& m = memory(index);
  Dev& dev = device(index);
  const Driver& d = driver();
  check(d.StreamSynchronize(dev.stream), "cuStreamSynchronize");
  count_sync(index);
  if (!m.pool) {
    m.cache->release_cached();
    return;
  }
  if (d.MemPoolTrimTo) check(d.MemPoolTrimTo(m.pool, 0), "cuMemPoolTrimTo");
  cuuint64_t reserved = 0;
  if (d.MemPoolGetAttribute) d.MemPoolGetAttribute(m.pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
  std::lock_guard<std::mutex> lk(m.mu);
  m.reserved = reserved;
}

}  // namespace kfuse::detail::cuda
