#include "workload.hpp"

namespace kbench {

int num_inputs(Kind k) {
  switch (k) {
    case Kind::LayerNorm:
    case Kind::ReluFma:
    case Kind::Chain3: return 3;
    case Kind::Add:
    case Kind::AddRelu: return 2;
    default: return 1;
  }
}

namespace {
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {  // [lo, hi)
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
};
}  // namespace

void make_inputs(Workload& w, uint64_t seed) {
  SplitMix rng{seed * 0x2545F4914F6CDD1DULL + 17};
  const int64_t n = w.numel();
  w.inputs.clear();
  auto fill = [&](int64_t count, float lo, float hi) {
    std::vector<float> v(static_cast<size_t>(count));
    for (auto& x : v) x = rng.uniform(lo, hi);
    w.inputs.push_back(std::move(v));
  };
  switch (w.kind) {
    case Kind::LayerNorm:
      fill(n, -3, 3);
      fill(w.cols, 0.5f, 1.5f);   // weight
      fill(w.cols, -0.5f, 0.5f);  // bias
      break;
    case Kind::SumAxis0:
    case Kind::SumAxis1:
    case Kind::SumAll: fill(n, 0, 1); break;  // positive: relative error is meaningful
    default:
      for (int i = 0; i < num_inputs(w.kind); ++i) fill(n, -3, 3);
  }
  switch (w.kind) {
    case Kind::SumAxis0: w.out_numel = w.cols; break;
    case Kind::SumAxis1: w.out_numel = w.rows; break;
    case Kind::SumAll: w.out_numel = 1; break;
    default: w.out_numel = n;
  }
  double in_bytes = 0;
  for (auto& v : w.inputs) in_bytes += 4.0 * static_cast<double>(v.size());
  w.compulsory_bytes = in_bytes + 4.0 * static_cast<double>(w.out_numel);
}

}  // namespace kbench
