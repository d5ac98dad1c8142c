#include "gpu_plan.hpp"

#include <algorithm>

namespace kfuse::detail::gpu {

namespace {

int64_t pow2_ceil(int64_t x) {
  int64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

}  // namespace

int row_split_folds(const ir::Kernel& k) {
  int folds = 0;
  while (folds < static_cast<int>(k.phases.size()) && k.phases[folds].over_reduce && !k.phases[folds].accs.empty() &&
         k.phases[folds].stores.empty())
    ++folds;
  for (size_t i = folds; i < k.phases.size(); ++i)
    if (!k.phases[i].accs.empty()) return 0;
  return folds;
}

Plan choose(const ir::Kernel& k, const Dialect& d) {
  Plan p;
  p.block = d.block_size;
  bool has_reduce = false;
  for (const auto& ph : k.phases) has_reduce |= ph.over_reduce;
  const int64_t R = k.reduce_numel();
  if (k.dynamic_reduce()) {  // segment kernels: a thread per outer point walks its own range
    p.strategy = "segment-thread";
    return p;
  }
  if (!has_reduce || R == 0) {
    p.strategy = has_reduce ? "serial" : "pointwise";
    return p;
  }
  // Two-stage form: one folding phase first (no element stores), every later phase once.
  bool eligible = k.phases[0].over_reduce && k.phases[0].stores.empty() && !k.phases[0].accs.empty();
  for (size_t i = 1; i < k.phases.size(); ++i) eligible &= !k.phases[i].over_reduce;
  if (k.kind == ir::KernelKind::Column) {
    // A thread per kept element: neighbouring threads read neighbouring addresses. A column of
    // R > 256 rows splits into row chunks, or one thread per column walks all R rows (a grid of
    // columns / 256 blocks: 16 for 4096 columns, most of a GPU idle).
    bool stores_later = false, folds_later = false;
    for (size_t i = 1; i < k.phases.size(); ++i)
      if (k.phases[i].over_reduce) {
        stores_later = true;
        folds_later |= !k.phases[i].accs.empty();
      }
    const bool chunkable = k.phases[0].over_reduce && k.phases[0].stores.empty() && !k.phases[0].accs.empty() &&
                           stores_later && !folds_later;
    if ((eligible || chunkable) && R > 256) {
      p.two_stage = true;
      p.chunked_stores = chunkable;
      p.split = std::min<int64_t>(256, (R + 63) / 64);
    }
    p.strategy = p.chunked_stores ? "two-stage-stores" : p.two_stage ? "two-stage-thread" : "serial";
  } else if (k.kind == ir::KernelKind::Global) {
    p.team = Team::Block;
    if (eligible && R > 4096) {
      p.two_stage = true;
      p.split = std::min<int64_t>(1024, (R + 4095) / 4096);
    }
    p.strategy = p.two_stage ? "two-stage-block" : "row-block";
  } else if (R >= kRowSplitMin && !k.reduce.empty() && row_split_folds(k) > 0) {
    p.team = Team::Block;
    p.two_stage = true;
    p.row_folds = row_split_folds(k);
    p.split = std::min<int64_t>(256, (R + kRowSplitChunk - 1) / kRowSplitChunk);
    p.strategy = "row-split";
  } else if (d.warp_shuffle && R <= 1024) {
    p.team = Team::Warp;
    p.strategy = "row-warp";
    // f64 bodies stay rolled (KF_NO_UNROLL: unrolled f64 exp/log make ptxas spill).
    bool f64 = false;
    for (const auto& b : k.buffers) f64 |= b.dtype == DType::F64;
    for (const auto& a : k.accs) f64 |= a.value->dtype == DType::F64;
    p.row_cache = !f64 && !k.reduce.empty() && k.phases.size() > 1;
  } else {
    p.team = Team::Block;
    p.block = static_cast<int>(std::min<int64_t>(d.block_size, pow2_ceil(R)));
    if (d.warp_shuffle) p.block = std::max(p.block, d.warp_size);
    p.strategy = "row-block";
  }
  if (p.two_stage) {
    p.chunk = (R + p.split - 1) / p.split;
    p.split = (R + p.chunk - 1) / p.chunk;
  }
  return p;
}

int team_size(Team t, const Plan& p, const Dialect& d) {
  return t == Team::Thread ? 1 : t == Team::Warp ? d.warp_size : p.block;
}

}  // namespace kfuse::detail::gpu
