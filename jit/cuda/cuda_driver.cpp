// The CUDA driver API through dlopen("libcuda.so.1"), device memory and copies. A missing driver,
// the toolkit's stub library (cuInit returns CUDA_ERROR_STUB_LIBRARY, 34) or a machine without a
// device give BackendUnavailable with the reason; nothing here aborts the process.
#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda_runtime.hpp"
#include "kfuse/error.hpp"

namespace kfuse::detail {

namespace cuda {

namespace {

std::atomic<uint64_t> g_launches{0};

struct Loaded {
  Driver drv;
  std::string error;  // empty when usable
};

Loaded load() {
  Loaded l;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.error = std::string("no CUDA driver: ") + (e ? e : "dlopen(libcuda.so.1) failed");
    return l;
  }
  Driver& d = l.drv;
  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (!fn) {
      ok = false;
      l.error = std::string("the CUDA driver lacks ") + name;
    }
  };
  sym(d.Init, "cuInit");
  sym(d.DriverGetVersion, "cuDriverGetVersion");
  sym(d.DeviceGetCount, "cuDeviceGetCount");
  sym(d.DeviceGet, "cuDeviceGet");
  sym(d.DeviceGetName, "cuDeviceGetName");
  sym(d.DeviceGetAttribute, "cuDeviceGetAttribute");
  sym(d.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  sym(d.CtxSetCurrent, "cuCtxSetCurrent");
  sym(d.StreamCreate, "cuStreamCreate");
  sym(d.StreamSynchronize, "cuStreamSynchronize");
  sym(d.ModuleLoadData, "cuModuleLoadData");
  sym(d.ModuleUnload, "cuModuleUnload");
  sym(d.ModuleGetFunction, "cuModuleGetFunction");
  sym(d.MemAlloc, "cuMemAlloc_v2");
  sym(d.MemFree, "cuMemFree_v2");
  sym(d.MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  sym(d.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  sym(d.LaunchKernel, "cuLaunchKernel");
  sym(d.EventCreate, "cuEventCreate");
  sym(d.EventRecord, "cuEventRecord");
  sym(d.EventSynchronize, "cuEventSynchronize");
  sym(d.EventElapsedTime, "cuEventElapsedTime");
  sym(d.EventDestroy, "cuEventDestroy_v2");
  sym(d.GetErrorName, "cuGetErrorName");
  sym(d.GetErrorString, "cuGetErrorString");
  if (!ok) return l;
  auto opt = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
  };
  opt(d.MemAllocAsync, "cuMemAllocAsync");
  opt(d.MemFreeAsync, "cuMemFreeAsync");
  opt(d.DeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool");
  opt(d.MemPoolSetAttribute, "cuMemPoolSetAttribute");
  opt(d.MemPoolGetAttribute, "cuMemPoolGetAttribute");
  opt(d.MemPoolTrimTo, "cuMemPoolTrimTo");
  CUresult rc = d.Init(0);
  if (rc == 34 /* CUDA_ERROR_STUB_LIBRARY */) {
    l.error = "libcuda.so.1 is the toolkit's stub library (cuInit returned CUDA_ERROR_STUB_LIBRARY): no real driver";
  } else if (rc != CUDA_SUCCESS) {
    const char* s = nullptr;
    d.GetErrorString(rc, &s);
    l.error = "cuInit failed (error " + std::to_string(rc) + ": " + (s ? s : "?") + "): no usable GPU or driver";
  } else {
    d.DriverGetVersion(&d.version);
  }
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw BackendUnavailable("CUDA: " + l.error);
  return l.drv;
}

void check(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return;
  const char *name = nullptr, *str = nullptr;
  const Driver& d = loaded().drv;
  if (d.GetErrorName) d.GetErrorName(rc, &name);
  if (d.GetErrorString) d.GetErrorString(rc, &str);
  throw BackendError(std::string("CUDA: ") + what + " failed: " + (name ? name : std::to_string(rc)) + " (" +
                     (str ? str : "?") + ")");
}

void count_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }

Dev& device(int index) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<Dev>> devs;
  const Driver& d = driver();
  std::unique_lock<std::mutex> lk(mu);
  if (index < 0 || devs.size() <= static_cast<size_t>(index) || !devs[index]) {
    int n = 0;
    check(d.DeviceGetCount(&n), "cuDeviceGetCount");
    if (index < 0 || index >= n)
      throw BackendUnavailable("CUDA: no device with index " + std::to_string(index) + " (" + std::to_string(n) +
                               " found)");
    auto dev = std::make_unique<Dev>();
    check(d.DeviceGet(&dev->device, index), "cuDeviceGet");
    int major = 0, minor = 0;
    check(d.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev->device),
          "cuDeviceGetAttribute");
    check(d.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev->device),
          "cuDeviceGetAttribute");
    dev->arch = major * 10 + minor;
    char name[256] = {};
    d.DeviceGetName(name, sizeof name, dev->device);
    dev->name = name;
    check(d.DevicePrimaryCtxRetain(&dev->ctx, dev->device), "cuDevicePrimaryCtxRetain");
    check(d.CtxSetCurrent(dev->ctx), "cuCtxSetCurrent");
    check(d.StreamCreate(&dev->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    if (devs.size() <= static_cast<size_t>(index)) devs.resize(index + 1);
    devs[index] = std::move(dev);
  }
  Dev& dev = *devs[index];
  lk.unlock();
  check(d.CtxSetCurrent(dev.ctx), "cuCtxSetCurrent");  // the current context is per thread
  return dev;
}

}  // namespace cuda

namespace {
CUdeviceptr ptr_of(const Storage& s) {
  if (s.device.kind() != Device::Kind::CUDA) throw InternalError("CUDA: storage is not on a CUDA device");
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(s.data));
}
}  // namespace

