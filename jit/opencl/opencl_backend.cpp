// The OpenCL backend: kernel IR -> OpenCL C 1.2 (jit/gpu renderer) -> clBuildProgram -> launches
// on the device's in-order queue. Device memory and copies: opencl_runtime.hpp. Buffers come from
// the device's block cache (jit/gpu/block_cache.hpp): the queue is in order, so a freed buffer
// can be handed out again at once.
#include <CL/cl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

#include "../gpu/block_cache.hpp"
#include "../gpu/gpu_render.hpp"
#include "../gpu/staging.hpp"
#include "backend/factories.hpp"
#include "kfuse/error.hpp"
#include "kfuse/options.hpp"
#include "opencl_runtime.hpp"

namespace kfuse::detail {

namespace {

std::atomic<uint64_t> g_launches{0};

void check(cl_int rc, const char* what) {
  if (rc != CL_SUCCESS)
    throw BackendError(std::string("OpenCL: ") + what + " failed (error " + std::to_string(rc) + ")");
}

// clGetPlatformInfo / clGetDeviceInfo string queries.
template <typename Obj, typename Info, typename Fn>
std::string info_str(Fn fn, Obj obj, Info what) {
  size_t n = 0;
  fn(obj, what, 0, nullptr, &n);
  std::string s(n, '\0');
  fn(obj, what, n, s.data(), nullptr);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// One OpenCL device with its context and in-order queue, created on first use.
struct ClDevice {
  cl_device_id device = nullptr;
  cl_context ctx = nullptr;
  cl_command_queue queue = nullptr;
  std::string desc;   // platform / device / driver
  std::string error;  // why unusable (empty when usable)
  bool fp64 = false;
  size_t max_wg = 0;
  std::unique_ptr<gpu::BlockCache> mem;  // every buffer of this device (tensors and scratch)
  // Host <-> device copies: pinned slots (CL_MEM_ALLOC_HOST_PTR buffers, mapped once) and the
  // event of the last copy through each (gpu/staging.hpp).
  std::unique_ptr<gpu::StagingRing> staging;
  std::vector<cl_mem> staging_bufs;
  std::vector<cl_event> fences;
};

constexpr size_t kStagingSlotBytes = size_t{2} << 20;
constexpr int kStagingSlots = 4;

void set_fence(ClDevice& d, int slot, cl_event ev) {
  if (d.fences[slot]) clReleaseEvent(d.fences[slot]);
  d.fences[slot] = ev;
}

std::unique_ptr<gpu::StagingRing> make_staging(ClDevice& d) {
  d.staging_bufs.assign(kStagingSlots, nullptr);
  d.fences.assign(kStagingSlots, nullptr);
  gpu::StagingRing::Hooks h;
  h.alloc = [&d](int slot, size_t bytes) -> void* {
    cl_int rc = CL_SUCCESS;
    cl_mem m = clCreateBuffer(d.ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes, nullptr, &rc);
    if (rc != CL_SUCCESS) return nullptr;
    void* p = clEnqueueMapBuffer(d.queue, m, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, nullptr, nullptr, &rc);
    if (rc != CL_SUCCESS || !p) {
      clReleaseMemObject(m);
      return nullptr;
    }
    d.staging_bufs[slot] = m;
    return p;
  };
  h.release = [&d](int slot, void* p) {
    clEnqueueUnmapMemObject(d.queue, d.staging_bufs[slot], p, 0, nullptr, nullptr);
    clReleaseMemObject(d.staging_bufs[slot]);
    d.staging_bufs[slot] = nullptr;
    set_fence(d, slot, nullptr);
  };
  h.done = [&d](int slot) {
    cl_int st = CL_COMPLETE;
    if (d.fences[slot]) clGetEventInfo(d.fences[slot], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, nullptr);
    return st == CL_COMPLETE;
  };
  h.wait = [&d](int slot) {
    if (d.fences[slot]) check(clWaitForEvents(1, &d.fences[slot]), "clWaitForEvents (staging)");
  };
  return std::make_unique<gpu::StagingRing>(std::move(h), kStagingSlotBytes, kStagingSlots);
}

ClDevice make_device(int index) {
  ClDevice d;
  cl_uint np = 0;
  if (clGetPlatformIDs(0, nullptr, &np) != CL_SUCCESS || np == 0) {
    d.error = "no OpenCL platform (is an ICD such as pocl-opencl-icd installed?)";
    return d;
  }
  std::vector<cl_platform_id> plats(np);
  clGetPlatformIDs(np, plats.data(), nullptr);
  int seen = 0;
  for (cl_platform_id p : plats) {
    cl_uint nd = 0;
    if (clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS) continue;
    std::vector<cl_device_id> devs(nd);
    clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, devs.data(), nullptr);
    for (cl_device_id dev : devs) {
      if (seen++ != index) continue;
      cl_int rc = CL_SUCCESS;
      d.device = dev;
      d.ctx = clCreateContext(nullptr, 1, &dev, nullptr, nullptr, &rc);
      if (rc != CL_SUCCESS) {
        d.error = "clCreateContext failed (error " + std::to_string(rc) + ")";
        return d;
      }
      // Profiling enabled: the profiler times launches with the events' device timestamps.
      d.queue = clCreateCommandQueue(d.ctx, dev, CL_QUEUE_PROFILING_ENABLE, &rc);
      if (rc != CL_SUCCESS) {
        d.error = "clCreateCommandQueue failed (error " + std::to_string(rc) + ")";
        return d;
      }
      cl_uint fp = 0;
      cl_device_fp_config cfg = 0;
      clGetDeviceInfo(dev, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof cfg, &cfg, nullptr);
      clGetDeviceInfo(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_DOUBLE, sizeof fp, &fp, nullptr);
      d.fp64 = cfg != 0 && fp != 0;
      clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof d.max_wg, &d.max_wg, nullptr);
      cl_ulong global = 0;
      clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, nullptr);
      cl_context ctx = d.ctx;
      d.mem = std::make_unique<gpu::BlockCache>(
          [ctx](size_t bytes) -> void* {
            cl_int err = CL_SUCCESS;
            cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, nullptr, &err);
            if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY)
              return nullptr;
            check(err, "clCreateBuffer");
            return m;
          },
          [](void* m) { clReleaseMemObject(static_cast<cl_mem>(m)); },
          static_cast<size_t>(global / 2));  // cache at most half of the device's memory
      d.staging = nullptr;                   // (made by device(): the hooks refer to the ClDevice's final address)
      d.desc = info_str(clGetPlatformInfo, p, CL_PLATFORM_VERSION) + " / " +
               info_str(clGetDeviceInfo, dev, CL_DEVICE_NAME) + " / " +
               info_str(clGetDeviceInfo, dev, CL_DRIVER_VERSION);
      return d;
    }
  }
  d.error = "no OpenCL device with index " + std::to_string(index) + " (" + std::to_string(seen) + " found)";
  return d;
}

