// Device memory of the GPU backends (OpenCL: PoCL on CPU-only machines; CUDA where a GPU is
// present, skipped otherwise): a steady-state evaluation loop makes no driver allocation, no free
// and no host wait (memory comes back from the block cache or the driver's stream-ordered pool);
// reads wait for the work they need, also from another thread; empty_cache() frees the cache.
#include <thread>

#include "test_util.hpp"

namespace kfuse::test {
namespace {

struct Workload {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> f;  // (x [rows, cols], w [cols])
};

std::vector<Workload> workloads() {
  return {
      {"log_softmax", [](const Tensor& x, const Tensor&) { return log_softmax(x, -1); }},
      {"layer_norm", [](const Tensor& x, const Tensor& w) { return layer_norm(x, {x.shape()[1]}, w); }},
      {"relu(a*b+c)", [](const Tensor& x, const Tensor& w) { return relu(x * w + 1.0); }},
      {"sum over axis 0", [](const Tensor& x, const Tensor&) { return sum(x, {0}); }},
      {"sum of all", [](const Tensor& x, const Tensor&) { return sum(x * x); }},
      {"x - mean(x, 0)", [](const Tensor& x, const Tensor&) { return x - mean(x, {0}, true); }},
  };
}

void steady_state(Device dev) {
  const int64_t rows = 1031, cols = 67;
  Tensor x = make_tensor(random_values(rows * cols, 1), {rows, cols});
  Tensor w = make_tensor(random_values(cols, 2), {cols});
  Tensor xd = x.to(dev), wd = w.to(dev);
  for (const Workload& wl : workloads()) {
    for (int i = 0; i < 2; ++i) wl.f(xd, wd).eval();  // plans, compiles, fills the cache
    const DeviceMemoryStats before = device_memory_stats(dev);
    for (int i = 0; i < 5; ++i) wl.f(xd, wd).eval();  // each result freed at once
    const DeviceMemoryStats after = device_memory_stats(dev);
    EXPECT_EQ(after.driver_allocs, before.driver_allocs) << wl.name;
    EXPECT_EQ(after.driver_frees, before.driver_frees) << wl.name;
    EXPECT_EQ(after.host_syncs, before.host_syncs) << wl.name;
    EXPECT_GE(after.reuses, before.reuses + 5) << wl.name;
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use) << wl.name;
    // Read right after the asynchronous evaluation: the read waits for it.
    Tensor y = wl.f(xd, wd);
    y.eval();
    EXPECT_TRUE(all_close(values(y), reference_values(wl.f(x, w)), 1e-4, 1e-5)) << wl.name;
  }
}

void reads_wait(Device dev) {
  Tensor x = make_tensor(random_values(4096 * 33, 3), {4096, 33});
  Tensor xd = x.to(dev);
  std::vector<Tensor> ys;
  for (int i = 0; i < 4; ++i) ys.push_back(softmax(xd * (1.0 + i), -1));
  eval(ys);  // enqueued; nothing waited for
  std::vector<std::vector<double>> got(ys.size());
  std::vector<std::thread> readers;
  for (size_t i = 0; i < ys.size(); ++i) readers.emplace_back([&, i] { got[i] = values(ys[i]); });
  for (auto& t : readers) t.join();
  for (size_t i = 0; i < ys.size(); ++i)
    EXPECT_TRUE(all_close(got[i], reference_values(softmax(x * (1.0 + static_cast<double>(i)), -1)), 1e-5, 1e-6)) << i;
}

void empty_cache_and_synchronize(Device dev) {
  Tensor xd = make_tensor(random_values(999, 4), {999}).to(dev);
  (exp(xd) * 2.0).eval();  // its memory is cached once the result is dropped
  // 64 MiB, allocated and freed: the driver's pool reserves memory in chunks (32 MiB on an H100),
  // and the chunk that holds xd stays reserved through empty_cache (its free rest counted as
  // cached), while a chunk with nothing live in it goes back.
  const int64_t big = (int64_t{64} << 20) / 4;
  (full({big}, 1.5).to(dev) * 2.0).eval();
  const DeviceMemoryStats before = device_memory_stats(dev);
  EXPECT_GT(before.bytes_cached, 0u);
  synchronize(dev);
  empty_cache(dev);
  const DeviceMemoryStats after = device_memory_stats(dev);
  if (after.allocator == "block cache") {
    EXPECT_EQ(after.bytes_cached, 0u);  // blocks are exact: every cached one goes back
  } else {
    EXPECT_GE(before.bytes_cached, static_cast<uint64_t>(4 * big));
    EXPECT_LE(after.bytes_cached + 4 * big, before.bytes_cached) << after.allocator;
  }
  EXPECT_GE(after.host_syncs, before.host_syncs + 1);
  EXPECT_GT(after.bytes_in_use, 0u);  // xd is still alive
}

// Uploads go through the pinned staging ring (jit/gpu/staging.hpp): they return without a host
// wait, and the caller's memory may be freed at once (the bytes were copied before return);
// copies larger than the ring go in chunks (both directions) and round-trip bit for bit, also
// from two threads at once.
void uploads(Device dev) {
  auto upload = [&](int64_t n, uint64_t seed) {
    Tensor h = make_tensor(random_values(static_cast<size_t>(n), seed), {n});
    return h.to(dev);  // h, and its host memory, die here
  };
  for (int i = 0; i < 2; ++i) (upload(1000, 5) * 2.0).eval();  // warm: the ring, the block cache, the kernel
  const DeviceMemoryStats before = device_memory_stats(dev);
  std::vector<Tensor> ups;
  for (int i = 0; i < 3; ++i) ups.push_back(upload(1000, 10 + i));
  std::vector<Tensor> ys;
  for (const Tensor& u : ups) ys.push_back(u * 2.0);
  eval(ys);
  EXPECT_EQ(device_memory_stats(dev).host_syncs, before.host_syncs) << "an upload waited for the device";
  for (size_t i = 0; i < ys.size(); ++i) {
    std::vector<double> want = stored_values(random_values(1000, 10 + i), DType::F32);
    for (double& v : want) v *= 2.0;
    EXPECT_EQ(values(ys[i]), want) << "upload " << i;
  }
  // Larger than the whole ring (4 slots of 2 MiB on either backend): chunked, slots reused.
  const int64_t big = (9 << 20) / 4 + 3;
  EXPECT_EQ(values(upload(big, 20)), stored_values(random_values(big, 20), DType::F32));
  std::vector<std::vector<double>> got(2);
  std::vector<std::thread> ts;
  for (int t = 0; t < 2; ++t) ts.emplace_back([&, t] { got[t] = values(upload(big / 2 + t, 30 + t) + 1.0); });
  for (auto& t : ts) t.join();
  for (int t = 0; t < 2; ++t) {
    std::vector<double> want = stored_values(random_values(big / 2 + t, 30 + t), DType::F32);
    for (double& v : want) v = static_cast<float>(static_cast<float>(v) + 1.0f);
    EXPECT_EQ(got[t], want) << "thread " << t;
  }
}

}  // namespace

