// kfuse-cache commands, called through the same library function as the tool's main.
#include <nlohmann/json.hpp>

#include "cache/cache_tool.hpp"
#include "cache/disk_cache.hpp"
#include "cache_test_util.hpp"

using namespace kfuse;
using namespace kfuse::cache_test;
using detail::cache::run_cache_tool;
using nlohmann::json;

namespace {

struct ToolRun {
  int rc;
  std::string out, err;
  json j() const { return json::parse(out); }
};

ToolRun tool(std::vector<std::string> args) {
  std::ostringstream out, err;
  int rc = run_cache_tool(args, out, err);
  return {rc, out.str(), err.str()};
}

class CacheTool : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = tmp.sub("cache");
    ScopedCache sc(dir);
    log_softmax(rand({4, 10}, 1), -1).eval();
    log_softmax(rand({9, 10}, 2), -1).eval();  // same kernel: the batch is a run-time param
    sum(family_input(5), -1).eval();
    exp(rand({3, 3}, 3)).eval();
  }
  ToolRun run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--dir", dir});
    return tool(args);
  }
  std::string key_of(const std::string& stem_part) {
    json j = run({"list", "--json"}).j();  // keep the document alive while iterating it
    for (const auto& e : j["entries"])
      if (e["stem"].get<std::string>().find(stem_part) != std::string::npos) return e["key"].get<std::string>();
    return {};
  }
  TempDir tmp;
  std::string dir;
};

}  // namespace

TEST_F(CacheTool, HelpOnEveryCommand) {
  for (std::string cmd : {"list", "show", "stats", "why-miss", "verify", "prune", "clear", "path"}) {
    ToolRun r = tool({cmd, "--help"});
    EXPECT_EQ(r.rc, 0) << cmd;
    EXPECT_NE(r.out.find("Usage: kfuse-cache " + cmd), std::string::npos) << r.out;
  }
  ToolRun top = tool({"--help"});
  EXPECT_EQ(top.rc, 0);
  EXPECT_NE(top.out.find("why-miss"), std::string::npos);
  EXPECT_EQ(tool({}).rc, 2);
  EXPECT_EQ(tool({"frobnicate"}).rc, 2);
  EXPECT_EQ(tool({"list", "--sort", "colour"}).rc, 2);
}

