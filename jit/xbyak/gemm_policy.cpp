// xbyak backend: the launch-time choices of a contraction (gemm.hpp), each a rule measured on the
// CPUs it names: the packed path's cache blocking, the columns per epilogue group, the loop an
// m x n block runs (GEMV, transposed GEMV, swapped, direct or packed), and the rows a direct tile
// reads at once. gemm_run.cpp runs what these choose; nothing here changes the bits (every path
// sums each element of C the same way).
#include <algorithm>

#include "gemm.hpp"
#include "kfuse/profile.hpp"

namespace kfuse::detail::xb {

namespace {
int64_t round_down(int64_t v, int64_t m) { return std::max(m, v / m * m); }
}  // namespace

GemmBlocking gemm_blocking(const Ukrs& u) {
  // KC: a KC x NR sliver of B fills half of L1 (the other half: A's stream, C). MC: an MC x KC
  // panel of A fills half of L2. NC: a KC x NC panel of B a quarter of L3 (shared by the cores),
  // at most 4 MiB.
  //
  // AVX-512 (NR = 32 floats) instead takes a sliver of 1/16 of L2 (KC = 512 for 1 MiB): half of
  // L1 allowed KC = 128 only, and each KC block ends with a read-modify-write of the 14 x 32 C
  // tile. The sliver then streams from L2 (128 bytes per 28 FMAs, which the hardware prefetcher
  // sustains). Zen 4, 1 thread, 2048^3 (xbyak microkernel, C prefetched to L2): KC 128 168 ms,
  // 256 159-160, 384 157, 512 155-157, 1024 156; MC 238..1022 made no difference.
  const probe::CacheSizes& cs = probe::cache_sizes();
  const int64_t l1 = cs.l1d, l2 = cs.l2, l3 = cs.l3;
  GemmBlocking b;
  const int64_t sliver_bytes = u.w == 16 ? l2 / 16 : l1 / 2;
  b.kc = std::clamp<int64_t>(round_down(sliver_bytes / (u.nr * 4), 8), 64, 1024);
  b.mc = std::clamp<int64_t>(round_down(l2 / 2 / (b.kc * 4), u.mr), u.mr, 1024 / u.mr * u.mr);
  // NC: at most 4 MiB of panel, about one core's share of a server L3: VMs report the whole
  // socket's L3 (480 MiB on a 2-vCPU Xeon), and there a 16 MiB panel (NC = 4096 at KC = 1024) ran
  // [512,1024]x[1024,4096] 15% slower than a 4 MiB one, an 8 MiB one 4-7% (1 thread, interleaved).
  const int64_t panel_bytes = std::min<int64_t>(l3 / 4, int64_t{4} << 20);
  b.nc = std::clamp<int64_t>(round_down(panel_bytes / (b.kc * 4), u.nr), u.nr, 4096 / u.nr * u.nr);
  return b;
}

int64_t gemm_epilogue_columns(const Ukrs& u, int64_t kc) {
  return round_down(probe::cache_sizes().l2 / 4 / (std::max<int64_t>(kc, 1) * 4), u.nr);
}

GemmPath gemm_path(const Ukrs& u, const GemmPathQuery& q) {
  const int64_t l2 = probe::cache_sizes().l2, l3 = probe::cache_sizes().l3;
  // u8 x i8 with both operands along K (a quantised linear layer): read in place, W once per
  // column of tiles, for up to 16 rows whatever W's size, up to 64 once W is past half of L2
  // (a W in L2 is packed cheaply, and the packed kernels' tiles do more per load). Intel Xeon
  // (model 207), 1 thread, [M,K]x[N,K]^T, packed -> dot rows: [16,4096]x[4096,4096]^T 2.85 ->
  // 1.25 ms (oneDNN 1.63), 1 row 2.40 -> 0.58, 32 rows 3.66 -> 2.02, 64 4.90 -> 3.67, 128
  // 8.25 -> 8.29 (not taken); [32,1024]x[1024,1024]^T 0.164 -> 0.119, [16,256]x[256,256]^T
  // 8 -> 7 us; lost: [64,512]x[512,512]^T 56 -> 70 us, [32,256]x[256,256]^T 10 -> 12 us.
  if (q.forced != 1 && q.dot == DotKind::U8S8 && q.a_unit_k && q.b_unit_k &&
      (q.m <= 16 || (q.m <= kDotRowsLimit && q.K * q.n * q.b_bytes >= l2 / 2)))
    return GemmPath::DotRows;
  // The same with W stored [K, N]: its quads of k interleaved in registers, not in a panel.
  // Intel Xeon (model 207), 1 thread, [M,4096]x[4096,4096], packed -> dot cols: 1 row 2.31 ->
  // 0.85 ms, 8 2.38 -> 1.42, 16 2.84 -> 1.94, 32 3.57 -> 3.43.
  if (q.forced != 1 && q.dot == DotKind::U8S8 && q.a_unit_k && q.b_unit_n && q.m <= kDotColsLimit &&
      q.K * q.n * q.b_bytes >= l2 / 2)
    return GemmPath::DotCols;
  if (q.forced == 1 || !q.gemv_ok) return GemmPath::Packed;
  const int64_t bytes = (q.m * q.K + q.m * q.n) * 4 + q.K * q.n * q.b_bytes;  // A, C and B as stored
  if (q.b_unit_n) {
    // Three or four rows in L2 run faster through the direct kernel's register tile. Past L2,
    // up to 2 * kGemvRows rows go in two passes over B (groups of up to kGemvRows rows): about
    // the traffic of packing B once, where packing for 5 to 8 rows cost more than their
    // arithmetic. Zen 3, 1 thread, [M,1024]x[1024,1024] (B in L3), packed -> two passes:
    // M = 5 0.42 -> 0.24 ms, 8 0.51 -> 0.35 ms (oneDNN 0.26, 0.55); [8,4096]x[4096,4096] (B in
    // memory) 9.2 -> 7.1 ms. Three passes lost with B in memory (12 rows 9.7 -> 10.5 ms).
    // AVX-512 sweeps B once for up to 32 rows (register tiles, gemv.cpp), and takes up to 64
    // in two (gemv_rows_limit: Zen 4's figures). Intel Xeon (model 207), 1 thread,
    // [M,4096]x[4096,4096], when the limit was 32, before -> after (oneDNN):
    // M = 6 5.9 -> 3.3-3.8 ms (3.0), 8 6.3 -> 3.6 (3.3), 12 packed 10.1 -> 4.5 (5.3-5.6), 16
    // packed 11.2-11.7 -> 6.4-6.5 (5.7-6.7), 24 packed 12.2-15.8 -> 9.1-9.3 (8.0-9.4), 32 packed
    // 14.3-14.5 -> 12.8-13.2 (10.7-11.1).
    // Past one zmm sweep (33-64 rows) only with B past L3: from L3 the packed path's panels, reused
    // over more rows, won (Zen 4, 1 thread, tiles against packed: [48,2048]x[2048,2048] 6.3-6.4
    // against 5.3-5.5 ms, [64,1024]x[1024,1024] 1.6-2.1 against 1.4-1.5; from memory
    // [48,4096]x[4096,4096] 19.5 against 22.3). Up to 32 rows the one sweep wins from L3 too
    // ([16,2048]x[2048,2048] 1.6-2.0 against 2.1-2.3, [32,1024]^2 0.70-0.76 against 0.81-0.83).
    const bool zmm = u.w == 16, one_sweep = q.m <= gemv_rows_per_sweep(zmm);
    if (q.m <= 2 || (q.m <= gemv_rows_limit(zmm) && bytes > l2 / 2 && (one_sweep || !zmm || bytes > l3)))
      return GemmPath::Gemv;
    if (!q.plain) return GemmPath::Packed;  // (the direct kernels read f32 only)
    if (q.forced == 2 || bytes <= l2 / 2) return GemmPath::Direct;
    // AVX-512 with K in one KC block, on AMD: in place up to 3 L2s (each C tile is written
    // once, and no packing pass). Zen 4, 1 thread, direct vs packed: 256^3 292 vs 317 us,
    // 384^3 0.98 vs 1.04 ms, 512^3 2.33 vs 2.44 ms; 1024x512x512 (5 MiB) 5.12 vs 5.02 ms; with
    // K > KC direct lost (640^3 5.8 vs 4.9 ms). On an Intel Xeon (Sapphire Rapids class, 2 MiB
    // L2) direct loses at these sizes: 384^3 0.94 vs 0.78 ms, 512^3 2.1-2.4 vs 1.8 ms,
    // 1024x512x512 4.5-5.5 vs 3.4-3.6 ms (interleaved A/B, medians). (AVX2's rule above is the
    // one measured on Zen 3.)
    if (u.w == 16 && direct_gemm_past_l2() && q.K <= q.kc && bytes <= 3 * l2) return GemmPath::Direct;
    // Narrow B (attention's P @ V, N = 64), any K and M: in place too. The direct kernel
    // re-reads A once per NR columns, cheap for a few slivers, where packing A costs as much
    // per element whatever N is. Zen 4, 1 thread, packed -> direct: [1024,1000]x[1000,64] 97
    // -> 115 GFLOP/s, N = 256 109 -> 114, N = 300 lost; K = 1024 (A's rows 4 KiB apart, in
    // tiles of 8 rows: gemm_direct_tile_rows) 96-100 -> 115 (docs/performance.md, "Narrow
    // matmuls read A in place").
    if (u.w == 16 && direct_gemm_past_l2() && q.n <= kDirectNarrowColumns) return GemmPath::Direct;
  } else if (q.b_unit_k) {
    // B along K (x @ W^T): up to kGemvRows rows in one sweep of W; up to twice that in two
    // sweeps past half of L2, or whatever the size for half weights: packing W^T transposes
    // (and converts) all of it into a panel every call. Intel Xeon, 1 thread, packed -> two
    // sweeps: [8,4096]x[4096,4096]^T f32 13.8 -> 7.9 ms, f16 11.1 -> 5.4 ms; [8,1024]^2 f32
    // 676 -> 438 us; [8,512]x[512,512]^T f16 110 -> 78 us (f32 in L2 even; AVX2 kernels: f32
    // [6,256]^2 15.6 -> 21.5 us, so f32 in L2 stays packed). docs/performance.md.
    // The VL form (AMD's AVX-512) takes up to kGemvTRowsVl rows in one sweep: Zen 4, 1 thread,
    // [M,4096]x[4096,4096]^T, two zmm sweeps or swapped -> one VL sweep (oneDNN sgemm): 6 rows 9.3 ->
    // 4.4 ms (5.3-5.5), 8 rows 10.3 -> 5.4 (8.0-8.5), 12 rows swapped 9.6-9.7 -> 7.4 (14.2); 16 rows
    // level with swapped (9.6-9.7).
    const bool half = q.b_dt != DType::F32;
    const int64_t gemv_t_limit = std::max<int64_t>(2 * kGemvRows, gemv_t_rows_per_sweep(gemv_t_form(u.w == 16)));
    if (q.m <= kGemvRows || (q.m <= gemv_t_limit && (bytes > l2 / 2 || half))) return GemmPath::GemvT;
    // More rows, weights past half of L2: C^T = W x^T, W read in place by the direct kernels
    // (half weights converted a tile at a time) and only x packed (gemm_swapped.cpp). The packed path transposed all
    // of W for one or two row tiles. AMD EPYC (Zen 3, AVX2), 1 thread, [M,4096]x[4096,4096]^T packed -> swapped: M =
    // 9 12.9 -> 8.2 ms, 16 13.7 -> 8.6, 32 23.6 -> 13.8, 64 42-46 -> 27.5, 128 63-67 -> 57; 256 lost (136 -> 152), as
    // did W in L2 ([64,256]x[256,256]^T 109 -> 149 us) and 5 to 8 rows against the GEMV's two sweeps (8.0 -> 10.6
    // ms).
    if (q.m <= kSwappedRows && bytes > l2 / 2) return GemmPath::Swapped;
  }
  return GemmPath::Packed;
}

bool gemm_packs_a(const Ukrs& u, int64_t in_place_rows) {
  // The packed path reads an f32 A in place on the AVX-512 kernels when its tiles keep all but
  // two of their rows (12 of 14 with rows 4 KiB apart on a 48 KiB L1): the packing had taken
  // 2-7% of one thread's time (perf, Intel Xeon model 207: 1024^3 2.3%, 512^3 4.2%), and each of
  // two threads splitting N packed all of A. Same Xeon, A packed -> in place, one process
  // alternating them call by call, medians: 1 thread 512^3 1.74 -> 1.67 ms, 384^3 722 -> 694 us,
  // 1024^3 13.36 -> 13.11 ms, [1000,999]x[999,1001] 12.96 -> 12.47, [512,1024]x[1024,4096] and
  // 2048^3 level; 2 threads 512^3 891 -> 856 us, 1024^3 6.86 -> 6.62 ms, 2048^3 level. The AVX2
  // kernels (KFUSE_ISA=avx2 on that Xeon) lost at 1024^3 (25.0-25.8 -> 25.9-26.5 ms) and gained
  // at 512^3 (2 threads 1.64 -> 1.59 ms): they keep packing, as does a tile cut shorter (an 8-way
  // L1 holds 8 rows 4 KiB apart, not measured).
  return u.w != 16 || in_place_rows < u.mr - 2;
}

namespace {
int gemm_direct_tile_rows_of(int64_t row_bytes, int mr, int64_t l1d_bytes) {
  constexpr int64_t kSets = 4096 / 64;
  const int64_t ways = std::max<int64_t>(1, l1d_bytes / 4096);
  int64_t count[kSets] = {}, lines[kSets];  // (a tile has at most 16 rows: called per task, no allocation)
  int n = 0;
  for (int r = 0; r < std::min<int>(mr, kSets); ++r) {
    const int64_t b = r * row_bytes, line = b >= 0 ? b / 64 : -((-b + 63) / 64);
    if (std::find(lines, lines + n, line) != lines + n) continue;
    lines[n++] = line;
    if (++count[(line % kSets + kSets) % kSets] > ways) return std::max(r, 1);
  }
  return mr;
}
}  // namespace

// (gemm.hpp) An x86 L1D's set is address bits 6-11 (virtually indexed within a 4 KiB page).
// Rows within one line (a stride under 64 bytes, or 0: a broadcast A) count as that one line.
int gemm_direct_tile_rows(int64_t row_bytes, int mr, int64_t l1d_bytes) {
  // Asked per task with the launch's stride: the last answer per thread (the count of
  // gemm_direct_tile_rows_of zeroes 512 bytes: 1.5-4% of a 64^3 matmul's samples in perf).
  thread_local struct {
    int64_t row_bytes = -1, l1d = 0;
    int mr = 0, rows = 0;
  } last;
  if (last.row_bytes == row_bytes && last.mr == mr && last.l1d == l1d_bytes) return last.rows;
  last = {row_bytes, l1d_bytes, mr, gemm_direct_tile_rows_of(row_bytes, mr, l1d_bytes)};
  return last.rows;
}

}  // namespace kfuse::detail::xb