TEST(DeviceMemory, OpenCLUploadsReturnWithoutWaitingAndChunkedCopiesRoundTrip) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL platform on this machine";
  uploads(Device::opencl());
}

TEST(DeviceMemory, CudaUploadsReturnWithoutWaitingAndChunkedCopiesRoundTrip) {
  if (!device_usable(Device::cuda())) GTEST_SKIP() << "no CUDA device on this machine";
  uploads(Device::cuda());
}

TEST(DeviceMemory, OpenCLSteadyStateMakesNoDriverCallsAndNoHostWaits) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL platform on this machine";
  steady_state(Device::opencl());
  EXPECT_EQ(device_memory_stats(Device::opencl()).allocator, "block cache");
}
TEST(DeviceMemory, OpenCLReadsFromOtherThreadsWaitForTheWork) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL platform on this machine";
  reads_wait(Device::opencl());
}
TEST(DeviceMemory, OpenCLEmptyCacheAndSynchronize) {
  if (!device_usable(Device::opencl())) GTEST_SKIP() << "no OpenCL platform on this machine";
  empty_cache_and_synchronize(Device::opencl());
}

// On a GPU machine: the stream-ordered pool (or the block-cache fallback, named in the stats).
TEST(DeviceMemory, CudaSteadyStateMakesNoDriverCallsAndNoHostWaits) {
  if (!device_usable(Device::cuda())) GTEST_SKIP() << "no CUDA device on this machine";
  steady_state(Device::cuda());
  const std::string a = device_memory_stats(Device::cuda()).allocator;
  EXPECT_TRUE(a == "cuMemAllocAsync pool" || a == "block cache") << a;
}
TEST(DeviceMemory, CudaReadsFromOtherThreadsWaitForTheWork) {
  if (!device_usable(Device::cuda())) GTEST_SKIP() << "no CUDA device on this machine";
  reads_wait(Device::cuda());
}
TEST(DeviceMemory, CudaEmptyCacheAndSynchronize) {
  if (!device_usable(Device::cuda())) GTEST_SKIP() << "no CUDA device on this machine";
  empty_cache_and_synchronize(Device::cuda());
}

TEST(DeviceMemory, HostHasNothingToFreeOrWaitFor) {
  EXPECT_EQ(device_memory_stats(Device::cpu()).allocator, "host");
  synchronize(Device::cpu());
  empty_cache(Device::cpu());
}

}  // namespace kfuse::test
