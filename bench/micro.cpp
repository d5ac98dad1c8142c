// kfuse_micro: Catch2 v2 micro-benchmarks of the API's fixed costs.
//   kfuse_micro "[!benchmark]" --benchmark-samples 20
// Each case first checks the result against the fp64 reference, then benchmarks it.
#define CATCH_CONFIG_ENABLE_BENCHMARKING
#include <catch2/catch.hpp>
#include <cmath>
#include <kfuse/kfuse.hpp>
#include <kfuse/reference.hpp>
#include <vector>

// explain comes with the fusion engine; reference it weakly so this builds before it lands.
namespace kfuse {
__attribute__((weak)) Explanation explain(const std::vector<Tensor>& ts);
}

namespace {

bool have_explain() {
  using Fn = kfuse::Explanation (*)(const std::vector<kfuse::Tensor>&);
  Fn fn = &kfuse::explain;
  return fn != nullptr;
}

std::vector<float> ramp(size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>(i % 97) / 97.0f;
  return v;
}

void check_close(const kfuse::Tensor& y) {
  auto got = y.to_vector<double>();
  auto ref = kfuse::reference_values(y);
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(std::fabs(got[i] - ref[i]) <= 1e-5 + 1e-4 * std::fabs(ref[i]));
}

}  // namespace

TEST_CASE("record cost of ops", "[!benchmark][record]") {
  auto x = ramp(8, -1, 1);
  BENCHMARK("borrow 8 floats") { return kfuse::Tensor::borrow(x.data(), kfuse::Shape{8}); };
  auto t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{8});
  BENCHMARK("record 1 unary op") { return kfuse::relu(t); };
  BENCHMARK("record 1 binary op") { return t + t; };
  BENCHMARK("record scalar op") { return t * 2.0; };
  BENCHMARK("record 10-op chain") {
    return kfuse::sqrt(kfuse::sigmoid(kfuse::log(kfuse::relu(kfuse::square(kfuse::tanh(t * 1.5 + 0.5)) - 0.25) + 1.0)));
  };
  auto m = ramp(4096 * 10, -3, 3);
  auto tm = kfuse::Tensor::borrow(m.data(), kfuse::Shape{4096, 10});
  BENCHMARK("record log_softmax (composite)") { return kfuse::log_softmax(tm, -1); };
  BENCHMARK("record layer_norm (composite)") { return kfuse::layer_norm(tm, kfuse::Shape{10}); };
}

TEST_CASE("cached eval on tiny tensors", "[!benchmark][eval]") {
  auto x = ramp(8, -1, 1);
  {
    auto t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{8});
    check_close(kfuse::relu(t * 2.0 + 1.0));
  }
  BENCHMARK("record+eval relu, 8 floats") {
    auto t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{8});
    auto y = kfuse::relu(t);
    y.eval();
    return y.data();
  };
  BENCHMARK("record+eval relu(x*2+1), 8 floats") {
    auto t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{8});
    auto y = kfuse::relu(t * 2.0 + 1.0);
    y.eval();
    return y.data();
  };
  BENCHMARK("record+eval 10-op chain, 8 floats") {
    auto t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{8});
    auto y =
        kfuse::sqrt(kfuse::sigmoid(kfuse::log(kfuse::relu(kfuse::square(kfuse::tanh(t * 1.5 + 0.5)) - 0.25) + 1.0)));
    y.eval();
    return y.data();
  };
  // The fixed cost around a planned matmul (issue target: <= 5 us): 2x2 @ 2x2 is ~16 FLOPs.
  BENCHMARK("record+eval relu(matmul(a, b) + 1), 2x2") {
    auto a = kfuse::Tensor::borrow(x.data(), kfuse::Shape{2, 2});
    auto b = kfuse::Tensor::borrow(x.data() + 4, kfuse::Shape{2, 2});
    auto y = kfuse::relu(kfuse::matmul(a, b) + 1.0);
    y.eval();
    return y.data();
  };
  BENCHMARK("from_data (copy) + eval, 8 floats") {
    auto t = kfuse::Tensor::from_data(x.data(), kfuse::Shape{8});
    auto y = kfuse::relu(t);
    y.eval();
    return y.data();
  };
}

TEST_CASE("log_softmax [4096,10]", "[!benchmark][log_softmax]") {
  auto x = ramp(4096 * 10, -3, 3);
  {
    auto t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{4096, 10});
    check_close(kfuse::log_softmax(t, -1));
  }
  BENCHMARK("record+eval log_softmax [4096,10]") {
    auto t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{4096, 10});
    auto y = kfuse::log_softmax(t, -1);
    y.eval();
    return y.data();
  };
  if (have_explain()) {
    BENCHMARK("explain log_softmax [4096,10]") {
      auto t = kfuse::Tensor::borrow(x.data(), kfuse::Shape{4096, 10});
      return kfuse::explain(std::vector<kfuse::Tensor>{kfuse::log_softmax(t, -1)}).kernel_count();
    };
  }
}

// Math functions in cache (256 KiB in, 256 KiB out): compute bound, the interleaved copies of
// the xbyak injectors (docs/xbyak-backend.md) are what these measure.
TEST_CASE("math in cache [64,1024]", "[!benchmark][math]") {
  auto a = ramp(64 * 1024, -3, 3), b = ramp(64 * 1024, -1, 2), c = ramp(64 * 1024, -2, 2);
  const kfuse::Shape s{64, 1024};
  auto ta = kfuse::Tensor::borrow(a.data(), s), tb = kfuse::Tensor::borrow(b.data(), s);
  auto tc = kfuse::Tensor::borrow(c.data(), s);
  auto chain = [&] { return kfuse::tanh(ta * 0.5 + tb) * kfuse::sigmoid(tc) - kfuse::exp(-ta * ta); };
  check_close(chain());
  auto run = [](kfuse::Tensor y) {
    y.eval();
    return y.data();
  };
  BENCHMARK("exp [64,1024]") { return run(kfuse::exp(ta)); };
  BENCHMARK("gelu_tanh [64,1024]") { return run(kfuse::gelu(ta, true)); };
  BENCHMARK("gelu (erf) [64,1024]") { return run(kfuse::gelu(ta, false)); };
  BENCHMARK("silu [64,1024]") { return run(kfuse::silu(ta)); };
  BENCHMARK("tanh(a*0.5+b)*sigmoid(c)-exp(-a*a) [64,1024]") { return run(chain()); };
}

TEST_CASE("element-wise 64K", "[!benchmark][elementwise]") {
  auto a = ramp(1 << 16, -3, 3), b = ramp(1 << 16, -1, 2), c = ramp(1 << 16, 0, 1);
  {
    auto ta = kfuse::Tensor::borrow(a.data(), kfuse::Shape{1 << 16});
    auto tb = kfuse::Tensor::borrow(b.data(), kfuse::Shape{1 << 16});
    auto tc = kfuse::Tensor::borrow(c.data(), kfuse::Shape{1 << 16});
    check_close(kfuse::relu(ta * tb + tc));
  }
  BENCHMARK("record+eval relu(a*b+c), 64K") {
    auto ta = kfuse::Tensor::borrow(a.data(), kfuse::Shape{1 << 16});
    auto tb = kfuse::Tensor::borrow(b.data(), kfuse::Shape{1 << 16});
    auto tc = kfuse::Tensor::borrow(c.data(), kfuse::Shape{1 << 16});
    auto y = kfuse::relu(ta * tb + tc);
    y.eval();
    return y.data();
  };
}
