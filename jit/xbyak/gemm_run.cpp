// xbyak backend: running a contraction (gemm.hpp): the GotoBLAS/BLIS loop nest over packed
// panels, the small and GEMV paths that read the operands in place, threads, the epilogue.
// One GemmKernel whose paths (packed, direct, GEMV) share its launch geometry, scratch and
// epilogue; planning is gemm_plan.cpp, the choices of blocking and path gemm_policy.cpp, the
// microkernels gemm_kernel.cpp, the GEMV kernels gemv.cpp.
//
// Loop nest per task (a block of rows x columns of one batch's C):
//   for jc (NC columns) / for pc (KC of K, in order) / pack B (KC x NC, NR-wide slivers) /
//   for ic (MC rows) / pack A (MC x KC, MR-tall slivers) / for jr (NR) / for ir (MR): microkernel.
// KC x NR of B stays in L1 across the ir loop, MC x KC of A in L2 across jr, KC x NC of B in L3.
// Every element of C is summed the same way whatever the task split: per KC block, k ascending
// from 0 in one register (the microkernel), then added to C in pc order. Tasks therefore split
// M and N freely over threads and the result is bitwise independent of the thread count.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/thread_pool.hpp"
#include "exec_memory.hpp"
#include "gemm.hpp"
#include "gemm_loads.hpp"
#include "gemm_pack.hpp"
#include "gemm_pack_groups.hpp"
#include "kfuse/profile.hpp"

namespace kfuse::detail::xb {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// The step that covers `n` in as few blocks of at most `most` (a multiple of `unit`) as the
// plain step does, as even as whole units allow.
int64_t even_block(int64_t n, int64_t most, int64_t unit) {
  return std::min(most, ceil_div(ceil_div(n, ceil_div(n, most)), unit) * unit);
}

// Thread-local scratch of at least `n` floats, 64-byte aligned (one per use: A, B, tile, C),
// with at least 8 floats of slack past n: pack_a's vector stores may run 2 floats past a sliver.
float* scratch(int which, int64_t n) {
  thread_local std::vector<float> bufs[5];  // A panel, B panel, edge tile, temp C, A as f32
  std::vector<float>& v = bufs[which];
  if (v.size() < static_cast<size_t>(n) + 32) v.resize(static_cast<size_t>(n) + 32);
  auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((p + 63) / 64 * 64);
}

// n i32 values at p, rewritten as the f32 values a cast gives (round to nearest even).
__attribute__((target("avx2"))) void i32_to_f32(float* p, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(p + i, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i))));
  for (; i < n; ++i) {
    int32_t v;
    std::memcpy(&v, p + i, 4);
    p[i] = static_cast<float>(v);
  }
}

// Operand strides in elements for one launch.
struct Strides {
  int64_t off = 0, row = 0, col = 0;  // A: (m, k); B: (k, n); C: (m, n)
  int64_t batch[kMaxOuterDims] = {};
};

// Below this a launch runs on one thread. 64^3 (2^19) takes two: on Zen 3 (AVX2) it broke even
// and 96^3 gained (26 -> 14 us); on Zen 4 (AVX-512) 64^3 went 5.4-6.4 -> 3.5-4.5 us.
constexpr int64_t kParallelFlops = int64_t{1} << 19;

}  // namespace

namespace {
uint64_t next_serial() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}
}  // namespace

class GemmKernel final : public CompiledKernel {
 public:
  GemmKernel(const ir::Kernel& k, GemmPlan plan, Isa isa, const GemmForce& force)
      : k_(k),
        p_(std::move(plan)),
        u_(gemm_ukrs(isa)),
        blk_(gemm_blocking(u_)),
        path_(force.path),
        l2_(probe::cache_sizes().l2) {
    cvt_[0] = converter(p_.a_dt);
    cvt_[1] = converter(p_.b_dt);
    es_[0] = static_cast<int64_t>(dtype_size(p_.a_dt));
    es_[1] = static_cast<int64_t>(dtype_size(p_.b_dt));
    plain_ = !cvt_[0] && !cvt_[1] && !p_.a_pro && !p_.b_pro;
    gemv_ok_ = !cvt_[0] && !p_.a_pro && !p_.b_pro && gemv_reads(p_.b_dt);
    a_half_ = (p_.a_dt == DType::F16 || p_.a_dt == DType::BF16) && with_loader(p_.a_dt, [](auto) {}) && !p_.a_pro &&
              !p_.b_pro && gemv_reads(p_.b_dt);
    if (p_.acc_dt == DType::I32) dot_ = DotKind::U8S8;  // (gemm_analyze: u8 x i8, AVX512_VNNI)
    else if (isa == Isa::Avx512 && p_.a_dt == DType::BF16 && p_.b_dt == DType::BF16 && !p_.a_pro && !p_.b_pro)
      dot_ = DotKind::Bf16;
    // A forced mc or nc below one micro-tile (8 with AVX-512's 14-row tile) is one tile: rounded
    // down to 0 it made the block loops step by 0, forever.
    if (const GemmBlocking& b = force.blocking; b.kc > 0)
      blk_ = {std::max<int64_t>(u_.mr, b.mc / u_.mr * u_.mr), b.kc, std::max<int64_t>(u_.nr, b.nc / u_.nr * u_.nr)};
  }

