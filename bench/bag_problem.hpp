// The embedding-bag benchmark's problem (bench/embedding_bag.cpp), in plain C++ types so that a
// peer (bench/peers/torch_bag.cpp, compiled as C++17 against LibTorch) can include it.
#pragma once
#include <cstdint>
#include <vector>

#include "workload.hpp"

namespace kbench {

/// Bags of rows of an f32 table [rows, cols], PyTorch layout: bag b is
/// ids[offsets[b] .. offsets[b+1]) (the last ends at ids.size()); the result is [bags, cols].
struct BagProblem {
  const float* table = nullptr;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> ids, offsets;
};

/// LibTorch's at::embedding_bag (mode sum) over the f32 table: "torch f32".
Impl torch_bag_impl(const BagProblem& p, int threads);

}  // namespace kbench
