// Downstream smoke test: log_softmax of a small tensor through an installed kfuse, checked
// against values computed here in double precision.
#include <kfuse/kfuse.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const std::vector<float> in = {1, 2, 3, 4, -1, 0, 0.5f, 2};
  kfuse::Tensor x = kfuse::Tensor::from_vector<float>(in, {2, 4});
  kfuse::Tensor y = kfuse::log_softmax(x, -1);
  std::vector<float> got = y.to_vector<float>();
  if (got.size() != in.size()) {
    std::printf("kfuse_consumer: FAIL: %zu outputs, expected %zu\n", got.size(), in.size());
    return 1;
  }
  double max_err = 0;
  for (int r = 0; r < 2; ++r) {
    double m = -INFINITY, s = 0;
    for (int c = 0; c < 4; ++c) m = std::fmax(m, in[r * 4 + c]);
    for (int c = 0; c < 4; ++c) s += std::exp(double(in[r * 4 + c]) - m);
    for (int c = 0; c < 4; ++c) {
      double want = in[r * 4 + c] - m - std::log(s);
      max_err = std::fmax(max_err, std::fabs(got[r * 4 + c] - want));
    }
  }
  bool ok = max_err < 1e-5;
  std::printf("kfuse_consumer: log_softmax [2, 4] max |error| %.2e: %s\n", max_err, ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
