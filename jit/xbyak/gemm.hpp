// xbyak backend: f32 GEMM for "contraction" kernels (the IR form: /work docs, lib/ir/kernel.hpp
// kind "contraction"). Private to jit/xbyak/; no xbyak headers here.
//
//   gemm_plan.cpp    recognises the form (one Sum of pa * pb over one reduce dim, A indexed by
//                    (batch, M, K), B by (batch, K, N)), keeps the index expressions that give the
//                    strides of A, B and C per launch, and builds the epilogue as a pointwise kernel;
//   gemm_kernel.cpp  the register-blocked FMA microkernels per ISA (generated once per process);
//   gemm_run.cpp     blocking from the cache sizes, packing, threads, the epilogue calls;
//   gemm_pack.hpp    the packers' sliver copies (8 x 8 register transposes, dtype converters);
//   gemv.cpp         the GEMV path: a few rows of A, B streamed once (along N, or transposed);
//   gemm_swapped.cpp x @ W^T for a few dozen rows of x: C^T = W A^T, W read in place;
//   gemm_dot_rows.cpp u8 x i8 x @ W^T for up to 64 rows: rows of A and W read in place, vpdpbusd;
//   gemm_dot_cols.cpp u8 x i8 x @ W for a few rows: W's quads of k interleaved in registers.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "xbyak_backend.hpp"

