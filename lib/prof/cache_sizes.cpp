// probe::cache_sizes (kfuse/profile.hpp): the data cache sizes that GEMM blocking and the
// bench's "fits in the L3" notes use, one source for both.
#include <unistd.h>

#include <fstream>
#include <string>

#include "kfuse/profile.hpp"

namespace kfuse::probe {

namespace {

// "32K", "1024K", "32768K", "2M" (sysfs cache size syntax) in bytes, a plain number as itself; 0
// when unreadable.
int64_t parse_size(const std::string& s) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &used);
  } catch (...) { return 0; }
  const char unit = used < s.size() ? s[used] : '\0';
  if (unit == 'K') v <<= 10;
  else if (unit == 'M') v <<= 20;
  else if (unit == 'G') v <<= 30;
  return v > 0 ? v : 0;
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The size of cpu0's data or unified cache of `level` from sysfs; 0 when absent.
int64_t sysfs_cache(int level) {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string lv = read_line(dir + "level");
    if (lv.empty()) break;
    if (parse_size(lv) != level || read_line(dir + "type") == "Instruction") continue;  // (no throw on junk)
    return parse_size(read_line(dir + "size"));
  }
  return 0;
}

int64_t cache_bytes(int level, int name, int64_t fallback) {
  if (int64_t v = sysfs_cache(level); v > 0) return v;
  const long v = sysconf(name);
  return v > 0 ? v : fallback;
}

}  // namespace

const CacheSizes& cache_sizes() {
  static const CacheSizes c{cache_bytes(1, _SC_LEVEL1_DCACHE_SIZE, int64_t{32} << 10),
                            cache_bytes(2, _SC_LEVEL2_CACHE_SIZE, int64_t{512} << 10),
                            cache_bytes(3, _SC_LEVEL3_CACHE_SIZE, int64_t{8} << 20)};
  return c;
}

}  // namespace kfuse::probe
