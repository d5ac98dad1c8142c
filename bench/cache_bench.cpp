// kfuse_cache_bench: what the kernel cache costs (README "Kernel cache").
//   memory hit   compile_kernel() for a kernel already in the memory cache (print + key + shared lock)
//   disk load    compile_kernel() after clear_memory_cache(): read + verify the entry, Backend::load
//   compile      the same kernel with KFUSE_CACHE=off
//   new process  first eval of a fresh process against a warm directory vs an empty one
// Usage: kfuse_cache_bench [--backend NAME] [--json]. Uses a private temporary cache directory.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <kfuse/cache.hpp>
#include <kfuse/kfuse.hpp>
#include <string>
#include <vector>

#include "runtime/kernel_cache.hpp"
#include "runtime/plan.hpp"

using namespace kfuse;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_us(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return median(t);
}

void use(const std::string& mode, const std::string& dir, const std::string& backend) {
  Options o = options();
  o.cache_mode = mode;
  o.cache_dir = dir;
  o.backends = backend.empty() ? std::vector<std::string>{} : std::vector<std::string>{backend};
  set_options(o);
  clear_memory_cache();
}

// First eval in this process (the child of --first-eval).
int first_eval() {
  auto t0 = Clock::now();
  log_softmax(rand({64, 1000}, 1), -1).eval();
  double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  Counters c = counters();
  std::printf("%.1f %llu %llu\n", us, static_cast<unsigned long long>(c.kernels_compiled),
              static_cast<unsigned long long>(c.disk_loads));
  return 0;
}

double child_first_eval_us(const std::string& dir, const std::string& backend, unsigned long long* compiled) {
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = 0;
  std::string cmd = "KFUSE_CACHE=disk KFUSE_CACHE_DIR='" + dir + "' " +
                    (backend.empty() ? std::string() : "KFUSE_BACKEND=" + backend + " ") + "'" + exe + "' --first-eval";
  FILE* p = ::popen(cmd.c_str(), "r");
  double us = 0;
  unsigned long long loads = 0;
  if (!p || std::fscanf(p, "%lf %llu %llu", &us, compiled, &loads) != 3) us = -1;
  if (p) ::pclose(p);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--first-eval") return first_eval();
    if (a == "--backend" && i + 1 < argc) backend = argv[++i];
    else if (a == "--json") json = true;
  }
  std::string dir =
      (std::filesystem::temp_directory_path() / ("kfuse-cache-bench-" + std::to_string(::getpid()))).string();

  Tensor x = rand({64, 1000}, 1);
  auto plan = detail::make_plan({log_softmax(x, -1).node()}, false, options());
  const ir::Kernel* k = nullptr;
  for (const auto& pk : plan->kernels)
    if (!pk.lowered.kernel.name.empty()) k = &pk.lowered.kernel;
  if (!k) return 1;

  use("disk", dir, backend);
  auto first = detail::compile_kernel(*k, Device::cpu(), options());
  double hit = time_us(20001, [&] { detail::compile_kernel(*k, Device::cpu(), options()); });
  double print = time_us(20001, [&] { (void)ir::print_kernel(*k); });
  double disk = time_us(201, [&] {
    clear_memory_cache();
    detail::compile_kernel(*k, Device::cpu(), options());
  });
  use("off", dir, backend);
  double compile =
      time_us(first.backend == "llvm" ? 11 : 201, [&] { detail::compile_kernel(*k, Device::cpu(), options()); });
  // Fresh processes: an empty directory (compiles and stores), then the warm one; median of 5.
  unsigned long long warm_compiled = 0, cold_compiled = 0;
  std::vector<double> colds, warms;
  for (int rep = 0; rep < 5; ++rep) {
    std::filesystem::remove_all(dir);
    colds.push_back(child_first_eval_us(dir, backend, &cold_compiled));
    warms.push_back(child_first_eval_us(dir, backend, &warm_compiled));
  }
  std::filesystem::remove_all(dir);
  double cold = median(colds), warm = median(warms);

  if (json) {
    std::printf(
        "{\"backend\": \"%s\", \"memory_hit_us\": %.3f, \"print_kernel_us\": %.3f, \"disk_load_us\": %.1f, "
        "\"compile_us\": %.1f, \"new_process_first_eval_warm_us\": %.1f, \"new_process_first_eval_cold_us\": %.1f}\n",
        first.backend.c_str(), hit, print, disk, compile, warm, cold);
  } else {
    std::printf("kernel %s on %s (log_softmax [64, 1000] f32)\n", k->name.c_str(), first.backend.c_str());
    std::printf("  memory hit          %8.2f us  (of which print_kernel %.2f us)\n", hit, print);
    std::printf("  disk load           %8.1f us\n", disk);
    std::printf("  compile (no cache)  %8.1f us\n", compile);
    std::printf(
        "  new process, first eval: %.0f us with a warm disk cache (%llu compiled), %.0f us cold (%llu compiled)\n",
        warm, warm_compiled, cold, cold_compiled);
  }
  return 0;
}
