// The strategy of a GPU kernel (gpu_render.cpp writes it): which team (thread, warp, block) takes
// a unit of work, whether a reduction splits into two stages or row chunks, and the row cache.
// One decision per kernel, from its IR and the dialect; the kernel writer follows it.
#pragma once
#include <cstdint>
#include <string>

#include "gpu_render.hpp"
#include "ir/kernel.hpp"

namespace kfuse::detail::gpu {

/// How a kernel runs (the table "Strategies and launches per kernel kind", docs/gpu-backends.md).
struct Plan {
  std::string strategy;
  Team team = Team::Thread;
  int block = 256;
  bool two_stage = false;
  int64_t split = 1, chunk = 0;
  /// Two-stage column kernel whose later phases store over the reduce domain (x - mean(x, 0)):
  /// stage 2 runs per (outer point, chunk) too, each unit combining the partials and storing its
  /// chunk, so the stores get the same row-block parallelism as the fold.
  bool chunked_stores = false;
  /// row-warp rows short enough for registers (RowCache): the loop over a lane's elements is
  /// fully unrolled, and loads that several phases make are read from memory once.
  bool row_cache = false;
  /// row-split (very long rows, e.g. a vocabulary softmax): every stage runs per (row, chunk);
  /// stage s < folds combines the partials of folding phases 0..s-1 and folds phase s of its
  /// chunk into partials; the last stage combines them all and stores its chunk. folds + 1 launches.
  int row_folds = 0;
};

// Rows at least this long go "row-split": one block per row would leave most of a GPU idle when
// there are few rows (a [32, 50257] softmax is 32 blocks), and the chunks cost no extra traffic.
inline constexpr int64_t kRowSplitMin = 32768;
// Elements per (row, chunk) unit of row-split: 16 per lane of a 256-lane block.
inline constexpr int64_t kRowSplitChunk = 4096;

/// The folding phases of a row-split kernel (0 when it does not have that form): leading
/// over-reduce phases that fold without element stores, then phases that store without folding.
int row_split_folds(const ir::Kernel& k);
/// The strategy for `k` in dialect `d`.
Plan choose(const ir::Kernel& k, const Dialect& d);
/// Lanes of a team of kind `t` under plan `p`.
int team_size(Team t, const Plan& p, const Dialect& d);

}  // namespace kfuse::detail::gpu