ClDevice& device(int index) {
  static std::mutex mu;
  // Never destroyed: tensors freed during static destruction still return buffers to the cache.
  static auto& devs = *new std::vector<std::unique_ptr<ClDevice>>;
  std::lock_guard<std::mutex> lk(mu);
  if (index < 0) throw BackendUnavailable("OpenCL: negative device index");
  if (devs.size() <= static_cast<size_t>(index)) devs.resize(index + 1);
  if (!devs[index]) {
    devs[index] = std::make_unique<ClDevice>(make_device(index));
    // (after the move into place: the ring's hooks refer to the ClDevice by address)
    if (devs[index]->error.empty()) devs[index]->staging = make_staging(*devs[index]);
  }
  return *devs[index];
}

ClDevice& usable(int index) {
  ClDevice& d = device(index);
  if (!d.error.empty()) throw BackendUnavailable("OpenCL device " + std::to_string(index) + ": " + d.error);
  return d;
}

cl_mem mem_of(const Storage& s) {
  if (s.device.kind() != Device::Kind::OpenCL) throw InternalError("OpenCL: storage is not on an OpenCL device");
  return static_cast<cl_mem>(s.data);
}

// ---------------------------------------------------------------- compiled kernels
class OpenCLKernel final : public CompiledKernel {
 public:
  OpenCLKernel(const ir::Kernel& k, gpu::Rendered r, ClDevice& dev, cl_program prog)
      : k_(k), r_(std::move(r)), dev_(dev), prog_(prog) {
    for (const auto& s : r_.stages) {
      cl_int rc = CL_SUCCESS;
      cl_kernel kn = clCreateKernel(prog_, s.entry.c_str(), &rc);
      check(rc, "clCreateKernel");
      kernels_.push_back(kn);
    }
    params_.assign(std::max<size_t>(1, k_.params.size()), 0);
    set_.resize(r_.stages.size());
    for (SetArgs& set : set_) {
      set.buffers.resize(k_.buffers.size());
      set.params = params_;
    }
  }
  ~OpenCLKernel() override {
    for (cl_kernel kn : kernels_) clReleaseKernel(kn);
    clReleaseProgram(prog_);
  }