  // Compiles the operand prologues with the pointwise emitter; false (and why) when it declines.
  bool compile_prologues(Isa isa, std::string* why) {
    const std::shared_ptr<const ir::Kernel>* pros[2] = {&p_.a_pro, &p_.b_pro};
    for (int side = 0; side < 2; ++side) {
      const auto& pro = *pros[side];
      if (!pro) continue;
      Plan plan;
      std::string w = analyze(*pro, plan);
      if (w.empty() && (plan.mode != Mode::Pointwise || plan.scalar)) w = "not a pointwise kernel";
      Code code;
      if (w.empty()) {
        try {
          Isa pro_isa = isa;  // (AVX2 code where the zmm emitter does not take it yet)
          code = emit_code(*pro, plan, pro_isa);
        } catch (const DeclineError& e) { w = e.what(); }
      }
      if (!w.empty()) {
        *why = std::string("xbyak: contraction prologue of ") + (side ? "B" : "A") + ": " + w;
        return false;
      }
      pro_mem_[side] = std::make_unique<ExecMem>(code.bytes.data(), code.bytes.size(), pro->name);
    }
    return true;
  }

  // Compiles the epilogue kernel with the pointwise emitter; false (and why) when it declines.
  bool compile_epilogue(Isa isa, std::string* why, Code* code) {
    if (!p_.epi) return true;
    std::string w = analyze(*p_.epi, epi_plan_);
    if (w.empty() && (epi_plan_.mode != Mode::Pointwise || epi_plan_.scalar)) w = "not a pointwise kernel";
    // Its calls cover columns [n0, n1) of rows of a block of C still in L2: streaming prefetch
    // 2-4 KiB ahead along a row fetched C's later columns from memory, lines evicted again
    // long before the epilogue of their block runs.
    epi_plan_.cached_rows = true;
    if (w.empty()) {
      try {
        Isa epi_isa = isa;  // (AVX2 code where the zmm emitter does not take it yet)
        *code = emit_code(*p_.epi, epi_plan_, epi_isa);
      } catch (const DeclineError& e) { w = e.what(); }
    }
    if (!w.empty()) {
      *why = "xbyak: contraction epilogue: " + w;
      return false;
    }
    epi_mem_ = std::make_unique<ExecMem>(code->bytes.data(), code->bytes.size(), p_.epi->name + "_epilogue");
    return true;
  }

