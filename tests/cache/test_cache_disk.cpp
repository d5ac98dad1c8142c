// The disk cache end to end: a second process compiles nothing, many processes share one
// directory, damaged entries are detected, the batch never recompiles, and the trust model.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "cache/cache_tool.hpp"
#include "cache/disk_cache.hpp"
#include "cache_test_util.hpp"

using namespace kfuse;
using namespace kfuse::cache_test;
using nlohmann::json;

namespace {

// The expressions both processes of the second-process test evaluate.
std::vector<Tensor> shared_expressions() {
  Tensor x = rand({5, 10}, 7);
  Tensor y = rand({5, 10}, 8);
  return {log_softmax(x, -1), exp(x) * 2.0 + y, sum(x * y, -1), mean(tanh(x), 0)};
}

std::vector<uint8_t> result_bytes(const std::vector<Tensor>& ts) {
  std::vector<uint8_t> out;
  for (const auto& t : ts) {
    const auto* p = static_cast<const uint8_t*>(t.data());
    out.insert(out.end(), p, p + t.numel() * static_cast<int64_t>(dtype_size(t.dtype())));
  }
  return out;
}

void write_child_report(const std::vector<uint8_t>& bytes) {
  const char* out = std::getenv("KFUSE_TEST_OUT");
  ASSERT_TRUE(out);
  Counters c = counters();
  json j = {{"compiled", c.kernels_compiled},
            {"disk_loads", c.disk_loads},
            {"hits", c.cache_hits},
            {"misses", c.cache_misses},
            {"bytes", bytes}};
  std::ofstream(out) << j.dump();
}

json run_child(const std::string& name, const std::vector<std::string>& env, const TempDir& tmp,
               const std::string& tag) {
  std::string out = tmp.sub(tag + ".json"), log = tmp.sub(tag + ".log");
  std::vector<std::string> e = env;
  e.push_back("KFUSE_TEST_OUT=" + out);
  int rc = exit_code(std::system(child_command(name, e, log).c_str()));
  EXPECT_EQ(rc, 0) << read_text(log);
  std::string text = read_text(out);
  return text.empty() ? json{} : json::parse(text);
}

}  // namespace

// ---- child processes (run only when re-executed by the tests below) ----

TEST(CacheChild, DISABLED_SharedExpressions) {
  reset_counters();
  write_child_report(result_bytes(shared_expressions()));
}

TEST(CacheChild, DISABLED_Family) {
  // Evaluates the 200-kernel family starting at KFUSE_TEST_START, checking every result.
  reset_counters();
  int start = std::atoi(std::getenv("KFUSE_TEST_START"));
  for (int n = 0; n < 200; ++n) {
    int i = (start + n) % 200;
    auto got = sum(family_input(i), -1).to_vector<double>();
    ASSERT_EQ(got, family_expected(i)) << "kernel " << i;
  }
  write_child_report({});
}

// ---- tests ----

TEST(DiskCache, SecondProcessCompilesNothing) {
  for (const std::string& be : available_cpu_backends()) {
    SCOPED_TRACE(be);
    TempDir tmp;
    std::vector<std::string> env = {"KFUSE_CACHE=disk", "KFUSE_CACHE_DIR=" + tmp.sub("cache"), "KFUSE_BACKEND=" + be};
    json first = run_child("SharedExpressions", env, tmp, "first");
    json second = run_child("SharedExpressions", env, tmp, "second");
    ASSERT_FALSE(first.is_null());
    ASSERT_FALSE(second.is_null());
    EXPECT_GT(first["compiled"].get<int>(), 0);
    EXPECT_EQ(first["bytes"], second["bytes"]) << "results must be bitwise identical";
    // Backends that store no binary and cannot load from IR recompile by design.
    bool loadable = false;
    {
      ScopedCache sc(tmp.sub("cache"), "disk", {be});
      for (const auto& e : cache_entries()) loadable |= e.backend == be;
    }
    if (!loadable) {
      std::cout << "[ note ] " << be << " stores nothing loadable; second process recompiled " << second["compiled"]
                << " kernel(s)\n";
      continue;
    }
    EXPECT_EQ(second["compiled"].get<int>(), 0);
    EXPECT_EQ(second["disk_loads"].get<int>(), first["compiled"].get<int>());
  }
}

