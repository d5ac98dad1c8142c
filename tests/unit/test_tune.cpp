// KFUSE_TUNE: the faster of two deliberately different backends (the reference interpreter and
// xbyak's machine code), variants and thread counts wins, and the choice persists in the cache
// directory for later processes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <kfuse/cache.hpp>
#include <kfuse/kfuse.hpp>
#include <kfuse/profile.hpp>

#include "backend/backend.hpp"
#include "backend/thread_pool.hpp"
#include "cache/cache_tool.hpp"
#include "profile_test_util.hpp"
#include "runtime/tune.hpp"
#include "test_util.hpp"

namespace kfuse {
namespace {

// The backend that ran the one kernel of exp(x) * 2 + 1 on fresh inputs.
std::string backend_that_ran(uint64_t seed) {
  Tensor x = test::make_tensor(test::random_values(1 << 16, seed), {1 << 16}, DType::F32);
  Profile p = profile([&] { (exp(x) * 2.0f + 1.0f).eval(); });
  return p.launches.size() == 1 ? p.launches[0].backend : "?";
}

// A new process, as far as the choice goes: no remembered table, no compiled kernels or plans.
void as_new_process(const Options& o) {
  detail::reset_tune_state();
  clear_memory_cache();
  set_options(o);  // a new generation: the plan cache starts over
}

TEST(Tune, FasterVariantWinsAndPersists) {
  if (!detail::find_backend("xbyak")) GTEST_SKIP() << "xbyak backend not built or no AVX2";
  set_machine(fake_machine());
  const Options saved = options();
  Options o = saved;
  o.backends = {"reference", "xbyak"};  // static choice: the interpreter, 10-100x slower
  o.cache_mode = "disk";
  o.cache_dir = (std::filesystem::temp_directory_path() / ("kfuse-tune-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(o.cache_dir);
  as_new_process(o);
  EXPECT_EQ(backend_that_ran(1), "reference");  // without tuning the static choice stays

  as_new_process(o);
  ::setenv("KFUSE_TUNE", "1", 1);
  EXPECT_EQ(backend_that_ran(2), "xbyak");
  ::unsetenv("KFUSE_TUNE");
  EXPECT_TRUE(std::filesystem::exists(o.cache_dir + "/tune.json"));

  as_new_process(o);  // tuning off: the remembered choice is used
  EXPECT_EQ(backend_that_ran(3), "xbyak");
  std::ostringstream out, err;  // kfuse-cache tuned: the winner and by how much
  ASSERT_EQ(detail::cache::run_cache_tool({"--dir", o.cache_dir, "tuned"}, out, err), 0) << err.str();
  EXPECT_NE(out.str().find(": xbyak "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("reference "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("1 tuned kernel"), std::string::npos) << out.str();

  std::filesystem::remove(o.cache_dir + "/tune.json");
  as_new_process(o);
  EXPECT_EQ(backend_that_ran(4), "reference");

  std::filesystem::remove_all(o.cache_dir);
  as_new_process(saved);
}

// A kernel of two forms: by default "slow" sleeps 600 us, "fast" returns at once, and either
// sleeps 300 us more on the pool, so its fastest form is "fast" on one thread. It notes the form
// it last ran in.
class FormsKernel final : public detail::CompiledKernel {
 public:
  FormsKernel(int slow_us = 600, int fast_us = 0, int pool_us = 300)
      : slow_us_(slow_us), fast_us_(fast_us), pool_us_(pool_us) {}
  std::vector<std::string> variants() const override { return {"slow", "fast"}; }
  void run(const ir::LaunchArgs& a) const override { run_variant(a, 0); }
  void run_variant(const ir::LaunchArgs&, int v) const override {
    last_variant = v;
    last_threads = detail::num_threads();
    const int us = (v == 0 ? slow_us_ : fast_us_) + (last_threads > 1 ? pool_us_ : 0);
    if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  mutable std::atomic<int> last_variant{-1}, last_threads{-1};

 private:
  int slow_us_, fast_us_, pool_us_;
};

// Forms that take the same time: the static one stays (a tie must not flip between processes).
TEST(Tune, TiesKeepTheStaticForm) {
  const Options saved = options();
  Options o = saved;
  o.cache_mode = "memory";
  as_new_process(o);
  ir::Kernel k;
  k.name = "k_tie";
  k.buffers = {{"out0", DType::F32, true}};
  auto fk = std::make_shared<FormsKernel>(1500, 1500, 0);
  detail::TuneResult r = detail::tune_and_remember("tie-key", "tie-ir", k, {16}, {{"xbyak", fk}}, o);
  EXPECT_EQ(r.winner.label(), "xbyak/slow");
  as_new_process(saved);
}

TEST(Tune, FasterVariantAndThreadCountWinAndPersist) {
  const Options saved = options();
  Options o = saved;
  o.num_threads = 2;
  o.cache_mode = "disk";
  o.cache_dir = (std::filesystem::temp_directory_path() / ("kfuse-tune-forms-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(o.cache_dir);
  as_new_process(o);
  if (detail::num_threads() < 2) {
    set_options(saved);
    GTEST_SKIP() << "a one-thread pool: no thread count to choose";
  }
  ir::Kernel k;
  k.name = "k_forms";
  k.buffers = {{"out0", DType::F32, true}};
  auto fk = std::make_shared<FormsKernel>();
  detail::TuneResult r = detail::tune_and_remember("forms-key", "forms-ir", k, {16}, {{"xbyak", fk}}, o);
  EXPECT_EQ(r.winner.label(), "xbyak/fast 1 thread");
  ASSERT_EQ(r.seconds.size(), 3u);  // slow, fast, then the faster of them on one thread

  detail::reset_tune_state();  // a later process: the choice comes from tune.json
  detail::TuneChoice c = detail::tuned_choice("forms-key", o);
  EXPECT_EQ(c.backend, "xbyak");
  EXPECT_EQ(c.variant, 1);
  EXPECT_EQ(c.variant_name, "fast");
  EXPECT_EQ(c.threads, 1);
  auto tuned = detail::apply_choice(fk, c);
  tuned->run({});
  EXPECT_EQ(fk->last_variant, 1);
  EXPECT_EQ(fk->last_threads, 1);
  fk->run({});  // the kernel itself keeps its static form
  EXPECT_EQ(fk->last_variant, 0);
  EXPECT_EQ(fk->last_threads, 2);

  // A table from another version naming a variant this kernel lacks: the static form.
  EXPECT_EQ(detail::apply_choice(fk, {"xbyak", 1, "renamed", 0}), fk);
  EXPECT_EQ(detail::apply_choice(fk, {"xbyak", 0, "slow", 0}), fk);

  std::ostringstream out, err;
  ASSERT_EQ(detail::cache::run_cache_tool({"--dir", o.cache_dir, "tuned"}, out, err), 0) << err.str();
  EXPECT_NE(out.str().find("k_forms: xbyak/fast 1 thread "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("xbyak/slow "), std::string::npos) << out.str();
  std::filesystem::remove_all(o.cache_dir);
  as_new_process(saved);
}

// The xbyak GEMM's packed and direct paths are timed as variants of one kernel; the winner is
// reported by kfuse-cache show and tuned, and the results do not change. Without KFUSE_TUNE
// nothing is timed or written.
TEST(Tune, GemmVariantsAreMeasuredAndShown) {
  if (!detail::find_backend("xbyak")) GTEST_SKIP() << "xbyak backend not built or no AVX2";
  set_machine(fake_machine());
  const Options saved = options();
  Options o = saved;
  o.backends = {"xbyak"};
  o.cache_mode = "disk";
  o.cache_dir = (std::filesystem::temp_directory_path() / ("kfuse-tune-gemm-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(o.cache_dir);
  // The variants sum each element in the same order; allow for rounding anyway (edge tiles).
  auto expect_close = [](const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << i;
  };
  auto mm = [] {
    Tensor a = test::make_tensor(test::random_values(48 * 40, 5), {48, 40}, DType::F32);
    Tensor b = test::make_tensor(test::random_values(40 * 56, 6), {40, 56}, DType::F32);
    return matmul(a, b).to_vector<float>();
  };
  as_new_process(o);
  const std::vector<float> plain = mm();
  EXPECT_FALSE(std::filesystem::exists(o.cache_dir + "/tune.json"));

  as_new_process(o);
  ::setenv("KFUSE_TUNE", "1", 1);
  const std::vector<float> tuned = mm();
  ::unsetenv("KFUSE_TUNE");
  expect_close(tuned, plain);
  std::ifstream f(o.cache_dir + "/tune.json");
  nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_EQ(j.size(), 1u) << j.dump(2);
  const nlohmann::json& e = j.begin().value();
  EXPECT_EQ(e.value("backend", ""), "xbyak");
  for (const char* form : {"xbyak/by size", "xbyak/packed", "xbyak/direct"})
    EXPECT_TRUE(e["seconds"].contains(form)) << form << " not timed: " << e.dump(2);

  as_new_process(o);  // the remembered form runs and computes the same
  expect_close(mm(), plain);
  std::ostringstream out, err;
  ASSERT_EQ(
      detail::cache::run_cache_tool({"--dir", o.cache_dir, "show", e.value("kernel", "?"), "--no-code"}, out, err), 0)
      << err.str();
  EXPECT_NE(out.str().find("tuned:        " + e.value("winner", "?") + " "), std::string::npos) << out.str();
  std::filesystem::remove_all(o.cache_dir);
  as_new_process(saved);
}

}  // namespace
}  // namespace kfuse
