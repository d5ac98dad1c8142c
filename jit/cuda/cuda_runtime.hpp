// CUDA for kfuse: NVRTC compilation (linked) and the driver API (libcuda loaded with dlopen at
// run time, never linked, so the library loads on machines without a GPU). Tensors on
// Device::cuda(i) keep a CUdeviceptr in Storage::data (Storage::owner frees it). Copies run on
// the device's stream, after every kernel launched before them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kfuse/node.hpp"

namespace kfuse::detail {

struct NvrtcOutput {
  std::string ptx;             ///< PTX text (cubin == false)
  std::vector<uint8_t> cubin;  ///< SASS for the real arch (cubin == true)
  std::string log;             ///< NVRTC program log (warnings)
  double ms = 0;
};

/// Compiles CUDA C++ with NVRTC for `arch` ("sm_80", "sm_90", ...): PTX for compute_XX, or a
/// CUBIN for sm_XX when `cubin` is true. Throws BackendError with the NVRTC program log on failure.
NvrtcOutput nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch = "sm_80",
                          bool cubin = false);
/// "13.0"
std::string nvrtc_version();
/// The real archs NVRTC can compile for (e.g. 75 80 86 ... 120).
std::vector<int> nvrtc_archs();

/// True when libcuda loads, cuInit succeeds and device `index` exists.
bool cuda_available(int index = 0);
/// The device's name and arch, or why CUDA is unavailable (no driver, stub library, no device).
std::string cuda_describe(int index = 0);
/// Uninitialised device memory (cuMemAlloc; 1 byte when empty). Throws BackendUnavailable.
std::shared_ptr<Storage> cuda_alloc(DType dtype, int64_t numel, int index = 0);
/// Copies dst.bytes() bytes from host `src` into device storage `dst` (returns when done).
void cuda_copy_to_device(const Storage& dst, const void* src);
/// Copies src.bytes() bytes of device storage `src` into host `dst` (waits for earlier launches).
void cuda_copy_to_host(const Storage& src, void* dst);
/// Waits for the device's stream.
void cuda_synchronize(int index = 0);
/// Kernel launches (cuLaunchKernel calls) made by this process so far.
uint64_t cuda_launch_count();

}  // namespace kfuse::detail
