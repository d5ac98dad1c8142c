// Helpers of the kernel-cache tests: private temporary cache directories, options switching,
// re-executing this test binary as a child process, and small kernel families.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <kfuse/cache.hpp>
#include <kfuse/kfuse.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace kfuse::cache_test {

namespace fs = std::filesystem;

/// A fresh private directory under the system temp dir, removed by the destructor.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "kfuse-cache-test-XXXXXX").string();
    char* p = ::mkdtemp(t.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, ec);
    fs::remove_all(path, ec);
  }
  std::string sub(const std::string& name) const { return path + "/" + name; }
};

/// Options for one test: cache mode and directory, a backend list, then fresh counters and an
/// empty memory cache. Restores the previous options on destruction.
struct ScopedCache {
  Options saved;
  ScopedCache(const std::string& dir, const std::string& mode = "disk",
              std::vector<std::string> backends = {"reference"}, uint64_t max_bytes = uint64_t{1} << 30) {
    saved = options();
    Options o = saved;
    o.cache_mode = mode;
    o.cache_dir = dir;
    o.cache_max_bytes = max_bytes;
    o.backends = std::move(backends);
    set_options(o);
    clear_memory_cache();
    reset_counters();
  }
  ~ScopedCache() {
    clear_memory_cache();
    set_options(saved);
  }
};

inline std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// The shell command that runs the disabled test CacheChild.DISABLED_<name> of this binary with
/// `env` (KEY=VALUE...) and KFUSE_TEST_CHILD=1, output to `log`.
inline std::string child_command(const std::string& name, const std::vector<std::string>& env, const std::string& log) {
  std::string cmd = "env KFUSE_TEST_CHILD=1";
  // Appended piece by piece: `" " + shell_quote(...)` trips a GCC 12 -Wrestrict false positive.
  for (const auto& e : env) cmd.append(" ").append(shell_quote(e));
  cmd.append(" ").append(shell_quote(self_exe()));
  cmd.append(" --gtest_also_run_disabled_tests --gtest_filter=CacheChild.DISABLED_").append(name);
  cmd.append(" > ").append(shell_quote(log)).append(" 2>&1");
  return cmd;
}

inline int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128; }

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// Backends of this build that can be created on this machine (CPU).
inline std::vector<std::string> available_cpu_backends() {
  std::vector<std::string> out;
  for (const auto& n : detail::builtin_backend_names()) {
    auto b = detail::find_backend(n);
    if (b && b->device().kind() == Device::Kind::CPU) out.push_back(n);
  }
  return out;
}

/// Family member i of distinct kernels: a row sum over [2, i + 1] (the reduce extent is
/// specialised, so every i is its own kernel). Values are small integers: exact in f32.
inline Tensor family_input(int i) {
  std::vector<float> v(static_cast<size_t>(2 * (i + 1)));
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>((j * 7 + static_cast<size_t>(i)) % 13) - 6.0f;
  return Tensor::from_vector(v, {2, i + 1});
}
inline std::vector<double> family_expected(int i) {
  std::vector<double> r(2, 0.0);
  size_t n = static_cast<size_t>(i + 1);
  for (size_t row = 0; row < 2; ++row)
    for (size_t c = 0; c < n; ++c)
      r[row] += static_cast<double>(((row * n + c) * 7 + static_cast<size_t>(i)) % 13) - 6.0;
  return r;
}

}  // namespace kfuse::cache_test