TEST_F(CacheTool, Path) {
  ToolRun r = run({"path"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, dir + "\n");
  json j = run({"path", "--json"}).j();
  EXPECT_EQ(j["root"], dir + "/v1");
  EXPECT_EQ(j["exists"], true);
}

TEST_F(CacheTool, ListTextAndJson) {
  ToolRun r = run({"list"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("KEY          STEM                         BACKEND   TARGET", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("3 entries, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" in " + dir + "/v1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reference interpreter"), std::string::npos) << r.out;
  json j = run({"list", "--json"}).j();
  ASSERT_EQ(j["entries"].size(), 3u);
  for (const auto& e : j["entries"]) {
    EXPECT_EQ(e["key"].get<std::string>().size(), 32u);
    EXPECT_EQ(e["backend"], "reference");
    for (const char* f : {"stem", "target", "shape", "size_bytes", "hits", "compile_ms", "age_s", "ops", "pattern"})
      EXPECT_TRUE(e.contains(f)) << f;
  }
  // sorted by stem by default
  std::vector<std::string> stems;
  for (const auto& e : j["entries"]) stems.push_back(e["stem"]);
  EXPECT_TRUE(std::is_sorted(stems.begin(), stems.end()));
  json f = run({"list", "--json", "--filter", "log_softmax"}).j();
  ASSERT_EQ(f["entries"].size(), 1u);
  EXPECT_NE(f["entries"][0]["shape"].get<std::string>().find("x [10]"), std::string::npos);
  json s = run({"list", "--json", "--sort", "size", "--reverse"}).j();
  EXPECT_LE(s["entries"][0]["size_bytes"].get<int>(), s["entries"][2]["size_bytes"].get<int>());
}

TEST_F(CacheTool, Show) {
  std::string key = key_of("log_softmax");
  ASSERT_FALSE(key.empty()) << run({"list"}).out;
  ToolRun r = run({"show", key.substr(0, 8)});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("key:          " + key + "\n", 0), 0u) << r.out;
  for (const char* s :
       {"backend:      reference", "target:       interpreter", "--- kernel IR ---\nkernel k_", "specialised:  reduce",
        "ops:          ", "--- code (none, 0 bytes) ---", "re-creates this kernel from its IR"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  json j = run({"show", key, "--json"}).j();
  EXPECT_EQ(j["key"], key);
  EXPECT_NE(j["kernel_ir"].get<std::string>().find("reduce: [10]"), std::string::npos);
  EXPECT_EQ(run({"show", "ffffffffffff"}).rc, 1);
  EXPECT_NE(run({"show", "ffffffffffff"}).err.find("no entry matches"), std::string::npos);
}

TEST_F(CacheTool, ShowDisassemblesX86ThroughTheHookOrDumpsHex) {
  // A hand-made entry holding raw x86 code.
  detail::cache::Entry e;
  e.fields.backend = "xbyak";
  e.fields.target = "x86_64 test";
  e.fields.dtypes = "f32";
  e.fields.ir_text = "kernel k_raw_f32 (pointwise)\n";
  e.key = detail::cache::make_key(e.fields, "k_raw_f32");
  e.binary = {0x48, 0x31, 0xc0, 0xc3};  // xor rax, rax; ret
  e.binary_kind = "x86-raw";
  detail::cache::DiskCache dc(dir, 1 << 30);
  ASSERT_TRUE(dc.store(e));
  ToolRun hex = run({"show", e.key.hex()});
  EXPECT_NE(hex.out.find("hex dump (kfuse-cache was built without LLVM"), std::string::npos) << hex.out;
  EXPECT_NE(hex.out.find("48 31 c0 c3"), std::string::npos) << hex.out;
  detail::cache::ToolHooks hooks;
  hooks.disassemble_x86 = [](const uint8_t* p, size_t n, uint64_t, std::string* t) {
    *t = "  fake disassembly of " + std::to_string(n) + " bytes\n";
    return true;
  };
  std::ostringstream out, err;
  EXPECT_EQ(run_cache_tool({"--dir", dir, "show", e.key.hex()}, out, err, hooks), 0);
  EXPECT_NE(out.str().find("raw x86-64 code:\n  fake disassembly of 4 bytes"), std::string::npos) << out.str();
}

TEST_F(CacheTool, Stats) {
  ToolRun r = run({"stats"});
  ASSERT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("directory:    " + dir + "/v1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trust:        ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("entries:      3 ("), std::string::npos) << r.out;
  json j = run({"stats", "--json"}).j();
  EXPECT_EQ(j["entries"], 3);
  EXPECT_EQ(j["by_backend"]["reference"]["entries"], 3);
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["bad_entries"], 0);
}

TEST_F(CacheTool, WhyMiss) {
  std::string key = key_of("log_softmax");
  ToolRun hit = run({"why-miss", key});
  ASSERT_EQ(hit.rc, 0) << hit.err;
  EXPECT_NE(hit.out.find("HIT"), std::string::npos) << hit.out;
  ToolRun other = run({"why-miss", key, "--target", "sm_90"});
  EXPECT_NE(other.out.find("MISS"), std::string::npos) << other.out;
  EXPECT_NE(other.out.find("differs: target: entry 'interpreter', now 'sm_90'"), std::string::npos) << other.out;
  // an IR file: the same kernel with another reduce extent misses; the closest entry is named
  json shown = run({"show", key, "--json"}).j();
  std::string ir = shown["kernel_ir"];
  EXPECT_EQ(shown["backend_version"], 1) << "the reference backend's own codegen version is in its entries";
  std::string changed = ir;
  auto p = changed.find("reduce: [10]");
  ASSERT_NE(p, std::string::npos);
  changed.replace(p, 12, "reduce: [12]");
  std::ofstream(tmp.sub("k.ir")) << changed;
  ToolRun miss = run({"why-miss", "--ir", tmp.sub("k.ir"), "--backend", "reference", "--json"});
  ASSERT_EQ(miss.rc, 0) << miss.err;
  json j = miss.j();
  EXPECT_EQ(j["any_hit"], false);
  ASSERT_FALSE(j["results"][0]["closest"].empty());
  EXPECT_EQ(j["results"][0]["closest"][0]["key"], key);
  EXPECT_EQ(j["results"][0]["closest"][0]["differs"][0]["field"], "kernel_ir");
  std::ofstream(tmp.sub("same.ir")) << ir;
  json same = run({"why-miss", "--ir", tmp.sub("same.ir"), "--backend", "reference", "--json"}).j();
  EXPECT_EQ(same["any_hit"], true);
  EXPECT_EQ(run({"why-miss"}).rc, 2);
  EXPECT_EQ(run({"why-miss", "--ir", tmp.sub("missing.ir")}).rc, 1);
}

TEST_F(CacheTool, VerifyPruneClear) {
  ToolRun v = run({"verify"});
  EXPECT_EQ(v.rc, 0);
  EXPECT_NE(v.out.find("checked 3 entries: 3 ok, 0 problem(s)"), std::string::npos) << v.out;
  // damage one entry
  std::string path = run({"list", "--json"}).j()["entries"][0]["path"];
  fs::resize_file(path, 10);
  ToolRun bad = run({"verify", "--json"});
  EXPECT_EQ(bad.rc, 1);
  EXPECT_EQ(bad.j()["problems"][0]["path"], path);
  EXPECT_NE(run({"list"}).out.find("bad entry: " + path), std::string::npos);
  ToolRun fixed = run({"verify", "--remove"});
  EXPECT_EQ(fixed.rc, 0) << fixed.out;
  EXPECT_NE(fixed.out.find("removed " + path + ": truncated"), std::string::npos) << fixed.out;
  EXPECT_FALSE(fs::exists(path));
  // prune
  EXPECT_EQ(run({"prune"}).rc, 2);
  EXPECT_EQ(run({"prune", "--max-bytes", "lots"}).rc, 2);
  EXPECT_EQ(run({"prune", "--older-than", "soon"}).rc, 2);
  ToolRun keep = run({"prune", "--older-than", "7d"});
  EXPECT_EQ(keep.rc, 0);
  EXPECT_EQ(keep.out, "removed 0 entries (0 B), kept 2 (" +
                          detail::cache::human_bytes(run({"stats", "--json"}).j()["bytes"].get<uint64_t>()) + ")\n");
  json pr = run({"prune", "--max-bytes", "1", "--json"}).j();
  EXPECT_EQ(pr["removed"], 2);
  EXPECT_EQ(pr["kept"], 0);
  // clear
  {
    ScopedCache sc(dir);
    exp(rand({3, 3}, 3)).eval();
  }
  ToolRun c = run({"clear"});
  EXPECT_EQ(c.rc, 0);
  EXPECT_EQ(c.out, "removed 1 entries from " + dir + "/v1\n");
  EXPECT_EQ(run({"list", "--json"}).j()["entries"].size(), 0u);
}

TEST(CacheToolUnits, ParseSizesAndDurations) {
  using namespace detail::cache;
  uint64_t b;
  int64_t s;
  EXPECT_TRUE(parse_bytes("4096", &b) && b == 4096);
  EXPECT_TRUE(parse_bytes("64K", &b) && b == 65536);
  EXPECT_TRUE(parse_bytes("10MiB", &b) && b == 10485760);
  EXPECT_TRUE(parse_bytes("1G", &b) && b == 1073741824);
  EXPECT_FALSE(parse_bytes("1X", &b));
  EXPECT_FALSE(parse_bytes("", &b));
  EXPECT_TRUE(parse_duration("30", &s) && s == 30);
  EXPECT_TRUE(parse_duration("15m", &s) && s == 900);
  EXPECT_TRUE(parse_duration("7d", &s) && s == 604800);
  EXPECT_FALSE(parse_duration("d", &s));
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_age(90), "90s");
  EXPECT_EQ(human_age(7200), "2h");
}