  void run(const ir::LaunchArgs& args) const override { launch(args, nullptr); }

  // Device time of the launch: from the first stage's start to the last stage's end (profiling
  // events of the in-order queue), waiting for it to complete.
  double run_timed(const ir::LaunchArgs& args) const override {
    std::vector<cl_event> evs;
    try {
      launch(args, &evs);
    } catch (...) {
      for (cl_event e : evs) clReleaseEvent(e);
      throw;
    }
    if (evs.empty()) return 0;
    double s = 0;
    cl_int rc = clWaitForEvents(static_cast<cl_uint>(evs.size()), evs.data());
    cl_ulong t0 = 0, t1 = 0;
    if (rc == CL_SUCCESS &&
        clGetEventProfilingInfo(evs.front(), CL_PROFILING_COMMAND_START, sizeof t0, &t0, nullptr) == CL_SUCCESS &&
        clGetEventProfilingInfo(evs.back(), CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr) == CL_SUCCESS)
      s = static_cast<double>(t1 - t0) * 1e-9;
    for (cl_event e : evs) clReleaseEvent(e);
    check(rc, "clWaitForEvents");
    return s;
  }

 private:
  // Host time per launch is the cost of a small kernel (README "GPU backends", launch path): no
  // allocation here, and clSetKernelArg only for the arguments that changed since this kernel
  // object's previous launch (a cached plan re-runs with the same buffers and params).
  void launch(const ir::LaunchArgs& args, std::vector<cl_event>* evs) const {
    if (args.buffers.size() != k_.buffers.size() || args.params.size() != k_.params.size())
      throw InternalError("OpenCL: launch of " + k_.name + " with the wrong number of buffers or params");
    const int64_t outer = ir::outer_points(k_, args.params);
    if (outer <= 0) return;
    // Partials of split reductions: a cached block, given back as soon as the launches are
    // queued (whatever takes it next is queued after them).
    cl_mem scratch = nullptr;
    const size_t scratch_bytes = static_cast<size_t>(outer * r_.split * r_.scratch_slots) * 8;
    if (r_.scratch_slots > 0) scratch = static_cast<cl_mem>(dev_.mem->take(scratch_bytes));
    std::lock_guard<std::mutex> lk(mu_);  // clSetKernelArg is not thread-safe per kernel object
    try {
      std::copy(args.params.begin(), args.params.end(), params_.begin());  // params_[0] = 0 when none
      for (size_t s = 0; s < r_.stages.size(); ++s) {
        const gpu::Stage& st = r_.stages[s];
        cl_kernel kn = kernels_[s];
        SetArgs& set = set_[s];
        cl_uint a = 0;
        for (void* b : args.buffers) {
          if (!set.valid || set.buffers[a] != b) {
            cl_mem m = static_cast<cl_mem>(b);
            check(clSetKernelArg(kn, a, sizeof(cl_mem), &m), "clSetKernelArg (buffer)");
            set.buffers[a] = b;
          }
          ++a;
        }
        if (!set.valid || set.params != params_) {
          check(clSetKernelArg(kn, a, params_.size() * sizeof(int64_t), params_.data()), "clSetKernelArg (params)");
          set.params = params_;  // same size: no allocation
        }
        ++a;
        if (st.uses_scratch && (!set.valid || set.scratch != scratch)) {
          check(clSetKernelArg(kn, a, sizeof(cl_mem), &scratch), "clSetKernelArg (partials)");
          set.scratch = scratch;
        }
        set.valid = true;
        const int64_t groups = gpu::groups_for(st, gpu::opencl_dialect(), gpu::stage_units(st, k_, args.params));
        size_t local = static_cast<size_t>(st.block), global = static_cast<size_t>(groups) * local;
        cl_event ev = nullptr;
        check(clEnqueueNDRangeKernel(dev_.queue, kn, 1, nullptr, &global, &local, 0, nullptr, evs ? &ev : nullptr),
              "clEnqueueNDRangeKernel");
        if (evs) evs->push_back(ev);
        g_launches.fetch_add(1, std::memory_order_relaxed);
      }
    } catch (...) {
      for (SetArgs& set : set_) set.valid = false;  // a failed clSetKernelArg leaves the state unknown
      if (scratch) dev_.mem->give(scratch, scratch_bytes);
      throw;
    }
    if (scratch) dev_.mem->give(scratch, scratch_bytes);
  }

