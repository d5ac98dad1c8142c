// A test fixture parameterised by a CPU backend name: the backend order is that one backend for
// the test (KFUSE_BACKEND-style), restored afterwards; skipped when the backend is not built in.
#pragma once
#include <kfuse/options.hpp>

#include <string>

#include "backend/backend.hpp"
#include "test_util.hpp"

namespace kfuse::test {

class ForcedBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!detail::find_backend(GetParam()))
      GTEST_SKIP() << "backend " << GetParam() << " is not built in or unavailable";
    saved_ = options();
    Options o = saved_;
    o.backends = {GetParam()};
    set_options(o);
  }
  void TearDown() override {
    if (detail::find_backend(GetParam())) set_options(saved_);
  }
  Options saved_;
};

}  // namespace kfuse::test
