// Cache walkthrough, part 1: evaluates a few fused expressions so that their kernels land in the
// disk cache (KFUSE_CACHE_DIR), then lists what the cache holds through the public API. Part 2
// (examples/cache_walkthrough.sh) inspects the same directory with the kfuse-cache tool, and runs
// this program again to show that a second process compiles nothing.
#include <kfuse/cache.hpp>
#include <kfuse/kfuse.hpp>

#include <cstdio>

int main() {
  using namespace kfuse;
  std::vector<float> host(64 * 10);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 17) * 0.25f - 2.f;
  Tensor x = Tensor::from_vector(host, {64, 10});
  eval({log_softmax(x, -1), relu(x * 2.0 + 1.0), sum(x * x, 1)});
  // Only the batch changes: the same kernel serves it (outer extents are run-time parameters).
  Tensor x2 = Tensor::from_vector(std::vector<float>(host.begin(), host.begin() + 320), {32, 10});
  log_softmax(x2, -1).eval();

  Counters c = counters();
  CacheStats s = cache_stats();
  std::printf("cache dir: %s (mode %s)\n", s.dir.c_str(), s.mode.c_str());
  std::printf("this process: %llu kernels compiled, %llu loaded from disk, %llu memory hits\n",
              static_cast<unsigned long long>(c.kernels_compiled), static_cast<unsigned long long>(c.disk_loads),
              static_cast<unsigned long long>(c.cache_hits));
  for (const CacheEntry& e : cache_entries())
    std::printf("  %s  %-24s %-8s %-16s shape %s\n", e.key.substr(0, 12).c_str(), e.stem.c_str(), e.backend.c_str(),
                e.kind.c_str(), e.shape.c_str());
  return 0;
}