  ir::Kernel k_;
  gpu::Rendered r_;
  ClDevice& dev_;
  cl_program prog_;
  std::vector<cl_kernel> kernels_;
  mutable std::mutex mu_;
  // The arguments last set on each stage's kernel object (guarded by mu_).
  struct SetArgs {
    bool valid = false;
    std::vector<void*> buffers;
    std::vector<int64_t> params;
    cl_mem scratch = nullptr;
  };
  mutable std::vector<SetArgs> set_;
  mutable std::vector<int64_t> params_;  // the params argument (max(1, params) values)
};

class OpenCLBackend final : public Backend {
 public:
  explicit OpenCLBackend(int index) : index_(index), dev_(usable(index)) {}
  std::string name() const override { return "opencl"; }
  std::shared_ptr<Storage> allocate(DType dtype, int64_t numel) override { return opencl_alloc(dtype, numel, index_); }
  void copy_to_device(const Storage& dst, const void* host) override { opencl_copy_to_device(dst, host); }
  void copy_to_host(const Storage& src, void* host) override { opencl_copy_to_host(src, host); }
  DeviceMemoryStats memory_stats() override { return dev_.mem->stats(); }
  void empty_cache() override {
    opencl_finish(index_);
    dev_.mem->release_cached();
  }
  void synchronize() override { opencl_finish(index_); }
  std::string target() const override { return "opencl " + dev_.desc; }
  int codegen_version() const override { return gpu::kRenderVersion; }
  Device device() const override { return Device::opencl(index_); }

  std::string options_key(const Options& o) const override { return gpu::render_options_key(o); }

  CompileResult compile(const ir::Kernel& k, const Options& o) override {
    auto t0 = std::chrono::steady_clock::now();
    gpu::Rendered r;
    std::string why;
    if (!gpu::try_render(k, gpu::opencl_dialect(), r, why, gpu::render_knobs(o))) return {nullptr, why};
    if (r.uses_f64 && !dev_.fp64) return {nullptr, "opencl: the device has no fp64 (cl_khr_fp64)"};
    for (const auto& s : r.stages)
      if (static_cast<size_t>(s.block) > dev_.max_wg)
        return {nullptr, "opencl: work-group size " + std::to_string(s.block) + " exceeds the device's maximum"};
    const char* src = r.source.c_str();
    size_t len = r.source.size();
    cl_int rc = CL_SUCCESS;
    cl_program prog = clCreateProgramWithSource(dev_.ctx, 1, &src, &len, &rc);
    check(rc, "clCreateProgramWithSource");
    rc = clBuildProgram(prog, 1, &dev_.device, "-cl-std=CL1.2", nullptr, nullptr);
    if (rc != CL_SUCCESS) {
      size_t n = 0;
      clGetProgramBuildInfo(prog, dev_.device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
      std::string blog(n, '\0');
      clGetProgramBuildInfo(prog, dev_.device, CL_PROGRAM_BUILD_LOG, n, blog.data(), nullptr);
      clReleaseProgram(prog);
      throw BackendError("OpenCL: clBuildProgram failed for " + k.name + " (error " + std::to_string(rc) + ")",
                         blog + "\n---- source ----\n" + r.source);
    }
    auto ck = std::make_shared<OpenCLKernel>(k, r, dev_, prog);
    ck->backend = name();
    ck->target = target();
    ck->source = r.source;
    ck->source_kind = "opencl";
    ck->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log("codegen", "opencl: " + k.name + " strategy " + r.strategy + ", " + std::to_string(r.stages.size()) +
                       " launch(es), built in " + std::to_string(ck->compile_ms) + " ms");
    return {ck, {}};
  }

 private:
  int index_;
  ClDevice& dev_;
};

}  // namespace

