// Every test of kfuse_tests gets a private temporary KFUSE_CACHE_DIR (tests must never touch
// ~/.cache/kfuse). Child processes started by the cache tests get theirs from the parent.
#include "cache_test_util.hpp"

namespace {

class PrivateCacheDir : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("KFUSE_TEST_CHILD")) return;
    dir_ = std::make_unique<kfuse::cache_test::TempDir>();
    ::setenv("KFUSE_CACHE_DIR", dir_->path.c_str(), 1);
    kfuse::set_options(kfuse::Options::from_env());
  }
  void TearDown() override { dir_.reset(); }

 private:
  std::unique_ptr<kfuse::cache_test::TempDir> dir_;
};

[[maybe_unused]] ::testing::Environment* const g_env = ::testing::AddGlobalTestEnvironment(new PrivateCacheDir);

}  // namespace