namespace kfuse::detail::xb {

/// What a contraction kernel is, independent of the launch's extents.
struct GemmPlan {
  int nbatch = 0;            ///< batch dims: outer[0, nbatch); M = outer[nbatch], N = outer[nbatch + 1]
  int64_t K = 0;             ///< the reduce extent
  int a_buf = 0, b_buf = 0;  ///< input buffers of A and B
  ir::ExprRef a_idx, b_idx;  ///< their load indices (affine in batch, M/N and K vars)
  /// The dtype A and B are stored in: packing converts them to f32 exactly (a Cast to f32 of
  /// the load in the IR). Any dtype but f32 or a prologue takes the packed path.
  DType a_dt = DType::F32, b_dt = DType::F32;
  /// The sums' dtype: f32, or i32 (u8 A times i8 B on gemm_ukrs_dot(U8S8), C and the epilogue's
  /// accumulator buffer i32).
  DType acc_dt = DType::F32;
  /// i32 sums the epilogue reads only through a cast to f32: each block of C is converted to f32
  /// in place before the epilogue runs on it (whose accumulator buffer is then f32).
  bool acc_to_f32 = false;
  /// Element-wise prologues pa, pb (null: none): pointwise kernels over one f32 buffer of
  /// param(0) elements, in0 -> out0, applied in place to each packed panel (README "Matmul").
  std::shared_ptr<const ir::Kernel> a_pro, b_pro;
  /// C: where the microkernel accumulates. Direct (epi null): the one store of Acc(0) itself.
  /// In place (epi set, c_buf >= 0): the one f32 output, then the epilogue rewrites it. Temp
  /// (c_buf < 0): a per-task scratch block, then the epilogue writes every output from it.
  int c_buf = -1;
  ir::ExprRef c_idx;
  /// The epilogue: a pointwise kernel over the same outer domain whose buffers are the
  /// contraction's inputs, then the accumulator (input `epi_acc`), then its outputs; Acc(0) is a
  /// load of that buffer. Temp C: one extra param (last) is the scratch block's row stride.
  std::shared_ptr<const ir::Kernel> epi;
  int epi_acc = 0;
};

/// Fills `plan` when `k` is a contraction the GEMM path runs, else returns why not ("xbyak: ...").
std::string gemm_analyze(const ir::Kernel& k, GemmPlan& plan);

/// Evaluates an affine index expression at the given var values (outer vars, the reduce var).
int64_t eval_affine(const ir::ExprRef& e, const int64_t* params, const int64_t* outer, int64_t red);

/// The dot-product kernels (Ukrs::dot): each k step of a sliver is a group of k in one 32-bit
/// lane (gemm_pack_groups.hpp) and one instruction adds the group's products to each lane.
/// Bf16: `vdpbf16ps`, pairs of bf16, f32 sums (AVX512_BF16). U8S8: `vpdpbusd`, quads of u8 in A
/// times quads of i8 in B, i32 sums that wrap as i32 arithmetic does (AVX512_VNNI).
enum class DotKind { None, Bf16, U8S8 };
/// Values of k per lane of a DotKind's slivers (1 for None).
constexpr int64_t dot_group(DotKind d) { return d == DotKind::Bf16 ? 2 : d == DotKind::U8S8 ? 4 : 1; }

/// Arguments of a microkernel call (byte strides). C[i, j] (+)= sum_k A[i, k] * B[k, j] over a
/// full MR x NR tile: A at a + i * a_rs + k * a_ks, B at b + k * b_ks + j * 4, C at c + i * c_rs
/// + j * 4. Packed kernels ignore a_rs, a_ks, b_ks (MR and NR floats per k).
struct UkrArgs {
  const float* a;
  const float* b;
  float* c;
  int64_t kc, a_rs, a_ks, b_ks, c_rs;
  int64_t accumulate;  ///< 0: C = acc; 1: C = C + acc
  int64_t tail = 0;    ///< tail kernels (one vector): the columns of C (1 .. w - 1) read and written
  /// Streaming kernels (Ukrs::direct_streaming): the first of the lines they ask into L2 while
  /// they run, one 64-byte line every two k, in address order.
  const void* pf = nullptr;
};
using UkrFn = void (*)(const UkrArgs*);

/// Where a microkernel reads its operands: both through their strides (Direct: B contiguous
/// along N), both from packed slivers (Packed: A MR floats per k, B NR floats per k), or A in
/// place, contiguous along K (UkrArgs::a_ks is 4 bytes), and B from a packed sliver (PackedB: the
/// packed path with an f32 A that needs no packing, gemm_run.cpp).
enum class UkrForm { Direct = 0, Packed = 1, PackedB = 2 };

/// The microkernels of one ISA: `packed` reads packed panels; `direct` reads A and B in place.
/// (A few rows of A take the GEMV path instead, gemv below, which streams B along its rows.)
///
/// The full tiles are generated with the set; every smaller tile the first time a launch asks for
/// it (a shape uses a few: 64 rows on AVX-512 take the 8-row edge only). Generating all 56 of
/// AVX-512's kernels up front had made the first contraction of a process take 0.9-1.4 ms to
/// compile (Zen 4), over the 1 ms an emit may take.
struct Ukrs {
  static constexpr int kMaxMr = 14, kMaxNv = 2;
  int mr = 0, nr = 0;
  int w = 0;  ///< floats per vector (NR = w * vectors per row)
  /// Groups of k per lane (gemm_ukrs_dot): packed kernels only, UkrArgs::kc counting groups.
  DotKind dot = DotKind::None;
  UkrFn packed = nullptr, direct = nullptr;
  /// The kernel of a tile of `rows` x `nv` vectors (1..mr, 1..nr / w) in `form`. Direct: the
  /// edges of a small problem run in place too instead of through packed scratch tiles (at 64^3
  /// the 4 edge rows' packing was a fifth of the call). Packed and PackedB over full-size slivers
  /// of B (and of A, Packed): the M edge and the whole-vector N edge of the packed path store into
  /// C directly instead of computing a full tile into a scratch tile and copying its live part
  /// (for 512 rows and AVX-512's 14-row tile, the last 8 rows of every panel went through
  /// scratch). ((mr, nr / w) Direct is `direct`, Packed `packed`.)
  UkrFn tile(UkrForm form, int rows, int nv) const { return get(form, rows, nv, 0); }
  UkrFn direct_tile(int rows, int nv) const { return tile(UkrForm::Direct, rows, nv); }
  UkrFn packed_tile(int rows, int nv) const { return tile(UkrForm::Packed, rows, nv); }
  /// One vector of `rows` rows of which only the first UkrArgs::tail columns are C's, read and
  /// written in place through masks (the last part-vector of columns; the direct form loads only
  /// those columns of B, the packed forms read their zero-padded sliver at b).
  /// `narrow` (AVX-512 only, tail <= 8): the same on 8-float ymm registers, EVEX-encoded (32
  /// registers, opmasks): half the FMA work where a 512-bit FMA costs two 256-bit ones (AMD).
  UkrFn tail(UkrForm form, int rows, bool narrow = false) const { return get(form, rows, 1, narrow ? 2 : 1); }
  UkrFn direct_tail(int rows, bool narrow = false) const { return tail(UkrForm::Direct, rows, narrow); }
  UkrFn packed_tail(int rows, bool narrow = false) const { return tail(UkrForm::Packed, rows, narrow); }
  /// The direct kernel of a tile of whole vectors that also prefetches a stream of lines into L2
  /// (UkrArgs::pf: kc / 2 lines, one every two k), spread over its k loop: data a later step
  /// reads arrives while the FMAs run, not in a burst that waits on memory (gemm_swapped.cpp).
  UkrFn direct_streaming(int rows, int nv) const { return get(UkrForm::Direct, rows, nv, 3); }