  void run(const ir::LaunchArgs& args) const override { run_variant(args, 0); }
  // The variants are the paths of GemmForce, in its numbering (gemm_variants, gemm_plan.cpp).
  std::vector<std::string> variants() const override {
    // Converted or prologued operands are always packed (task()): "direct" would time the
    // packed path under another name, so such kernels offer only "by size" and "packed".
    std::vector<std::string> v = gemm_variants();
    if (!plain_) v.resize(2);
    return v;
  }
  void run_variant(const ir::LaunchArgs& args, int variant) const override {
    const int nb = p_.nbatch;
    const Geometry& g = geometry(args.params);
    const int64_t* ext = g.ext;
    int64_t batches = 1;
    for (int d = 0; d < nb; ++d) batches *= ext[d];
    if (batches == 0 || ext[nb] == 0 || ext[nb + 1] == 0) return;
    // Batch dims over which B does not move (a linear layer's W under activations [batch, seq,
    // K]) fold into M when A and C step over them as over rows of M: one [batches * M, K] product,
    // so B is read or packed once, not once per batch, and the GEMV and swapped forms see all the
    // rows ([2,8,4096]x[4096,4096]^T had run as two 8-row GEMVs: 29 ms against 8.6 for [16,4096]).
    const bool fold = batches > 1 && folds_into_m(g);
    const int64_t M = fold ? batches * ext[nb] : ext[nb], N = ext[nb + 1], K = p_.K;
    if (fold) batches = 1;
    Launch L;
    L.fold = fold;
    L.blk = blk_;
    L.path = variant > 0 ? variant : path_;
    L.args = &args;
    L.M = M;
    L.N = N;
    L.nb = nb;
    std::copy(ext, ext + kMaxOuterDims, L.ext);
    L.a = g.a;
    L.b = g.b;
    L.c = g.c;
    L.a_base = static_cast<const char*>(args.buffers[p_.a_buf]);
    L.b_base = static_cast<const char*>(args.buffers[p_.b_buf]);
    L.c_base = p_.c_buf >= 0 ? static_cast<float*>(args.buffers[p_.c_buf]) : nullptr;
    // (i32 sums have no other kernels: gemm_analyze took them only where VNNI is)
    L.dot = dot_ == DotKind::U8S8 || (dot_ != DotKind::None && dot_gemm(dot_)) ? dot_ : DotKind::None;

    // Tasks: batches x (gm x gn blocks of C), at least one per thread when worth threads, each
    // packing its own KC x NC blocks of B right before using them. A BLIS-style shared B panel
    // (the threads pack all of K x NC together, then split M, each packing only its own A) lost
    // on every shape measured on Zen 4, with the AVX-512 and the AVX2 kernels (2 threads:
    // [512,1024]x[1024,4096] 21.4 vs 20.0 ms split, [256,4096]x[4096,4096] 52.0 vs 43.1,
    // [128,2048]x[2048,2048] 7.93 vs 5.70, 2048^3 80.3 vs 78.7, 1024^3 level), and on Zen 3 it
    // had not separated from the host's noise; it was removed.
    const int64_t flops = 2 * M * N * std::max<int64_t>(K, 1);
    const int64_t threads = flops * batches < kParallelFlops ? 1 : num_threads();
    L.per_m = M, L.per_n = N;
    if (batches < threads) std::tie(L.per_m, L.per_n) = task_block(M, N, ceil_div(threads, batches));
    const int64_t gm = ceil_div(M, L.per_m), gn = ceil_div(N, L.per_n);
    const int64_t tasks = batches * gm * gn;
    const int64_t grain = std::max<int64_t>(1, kParallelFlops / (flops / (gm * gn) + 1));
    parallel_for(tasks, grain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t bi = t / (gm * gn), r = t % (gm * gn);
        const int64_t m0 = r / gn * L.per_m, n0 = r % gn * L.per_n;
        task(L, bi, m0, std::min(M, m0 + L.per_m), n0, std::min(N, n0 + L.per_n));
      }
    });
  }

 private:
  // The extents and operand strides of a launch: affine expressions of the params, evaluated
  // once per new params vector (a repeated launch of one shape, the common case, reuses them:
  // evaluating them was an eighth of the host work of a small matmul's record + eval).
  struct Geometry {
    std::vector<int64_t> params;
    int64_t ext[kMaxOuterDims] = {};
    Strides a, b, c;
  };
  // The block of C per task (rows, columns) for `want` tasks: M in whole micro-tiles of rows and N in whole NR
  // blocks, N first when N >= M; unless splitting M in rows and N in vectors leaves the largest
  // task (rows x columns padded to vectors) over 10% less work. Whole tiles had split 67 columns
  // as 64 + 3 and 80 as 64 + 16 (Zen 4, 2 threads, kfuse_gemm, whole tiles -> this, GFLOP/s:
  // 67^3 108 -> 167-169, 80^3 100-133 -> 199-201, 100^3 117-158 -> 188-196, 150^3 170-173 ->
  // 200-215; 200x200x197, 256^3 and [1000,999]x[999,1001] keep their split).
  std::pair<int64_t, int64_t> task_block(int64_t M, int64_t N, int64_t want) const {
    const int64_t W = u_.w, vn = ceil_div(N, W);
    int64_t gm, gn;
    const int64_t tm = ceil_div(M, u_.mr), tn = ceil_div(N, u_.nr);
    if (N >= M) {
      gn = std::min(want, tn);
      gm = std::min(ceil_div(want, gn), tm);
    } else {
      gm = std::min(want, tm);
      gn = std::min(ceil_div(want, gm), tn);
    }
    std::pair<int64_t, int64_t> block{ceil_div(tm, gm) * u_.mr, ceil_div(tn, gn) * u_.nr};
    auto largest = [&](int64_t pm, int64_t pn) { return std::min(pm, M) * std::min(pn, vn * W); };
    int64_t best = largest(block.first, block.second) * 9 / 10;
    for (int64_t g = 1; g <= std::min(want, vn); ++g) {  // g blocks of N, the rest of M
      const int64_t pn = ceil_div(vn, g) * W, pm = ceil_div(M, std::min(ceil_div(want, g), M));
      if (const int64_t c = largest(pm, pn); c < best) best = c, block = {pm, pn};
    }
    return block;
  }

  // Whether every batch dim folds into M (run_variant): B broadcast over it, A and C (in place)
  // stepping over it as over the rows it holds.
  bool folds_into_m(const Geometry& g) const {
    const int nb = p_.nbatch;
    int64_t rows = g.ext[nb];  // rows of M per step of batch dim d
    for (int d = nb; d-- > 0;) {
      if (g.b.batch[d] != 0 || g.a.batch[d] != rows * g.a.row) return false;
      if (p_.c_buf >= 0 && g.c.batch[d] != rows * g.c.row) return false;
      rows *= g.ext[d];
    }
    return true;
  }
  const Geometry& geometry(const std::vector<int64_t>& params) const {
    // Per thread (launches may run concurrently), keyed by the kernel's serial number, not its
    // address: a new kernel may be allocated where a freed one was.
    thread_local uint64_t owner = 0;
    thread_local Geometry g;
    if (owner == serial_ && g.params == params) return g;
    const int nb = p_.nbatch;
    g.params = params;
    for (int d = 0; d < nb + 2; ++d) g.ext[d] = ir::eval_index(k_.outer[d], params);
    g.a = strides(p_.a_idx, params, nb, nb, kMaxOuterDims);
    g.b = strides(p_.b_idx, params, nb, kMaxOuterDims, nb + 1);
    g.c = p_.c_buf >= 0 ? strides(p_.c_idx, params, nb, nb, nb + 1) : Strides{};
    owner = serial_;
    return g;
  }

  struct Launch {
    const ir::LaunchArgs* args;
    int64_t M, N;
    int nb;
    int64_t ext[kMaxOuterDims];
    Strides a, b, c;
    const char* a_base;  // (bytes: the operands may be stored in any packable dtype)
    const char* b_base;
    float* c_base;
    int64_t per_m, per_n;
    GemmBlocking blk;
    int path;
    bool fold;    ///< the batch dims folded into M (M counts the rows of all batches; one batch)
    DotKind dot;  ///< operands packed in groups of k for gemm_ukrs_dot (the packed path), or None
  };
  // One task's view: operands of its batch, its C.
  struct Task {
    const void* a;  // f32 when plain_ (the GEMV and direct paths read them in place)
    const void* b;
    float* c;  // C(m, n) = c + m * c_rs + n (global m, n; temp C: offset back by the task origin)
    int64_t c_rs;
    float* acc_ptr;  // the epilogue's accumulator buffer pointer
    int64_t bidx[kMaxOuterDims];
    int64_t brow;  // first outer row of this batch (batch index * M)
  };

  // The path of an m x n block (gemm_policy.cpp).
  GemmPath path_for(const Launch& L, int64_t m, int64_t n) const {
    const bool gemv_ok = gemv_ok_ || (a_half_ && L.dot == DotKind::None);
    return gemm_path(u_, {L.path, gemv_ok, plain_, L.b.col == 1, L.b.row == 1, L.a.col == 1, L.dot, p_.b_dt, es_[1], m,
                          n, p_.K, L.blk.kc});
  }

  // Strides of an affine index: `row` and `col` are the var positions (kMaxOuterDims: the reduce var).
  static Strides strides(const ir::ExprRef& e, const std::vector<int64_t>& params, int nb, int row, int col) {
    int64_t v[kMaxOuterDims] = {};
    Strides s;
    s.off = eval_affine(e, params.data(), v, 0);
    auto at = [&](int d) {
      if (d == kMaxOuterDims) return eval_affine(e, params.data(), v, 1) - s.off;
      v[d] = 1;
      int64_t r = eval_affine(e, params.data(), v, 0) - s.off;
      v[d] = 0;
      return r;
    };
    for (int d = 0; d < nb; ++d) s.batch[d] = at(d);
    s.row = at(row);
    s.col = at(col);
    return s;
  }

  // Packs rows [m, m + mr) x k [k0, k0 + kc) of A as MR-tall slivers (zero rows past mr).
  // Applies operand side's prologue (if any) in place to n packed floats.
  void prologue(int side, float* p, int64_t n) const {
    if (!pro_mem_[side]) return;
    void* bufs[2] = {p, p};
    const int64_t params[1] = {n};
    Frame f{};
    f.bufs = bufs;
    f.params = params;
    f.row_begin = 0;
    f.row_end = 1;
    f.ext[0] = n;
    f.lo = 0;
    f.hi = n;
    f.ways = 1;
    reinterpret_cast<void (*)(Frame*)>(const_cast<void*>(pro_mem_[side]->entry()))(&f);
  }

  // Other dtypes, element by element through the converter: slivers `w` wide of the operand's
  // M (A) or N (B) range [i, i + count) (stride `is`), k [k0, k0 + kc) (stride `ks`), zero-padded.
  static void pack_converted(float* dst, ToF32 cvt, const void* src, int64_t i, int64_t count, int w, int64_t is,
                             int64_t k0, int64_t kc, int64_t ks) {
    for (int64_t i0 = 0; i0 < count; i0 += w, dst += kc * w) {
      const int64_t live = std::min<int64_t>(w, count - i0);
      for (int64_t k = 0; k < kc; ++k) {
        for (int64_t j = 0; j < live; ++j) dst[k * w + j] = cvt(src, (i + i0 + j) * is + (k0 + k) * ks);
        for (int64_t j = live; j < w; ++j) dst[k * w + j] = 0.0f;
      }
    }
  }

  // Groups of k (DotKind `dot`) of the operand at `src` (element (i, k) at i * ls + k * ks).
  static void pack_groups(DotKind dot, float* dst, const void* src, int64_t ls, int64_t ks, int64_t count, int width,
                          int64_t kc) {
    auto* d = reinterpret_cast<uint32_t*>(dst);
    if (dot == DotKind::Bf16) pack_groups_panel(d, static_cast<const uint16_t*>(src), ls, ks, count, width, kc);
    else pack_groups_panel(d, static_cast<const uint8_t*>(src), ls, ks, count, width, kc);
  }

  void pack_a(float* dst, const void* a, const Strides& s, int64_t m, int64_t mr, int64_t k0, int64_t kc,
              DotKind dot) const {
    if (dot != DotKind::None)
      return pack_groups(dot, dst, static_cast<const char*>(a) + (m * s.row + k0 * s.col) * es_[0], s.row, s.col, mr,
                         u_.mr, kc);
    if (with_loader(p_.a_dt, [&](auto l) { pack_a_t<decltype(l)>(dst, a, s, m, mr, k0, kc); })) return;
    pack_converted(dst, cvt_[0], a, m, mr, u_.mr, s.row, k0, kc, s.col);
  }
  template <class L>
  void pack_a_t(float* dst, const void* av, const Strides& s, int64_t m, int64_t mr, int64_t k0, int64_t kc) const {
    const int MR = u_.mr;
    const auto* a = static_cast<const typename L::T*>(av);
    for (int64_t i0 = 0; i0 < mr; i0 += MR, dst += kc * MR) {
      const int64_t rows = std::min<int64_t>(MR, mr - i0);
      if (s.col == 1 && MR <= 16) {
        pack_a_rows<L>(dst, a + (m + i0) * s.row + k0, s.row, MR, static_cast<int>(rows), kc);
        continue;
      }
      for (int64_t i = 0; i < rows; ++i) {
        const auto* src = a + (m + i0 + i) * s.row + k0 * s.col;
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = L::one(src + k * s.col);
      }
      for (int64_t i = rows; i < MR; ++i)
        for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = 0.0f;
    }
  }
  // Packs k [k0, k0 + kc) x columns [n, n + nr) of B as NR-wide slivers (zero columns past nr).
  void pack_b(float* dst, const void* b, const Strides& s, int64_t k0, int64_t kc, int64_t n, int64_t nr,
              DotKind dot) const {
    if (dot != DotKind::None)
      return pack_groups(dot, dst, static_cast<const char*>(b) + (k0 * s.row + n * s.col) * es_[1], s.col, s.row, nr,
                         u_.nr, kc);
    if (with_loader(p_.b_dt, [&](auto l) { pack_b_t<decltype(l)>(dst, b, s, k0, kc, n, nr); })) return;
    pack_converted(dst, cvt_[1], b, n, nr, u_.nr, s.col, k0, kc, s.row);
  }
  template <class L>
  void pack_b_t(float* dst, const void* bv, const Strides& s, int64_t k0, int64_t kc, int64_t n, int64_t nr) const {
    const int NR = u_.nr;
    const auto* b = static_cast<const typename L::T*>(bv);
    if (s.col == 1) {
      // Row-major B: one pass along each of B's rows, scattered into the slivers (sliver j0 starts
      // at dst + j0 * kc). Walking sliver by sliver read 64 bytes per row at a stride of N floats,
      // a new page for every k once N >= 1024: 15% of the [512,1024]x[1024,4096] GEMM went there.
      const int64_t full = nr / NR * NR, cols = nr - full;
      for (int64_t k = 0; k < kc; ++k) {
        const auto* src = b + (k0 + k) * s.row + n;
        for (int64_t j0 = 0; j0 < full; j0 += NR) copy_row<L>(dst + j0 * kc + k * NR, src + j0, NR);
        if (cols > 0) {
          float* d = dst + full * kc + k * NR;
          for (int64_t j = 0; j < cols; ++j) d[j] = L::one(src + full + j);
          std::fill(d + cols, d + NR, 0.0f);
        }
      }
      return;
    }
    for (int64_t j0 = 0; j0 < nr; j0 += NR, dst += kc * NR) {
      const int64_t cols = std::min<int64_t>(NR, nr - j0);
      if (s.row == 1 && NR % 8 == 0) {
        pack_b_cols<L>(dst, b + k0 + (n + j0) * s.col, s.col, NR, static_cast<int>(cols), kc);
        continue;
      }
      for (int64_t k = 0; k < kc; ++k) {
        const auto* src = b + (k0 + k) * s.row + (n + j0) * s.col;
        float* d = dst + k * NR;
        for (int64_t j = 0; j < cols; ++j) d[j] = L::one(src + j * s.col);
        for (int64_t j = cols; j < NR; ++j) d[j] = 0.0f;
      }
    }
  }

  // C(m.., n..) (+)= the tile of packed slivers ap x bp, mr x nr of it, in place: whole vectors
  // of columns by the tile's own kernel, a last part-vector by the masked tail kernel (it had
  // gone through a scratch tile and a copy; a whole 32-column scratch tile for N = 1001's last 9
  // columns had cost 5%: 1024^2 x 1001 19.9 ms against 18.95 for N = 1008, Zen 4, 1 thread).
  // `ks`: the slivers' k steps (groups of k with `dot`, gemm_ukrs_dot's kernels).
  void tile_from_slivers(const Task& t, const float* ap, const float* bp, int64_t m, int64_t n, int64_t mr, int64_t nr,
                         int64_t ks, bool first, DotKind dot) const {
    run_tile(dot != DotKind::None ? gemm_ukrs_dot(dot) : u_,
             UkrArgs{ap, bp, t.c + m * t.c_rs + n, ks, 0, 0, 0, t.c_rs * 4, first ? 0 : 1}, static_cast<int>(mr), nr,
             UkrForm::Packed);
  }

  // An mr x nr tile at a (packed slivers or operands in place): its whole vectors of columns by
  // the tile's kernel, a last part-vector by the masked tail kernel, the narrow (ymm) one for up
  // to 8 columns where narrow_gemm_tails() says so (Zen 4, 1 thread, kfuse_gemm, zmm -> narrow
  // tails: 67^3 85-88 -> 92-94 GFLOP/s, 100^3 94 -> 99-102).
  void run_tile(const Ukrs& u, UkrArgs a, int mr, int64_t nr, UkrForm form) const {
    const int64_t W = u.w, whole = nr / W;
    if (whole > 0) u.tile(form, mr, static_cast<int>(whole))(&a);
    if (nr % W == 0) return;
    a.b += whole * W;
    a.c += whole * W;
    a.tail = nr % W;
    const bool narrow = W == 16 && a.tail <= 8 && narrow_gemm_tails();
    u.tail(form, mr, narrow)(&a);
  }

  // Runs the epilogue over rows [m0, m1) x columns [n0, n1) of this task's batch.
  void epilogue(const Launch& L, const Task& t, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t ld) const {
    if (!epi_mem_ || m0 >= m1 || n0 >= n1) return;
    if (p_.acc_to_f32)
      for (int64_t m = m0; m < m1; ++m) i32_to_f32(t.c + m * t.c_rs + n0, n1 - n0);
    const ir::LaunchArgs& args = *L.args;
    const int nin = k_.num_inputs();
    void* bufs[64];
    std::vector<void*> big;
    void** bp = bufs;
    const size_t nbuf = args.buffers.size() + 1;
    if (nbuf > 64) {
      big.resize(nbuf);
      bp = big.data();
    }
    for (int i = 0; i < nin; ++i) bp[i] = args.buffers[i];
    bp[nin] = t.acc_ptr;
    for (size_t i = nin; i < args.buffers.size(); ++i) bp[i + 1] = args.buffers[i];
    // Temp C appends its row stride to the launch's params (in place C passes them as they are).
    int64_t pbuf[32];
    std::vector<int64_t> pbig;
    const int64_t* params = args.params.data();
    if (p_.c_buf < 0) {
      const size_t np = args.params.size();
      int64_t* q = pbuf;
      if (np + 1 > 32) {
        pbig.resize(np + 1);
        q = pbig.data();
      }
      std::copy(args.params.begin(), args.params.end(), q);
      q[np] = ld;
      params = q;
    }
    Frame f{};
    f.bufs = bp;
    f.params = params;
    f.row_begin = t.brow + m0;
    f.row_end = t.brow + m1;
    if (L.fold) {  // the flat row m0 decomposed over the batch dims and M
      int64_t rest = m0;
      for (int d = L.nb; d >= 0; --d) {
        f.idx[d] = rest % L.ext[d];
        rest /= L.ext[d];
      }
    } else {
      for (int d = 0; d < L.nb; ++d) f.idx[d] = t.bidx[d];
      f.idx[L.nb] = m0;
    }
    for (int d = 0; d < L.nb + 2; ++d) f.ext[d] = L.ext[d];
    f.lo = n0;
    f.hi = n1;
    f.ways = 1;
    reinterpret_cast<void (*)(Frame*)>(const_cast<void*>(epi_mem_->entry()))(&f);
  }

  void task(const Launch& L, int64_t bi, int64_t m0, int64_t m1, int64_t n0, int64_t n1) const {
    Task t{};
    int64_t rest = bi;
    for (int d = L.nb; d-- > 0;) {
      t.bidx[d] = rest % L.ext[d];
      rest /= L.ext[d];
    }
    t.brow = bi * L.M;
    int64_t ao = L.a.off, bo = L.b.off, co = L.c.off;
    for (int d = 0; d < L.nb; ++d) {
      ao += t.bidx[d] * L.a.batch[d];
      bo += t.bidx[d] * L.b.batch[d];
      co += t.bidx[d] * L.c.batch[d];
    }
    t.a = L.a_base + ao * es_[0];
    t.b = L.b_base + bo * es_[1];
    int64_t ld = 0;
    if (L.c_base) {
      t.c = L.c_base + co;
      t.c_rs = L.c.row;
      t.acc_ptr = L.c_base;
    } else {  // temp C: the task's block, row stride ld; addressed by global (m, n)
      ld = n1 - n0;
      float* tmp = scratch(3, (m1 - m0) * ld);
      t.c = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(tmp) - static_cast<uintptr_t>((m0 * ld + n0) * 4));
      t.c_rs = ld;
      // The epilogue counts the rows of every batch before this one (gemm_plan.cpp).
      t.acc_ptr = reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(t.c) - static_cast<uintptr_t>(t.brow * ld * 4));
    }
    const int64_t K = p_.K;
    if (K == 0) {
      for (int64_t m = m0; m < m1; ++m) std::fill(t.c + m * t.c_rs + n0, t.c + m * t.c_rs + n1, 0.0f);
      epilogue(L, t, m0, m1, n0, n1, ld);
      return;
    }
    Strides sa = L.a;
    const Strides& sb = L.b;
    const GemmBlocking& blk = L.blk;
    const int64_t MR = u_.mr, NR = u_.nr, KC = blk.kc;
    const int64_t m = m1 - m0, n = n1 - n0;
    // GEMV (a few rows): B streamed once per group of up to gemv_rows_per_sweep() of them, no packing.
    const float* af = static_cast<const float*>(t.a);  // (read in place only when gemv_ok_)
    const GemmPath path = path_for(L, m, n);
    if (!gemv_ok_ && a_half_ && (path == GemmPath::Gemv || path == GemmPath::GemvT || path == GemmPath::Swapped)) {
      // A half A on the paths that read f32 A in place (a linear layer's bf16 activations and
      // weights on a CPU without AVX512_BF16): its rows of this task converted once (the values
      // packing gives them), then read as an f32 A of row stride K. Intel Xeon (model 207), 1
      // thread, [16,4096]x[4096,4096]^T bf16 x bf16: packed 11.0 -> swapped 6.8 ms.
      float* conv = scratch(4, m * K);
      with_loader(p_.a_dt, [&](auto l) {
        using Ld = decltype(l);
        load_rows<Ld>(conv, K, static_cast<const typename Ld::T*>(t.a) + m0 * sa.row, sa.row, sa.col, m, K);
      });
      af = conv - m0 * K;
      sa.row = K, sa.col = 1;
    }
    const float* bf = static_cast<const float*>(t.b);  // (plain_ only)
    const char* bb = static_cast<const char*>(t.b);    // (GEMV: f32, f16 or bf16)
    const int64_t eb = es_[1];
    if (path == GemmPath::DotRows) {  // (u8 A and i8 B, both along K: element sizes 1)
      gemm_dot_rows({static_cast<const uint8_t*>(t.a) + m0 * sa.row, static_cast<const int8_t*>(t.b) + n0 * sb.col,
                     reinterpret_cast<int32_t*>(t.c + m0 * t.c_rs + n0), K, sa.row, sb.col, t.c_rs * 4},
                    m, n, reinterpret_cast<uint8_t*>(scratch(0, ceil_div(m * dot_rows_a_stride(K), 4))));
      epilogue(L, t, m0, m1, n0, n1, ld);
      return;
    }
    if (path == GemmPath::DotCols) {
      gemm_dot_cols({static_cast<const uint8_t*>(t.a) + m0 * sa.row, static_cast<const int8_t*>(t.b) + n0,
                     reinterpret_cast<int32_t*>(t.c + m0 * t.c_rs + n0), K, sa.row, sb.row, t.c_rs * 4},
                    m, n, reinterpret_cast<uint8_t*>(scratch(0, ceil_div(m * dot_cols_a_stride(K), 4))));
      epilogue(L, t, m0, m1, n0, n1, ld);
      return;
    }
    if (path == GemmPath::GemvT) {
      const GemvTForm form = gemv_t_form(u_.w == 16);
      const int64_t most = gemv_t_rows_per_sweep(form);
      for (int64_t r0 = 0; r0 < m; r0 += most) {
        const int rows = static_cast<int>(std::min(most, m - r0));
        const float* ar = af + (m0 + r0) * sa.row;
        int64_t a_rs = sa.row, a_ks = sa.col;
        // Two or more rows of A are read interleaved (the rows of one k side by side): in place,
        // rows a power-of-two apart shared L1 sets with W's. Zen 4, 1 thread: VL form
        // [8,4096]x[4096,4096]^T 6.4 -> 5.4 ms; ymm (AVX2) form [4,4096] 4.7-4.8 -> 4.0, [2,4096]
        // 3.55-3.64 -> 3.36, [4,1024]x[1024,1024]^T 0.206 -> 0.186. (Intel's zmm form: not measured.)
        if (rows > 1 && form != GemvTForm::Zmm) {
          float* ai = scratch(0, rows * K);
          for (int64_t k = 0; k < K; ++k)
            for (int r = 0; r < rows; ++r) ai[k * rows + r] = ar[r * sa.row + k * sa.col];
          ar = ai, a_rs = 1, a_ks = rows;
        }
        gemv_t(form, p_.b_dt, rows, ar, a_rs, a_ks, bb + n0 * sb.col * eb, sb.col, t.c + (m0 + r0) * t.c_rs + n0,
               t.c_rs, n, K, KC);
      }
      epilogue(L, t, m0, m1, n0, n1, ld);
      return;
    }
    if (path == GemmPath::Swapped) {
      const int64_t kb = swapped_chunk(u_, l2_, m, K, KC), wd = swapped_width(u_, m);
      SwappedArgs s{af + m0 * sa.row,
                    sa.row,
                    sa.col,
                    bb + n0 * sb.col * eb,
                    p_.b_dt,
                    sb.col,
                    t.c + m0 * t.c_rs + n0,
                    t.c_rs,
                    m,
                    n,
                    K,
                    KC,
                    kb,
                    scratch(0, kb * wd),
                    scratch(1, kb >= K ? u_.mr * wd : n * wd),
                    scratch(2, u_.mr * swapped_stage_ld(KC))};
      gemm_swapped(u_, s);
      epilogue(L, t, m0, m1, n0, n1, ld);
      return;
    }
    if (path == GemmPath::Gemv) {
      // (sums_ld, not ld: the epilogue below reads a temp C at the task's stride ld)
      const int64_t sums_ld = gemv_sums_stride(n);
      float* sums = scratch(2, m * sums_ld);
      for (int64_t pc = 0; pc < K; pc += KC) {
        const int64_t kc = std::min(KC, K - pc);
        const bool first = pc == 0;
        // (as even groups as the sweeps allow: 16 rows as 8 + 8, not 12 + 4)
        const int64_t most = gemv_rows_per_sweep(u_.w == 16), g = ceil_div(m, ceil_div(m, most));
        for (int64_t r0 = 0; r0 < m; r0 += g)
          gemv(u_.w == 16, p_.b_dt, static_cast<int>(std::min<int64_t>(g, m - r0)),
               af + (m0 + r0) * sa.row + pc * sa.col, sa.row, sa.col, bb + (pc * sb.row + n0) * eb, sb.row,
               sums + r0 * sums_ld, sums_ld, n, kc);
        for (int64_t r = 0; r < m; ++r) {
          float* c = t.c + (m0 + r) * t.c_rs + n0;
          const float* s = sums + r * sums_ld;
          if (first) std::copy(s, s + n, c);
          else
            for (int64_t j = 0; j < n; ++j) c[j] = c[j] + s[j];
        }
      }
      epilogue(L, t, m0, m1, n0, n1, ld);
      return;
    }
    // Small problems in L2: the direct kernel reads A and B in place (B contiguous along N).
    if (path == GemmPath::Direct) {
      // Rows of A read in lockstep stay within the ways of an L1 set (a row-major A whose rows
      // are 4 KiB apart: 8 of them).
      const int64_t TR = sa.col == 1 ? gemm_direct_tile_rows(sa.row * 4, u_.mr, probe::cache_sizes().l1d) : MR;
      for (int64_t pc = 0; pc < K; pc += KC) {
        const int64_t kc = std::min(KC, K - pc);
        const bool first = pc == 0;
        // Everything runs in place, in tiles of up to TR rows and NR columns: the edge tiles by
        // the smaller direct kernels, a last part-vector of columns by the masked tail kernels
        // (it had been packed, A included: [100,100]^3 took 23 us against OpenBLAS's 18, Zen 4).
        auto tile = [&](int64_t i, int64_t j) {
          run_tile(u_,
                   UkrArgs{af + i * sa.row + pc * sa.col, bf + pc * sb.row + j, t.c + i * t.c_rs + j, kc, sa.row * 4,
                           sa.col * 4, sb.row * 4, t.c_rs * 4, first ? 0 : 1},
                   static_cast<int>(std::min(TR, m1 - i)), std::min(NR, n1 - j), UkrForm::Direct);
        };
        // Narrow blocks (AVX-512 on AMD) by rows of tiles: each row of A's tiles is read once,
        // and the epilogue follows it on the last k block while its C is in L1 (not after the
        // task, from L3). In L2 the column order, B's sliver in L1 across rows, won on AVX2.
        if (u_.w == 16 && direct_gemm_past_l2() && n1 - n0 <= kDirectNarrowColumns) {
          const bool last = pc + kc == K;
          for (int64_t i = m0; i < m1; i += TR) {
            for (int64_t j = n0; j < n1; j += NR) tile(i, j);
            if (last) epilogue(L, t, i, std::min(m1, i + TR), n0, n1, ld);
          }
          if (last) return;
          continue;
        }
        for (int64_t j = n0; j < n1; j += NR)
          for (int64_t i = m0; i < m1; i += TR) tile(i, j);
      }
      epilogue(L, t, m0, m1, n0, n1, ld);
      return;
    }
    // An f32 A along K without a prologue (not the dot kernels' groups of k) may be read in place
    // (UkrForm::PackedB, gemm_packs_a), in tiles of the rows an L1 set's ways hold.
    const int64_t in_place_rows = gemm_direct_tile_rows(sa.row * 4, MR, probe::cache_sizes().l1d);
    const bool a_in_place = !cvt_[0] && es_[0] == 4 && !p_.a_pro && L.dot == DotKind::None && sa.col == 1 &&
                            !gemm_packs_a(u_, in_place_rows);
    const int64_t AR = a_in_place ? in_place_rows : MR;
    float* ap = a_in_place ? nullptr : scratch(0, blk.mc * KC);
    // Blocks of M and N as even as whole tiles allow, at most mc and nc: 266 rows at mc = 252 made
    // a 252-row panel and a 14-row one that streamed all of B's panel for a single tile.
    const int64_t MC = even_block(m, blk.mc, MR);
    const int64_t NC = even_block(n, blk.nc, NR);
    float* bp = scratch(1, KC * (std::min(NC, ceil_div(n, NR) * NR)));
    // Groups of k: a k step of a sliver holds G of K in the bytes of one f32, so a block of K
    // G times as long packs into the same panels (and keeps the f32 blocking's footprint in cache).
    const int64_t G = dot_group(L.dot), KB = G * KC;
    for (int64_t jc = n0; jc < n1; jc += NC) {
      const int64_t nc = std::min(NC, n1 - jc);
      for (int64_t pc = 0; pc < K; pc += KB) {
        const int64_t kc = std::min(KB, K - pc), ks = groups_of(kc, G);
        const bool first = pc == 0, last = pc + kc == K;
        pack_b(bp, t.b, sb, pc, kc, jc, nc, L.dot);
        prologue(1, bp, ceil_div(nc, NR) * NR * kc);
        for (int64_t ic = m0; ic < m1; ic += MC) {
          const int64_t mc = std::min(MC, m1 - ic);
          if (!a_in_place) {
            pack_a(ap, t.a, sa, ic, mc, pc, kc, L.dot);
            prologue(0, ap, ceil_div(mc, MR) * MR * kc);
          }
          auto tile = [&](int64_t ir, int64_t jr) {
            if (a_in_place)
              run_tile(u_,
                       UkrArgs{af + (ic + ir) * sa.row + pc, bp + jr * ks, t.c + (ic + ir) * t.c_rs + jc + jr, ks,
                               sa.row * 4, 4, 0, t.c_rs * 4, first ? 0 : 1},
                       static_cast<int>(std::min(AR, mc - ir)), std::min(NR, nc - jr), UkrForm::PackedB);
            else
              tile_from_slivers(t, ap + ir * ks, bp + jr * ks, ic + ir, jc + jr, std::min(MR, mc - ir),
                                std::min(NR, nc - jr), ks, first, L.dot);
          };
          if (!(last && epi_mem_)) {
            for (int64_t jr = 0; jr < nc; jr += NR)
              for (int64_t ir = 0; ir < mc; ir += AR) tile(ir, jr);
            continue;
          }
          // On the last k block the epilogue follows each row of tiles across a group of
          // columns, while those rows are in L1: a group of B's slivers (a quarter of L2) is
          // walked once per row of tiles. Over a group of all mc rows, C's rows (a multiple of
          // 4 KiB apart when N is a power of two) fell into a few cache sets and the epilogue
          // read them from L3 (MLP block [512,1024]x[1024,4096], 1 thread, Intel Xeon: the
          // +bias epilogue 1.7-2.5% of the time, docs/performance.md).
          const int64_t ew = gemm_epilogue_columns(u_, kc);
          for (int64_t j0 = 0; j0 < nc; j0 += ew) {
            const int64_t j1 = std::min(nc, j0 + ew);
            for (int64_t ir = 0; ir < mc; ir += AR) {
              for (int64_t jr = j0; jr < j1; jr += NR) tile(ir, jr);
              epilogue(L, t, ic + ir, ic + std::min(mc, ir + AR), jc + j0, jc + j1, ld);
            }
          }
        }
      }
    }
  }

  ir::Kernel k_;
  GemmPlan p_;
  ToF32 cvt_[2] = {};   // A, B: null for f32 storage
  int64_t es_[2] = {};  // element sizes of A and B
  bool plain_ = true;   // f32 operands without prologues: the GEMV and direct paths may run
  // A in f32 and B in f32, f16 or bf16, without prologues: the GEMV paths may run (they convert
  // half weights as they load them: a linear layer's f16 weights at batch 1 are not packed).
  bool gemv_ok_ = true;
  // A in f16 or bf16 (else as gemv_ok_): on a launch without the pairs kernels, the GEMV and
  // swapped paths take it converted to f32 once per task (task()).
  bool a_half_ = false;
  // The dot-product kernels the operands allow: bf16 A and B without prologues on AVX-512
  // kernels (when dot_gemm(Bf16), read per launch), u8 x i8 with i32 sums (always).
  DotKind dot_ = DotKind::None;
  std::unique_ptr<ExecMem> pro_mem_[2];
  const Ukrs& u_;
  GemmBlocking blk_;
  int path_;  ///< GemmForce::path: the path of variant 0
  int64_t l2_;
  const uint64_t serial_ = next_serial();
  Plan epi_plan_;
  std::unique_ptr<ExecMem> epi_mem_;
};

std::shared_ptr<CompiledKernel> make_gemm_kernel(const ir::Kernel& k, GemmPlan plan, Isa isa, const GemmForce& force,
                                                 std::string* why, Code* epi_code) {
  if (plan.acc_dt == DType::I32 && isa != Isa::Avx512) {  // (a CPU with VNNI running the AVX2 kernels: tests)
    *why = "xbyak: contraction: i32 sums run on the AVX-512 VNNI kernels only";
    return nullptr;
  }
  auto g = std::make_shared<GemmKernel>(k, std::move(plan), isa, force);
  if (!g->compile_prologues(isa, why) || !g->compile_epilogue(isa, why, epi_code)) return nullptr;
  return g;
}

}  // namespace kfuse::detail::xb