TEST(DiskCache, FourProcessesShareOneDirectory) {
  TempDir tmp;
  std::string dir = tmp.sub("cache");
  std::string cmd;
  for (int p = 0; p < 4; ++p) {
    std::vector<std::string> env = {"KFUSE_CACHE=disk",
                                    "KFUSE_CACHE_DIR=" + dir,
                                    "KFUSE_BACKEND=reference",
                                    "KFUSE_NUM_THREADS=1",
                                    "KFUSE_TEST_START=" + std::to_string(p * 50),
                                    "KFUSE_TEST_OUT=" + tmp.sub("p" + std::to_string(p) + ".json")};
    cmd += "(" + child_command("Family", env, tmp.sub("p" + std::to_string(p) + ".log")) + "; echo $? > " +
           shell_quote(tmp.sub("p" + std::to_string(p) + ".rc")) + ") & ";
  }
  cmd += "wait";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  uint64_t compiled = 0, loaded = 0;
  for (int p = 0; p < 4; ++p) {
    std::string tag = "p" + std::to_string(p);
    EXPECT_EQ(read_text(tmp.sub(tag + ".rc")), "0\n") << read_text(tmp.sub(tag + ".log"));
    json j = json::parse(read_text(tmp.sub(tag + ".json")));
    EXPECT_EQ(j["compiled"].get<uint64_t>() + j["disk_loads"].get<uint64_t>(), 200u) << tag;
    compiled += j["compiled"].get<uint64_t>();
    loaded += j["disk_loads"].get<uint64_t>();
  }
  EXPECT_GE(compiled, 200u);
  EXPECT_GT(loaded, 0u) << "the processes should have reused each other's kernels";
  std::ostringstream out, err;
  EXPECT_EQ(detail::cache::run_cache_tool({"--dir", dir, "verify", "--json"}, out, err), 0) << out.str() << err.str();
  json v = json::parse(out.str());
  EXPECT_EQ(v["checked"].get<int>(), 200);
  EXPECT_EQ(v["ok"].get<int>(), 200);
  EXPECT_TRUE(v["problems"].empty()) << v.dump(2);
}

