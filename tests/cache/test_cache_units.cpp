// Keys (shape policy), the entry encoding, and the memory cache (single flight, failures,
// LRU eviction freeing code).
#include <atomic>
#include <thread>

#include "cache/entry.hpp"
#include "cache/memory_cache.hpp"
#include "cache_test_util.hpp"
#include "runtime/plan.hpp"

using namespace kfuse;
using namespace kfuse::detail;
using namespace kfuse::detail::cache;

namespace {

// The kernel IR of the only fused group of `t`'s plan.
ir::Kernel kernel_of(const Tensor& t) {
  auto plan = make_plan({t.node()}, false, options());
  for (const auto& pk : plan->kernels)
    if (!pk.lowered.kernel.name.empty()) return pk.lowered.kernel;
  throw std::runtime_error("no fused kernel");
}

KernelKey key_of(const ir::Kernel& k, const std::string& backend = "reference",
                 const std::string& target = "interpreter") {
  KeyFields f;
  f.backend = backend;
  f.target = target;
  f.dtypes = dtype_signature(k);
  f.ir_text = ir::print_kernel(k);
  return make_key(f, k.name);
}

}  // namespace

TEST(CacheKey, BatchIsRunTimeReduceIsSpecialised) {
  auto ls = [](int64_t b, int64_t c) { return kernel_of(log_softmax(ones({b, c}).cast(DType::F32) * 1.0, -1)); };
  ir::Kernel a = ls(1, 10), b = ls(64, 10), c = ls(8, 12);
  EXPECT_EQ(key_of(a).hex(), key_of(b).hex()) << ir::print_kernel(a) << ir::print_kernel(b);
  EXPECT_NE(key_of(a).hex(), key_of(c).hex());
  EXPECT_EQ(key_of(a).stem, a.name);
  EXPECT_EQ(key_of(a).hex().size(), 32u);
}

TEST(CacheKey, EveryFieldChangesTheKey) {
  ir::Kernel k = kernel_of(exp(ones({4, 4})) + 1.0);
  KeyFields f;
  f.backend = "reference";
  f.target = "interpreter";
  f.dtypes = dtype_signature(k);
  f.ir_text = ir::print_kernel(k);
  std::string base = make_key(f, "s").hex();
  EXPECT_EQ(base, make_key(f, "other stem").hex());  // the stem is not hashed
  auto changed = [&](auto edit) {
    KeyFields g = f;
    edit(g);
    return make_key(g, "s").hex() != base;
  };
  EXPECT_TRUE(changed([](KeyFields& g) { g.backend = "llvm"; }));
  EXPECT_TRUE(changed([](KeyFields& g) { g.target = "x86_64 avx2"; }));
  EXPECT_TRUE(changed([](KeyFields& g) { g.dtypes = "f64,f64"; }));
  EXPECT_TRUE(changed([](KeyFields& g) { g.ir_text += " "; }));
  EXPECT_TRUE(changed([](KeyFields& g) { g.codegen_version++; }));
  EXPECT_TRUE(changed([](KeyFields& g) { g.backend_version++; }));
  EXPECT_TRUE(changed([](KeyFields& g) { g.format_version++; }));
  // length-prefixed fields: moving a character across a boundary changes the key
  EXPECT_TRUE(changed([](KeyFields& g) {
    g.backend = "referenc";
    g.target = "einterpreter";
  }));
  EXPECT_EQ(dtype_signature_of_text(f.ir_text), f.dtypes);
  EXPECT_EQ(stem_of_text(f.ir_text), k.name);
  KernelKey parsed;
  ASSERT_TRUE(parse_key_hex(base, &parsed));
  EXPECT_EQ(parsed.hex(), base);
  EXPECT_FALSE(parse_key_hex("xyz", &parsed));
}

TEST(CacheEntry, RoundTripAndDamage) {
  Entry e;
  e.fields.backend = "xbyak";
  e.fields.target = "x86_64 avx512";
  e.fields.dtypes = "f32,f32";
  e.fields.ir_text = "kernel k_test_f32 (row)\n";
  e.key = make_key(e.fields, "k_test_f32");
  e.ops = {"exp", "sum"};
  e.pattern = "lattice";
  e.source = "vaddps ...";
  e.source_kind = "asm";
  e.binary = {0xc3, 0x90, 0x00, 0xff};
  e.binary_kind = "x86-raw";
  e.compile_ms = 1.25;
  e.created = 1700000000;
  auto bytes = encode_entry(e);
  Entry d;
  std::string why;
  ASSERT_EQ(decode_entry(bytes, &d, false, &why), DecodeStatus::Ok) << why;
  EXPECT_EQ(d.key.hex(), e.key.hex());
  EXPECT_EQ(d.key.stem, "k_test_f32");
  EXPECT_EQ(d.binary, e.binary);
  EXPECT_EQ(d.source, e.source);
  EXPECT_EQ(d.ops, e.ops);
  EXPECT_EQ(d.created, e.created);

  auto flipped = bytes;
  flipped[flipped.size() - 2] ^= 0x01;
  EXPECT_EQ(decode_entry(flipped, &d, false, &why), DecodeStatus::Checksum);
  auto cut = bytes;
  cut.resize(cut.size() - 3);
  EXPECT_EQ(decode_entry(cut, &d, false, &why), DecodeStatus::Truncated);
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  cut.resize(20);
  EXPECT_EQ(decode_entry(cut, &d, false, &why), DecodeStatus::Truncated);
  auto foreign = bytes;
  foreign[8] = 99;
  EXPECT_EQ(decode_entry(foreign, &d, false, &why), DecodeStatus::ForeignVersion);
  auto junk = bytes;
  junk[0] = 'X';
  EXPECT_EQ(decode_entry(junk, &d, false, &why), DecodeStatus::BadMagic);
}

