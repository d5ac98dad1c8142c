#include "kfuse/options.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>

namespace kfuse {

namespace {
std::vector<std::string> split(const char* s, char sep) {
  std::vector<std::string> out;
  if (!s) return out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}
const char* env(const char* k) {
  const char* v = std::getenv(k);
  return v && *v ? v : nullptr;
}

std::mutex g_mu;
std::shared_ptr<const Options> g_opts;
// g_opts.get(), readable without the lock: every evaluation asks options() (cache mode, log
// channels), and an Options object is never freed once published (see set_options).
std::atomic<const Options*> g_current{nullptr};
std::atomic<uint64_t> g_generation{0};
}  // namespace

bool Options::logging(const char* channel) const {
  return std::find(log.begin(), log.end(), channel) != log.end() ||
         std::find(log.begin(), log.end(), "all") != log.end();
}

Options Options::from_env() {
  Options o;
  o.backends = split(env("KFUSE_BACKEND"), ',');
  if (auto v = env("KFUSE_ISA")) o.isa = v;
  if (auto v = env("KFUSE_NUM_THREADS")) o.num_threads = std::max(0, std::atoi(v));
  o.log = split(env("KFUSE_LOG"), ',');
  if (auto v = env("KFUSE_DUMP")) o.dump_dir = v;
  if (auto v = env("KFUSE_CACHE")) o.cache_mode = v;
  if (auto v = env("KFUSE_CACHE_DIR")) {
    o.cache_dir = v;
  } else if (auto x = env("XDG_CACHE_HOME")) {
    o.cache_dir = std::string(x) + "/kfuse";
  } else if (auto h = env("HOME")) {
    o.cache_dir = std::string(h) + "/.cache/kfuse";
  } else {
    o.cache_dir = "/tmp/kfuse-cache";
  }
  if (auto v = env("KFUSE_CACHE_MAX_BYTES")) o.cache_max_bytes = std::strtoull(v, nullptr, 10);
  if (auto v = env("KFUSE_POOL_MAX_BYTES")) o.pool_max_bytes = std::strtoull(v, nullptr, 10);
  if (auto v = env("KFUSE_HUGE_PAGES")) o.huge_pages = std::atoi(v) != 0;
  o.plugins = split(env("KFUSE_PLUGINS"), ':');
  if (auto v = env("KFUSE_GEMM_PATH")) o.gemm_path = v;
  if (auto b = split(env("KFUSE_GEMM_BLOCKING"), ','); b.size() == 3)
    o.gemm_blocking = {std::atoll(b[0].c_str()), std::atoll(b[1].c_str()), std::atoll(b[2].c_str())};
  else if (!b.empty())
    std::fprintf(stderr, "[kfuse] KFUSE_GEMM_BLOCKING=%s is not mc,kc,nc; ignored\n", env("KFUSE_GEMM_BLOCKING"));
  if (auto v = env("KFUSE_GPU_GEMM_TILE")) o.gpu_gemm_tile = std::atoi(v);
  if (auto v = env("KFUSE_LLVM_COLUMN_TILE")) o.llvm_column_tile = std::max<int64_t>(0, std::atoll(v));
  if (auto v = env("KFUSE_LLVM_LAUNCH_CHUNK")) o.llvm_launch_chunk = std::max<int64_t>(0, std::atoll(v));
  return o;
}

const Options& options() {
  if (const Options* o = g_current.load(std::memory_order_acquire)) return *o;
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_opts) {
    g_opts = std::make_shared<const Options>(Options::from_env());
    g_current.store(g_opts.get(), std::memory_order_release);
  }
  return *g_opts;  // replaced values are kept alive below: set_options is test-only
}

void set_options(const Options& o) {
  std::lock_guard<std::mutex> lk(g_mu);
  static std::vector<std::shared_ptr<const Options>> retired;  // references may still be held
  if (g_opts) retired.push_back(g_opts);
  g_opts = std::make_shared<const Options>(o);
  g_current.store(g_opts.get(), std::memory_order_release);
  g_generation.fetch_add(1);
}

uint64_t options_generation() { return g_generation.load(std::memory_order_acquire); }

bool log_enabled(const char* channel) { return options().logging(channel); }

void log(const char* channel, const std::string& msg) {
  if (!log_enabled(channel)) return;
  std::fprintf(stderr, "[kfuse:%s] %s\n", channel, msg.c_str());
}

}  // namespace kfuse
