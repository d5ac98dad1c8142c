// Code-generation knobs are options (Options::gemm_path, gemm_blocking, llvm_column_tile,
// llvm_launch_chunk, gpu_gemm_tile): they reach the backend through the options an evaluation starts with, and
// take part in the kernel cache key, so a kernel compiled under another value is never reused.
#include <gtest/gtest.h>
#include <kfuse/cache.hpp>
#include <kfuse/options.hpp>
#include <kfuse/stats.hpp>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "backend/backend.hpp"
#include "test_util.hpp"

namespace kfuse {
using namespace kfuse::test;
namespace {

// Sets the process-wide options for one test and restores them after it.
struct OptionsScope {
  Options saved = options();
  explicit OptionsScope(const Options& o) { set_options(o); }
  ~OptionsScope() { set_options(saved); }
};

std::string temp_cache_dir(const char* what) {
  auto d =
      std::filesystem::temp_directory_path() / (std::string("kfuse-knobs-") + what + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

TEST(OptionKnobs, GemmPathReachesXbyakAndItsCacheKey) {
  if (!detail::find_backend("xbyak", options())) GTEST_SKIP() << "xbyak backend not available";
  Options o = options();
  o.backends = {"xbyak"};
  o.cache_mode = "disk";
  o.cache_dir = temp_cache_dir("gemm");
  Tensor a = make_tensor(random_values(24 * 40, 1), {24, 40}), b = make_tensor(random_values(40 * 36, 2), {40, 36});
  std::vector<std::vector<double>> outs;
  std::set<std::string> targets;
  clear_memory_cache();  // a kernel of an earlier test must not answer for the default path
  for (const char* path : {"auto", "packed", "direct"}) {
    o.gemm_path = path;
    o.gemm_blocking = std::string(path) == "packed" ? Options::GemmBlocking{8, 16, 16} : Options::GemmBlocking{};
    OptionsScope scope(o);
    reset_counters();
    outs.push_back(values(matmul(a, b)));
    EXPECT_EQ(counters().kernels_compiled, 1u) << path << ": a kernel of another path was reused";
    EXPECT_EQ(counters().fallbacks, 0u) << path;
    for (const CacheEntry& e : cache_entries()) targets.insert(e.target);
  }
  // One key per path: the default target alone, then the knobs beside it.
  ASSERT_EQ(targets.size(), 3u);
  int packed = 0, direct = 0;
  for (const auto& t : targets) {
    packed += t.find("[gemm_path=packed;gemm_blocking=8,16,16]") != std::string::npos;
    direct += t.find("[gemm_path=direct;gemm_blocking=0,0,0]") != std::string::npos;
  }
  EXPECT_EQ(packed, 1);
  EXPECT_EQ(direct, 1);
  for (const auto& v : outs) EXPECT_TRUE(all_close(v, outs[0], 1e-5, 1e-5));
  std::filesystem::remove_all(o.cache_dir);
}

TEST(OptionKnobs, UnknownGemmPathIsAUserError) {
  if (!detail::find_backend("xbyak", options())) GTEST_SKIP() << "xbyak backend not available";
  Options o = options();
  o.backends = {"xbyak"};
  o.cache_mode = "memory";
  o.gemm_path = "fastest";
  OptionsScope scope(o);
  Tensor a = make_tensor(random_values(12, 3), {3, 4}), b = make_tensor(random_values(20, 4), {4, 5});
  try {
    matmul(a, b).eval();
    FAIL() << "no error for gemm_path 'fastest'";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("'fastest': use auto, packed or direct"), std::string::npos) << e.what();
  }
}

TEST(OptionKnobs, LlvmColumnTileIsPartOfTheCacheKey) {
  if (!detail::find_backend("llvm", options())) GTEST_SKIP() << "llvm backend not available";
  Options o = options();
  o.backends = {"llvm"};
  o.cache_mode = "memory";
  Tensor x = make_tensor(random_values(37 * 53, 5), {37, 53});
  std::vector<std::vector<double>> outs;
  clear_memory_cache();
  // The automatic width compiles, the forced one compiles its own code, and the automatic width
  // is then found in the memory cache again (set_options dropped the plans, not the kernels).
  const std::pair<int64_t, uint64_t> runs[] = {{0, 1}, {4, 1}, {0, 0}};
  for (auto [tile, compiles] : runs) {
    o.llvm_column_tile = tile;
    OptionsScope scope(o);
    reset_counters();
    outs.push_back(values(sum(x, 0)));
    EXPECT_EQ(counters().kernels_compiled, compiles) << "tile " << tile;
  }
  for (const auto& v : outs) EXPECT_EQ(v, outs[0]);  // tiles never change a bit (column_tiles.cpp)
}

// The GPU tiled GEMM's tiling (Options::gpu_gemm_tile) reaches the OpenCL backend and its cache
// key; both tilings sum each element k ascending in one accumulator, so they agree bit for bit.
TEST(OptionKnobs, GpuGemmTileReachesOpenCLAndItsCacheKey) {
  if (!detail::find_backend("opencl", options())) GTEST_SKIP() << "no OpenCL device";
  Options o = options();
  o.cache_mode = "memory";
  Tensor a = make_tensor(random_values(70 * 33, 7), {70, 33}).to(Device::opencl());
  Tensor b = make_tensor(random_values(33 * 131, 8), {33, 131}).to(Device::opencl());
  std::vector<std::vector<double>> outs;
  clear_memory_cache();
  const std::pair<int, uint64_t> runs[] = {{0, 1}, {64, 1}, {128, 0}};  // 128 is the default's kernel
  for (auto [tile, compiles] : runs) {
    o.gpu_gemm_tile = tile;
    OptionsScope scope(o);
    reset_counters();
    outs.push_back(values(matmul(a, b).to(Device::cpu())));
    EXPECT_EQ(counters().kernels_compiled, compiles) << "tile " << tile;
  }
  for (const auto& v : outs) EXPECT_EQ(v, outs[0]);
  o.gpu_gemm_tile = 48;
  OptionsScope scope(o);
  EXPECT_THROW(matmul(a, b).eval(), UserError);
}

}  // namespace
}  // namespace kfuse
