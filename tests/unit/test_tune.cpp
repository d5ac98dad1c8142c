// KFUSE_TUNE: the faster of two deliberately different backends (the reference interpreter and
// xbyak's machine code) wins, and the choice persists in the cache directory for later processes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <kfuse/cache.hpp>
#include <kfuse/kfuse.hpp>
#include <kfuse/profile.hpp>

#include "backend/backend.hpp"
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

}  // namespace
}  // namespace kfuse