bool opencl_available(int index) { return device(index).error.empty(); }

std::string opencl_describe(int index) {
  ClDevice& d = device(index);
  return d.error.empty() ? d.desc : d.error;
}

std::shared_ptr<Storage> opencl_alloc(DType dtype, int64_t numel, int index) {
  ClDevice& d = usable(index);
  auto s = std::make_shared<Storage>();
  s->dtype = dtype;
  s->numel = numel;
  s->device = Device::opencl(index);
  const size_t bytes = std::max<size_t>(1, s->bytes());
  gpu::BlockCache* mem = d.mem.get();
  s->data = mem->take(bytes);
  s->owner = std::shared_ptr<void>(s->data, [mem, bytes](void* p) { mem->give(p, bytes); });
  return s;
}

// Uploads go through the pinned staging ring and return without waiting (the caller's memory is
// copied before return); without pinned memory, a blocking write (`src` may be freed at return).
void opencl_copy_to_device(const Storage& dst, const void* src) {
  if (dst.bytes() == 0) return;
  ClDevice& d = usable(dst.device.index());
  cl_mem m = mem_of(dst);
  const uint64_t w0 = d.staging->waits();
  const bool staged = d.staging->upload(src, dst.bytes(), [&](int slot, void* host, size_t off, size_t n) {
    cl_event ev = nullptr;
    check(clEnqueueWriteBuffer(d.queue, m, CL_FALSE, off, n, host, 0, nullptr, &ev), "clEnqueueWriteBuffer");
    set_fence(d, slot, ev);
  });
  if (staged) {
    for (uint64_t w = d.staging->waits(); w > w0; --w) d.mem->count_sync();
    return;
  }
  d.mem->count_sync();
  check(clEnqueueWriteBuffer(d.queue, m, CL_TRUE, 0, dst.bytes(), src, 0, nullptr, nullptr), "clEnqueueWriteBuffer");
}

// Reads wait for the queue (their caller needs the values): chunked through the staging ring, the
// host's copy of one chunk overlapping the device's copy of the next.
void opencl_copy_to_host(const Storage& src, void* dst) {
  if (src.bytes() == 0) return;
  ClDevice& d = usable(src.device.index());
  cl_mem m = mem_of(src);
  d.mem->count_sync();
  const bool staged = d.staging->download(dst, src.bytes(), [&](int slot, void* host, size_t off, size_t n) {
    cl_event ev = nullptr;
    check(clEnqueueReadBuffer(d.queue, m, CL_FALSE, off, n, host, 0, nullptr, &ev), "clEnqueueReadBuffer");
    set_fence(d, slot, ev);
  });
  if (!staged)
    check(clEnqueueReadBuffer(d.queue, m, CL_TRUE, 0, src.bytes(), dst, 0, nullptr, nullptr), "clEnqueueReadBuffer");
}

void opencl_finish(int index) {
  ClDevice& d = usable(index);
  d.mem->count_sync();
  check(clFinish(d.queue), "clFinish");
}

uint64_t opencl_launch_count() { return g_launches.load(std::memory_order_relaxed); }

std::shared_ptr<Backend> make_opencl_backend(const Options&) {
  if (!opencl_available(0)) {
    log("backend", "opencl: unavailable: " + opencl_describe(0));
    return nullptr;
  }
  return std::make_shared<OpenCLBackend>(0);
}

}  // namespace kfuse::detail
