// KFUSE_DUMP (Options::dump_dir): every kernel a backend produces is written out as IR, source and
// binary, whether it was compiled or loaded from the disk cache; a cache hit in memory writes nothing.
#include "cache_test_util.hpp"

using namespace kfuse;
using namespace kfuse::cache_test;

namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(KernelDump, WritesIrSourceAndBinaryOfCompiledAndDiskLoadedKernels) {
  for (const std::string& be : available_cpu_backends()) {
    if (be == "reference") continue;  // no source, no binary: covered by the IR-only case below
    SCOPED_TRACE(be);
    TempDir tmp;
    const std::string dump = tmp.sub("dump");
    ScopedCache sc(tmp.sub("cache"), "disk", {be});
    Options o = options();
    o.dump_dir = dump;
    set_options(o);
    Tensor x = rand({7, 33}, 5);
    log_softmax(x, -1).eval();
    std::vector<std::string> files = names_in(dump);
    ASSERT_FALSE(files.empty());
    std::string ir_file;
    for (const std::string& f : files)
      if (f.rfind("k_log_softmax", 0) == 0 && f.size() > 3 && f.substr(f.size() - 3) == ".ir") ir_file = f;
    ASSERT_FALSE(ir_file.empty()) << "no IR file among " << files.size();
    const std::string stem = ir_file.substr(0, ir_file.size() - 3);
    EXPECT_NE(read_all(dump + "/" + ir_file).find("k_log_softmax"), std::string::npos);
    // Its source and its binary sit beside the IR, named by their kinds.
    int beside = 0;
    for (const std::string& f : files)
      if (f.rfind(stem + ".", 0) == 0 && f != ir_file) {
        ++beside;
        EXPECT_GT(fs::file_size(dump + "/" + f), 0u) << f;
      }
    // LLVM keeps its IR and object file; xbyak re-emits from the kernel IR in microseconds and
    // keeps no binary.
    if (be == "llvm") { EXPECT_GE(beside, 2) << stem; }

    // Another batch size is planned again and finds the kernel on disk (the memory cache
    // emptied): dumped again, under the same name.
    fs::remove_all(dump);
    clear_memory_cache();
    reset_counters();
    log_softmax(rand({9, 33}, 6), -1).eval();
    if (be == "llvm") { EXPECT_EQ(counters().disk_loads, 1u); }
    EXPECT_TRUE(fs::exists(dump + "/" + ir_file));

    // A memory-cache hit produces nothing new.
    fs::remove_all(dump);
    log_softmax(rand({11, 33}, 7), -1).eval();
    EXPECT_TRUE(names_in(dump).empty());
  }
}

TEST(KernelDump, ReferenceKernelsDumpTheirIr) {
  TempDir tmp;
  const std::string dump = tmp.sub("dump");
  ScopedCache sc(tmp.sub("cache"), "memory", {"reference"});
  Options o = options();
  o.dump_dir = dump;
  set_options(o);
  (rand({5}, 1) * 2.0).eval();
  std::vector<std::string> files = names_in(dump);
  ASSERT_EQ(files.size(), 1u);  // one fused kernel, IR only
  for (const std::string& f : files) EXPECT_EQ(f.substr(f.size() - 3), ".ir") << f;
}
