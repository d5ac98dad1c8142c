#include "kernel_dump.hpp"

#include <filesystem>
#include <fstream>

#include "kfuse/options.hpp"

namespace kfuse::detail {

void dump_kernel(const std::string& dir, const cache::KernelKey& key, const std::string& ir_text,
                 const CompiledKernel& ck) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  // The first 12 hex digits, as kfuse-cache lists keys (`kfuse-cache show` takes them). The key
  // hashes the backend and its target, so one name is one backend's kernel.
  const std::string base = (fs::path(dir) / (key.stem + "-" + key.hex().substr(0, 12))).string();
  auto write = [&](const std::string& ext, const char* data, size_t n) {
    std::ofstream out(base + "." + ext, std::ios::binary);
    out.write(data, static_cast<std::streamsize>(n));
    if (!out) log("cache", "KFUSE_DUMP: cannot write " + base + "." + ext);
  };
  write("ir", ir_text.data(), ir_text.size());
  if (!ck.source.empty()) write(ck.source_kind.empty() ? "src" : ck.source_kind, ck.source.data(), ck.source.size());
  if (!ck.binary.empty())
    write(ck.binary_kind.empty() ? "bin" : ck.binary_kind, reinterpret_cast<const char*>(ck.binary.data()),
          ck.binary.size());
}

}  // namespace kfuse::detail