bool cuda_available(int index) {
  try {
    cuda::device(index);
    return true;
  } catch (const Error&) { return false; }
}

std::string cuda_describe(int index) {
  try {
    cuda::Dev& d = cuda::device(index);
    return d.name + " (sm_" + std::to_string(d.arch) + ", driver " + std::to_string(cuda::driver().version) + ")";
  } catch (const Error& e) { return e.what(); }
}

std::shared_ptr<Storage> cuda_alloc(DType dtype, int64_t numel, int index) {
  auto s = std::make_shared<Storage>();
  s->dtype = dtype;
  s->numel = numel;
  s->device = Device::cuda(index);
  const size_t bytes = std::max<size_t>(1, s->bytes());
  s->data = cuda::mem_take(index, bytes);
  s->owner = std::shared_ptr<void>(s->data, [index, bytes](void* q) {
    try {
      cuda::mem_give(index, q, bytes);
    } catch (...) {  // a deleter must not throw; the driver reclaims the memory with the context
    }
  });
  return s;
}

void cuda_copy_to_device(const Storage& dst, const void* src) {
  if (dst.bytes() == 0) return;
  cuda::Dev& dev = cuda::device(dst.device.index());
  const cuda::Driver& d = cuda::driver();
  cuda::check(d.MemcpyHtoDAsync(ptr_of(dst), src, dst.bytes(), dev.stream), "cuMemcpyHtoDAsync");
  cuda::count_sync(dst.device.index());  // `src` may be freed when this returns
  cuda::check(d.StreamSynchronize(dev.stream), "cuStreamSynchronize");
}

void cuda_copy_to_host(const Storage& src, void* dst) {
  if (src.bytes() == 0) return;
  cuda::Dev& dev = cuda::device(src.device.index());
  const cuda::Driver& d = cuda::driver();
  cuda::check(d.MemcpyDtoHAsync(dst, ptr_of(src), src.bytes(), dev.stream), "cuMemcpyDtoHAsync");
  cuda::count_sync(src.device.index());
  cuda::check(d.StreamSynchronize(dev.stream), "cuStreamSynchronize");
}

void cuda_synchronize(int index) {
  cuda::Dev& dev = cuda::device(index);
  cuda::count_sync(index);
  cuda::check(cuda::driver().StreamSynchronize(dev.stream), "cuStreamSynchronize");
}

uint64_t cuda_launch_count() { return cuda::g_launches.load(std::memory_order_relaxed); }

}  // namespace kfuse::detail
