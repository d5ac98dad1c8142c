// OpenCL device memory and launch bookkeeping for the executor (and the tests). Tensors on
// Device::opencl(i) keep a cl_mem in Storage::data (Storage::owner releases it). Copies are
// ordered after every kernel launched before them on the device's in-order queue.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kfuse/node.hpp"

namespace kfuse::detail {

/// True when OpenCL device `index` (devices of every platform, in platform order) can be used.
bool opencl_available(int index = 0);
/// "<platform> / <device>", or the reason no device is usable.
std::string opencl_describe(int index = 0);
/// Uninitialised device memory for `numel` elements (a 1-byte allocation when empty).
/// Throws BackendUnavailable without a device, BackendError when the allocation fails.
std::shared_ptr<Storage> opencl_alloc(DType dtype, int64_t numel, int index = 0);
/// Copies dst.bytes() bytes from host memory `src` into device storage `dst`.
void opencl_copy_to_device(const Storage& dst, const void* src);
/// Copies src.bytes() bytes of device storage `src` into host memory `dst` (blocking).
void opencl_copy_to_host(const Storage& src, void* dst);
/// Waits for every command queued on the device.
void opencl_finish(int index = 0);
/// Kernel launches (clEnqueueNDRangeKernel calls) made by this process so far.
uint64_t opencl_launch_count();

}  // namespace kfuse::detail