 private:
  /// kind: 0 a tile of whole vectors, 1 a masked tail, 2 a narrow masked tail, 3 a direct tile of
  /// whole vectors with a prefetch stream.
  UkrFn get(UkrForm form, int rows, int nv, int kind) const {
    const UkrFn f = tiles_[kind][static_cast<int>(form)][rows][nv].load(std::memory_order_acquire);
    return f ? f : generate(form, rows, nv, kind);
  }
  /// Generates the kernel (gemm_kernel.cpp), once per process whichever threads ask.
  UkrFn generate(UkrForm form, int rows, int nv, int kind) const;
  mutable std::atomic<UkrFn> tiles_[4][3][kMaxMr + 1][kMaxNv + 1];  // (value-initialised: null)
};
/// Generated on first use, kept for the process (they do not depend on any kernel).
const Ukrs& gemm_ukrs(Isa isa);
/// AVX-512's packed dot-product kernels (Ukrs::dot, not None): MR x NR tiles of f32 (Bf16) or
/// i32 (U8S8) accumulators over slivers of groups, the dot instruction for each FMA of the f32
/// kernels.
const Ukrs& gemm_ukrs_dot(DotKind d);
/// Whether contractions of a DotKind's operands without prologues run on gemm_ukrs_dot (AVX-512
/// kernels on a CPU with the instruction). Bf16: twice the multiply-adds per instruction of the
/// f32 kernels; the sums differ from the f32 path's in the last bits (each pair's two products
/// are added in turn) and the instruction flushes subnormal inputs and results to zero
/// (docs/semantics.md). U8S8: four times, exact (the i32 path of the LLVM backend, bit for bit).
/// Tests force both off (nullopt: back to the CPU's answer; forcing on where the CPU lacks the
/// instruction does nothing): Bf16 per launch (the f32 kernels run instead), U8S8 when a kernel
/// is compiled (i32 sums have no other xbyak kernels: it declines to LLVM). Defined in
/// backend.cpp, beside the other answers read from CPUID.
bool dot_gemm(DotKind d);
void set_dot_gemm(std::optional<bool> on);

/// The GEMM kernels' code generation (gemm_kernel.cpp): every kernel is generated into one reused
/// buffer of kGemmGenBytes under gemm_gen_mutex(), then copied to executable pages kept for the
/// process by keep_gemm_code (which returns its entry).
constexpr size_t kGemmGenBytes = 1 << 16;
std::mutex& gemm_gen_mutex();
uint8_t* gemm_gen_buffer();
const void* keep_gemm_code(const uint8_t* code, size_t size, const std::string& name);
/// The kernel in `slot`, made by `emit()` (which generates it into gemm_gen_buffer() and returns
/// keep_gemm_code's entry) under gemm_gen_mutex() the first time any thread asks.
template <class Fn, class Emit>
Fn generated_once(std::atomic<Fn>& slot, Emit&& emit) {
  if (Fn f = slot.load(std::memory_order_acquire)) return f;
  std::lock_guard<std::mutex> lock(gemm_gen_mutex());
  if (Fn f = slot.load(std::memory_order_relaxed)) return f;  // another thread made it meanwhile
  const Fn f = reinterpret_cast<Fn>(const_cast<void*>(emit()));
  slot.store(f, std::memory_order_release);
  return f;
}

/// u8 x i8 products with both operands contiguous along K (gemm_dot_rows.cpp): x @ W^T of a
/// quantised linear layer, W [N, K] as stored. C[r, j] = sum_k A[r, k] * W[j, k] (i32, wrapping),
/// A (u8) at a + r * a_rs + k, W (i8) at w + j * w_rs + k, C at c + r * c_rs + j * 4 (bytes);
/// rows [0, m), columns [0, n), all of K in one call. Both operands are read in place, 64 k at
/// a time (`vpdpbusd` of a row of A and a row of W into a register of 16 partial sums per C
/// element), no packing: the packed path transposes all of W into quads of k every call, three
/// passes over W where this reads it once. Integer sums are exact, so the order is free: the
/// same values as the packed path.
struct DotRowsArgs {
  const uint8_t* a;
  const int8_t* w;
  int32_t* c;
  int64_t k, a_rs, w_rs, c_rs;
  const int8_t* pf = nullptr;  ///< (per tile, gemm_dot_rows.cpp: the next tile's rows of W)
  int64_t skew = 0;            ///< (per tile: the operands' offset in their 64-byte lines)
};
/// `at`: 64-byte aligned scratch of m * dot_rows_a_stride(k) bytes (A is copied there).
void gemm_dot_rows(const DotRowsArgs& s, int64_t m, int64_t n, uint8_t* at);
int64_t dot_rows_a_stride(int64_t K);
/// The most rows of A the dot-rows path takes (gemm_path; past it the packed path's panels pay).
constexpr int64_t kDotRowsLimit = 64;

/// u8 x i8 with A along K and W stored [K, N] (gemm_dot_cols.cpp): C[r, j] = sum_k A[r, k] *
/// W[k, j], A at a + r * a_rs + k, W at w + k * w_rs + j, C at c + r * c_rs + j * 4 (bytes);
/// W read in place, its quads of k interleaved in registers (the packed path's panel per call
/// is a read and a write of all of W). `at`: 64-byte aligned scratch of m *
/// dot_cols_a_stride(k) bytes. The same values as the packed path (exact integer sums).
struct DotColsArgs {
  const uint8_t* a;
  const int8_t* w;
  int32_t* c;
  int64_t k, a_rs, w_rs, c_rs;
};
void gemm_dot_cols(const DotColsArgs& s, int64_t m, int64_t n, uint8_t* at);
int64_t dot_cols_a_stride(int64_t K);
/// Rows of W per block (a multiple of 4): their pages stay in the TLB while the block's strips of
/// 64 columns are read.
constexpr int64_t kDotColsRows = 256;
/// The most rows of A the dot-cols path takes (gemm_path).
constexpr int64_t kDotColsLimit = 32;

/// GEMV (gemv.cpp): rows 1 .. gemv_rows_per_sweep (`gemv`) or gemv_t_rows_per_sweep (`gemv_t`) of A at
/// a + r * a_rs + k * a_ks (f32) against all of B, streamed once, B stored as `b_dt` (gemv_reads: f32, or bf16 / f16
/// (with F16C) converted as loaded, exactly as the packers convert them). `gemv`: B contiguous along N (element
/// k * b_rs + j); into t[r * ldt + j] (j < n) the chain over k in [0, kc) (one KC block; the caller writes or adds it
/// to C). `gemv_t`: B contiguous along K (element j * b_cs + k, a linear layer's W [N, K]); all of K, straight into C
/// (c + r * c_rs + j), KC block by KC block as the other paths add them. `zmm` (gemv) and `form` (gemv_t) pick the
/// kernels' registers (the kernel's ISA, Ukrs::w == 16, and for gemv_t the vendor); every choice gives the same bits.
constexpr int kGemvRows = 4;
/// `gemv` on zmm takes up to 32 rows in one sweep of B (gemv.cpp, gemv_rows_tiled_z: tiles of up to 8 rows past 12).
constexpr int kGemvRowsZ = 32;
/// `gemv` on ymm takes up to 6 rows in one sweep of B (gemv.cpp, gemv_rows_tiled_y).
constexpr int kGemvRowsY = 6;
/// The rows one `gemv` sweep of B takes on the kernel's ISA.
constexpr int gemv_rows_per_sweep(bool zmm) { return zmm ? kGemvRowsZ : kGemvRowsY; }
/// The most rows the GEMV path takes with B contiguous along N past half of L2 (in as few, even
/// sweeps as that allows): AVX2 up to 8 (one sweep up to 6, 7 and 8 as 4 + 3 and 4 + 4); AVX-512 up to 64, past 32
/// with B past L3 (gemm_path) (Zen 4, 1
/// thread, [M,4096]x[4096,4096] against the packed path: 32 rows 12.5-13.9 against 16.9-18.2 ms, 48 19.4-19.9
/// against 22.6-22.8, 64 25.3-25.6 against 27.6-28.8; on an Intel Xeon, before the tiles' prefetch and unaliased
/// rows, two sweeps of 24 had lost at 48 rows, 18.4-18.6 against 17.3-18.3: not measured there since).
constexpr int gemv_rows_limit(bool zmm) { return zmm ? 64 : 2 * kGemvRows; }
bool gemv_reads(DType b_dt);
void gemv(bool zmm, DType b_dt, int rows, const float* a, int64_t a_rs, int64_t a_ks, const void* b, int64_t b_rs,
          float* t, int64_t ldt, int64_t n, int64_t kc);
/// The row stride of `gemv`'s t for n columns: n rounded up to whole 64-byte lines, an odd number
/// of them, so that the rows a register tile updates together fall in distinct L1 sets. At a
/// stride of a multiple of 4 KiB (n = 1024, 4096: the usual widths) they all shared one set with
/// the block of B the tile reads (rows 16 KiB apart there too), and every load of t missed L1
/// (Zen 4, 1 thread, [M,4096]x[4096,4096]: 16 rows 11.7 -> 8.3-8.9 ms, 32 rows 23.4 -> 16.0-16.4).
constexpr int64_t gemv_sums_stride(int64_t n) {
  const int64_t lines = (n + 15) / 16;
  return 16 * (lines | 1);
}
/// The forms of `gemv_t`: 8 rows of W transposed on ymm (AVX2: 16 registers, up to kGemvRows rows
/// of A a sweep), 16 rows on zmm (AVX-512 on Intel), and the ymm form compiled for AVX-512VL (32
/// registers: up to kGemvTRowsVl rows a sweep; AVX-512 on AMD, whose 512-bit shuffles take two
/// cycles: Zen 4, 1 thread, [1,4096]x[4096,4096]^T zmm 4.1-4.2 ms, ymm 3.2, VL 3.0; 8 rows 10.3
/// -> 5.4 as one VL sweep). All give the same bits.
enum class GemvTForm { Ymm, Zmm, YmmVl };
constexpr int kGemvTRowsVl = 12;
/// The form for the kernel's ISA (`zmm`: Ukrs::w == 16) on this CPU; tests may force one the CPU
/// runs (set_gemv_t_form, nullopt: back to the CPU's choice).
GemvTForm gemv_t_form(bool zmm);
void set_gemv_t_form(std::optional<GemvTForm> form);
/// Rows of A one gemv_t sweep of W takes in `form`.
constexpr int gemv_t_rows_per_sweep(GemvTForm form) { return form == GemvTForm::YmmVl ? kGemvTRowsVl : kGemvRows; }
void gemv_t(GemvTForm form, DType b_dt, int rows, const float* a, int64_t a_rs, int64_t a_ks, const void* b,
            int64_t b_cs, float* c, int64_t c_rs, int64_t n, int64_t K, int64_t KC);

/// x @ W^T with B contiguous along K (gemm_swapped.cpp): C[r, j] = sum_k A[r, k] * W[j, k] for r
/// in [0, m), j in [0, n), A (f32) at a + r * a_rs + k * a_ks, W (`w_dt`: what gemv_reads takes)
/// at element j * w_rs + k, C at c + r * c_rs + j; computed as C^T = W A^T by the direct kernels,
/// per KC block as the other paths sum (the same bits). `xt`: kb * swapped_width(m) floats (A^T,
/// a chunk of kb of K); `ct`: MR * width floats when kb >= K, else n * width; `wt`: MR *
/// swapped_stage_ld(KC) floats (half weights, converted a tile of rows at a time), else unused.
struct SwappedArgs {
  const float* a;
  int64_t a_rs, a_ks;
  const void* w;
  DType w_dt;
  int64_t w_rs;
  float* c;
  int64_t c_rs, m, n, K, KC, kb;
  float *xt, *ct, *wt;
};
/// The most rows of x the swapped form takes (past it, packing W pays for itself).
constexpr int64_t kSwappedRows = 128;
/// Rows of x padded to whole vectors (the direct kernels' columns).
int64_t swapped_width(const Ukrs& u, int64_t m);
/// The row stride (floats) of a staged block of half weights: KC padded past a multiple of 4 KiB.
int64_t swapped_stage_ld(int64_t KC);
/// The chunk of K whose A^T is packed at a time: whole KC blocks in half of `l2` (at least one).
int64_t swapped_chunk(const Ukrs& u, int64_t l2, int64_t m, int64_t K, int64_t KC);
void gemm_swapped(const Ukrs& u, const SwappedArgs& s);

// ---- launch-time choices (gemm_policy.cpp) ----

/// Cache blocking of the packed path, from the cache sizes the CPU reports.
struct GemmBlocking {
  int64_t mc, kc, nc;
};
GemmBlocking gemm_blocking(const Ukrs& u);
/// Columns per group of the epilogue on a k block of `kc`: the group's slivers of packed B take a
/// quarter of L2, as they are walked once per row of tiles (gemm_run.cpp).
int64_t gemm_epilogue_columns(const Ukrs& u, int64_t kc);

/// The loop an m x n block of a launch runs: GEMV (a few rows: B streamed once per group of rows,
/// along N, or transposed in registers for B contiguous along K: GemvT), swapped (x @ W^T as
/// W x^T, W read in place), direct (f32 operands in place, B contiguous along N) or packed.
/// DotRows: u8 x i8 with A and B contiguous along K (gemm_dot_rows); DotCols: u8 x i8 with A
/// along K and B along N (gemm_dot_cols).
enum class GemmPath { Gemv, GemvT, Swapped, Direct, Packed, DotRows, DotCols };
/// Columns of a block up to which AVX-512's direct kernel runs on AMD whatever M and K; such
/// blocks run by rows of tiles (gemm_run.cpp).
constexpr int64_t kDirectNarrowColumns = 256;
/// What gemm_path decides on: the launch's forced path (GemmForce::path or a tuned variant), what
/// the kernel's operands allow, B's layout and dtype, the block and K, the packed path's KC.
struct GemmPathQuery {
  int forced;     ///< 0 by size, 1 packed, 2 direct
  bool gemv_ok;   ///< f32 A without a prologue, B a dtype the GEMV kernels read (no prologue)
  bool plain;     ///< both operands f32 without prologues (the direct kernels' input)
  bool b_unit_n;  ///< B contiguous along N
  bool b_unit_k;  ///< B contiguous along K (x @ W^T)
  bool a_unit_k;  ///< A contiguous along K
  DotKind dot;    ///< the launch's dot-product kernels (Launch::dot)
  DType b_dt;
  int64_t b_bytes;  ///< bytes of one element of B as stored
  int64_t m, n, K, kc;
};
GemmPath gemm_path(const Ukrs& u, const GemmPathQuery& q);

/// The most rows (at most `mr`) of A `row_bytes` apart that a direct tile reads at the same k
/// without putting more lines in one L1D set than it has ways: an x86 L1D indexes its sets by
/// address bits 6-11 (virtually indexed within a 4 KiB page), so it has l1d / 4 KiB ways. Rows a
/// multiple of 4 KiB apart (K = 1024 f32) all share one set: Zen 4 (8 ways), [1024,1024]x[1024,64]
/// in place, tiles of 14 rows 76-88 GFLOP/s, 12 rows 103-104, 10 113-114, 8 and 7 115.
int gemm_direct_tile_rows(int64_t row_bytes, int mr, int64_t l1d_bytes);
/// Whether the packed path packs an f32 A it could read in place (UkrForm::PackedB) in tiles of
/// `in_place_rows` rows (gemm_direct_tile_rows), on kernels `u` (gemm_policy.cpp).
bool gemm_packs_a(const Ukrs& u, int64_t in_place_rows);
/// Whether AVX-512's direct (unpacked) kernel beats packing for problems of up to 3 L2s with K
/// in one KC block (gemm_path): on AMD (Zen 4), not on Intel (a Sapphire Rapids
/// class Xeon). Defined in backend.cpp, beside the other answers read from CPUID.
bool direct_gemm_past_l2();
/// Whether AVX-512's last part-vector of up to 8 columns runs through the narrow (ymm) tail
/// kernels rather than a masked zmm tile (gemm_run.cpp, run_tile): on AMD, whose 512-bit FMA
/// takes the issue slots of two 256-bit ones, so a 16-wide tail of 3 columns cost as much as 16
/// columns. Not on Intel, whose cores issue 512-bit FMAs at the 256-bit rate (not measured there).
bool narrow_gemm_tails();
/// Tests force either answer (nullopt: back to the CPU's); both give the same bits.
void set_narrow_gemm_tails(std::optional<bool> on);

/// The forms of a contraction that KFUSE_TUNE chooses between (CompiledKernel::variants):
/// "by size" (the static choice), "packed", "direct"; a variant's index is its path below.
const std::vector<std::string>& gemm_variants();

/// What Options::gemm_path and Options::gemm_blocking force on a kernel's launches, fixed when it
/// is compiled: path 0 by size, 1 packed, 2 direct where B is contiguous along N (the variant
/// numbering); blocking used when its kc > 0 (mc and nc rounded down to the microkernel).
struct GemmForce {
  int path = 0;
  GemmBlocking blocking{0, 0, 0};
};
/// The force of `o`; throws UserError when Options::gemm_path is not auto, packed or direct.
GemmForce gemm_force(const Options& o);

/// A compiled contraction: the plan and, when there is one, the compiled epilogue (its code in
/// `epi_code`). Null, with `why`, when the epilogue is declined.
std::shared_ptr<CompiledKernel> make_gemm_kernel(const ir::Kernel& k, GemmPlan plan, Isa isa, const GemmForce& force,
                                                 std::string* why, Code* epi_code);

}  // namespace kfuse::detail::xb
