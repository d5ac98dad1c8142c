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
  sym(d.EventQuery, "cuEventQuery");
  sym(d.MemHostAlloc, "cuMemHostAlloc");
  sym(d.MemFreeHost, "cuMemFreeHost");
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

namespace {

constexpr size_t kStagingSlotBytes = size_t{2} << 20;
constexpr int kStagingSlots = 4;

// The device's staging ring (gpu/staging.hpp): slots from cuMemHostAlloc, fenced by events
// recorded on the device's stream after each copy. The hooks run on threads that have made the
// device's context current (every caller goes through device()).
gpu::StagingRing* make_staging(Dev& dev) {
  const Driver& d = driver();
  dev.fences.assign(kStagingSlots, nullptr);
  for (CUevent& e : dev.fences) check(d.EventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  gpu::StagingRing::Hooks h;
  h.alloc = [&d](int, size_t bytes) -> void* {
    void* p = nullptr;
    return d.MemHostAlloc(&p, bytes, 0) == CUDA_SUCCESS ? p : nullptr;
  };
  h.release = [&d](int, void* p) { d.MemFreeHost(p); };
  // (an event never recorded counts as complete)
  h.done = [&d, &dev](int slot) { return d.EventQuery(dev.fences[slot]) == CUDA_SUCCESS; };
  h.wait = [&d, &dev](int slot) { check(d.EventSynchronize(dev.fences[slot]), "cuEventSynchronize (staging)"); };
  return new gpu::StagingRing(std::move(h), kStagingSlotBytes, kStagingSlots);
}

}  // namespace

Dev& device(int index) {
  static std::mutex mu;
  // Never destroyed: the devices (their staging rings included) live for the process.
  static auto& devs = *new std::vector<std::unique_ptr<Dev>>;
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
    dev->staging = make_staging(*dev);
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

// Uploads go through the pinned staging ring and return without waiting (the caller's bytes are
// copied before return); without pinned memory, an asynchronous copy from pageable memory and a
// wait (`src` may be freed when this returns).
void cuda_copy_to_device(const Storage& dst, const void* src) {
  if (dst.bytes() == 0) return;
  const int index = dst.device.index();
  cuda::Dev& dev = cuda::device(index);
  const cuda::Driver& d = cuda::driver();
  const CUdeviceptr to = ptr_of(dst);
  const uint64_t w0 = dev.staging->waits();
  const bool staged = dev.staging->upload(src, dst.bytes(), [&](int slot, void* host, size_t off, size_t n) {
    cuda::check(d.MemcpyHtoDAsync(to + off, host, n, dev.stream), "cuMemcpyHtoDAsync");
    cuda::check(d.EventRecord(dev.fences[slot], dev.stream), "cuEventRecord");
  });
  if (staged) {
    for (uint64_t w = dev.staging->waits(); w > w0; --w) cuda::count_sync(index);
    return;
  }
  cuda::check(d.MemcpyHtoDAsync(to, src, dst.bytes(), dev.stream), "cuMemcpyHtoDAsync");
  cuda::count_sync(index);
  cuda::check(d.StreamSynchronize(dev.stream), "cuStreamSynchronize");
}

// Reads wait (their caller needs the values): chunked through the staging ring, the host's copy
// of one chunk out of pinned memory overlapping the device's copy of the next.
void cuda_copy_to_host(const Storage& src, void* dst) {
  if (src.bytes() == 0) return;
  const int index = src.device.index();
  cuda::Dev& dev = cuda::device(index);
  const cuda::Driver& d = cuda::driver();
  const CUdeviceptr from = ptr_of(src);
  cuda::count_sync(index);
  const bool staged = dev.staging->download(dst, src.bytes(), [&](int slot, void* host, size_t off, size_t n) {
    cuda::check(d.MemcpyDtoHAsync(host, from + off, n, dev.stream), "cuMemcpyDtoHAsync");
    cuda::check(d.EventRecord(dev.fences[slot], dev.stream), "cuEventRecord");
  });
  if (staged) return;
  cuda::check(d.MemcpyDtoHAsync(dst, from, src.bytes(), dev.stream), "cuMemcpyDtoHAsync");
  cuda::check(d.StreamSynchronize(dev.stream), "cuStreamSynchronize");
}

void cuda_synchronize(int index) {
  cuda::Dev& dev = cuda::device(index);
  cuda::count_sync(index);
  cuda::check(cuda::driver().StreamSynchronize(dev.stream), "cuStreamSynchronize");
}

uint64_t cuda_launch_count() { return cuda::g_launches.load(std::memory_order_relaxed); }

}  // namespace kfuse::detail
