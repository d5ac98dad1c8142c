// The embedding-bag benchmark's problem, shared by kfuse_compare's "embedding_bag" workloads and
// kfuse_bag (bench/embedding_bag.cpp). Plain C++ types, so that a peer
// (bench/peers/torch_bag.cpp, compiled as C++17 against LibTorch) can include it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "workload.hpp"

namespace kbench {

/// Bags of rows of an f32 table [rows, cols], PyTorch layout: bag b is
/// ids[offsets[b] .. offsets[b+1]) (the last ends at ids.size()); the result is [bags, cols].
struct BagProblem {
  const float* table = nullptr;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> ids, offsets;
  int64_t distinct = 0;         ///< distinct rows among the ids (what a bag must read at least)
  std::shared_ptr<void> owner;  ///< keeps `table` alive (bag_table)
};

/// An f32 table [rows, cols] of uniform values in [-1, 1), made once per shape and shared.
/// Allocated as kfuse allocates its own big buffers (lib/graph/host_pool.cpp): on a 2 MiB boundary
/// with transparent huge pages asked for (unless kfuse::Options::huge_pages is off), so
/// that kfuse, LibTorch and kfuse's f16 / 8-bit / 4-bit copies pay the same TLB misses per row. (A
/// std::vector of this size is 16 bytes past a page: every 256-byte row would span 5 cache lines,
/// and its pages are 4 KiB where THP is "madvise".)
std::shared_ptr<const float> bag_table(int64_t rows, int64_t cols);

/// A problem over bag_table(rows, cols): `bags` bags of 20-100 ids, drawn uniformly or Zipf-like
/// (rank k with density ~ 1/(k+1), the shape of real id traffic, scattered over the table by a
/// bijection so that hot rows are not neighbours); deterministic for a seed.
BagProblem make_bag_problem(int64_t rows, int64_t cols, int64_t bags, bool zipf, uint64_t seed);
/// make_bag_problem made once per (rows, cols, bags, zipf) for the process, with the seeds
/// kfuse_bag uses (1 uniform, 2 Zipf-like): every table format of a run reads the same bags.
std::shared_ptr<const BagProblem> shared_bag_problem(int64_t rows, int64_t cols, int64_t bags, bool zipf);

/// fp64 bags of `values` (the table as a storage format holds it, as f32 [rows, cols]), with the
/// per-element bound 4 eps32 sum|row values| (f32 sums in any order, dequantisation computed once
/// per use).
Reference bag_reference(const BagProblem& p, const float* values);

/// Bytes per stored row of a table format: "f32", "f16", "8-bit", "8-bit fused" (the same bytes
/// in PyTorch's fused rows), "4-bit" (values plus the quantised formats' f32 scale and bias),
/// "4-bit fused" (PyTorch's 4-bit rows: f16 scale and bias).
double bag_row_bytes(const std::string& format, int64_t cols);

/// LibTorch's at::embedding_bag (mode sum) over the f32 table: "torch f32".
Impl torch_bag_impl(const BagProblem& p, int threads);
/// PyTorch's quantised bag (quantized::embedding_bag_byte_rowwise_offsets at 8 bits,
/// ..._4bit_rowwise_offsets at 4; mode sum) over a fused rowwise table (kfuse::pack_fused_rowwise's:
/// u8 [rows, cols + 8], or [rows, ceil(cols/2) + 4]), read in place: "torch 8-bit", "torch 4-bit".
Impl torch_bag_fused_impl(const BagProblem& p, const uint8_t* fused, int bits, int threads);

}  // namespace kbench
