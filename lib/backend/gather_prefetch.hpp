// How the CPU backends prefetch the rows a gathering kernel (an embedding bag) reads: THE one
// source of this policy for jit/xbyak/segment.cpp and jit/llvm (prefetch_rows.cpp).
//
// A bag reads one table row per id, rows scattered over the table, so the hardware prefetchers
// cannot guess the next row (its address is data: a later id). The kernels prefetch the rows of
// the id `ahead` positions on, into L1 or into L2 depending on the table's size, or not at all:
//
// - A table beyond about a quarter of the L3 misses to memory: a row of 64 f32 is 4 lines, so
//   16-32 ids ahead is 64-128 lines in flight, more than the L1's miss buffers hold (about 24 on
//   Zen 4); prefetches into L1 queue behind them and the walk waits. Into L2 (prefetcht1) they
//   use the L2's larger miss queue, and the later load's L2 -> L1 step is short.
// - A table in the caches: the rows come from L2 or L3 in a few tens of cycles, and a prefetch
//   into L1 16 ids ahead makes the loads L1 hits; prefetching into L2 leaves each load an L1
//   miss (the in-L2 table's bag 10-25% slower).
// - A table of rows alone that fits the L2: out-of-order execution hides the L2's latency, and
//   the prefetches only take load slots (5 per id for an f32 row of 64). Without them the f32
//   bag over [2000, 64] took 663-665 instead of 695-702 us on uniform ids and 529-532 instead of
//   664-672 us on Zipf ids; f16 rows the same. A gathered scalar beside the row (the 8-bit and
//   4-bit tables' scale/bias, its own line elsewhere) keeps the L1 prefetch: without it the
//   8-bit bag was 3-5% slower.
//
// Measured (docs/performance.md, "Embedding bags: prefetch into L2 for big tables"): 2-vCPU AMD
// EPYC Zen 4 (L2 1 MiB, L3 32 MiB), f32 [R, 64] tables, 246k ids, 1 thread, L1 at 16 ahead
// against L2 at 32 ahead: R = 2k (0.5 MiB) and 8k (2 MiB) L1 15-25% faster; 20k (5 MiB) L1
// 5-10% faster; 32k (8 MiB) even; 60k (15 MiB) L2 25-35% faster; 2M (512 MiB) L2 1.5-1.6x faster
// (f16 2x). Distances for L2 prefetches: 24-48 ids the best, 16 and 64 slower, for those rows of
// 256 bytes (4 lines, 128 in flight at 32 ahead). Shorter rows take proportionally more ids, up to
// 64 (about 128 lines again), once the prefetch ran on across bags (it had stopped at the end of
// the next bag): Zen 4, 1 thread, 32 -> 64 ahead, 4096 bags of 20-100 ids, [2M, 64] tables: 8-bit
// fused rows (72 bytes) uniform 1.71-1.78 -> 1.39-1.53 ms, f16 (128 bytes) 1.41-1.57 -> 1.34-1.36;
// 2 threads 8-bit 0.79-0.83 -> 0.70-0.76, f16 0.78-0.97 -> 0.71; f32 rows and Zipf ids level
// (docs/performance.md, "Bag prefetches run across bags").
//
// An Intel core (a Sapphire Rapids class Xeon, 2 vCPUs: docs/performance.md, "Bag prefetches on
// an Intel Xeon") keeps L1 prefetches for a big table whose rows are short: with at most 192
// bytes read per id (3 lines: 8-bit and 4-bit rows of up to 128 columns, f16 rows of 64) the L1
// at 16 ahead ran 1.1-1.3x faster than the L2 at 32 ([1M, 128] 8-bit, uniform ids 4.37 -> 3.40
// ms, Zipf 3.11 -> 2.47; [2M, 64] f16 2.68 -> 2.50), both backends; from 256 bytes (f32 rows of
// 64, f16 of 128) the L2 stayed ahead ([1M, 128] f16 5.0 against 6.8-7.3 ms).
#pragma once
#include <algorithm>
#include <cstdint>

#include "kfuse/profile.hpp"

namespace kfuse::detail {

struct GatherPrefetch {
  int64_t ahead;  ///< ids ahead of the walk whose rows are prefetched; 0: no prefetch
  bool to_l2;     ///< prefetcht1 (llvm.prefetch locality 2), else prefetcht0 (locality 3)
};

/// Adds rows x bytes (one table's bytes) to `total`; -1 (unknown) when either is unknown (< 0)
/// or the sum does not fit an int64.
inline int64_t add_table_bytes(int64_t total, int64_t rows, int64_t bytes) {
  int64_t t = 0;
  if (total < 0 || rows < 0 || bytes < 0 || __builtin_mul_overflow(rows, bytes, &t) ||
      __builtin_add_overflow(total, t, &t))
    return -1;
  return t;
}

/// Whether short rows of a big table are prefetched into L1 (see above): an Intel core, not AMD's
/// (measured on Zen 4 the other way). One answer per process.
inline bool short_rows_to_l1() {
  static const bool intel = __builtin_cpu_is("intel");
  return intel;
}

/// The prefetch for a kernel whose gathered rows span `table_bytes` (the rows a clamped index can
/// select, times the bytes of each the kernel reads, summed over its tables); < 0: unknown,
/// taken as big (a bag over a table in memory is the case prefetching exists for). `id_bytes`:
/// the bytes prefetched per id (every table's span summed); < 0: unknown. `rows_only`: every
/// prefetched load reads a vector of a row (no gathered scalar such as a scale).
inline GatherPrefetch gather_prefetch(int64_t table_bytes, int64_t id_bytes, bool rows_only) {
  const probe::CacheSizes& cs = probe::cache_sizes();
  if (table_bytes < 0 || table_bytes > cs.l3 / 4) {
    if (id_bytes >= 0 && id_bytes <= 192 && short_rows_to_l1()) return {16, false};
    constexpr int64_t kLinesAhead = 128;  // lines in flight to aim for (see above)
    return {id_bytes > 0 ? std::clamp<int64_t>(kLinesAhead * 64 / id_bytes, 32, 64) : 32, true};
  }
  if (rows_only && table_bytes <= cs.l2) return {0, false};
  return {16, false};
}

}  // namespace kfuse::detail
