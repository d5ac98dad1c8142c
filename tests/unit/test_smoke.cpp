#include <gtest/gtest.h>

#include <cmath>
#include <kfuse/kfuse.hpp>
#include <kfuse/reference.hpp>

using namespace kfuse;

TEST(Smoke, LogSoftmax) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = log_softmax(x, -1);
  auto v = y.to_vector<double>();
  auto r = reference_values(y);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], r[i], 1e-6);
  EXPECT_NEAR(v[0], 1 - std::log(std::exp(1.) + std::exp(2.) + std::exp(3.)), 1e-6);
}