namespace {
class FakeKernel final : public CompiledKernel {
 public:
  void run(const ir::LaunchArgs&) const override {}
};
KernelKey test_key(int i) {
  KeyFields f;
  f.backend = "fake";
  f.ir_text = "kernel k" + std::to_string(i);
  return make_key(f, "k" + std::to_string(i));
}
}  // namespace

TEST(MemoryCache, SingleFlight) {
  MemoryCache mc;
  std::atomic<int> produced{0};
  std::atomic<int> hits{0};
  std::vector<std::thread> ts;
  std::vector<const CompiledKernel*> got(8);
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&, t] {
      auto r = mc.get(test_key(1), [&] {
        ++produced;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return CompileResult{std::make_shared<FakeKernel>(), {}};
      });
      got[t] = r.kernel.get();
      hits += r.hit;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(produced.load(), 1);
  EXPECT_EQ(hits.load(), 7);
  for (auto* p : got) EXPECT_EQ(p, got[0]);
}

TEST(MemoryCache, FailureIsSharedButNotCached) {
  MemoryCache mc;
  int calls = 0;
  auto fail = [&]() -> CompileResult {
    ++calls;
    throw BackendError("boom", "log");
  };
  EXPECT_THROW(mc.get(test_key(2), fail), BackendError);
  EXPECT_EQ(mc.size(), 0u);
  auto r = mc.get(test_key(2), [&] {
    ++calls;
    return CompileResult{std::make_shared<FakeKernel>(), {}};
  });
  EXPECT_FALSE(r.hit);
  EXPECT_TRUE(r.kernel);
  EXPECT_EQ(calls, 2);
  // a decline is cached (deterministic for a key)
  auto d1 = mc.get(test_key(3), [] { return CompileResult{nullptr, "no"}; });
  auto d2 = mc.get(test_key(3), [] { return CompileResult{std::make_shared<FakeKernel>(), {}}; });
  EXPECT_FALSE(d2.kernel);
  EXPECT_EQ(d2.declined, "no");
  EXPECT_TRUE(d2.hit);
}

TEST(MemoryCache, LruEvictionFreesCode) {
  MemoryCache mc;
  mc.set_limits(3, uint64_t{1} << 30);
  std::vector<std::weak_ptr<CompiledKernel>> weak;
  auto make = [] { return CompileResult{std::make_shared<FakeKernel>(), {}}; };
  for (int i = 0; i < 3; ++i) weak.push_back(mc.get(test_key(10 + i), make).kernel);
  // touch 10 so 11 is the least recently used
  EXPECT_TRUE(mc.get(test_key(10), make).hit);
  weak.push_back(mc.get(test_key(13), make).kernel);
  EXPECT_EQ(mc.size(), 3u);
  EXPECT_EQ(mc.evictions(), 1u);
  EXPECT_FALSE(weak[0].expired());
  EXPECT_TRUE(weak[1].expired()) << "evicting must drop the code";
  EXPECT_FALSE(mc.get(test_key(11), make).hit);
  // byte bound
  mc.set_limits(100, 1);
  EXPECT_LE(mc.size(), 1u);
  mc.clear();
  EXPECT_EQ(mc.size(), 0u);
  EXPECT_EQ(mc.bytes(), 0u);
}

// Over the bound, one scan evicts the least recently used down to 15/16 of it (not one scan per
// eviction, which made every insert into a full cache cost O(entries)).
TEST(MemoryCache, EvictsOldestSixteenthInOneScan) {
  MemoryCache mc;
  mc.set_limits(64, uint64_t{1} << 30);
  std::vector<std::weak_ptr<CompiledKernel>> weak;
  auto make = [] { return CompileResult{std::make_shared<FakeKernel>(), {}}; };
  for (int i = 0; i < 64; ++i) weak.push_back(mc.get(test_key(100 + i), make).kernel);
  EXPECT_EQ(mc.evictions(), 0u);
  EXPECT_TRUE(mc.get(test_key(100), make).hit);  // the oldest insert, now recently used
  weak.push_back(mc.get(test_key(164), make).kernel);
  EXPECT_EQ(mc.size(), 60u);
  EXPECT_EQ(mc.evictions(), 5u);
  EXPECT_FALSE(weak[0].expired()) << "a hit keeps an entry";
  for (int i = 1; i <= 5; ++i) EXPECT_TRUE(weak[i].expired()) << "entry " << i << " was among the oldest";
  for (int i = 6; i <= 64; ++i) EXPECT_FALSE(weak[i].expired()) << "entry " << i;
  for (int i = 0; i < 4; ++i) mc.get(test_key(200 + i), make);  // room left: no scan, no eviction
  EXPECT_EQ(mc.evictions(), 5u);
  EXPECT_EQ(mc.size(), 64u);
}

TEST(MemoryCache, ConcurrentHitsAndMisses) {
  MemoryCache mc;
  mc.set_limits(16, uint64_t{1} << 30);
  std::atomic<int> produced{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        auto r = mc.get(test_key((i * 7 + t) % 24), [&] {
          ++produced;
          return CompileResult{std::make_shared<FakeKernel>(), {}};
        });
        ASSERT_TRUE(r.kernel);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_LE(mc.size(), 16u);
  EXPECT_GE(produced.load(), 24);
}
