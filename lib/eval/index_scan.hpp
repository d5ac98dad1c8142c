// The fast scan behind the index check (check_index.hpp): whether every index of a host i32/i64
// buffer lies in [0, size), in vectors where the CPU has them. Index ops run it at record time
// on indices that are already computed (lib/api/index_ops.cpp); only when it finds a bad one does
// the exact check (check_indices) run to name it.
#pragma once
#include <cstdint>

namespace kfuse::detail {

/// The instructions the scan may use: the best the CPU has (best_scan_isa), or a lower one (tests).
enum class ScanIsa { Scalar, Avx2, Avx512 };
ScanIsa best_scan_isa();

/// Whether every v[i], i in [0, n), lies in [0, size): one unsigned compare per index (a negative
/// one wraps above any size), OR-ed without branches within blocks of 4096, an early exit between
/// blocks. AVX-512 compares 8 i64 or 16 i32 per instruction; AVX2 4 i64 (i32 takes the generic
/// loop, which SSE2 vectorises).
bool all_in_range(const int64_t* v, int64_t n, int64_t size, ScanIsa isa = best_scan_isa());
bool all_in_range(const int32_t* v, int64_t n, int64_t size, ScanIsa isa = best_scan_isa());

}  // namespace kfuse::detail
