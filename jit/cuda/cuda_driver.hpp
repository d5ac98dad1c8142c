// Internal to jit/cuda: the CUDA driver API resolved with dlsym from libcuda.so.1 (never linked).
#pragma once
#include <cuda.h>

#include <cstddef>
#include <string>
#include <vector>

#include "../gpu/staging.hpp"
#include "kfuse/device.hpp"

namespace kfuse::detail::cuda {

struct Driver {
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuDriverGetVersion) DriverGetVersion = nullptr;
  decltype(&::cuDeviceGetCount) DeviceGetCount = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDeviceGetName) DeviceGetName = nullptr;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain = nullptr;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&::cuStreamCreate) StreamCreate = nullptr;
  decltype(&::cuStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&::cuModuleLoadData) ModuleLoadData = nullptr;
  decltype(&::cuModuleUnload) ModuleUnload = nullptr;
  decltype(&::cuModuleGetFunction) ModuleGetFunction = nullptr;
  decltype(&::cuMemAlloc) MemAlloc = nullptr;
  decltype(&::cuMemFree) MemFree = nullptr;
  decltype(&::cuMemcpyHtoDAsync) MemcpyHtoDAsync = nullptr;
  decltype(&::cuMemcpyDtoHAsync) MemcpyDtoHAsync = nullptr;
  decltype(&::cuLaunchKernel) LaunchKernel = nullptr;
  decltype(&::cuEventCreate) EventCreate = nullptr;  // the profiler's device timestamps
  decltype(&::cuEventRecord) EventRecord = nullptr;
  decltype(&::cuEventSynchronize) EventSynchronize = nullptr;
  decltype(&::cuEventElapsedTime) EventElapsedTime = nullptr;
  decltype(&::cuEventDestroy) EventDestroy = nullptr;
  decltype(&::cuEventQuery) EventQuery = nullptr;      // staging slots' fences
  decltype(&::cuMemHostAlloc) MemHostAlloc = nullptr;  // pinned staging memory
  decltype(&::cuMemFreeHost) MemFreeHost = nullptr;
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;
  // Stream-ordered allocation (CUDA 11.2+); null on older drivers, which take the fallback.
  decltype(&::cuMemAllocAsync) MemAllocAsync = nullptr;
  decltype(&::cuMemFreeAsync) MemFreeAsync = nullptr;
  decltype(&::cuDeviceGetDefaultMemPool) DeviceGetDefaultMemPool = nullptr;
  decltype(&::cuMemPoolSetAttribute) MemPoolSetAttribute = nullptr;
  decltype(&::cuMemPoolGetAttribute) MemPoolGetAttribute = nullptr;
  decltype(&::cuMemPoolTrimTo) MemPoolTrimTo = nullptr;
  int version = 0;
};

/// One device: its primary context, a stream and its compute capability (e.g. 90).
struct Dev {
  CUdevice device = 0;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  int arch = 0;
  std::string name;
  // Host <-> device copies through pinned slots (gpu/staging.hpp), each fenced by an event.
  // Never freed: the devices live for the process, and the driver may be gone at static
  // destruction.
  gpu::StagingRing* staging = nullptr;
  std::vector<CUevent> fences;
};

/// The loaded driver; throws BackendUnavailable (no libcuda, stub library, cuInit failure).
const Driver& driver();
/// Device `index` made current on the calling thread; throws BackendUnavailable.
Dev& device(int index);
/// Throws BackendError naming the call and the driver's error text when rc is not CUDA_SUCCESS.
void check(CUresult rc, const char* what);
/// Counts one launch.
void count_launch();

/// Device memory of device `index` (cuda_memory.cpp): `bytes` (> 0) usable in stream order on the
/// device's stream from now on; give() returns it (stream-ordered: work queued before may still
/// use it). Throws BackendError when the device is out of memory.
void* mem_take(int index, size_t bytes);
void mem_give(int index, void* p, size_t bytes);
/// Counts one host wait on device `index`'s stream.
void count_sync(int index);
/// The memory counters of device `index`, and giving its cached memory back (after a sync).
DeviceMemoryStats mem_stats(int index);
void mem_release_cached(int index);

}  // namespace kfuse::detail::cuda