TEST(DiskCache, DamagedEntriesAreDetectedRecompiledAndReported) {
  TempDir tmp;
  std::string dir = tmp.sub("cache");
  std::vector<std::string> paths;
  {
    ScopedCache sc(dir);
    for (int i = 0; i < 3; ++i) sum(family_input(i), -1).eval();
    EXPECT_EQ(counters().kernels_compiled, 3u);
    auto es = cache_entries();
    ASSERT_EQ(es.size(), 3u);
    for (const auto& e : es) paths.push_back(e.path);
  }
  std::sort(paths.begin(), paths.end());
  // flip one byte in the payload of entry 0; truncate entry 1
  {
    std::fstream f(paths[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    char c;
    f.get(c);
    f.seekp(-5, std::ios::end);
    f.put(static_cast<char>(c ^ 0x20));
  }
  fs::resize_file(paths[1], fs::file_size(paths[1]) / 2);
  std::ostringstream out, err;
  EXPECT_EQ(detail::cache::run_cache_tool({"--dir", dir, "verify"}, out, err), 1);
  EXPECT_NE(out.str().find("BAD " + paths[0] + ": checksum mismatch"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("BAD " + paths[1] + ": truncated"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("checked 3 entries: 1 ok, 2 problem(s)"), std::string::npos) << out.str();
  {
    ScopedCache sc(dir);
    testing::internal::CaptureStderr();
    Options o = options();
    o.log = {"cache"};
    set_options(o);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(sum(family_input(i), -1).to_vector<double>(), family_expected(i));
    std::string log = testing::internal::GetCapturedStderr();
    Counters c = counters();
    EXPECT_EQ(c.kernels_compiled, 2u) << "both damaged entries are recompiled";
    EXPECT_EQ(c.disk_loads, 1u);
    EXPECT_NE(log.find("removed bad entry"), std::string::npos) << log;
    EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
    EXPECT_NE(log.find("truncated"), std::string::npos) << log;
  }
  std::ostringstream out2, err2;
  EXPECT_EQ(detail::cache::run_cache_tool({"--dir", dir, "verify"}, out2, err2), 0) << out2.str();
}

TEST(DiskCache, BatchNeverRecompilesOneCompilePerBackend) {
  for (const std::string& be : available_cpu_backends()) {
    SCOPED_TRACE(be);
    for (const char* mode : {"memory", "disk"}) {
      TempDir tmp;
      ScopedCache sc(tmp.sub("cache"), mode, {be});
      for (int64_t b = 1; b <= 64; ++b) {
        Tensor x = rand({b, 10}, static_cast<uint64_t>(b));
        auto y = log_softmax(x, -1).to_vector<double>();
        ASSERT_EQ(y.size(), static_cast<size_t>(b * 10));
      }
      Counters c = counters();
      EXPECT_EQ(c.kernels_compiled, 1u) << mode;
      if (be == "reference") { EXPECT_EQ(c.cache_misses, 1u) << mode; }  // others may decline first
      EXPECT_EQ(c.cache_hits, 63u) << mode;
    }
  }
}

TEST(DiskCache, EntriesRecordProvenanceAndShapePolicy) {
  TempDir tmp;
  ScopedCache sc(tmp.sub("cache"));
  log_softmax(rand({3, 10}, 1), -1).eval();
  auto es = cache_entries();
  ASSERT_EQ(es.size(), 1u);
  const CacheEntry& e = es[0];
  EXPECT_EQ(e.backend, "reference");
  EXPECT_EQ(e.target, "interpreter");
  EXPECT_NE(e.stem.find("log_softmax"), std::string::npos) << e.stem;
  EXPECT_FALSE(e.ops.empty());
  EXPECT_FALSE(e.pattern.empty());
  EXPECT_FALSE(e.specialised.empty());
  EXPECT_NE(e.shape.find("x [10]"), std::string::npos) << e.shape;
  EXPECT_NE(e.shape.find("$"), std::string::npos) << "outer extent is a run-time param: " << e.shape;
  EXPECT_EQ(e.format_version, 1);
  EXPECT_GT(e.created, 0);
  EXPECT_EQ(e.path.find(tmp.path), 0u);
  // layout <dir>/v1/<2 hex>/<key>.kfc, private modes
  EXPECT_EQ(e.path, tmp.sub("cache") + "/v1/" + e.key.substr(0, 2) + "/" + e.key + ".kfc");
  struct stat st;
  ASSERT_EQ(::stat(tmp.sub("cache").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(e.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);
  CacheStats s = cache_stats();
  EXPECT_EQ(s.mode, "disk");
  EXPECT_TRUE(s.disk_writable);
  EXPECT_EQ(s.disk_entries, 1u);
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_GE(s.disk_stores, 1u);
}

TEST(DiskCache, SizeBoundEvictsLeastRecentlyUsed) {
  TempDir tmp;
  ScopedCache sc(tmp.sub("cache"), "disk", {"reference"}, 6000);
  for (int i = 0; i < 20; ++i) sum(family_input(i), -1).eval();
  uint64_t total = 0;
  auto es = cache_entries();
  for (const auto& e : es) total += e.size_bytes;
  EXPECT_LE(total, 6000u);
  EXPECT_GT(es.size(), 0u);
  EXPECT_LT(es.size(), 20u);
  EXPECT_GT(cache_stats().disk_evictions, 0u);
}

TEST(DiskCache, ModeOffAndMemoryTouchNoDisk) {
  TempDir tmp;
  {
    ScopedCache sc(tmp.sub("off"), "off");
    sum(family_input(1), -1).eval();
    sum(family_input(1), -1).eval();
    EXPECT_EQ(counters().kernels_compiled, 2u);
    EXPECT_EQ(counters().cache_hits, 0u);
  }
  {
    ScopedCache sc(tmp.sub("mem"), "memory");
    sum(family_input(1), -1).eval();
    sum(family_input(1), -1).eval();
    EXPECT_EQ(counters().kernels_compiled, 1u);
    EXPECT_EQ(counters().cache_hits, 1u);
  }
  EXPECT_FALSE(fs::exists(tmp.sub("off")));
  EXPECT_FALSE(fs::exists(tmp.sub("mem")));
}

// ---- trust model ----

TEST(CacheTrust, GroupOrWorldWritableDirectoryIsRefused) {
  for (mode_t m : {0770, 0707, 0777}) {
    TempDir tmp;
    std::string dir = tmp.sub("shared");
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    ASSERT_EQ(::chmod(dir.c_str(), m), 0);
    testing::internal::CaptureStderr();
    {
      ScopedCache sc(dir);
      EXPECT_EQ(sum(family_input(2), -1).to_vector<double>(), family_expected(2));
      EXPECT_EQ(sum(family_input(3), -1).to_vector<double>(), family_expected(3));
      CacheStats s = cache_stats();
      EXPECT_FALSE(s.disk_readable);
      EXPECT_FALSE(s.disk_writable);
      EXPECT_NE(s.disk_note.find("refusing cache directory " + dir), std::string::npos) << s.disk_note;
      EXPECT_EQ(counters().kernels_compiled, 2u);
    }
    std::string err = testing::internal::GetCapturedStderr();
    std::string want = std::string("writable by ") + ((m & 07) ? "others" : "its group");
    EXPECT_NE(err.find("[kfuse:cache] warning: refusing cache directory " + dir + ": it is " + want), std::string::npos)
        << err;
    EXPECT_NE(err.find("chmod go-w"), std::string::npos) << err;
    EXPECT_EQ(err.find("warning"), err.rfind("warning")) << "one warning only:\n" << err;
    EXPECT_FALSE(fs::exists(dir + "/v1")) << "nothing is created inside a refused directory";
  }
}

TEST(CacheTrust, ForeignOwnerAndWritableEntriesAreRefused) {
  TempDir tmp;
  std::string dir = tmp.sub("cache");
  std::string path;
  {
    ScopedCache sc(dir);
    sum(family_input(4), -1).eval();
    path = cache_entries().at(0).path;
  }
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  testing::internal::CaptureStderr();
  {
    ScopedCache sc(dir);
    EXPECT_EQ(sum(family_input(4), -1).to_vector<double>(), family_expected(4));
    EXPECT_EQ(counters().kernels_compiled, 1u) << "a refused entry is recompiled";
    EXPECT_EQ(counters().disk_loads, 0u);
    EXPECT_GE(cache_stats().disk_refused, 1u);
  }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("refusing cache entry " + path + ": it is writable by others"), std::string::npos) << err;
  // the fresh compile replaced it with a private file
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u);

  if (::geteuid() != 0) GTEST_SKIP() << "changing a directory's owner needs root";
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  testing::internal::CaptureStderr();
  {
    ScopedCache sc(dir);
    sum(family_input(4), -1).eval();
    EXPECT_FALSE(cache_stats().disk_readable);
  }
  err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("refusing cache directory " + dir + ": it is owned by uid 65534, not by this user"),
            std::string::npos)
      << err;
}

TEST(CacheTrust, UnwritableDiskDegradesToMemoryWithOneWarning) {
  TempDir tmp;
  std::string dir = tmp.sub("cache");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir + "/v1").c_str(), 0700), 0);
  // Every shard directory name is taken by a plain file: no entry can be written.
  for (int i = 0; i < 256; ++i) {
    char name[8];
    std::snprintf(name, sizeof name, "/%02x", i);
    std::ofstream(dir + "/v1" + name) << "x";
  }
  testing::internal::CaptureStderr();
  {
    ScopedCache sc(dir);
    for (int i = 10; i < 14; ++i) EXPECT_EQ(sum(family_input(i), -1).to_vector<double>(), family_expected(i));
    for (int i = 10; i < 14; ++i) sum(family_input(i), -1).eval();
    EXPECT_EQ(counters().kernels_compiled, 4u);
    EXPECT_EQ(counters().cache_hits, 4u) << "the memory cache still works";
    EXPECT_FALSE(cache_stats().disk_writable);
  }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cannot write to the kernel cache"), std::string::npos) << err;
  EXPECT_NE(err.find("memory cache only"), std::string::npos) << err;
  EXPECT_EQ(err.find("warning"), err.rfind("warning")) << "one warning only:\n" << err;
}
