// The tiled GEMM writer of the C-like GPU renderer (the strategy "gemm-tiled"; gemm_render.hpp).
// A contraction (lib/ir/kernel.hpp, README "Matmul") in the form outer [batch.., M, N], reduce
// [K], one Sum of pa * pb (pa free of the N var, pb free of the M var), then one phase of stores:
// a block computes a square tile of C (templates/gpu/gemm.tmpl). The operands are
// evaluated through their own expressions while staging, so any strides (transposed, sliced,
// broadcast) work without copies. Anything else renders as a generic row kernel.
#include "gemm_render.hpp"

#include <sstream>
#include <string>
#include <vector>

#include "ir/expr_util.hpp"

namespace kfuse::detail::gpu {

namespace {

using namespace rx;
using ir::AccKind;

// How a block splits its tile of C. 4-byte accumulators (f32, i32): a 128 x 128 tile on 256
// lanes of 8 x 8 elements, K in slices of 8. A lane owns rows ty*4 .. ty*4+3 and 64 + the same
// (columns likewise): groups of 4 adjacent elements, so that per k its 8 + 8 staged values are
// four 16-byte shared-memory reads (ld.shared.v4) where scalar reads had bounded the rate, and
// the block's 256 lanes stage 2 KiB per slice for 16 multiply-adds per staged element (the
// 64 x 64 tile on 64 lanes: 8). 8-byte accumulators (f64, i64): a 64 x 64 tile on 256 lanes of
// 4 x 4 single elements strided by 16, K in slices of 16 (8 x 8 of them exceed the register file).
// Options::gpu_gemm_tile = 64 asks for the previous 4-byte tiling (64 x 64 on 64 lanes of 8 x 8
// strided by 8, slices of 16), kept to be timed against on each GPU (scripts/gpu-check.sh).
// The 128 x 128 tiling asks for two blocks per multiprocessor (at most 128 registers per lane):
// with k_step operands it needs 129 alone, and on an H200 (docs/gpu-backends.md, "Bench") two
// blocks ran [4096,4096]^2 f32 at 35.7 TFLOP/s against 30.5 for one (ptxas spills a few dozen
// bytes for it; 33.1 before k_step).
struct Tiling {
  int wx, wy;      // lanes along N and M
  int mr, nr;      // elements per lane along M and N
  int g;           // a lane's elements come in groups of g adjacent rows (columns)
  int tm, tk;      // the tile is tm x tm, K goes in slices of tk
  int min_blocks;  // blocks per multiprocessor asked of the CUDA compiler (Stage::min_blocks)
  int threads() const { return wx * wy; }
  int per_lane() const { return tk * tm / threads(); }  // slice elements each lane stages per operand
  // Staged slice row length: padded so that the staging stores of a K-fastest operand (lanes
  // walk k) fall in distinct banks, and a multiple of g so that the group reads stay aligned.
  int row() const { return tm + g; }
  // The tile row (column) of a lane's element kf_i (kf_j) along lanes `lane` of `w`.
  std::string at(const std::string& lane, const std::string& i, int w) const {
    if (g == 1) return lane + " + " + i + " * " + std::to_string(w);
    return "(" + i + " / " + std::to_string(g) + ") * " + std::to_string(w * g) + " + " + lane + " * " +
           std::to_string(g) + " + " + i + " % " + std::to_string(g);
  }
};
Tiling tiling_for(DType mt, DType at, int tile) {
  if (dtype_size(mt) > 4 || dtype_size(at) > 4) return {16, 16, 4, 4, 1, 64, 16, 1};
  if (tile == 64) return {8, 8, 8, 8, 1, 64, 16, 1};
  return {16, 16, 8, 8, 4, 128, 8, 2};
}

// Whether some Load in `e` moves by one element along the var: the var is a bare addend of its
// index's top-level sum. Only picks which way lanes walk while staging (coalescing).
bool unit_step(const ir::Expr* e, ir::Space s, int dim) {
  if (e->kind == ExprKind::Load) {
    std::vector<const ir::Expr*> sum = {e->args[0].get()};
    while (!sum.empty()) {
      const ir::Expr* x = sum.back();
      sum.pop_back();
      if (x->kind == ExprKind::Var && x->space == s && x->index == dim) return true;
      if (x->kind == ExprKind::Op && x->op == Op::Add)
        for (const auto& a : x->args) sum.push_back(a.get());
    }
  }
  for (const auto& a : e->args)
    if (unit_step(a.get(), s, dim)) return true;
  return false;
}

struct GemmForm {
  ExprRef pa, pb;                           // the operands of the product
  ExprRef a_step, b_step;                   // k_step of each operand (null: the general staging)
  DType mt = DType::F32, at = DType::F32;   // product and accumulator dtypes
  bool a_m_fast = false, b_n_fast = false;  // staging walks M (N) fastest, else K
};

// The step along K of an operand that is one unmasked Load whose index is base + step * k, the
// step free of k, of the operand's own tile index (`dim`) and of loads; null for anything else (a
// fused prologue, a gathered or masked operand), and when K is 0. Such an operand is staged from
// offsets computed once per tile, at rows clamped into the matrix: every read is in bounds, the
// rows past the edge only feed products of C elements that are never stored, and the k past K
// are never multiplied (the tail slice's loop stops at K). So a slice inside K loads each element
// with one add and no compare, where the index expression and both bounds tests (i64 compares
// and adds per element) had made the [4096,4096]^2 f32 kernel execute 3.01e9 instructions on an
// H200 instead of 2.67e9 (docs/gpu-backends.md, "The GEMM on the H200").
ExprRef k_step(const ExprRef& x, int dim, int64_t K) {
  if (K < 1 || x->kind != ExprKind::Load || x->args.size() != 1) return nullptr;
  auto st = ir::symbolic_step(x->args[0], ir::Space::Reduce, 0);
  if (!st || ir::contains(st->get(), ExprKind::Load) || ir::depends_on(st->get(), ir::Space::Outer, dim))
    return nullptr;
  return *st;
}

bool gemm_form(const ir::Kernel& k, GemmForm& g) {
  if (k.kind != ir::KernelKind::Contraction || k.outer.size() < 2 || k.reduce.size() != 1 || k.accs.size() != 1 ||
      k.phases.size() != 2)
    return false;
  const ir::Accumulator& A = k.accs[0];
  const ir::Phase &p0 = k.phases[0], &p1 = k.phases[1];
  if (A.kind != AccKind::Sum || A.dtype == DType::Bool || !p0.over_reduce || p0.accs != std::vector<int>{0} ||
      !p0.stores.empty() || p1.over_reduce || p1.stores.empty())
    return false;
  const ExprRef& v = A.value;
  if (v->kind != ExprKind::Op || v->op != Op::Mul || v->args.size() != 2 || v->dtype == DType::Bool) return false;
  const int md = static_cast<int>(k.outer.size()) - 2, nd = md + 1;
  auto fits = [&](const ExprRef& a, const ExprRef& b) {
    return !ir::depends_on(a.get(), ir::Space::Outer, nd) && !ir::depends_on(b.get(), ir::Space::Outer, md);
  };
  if (fits(v->args[0], v->args[1])) {
    g.pa = v->args[0];
    g.pb = v->args[1];
  } else if (fits(v->args[1], v->args[0])) {  // the product commutes exactly
    g.pa = v->args[1];
    g.pb = v->args[0];
  } else {
    return false;
  }
  g.mt = v->dtype;
  g.at = A.dtype;
  g.a_m_fast = unit_step(g.pa.get(), ir::Space::Outer, md);
  g.b_n_fast = unit_step(g.pb.get(), ir::Space::Outer, nd);
  g.a_step = k_step(g.pa, md, k.reduce[0]);
  g.b_step = k_step(g.pb, nd, k.reduce[0]);
  return true;
}

class GemmWriter {
 public:
  GemmWriter(Ctx& c, const GemmForm& g, const Tiling& t)
      : c_(c), g_(g), t_(t), md_(static_cast<int>(c.k.outer.size()) - 2) {}

  std::string kernel(const std::string& name) {
    c_.note(g_.mt);
    c_.note(g_.at);
    std::string batch;
    const std::string ext = outer_extents(c_, static_cast<size_t>(md_), batch);
    std::ostringstream bv;
    for (int i = md_; i-- > 0;)
      bv << "    const kf_i64 kf_o" << i << " = kf_rem % kf_e" << i << "; kf_rem /= kf_e" << i << ";\n";
    std::ostringstream epi;
    Emitter em(c_, epi, "          ");
    emit_stores(em, c_.k.phases[1], "          ", epi);
    return fill(template_text("gpu/gemm.tmpl"), {{"ENTRY", name},
                                                 {"ARGS", kernel_args(c_, /*restrict=*/false)},
                                                 {"EXTENTS", ext},
                                                 {"BATCH", batch},
                                                 {"BATCH_VARS", bv.str()},
                                                 {"PREP_A", prep(true)},
                                                 {"PREP_B", prep(false)},
                                                 {"LOAD_A", load(true)},
                                                 {"LOAD_B", load(false)},
                                                 {"STORE_A", store(true)},
                                                 {"STORE_B", store(false)},
                                                 {"PER_LANE", std::to_string(t_.per_lane())},
                                                 {"MAC_FULL", mac(std::to_string(t_.tk), true)},
                                                 {"MAC_TAIL", mac("kf_kn", false)},
                                                 {"EPILOGUE", epi.str()},
                                                 {"K", c_.int_lit(c_.k.reduce[0], DType::I64)},
                                                 {"MT", ctype(g_.mt)},
                                                 {"AT", ctype(g_.at)},
                                                 {"AZERO", c_.lit(0, g_.at)},
                                                 {"ROW", std::to_string(t_.row())},
                                                 {"THREADS", std::to_string(t_.threads())},
                                                 {"WX", std::to_string(t_.wx)},
                                                 {"WY", std::to_string(t_.wy)},
                                                 {"MR", std::to_string(t_.mr)},
                                                 {"NR", std::to_string(t_.nr)},
                                                 {"G", std::to_string(t_.g)},
                                                 {"ROW_I", t_.at("kf_ty", "kf_i", t_.wy)},
                                                 {"COL_J", t_.at("kf_tx", "kf_j", t_.wx)},
                                                 {"TM", std::to_string(t_.tm)},
                                                 {"TN", std::to_string(t_.tm)},
                                                 {"TK", std::to_string(t_.tk)},
                                                 {"MD", std::to_string(md_)},
                                                 {"ND", std::to_string(md_ + 1)}});
  }

 private:
  // Where element kf_w of this lane's share of the A (or B) slice sits: its row kf_x of the tile
  // (m or n) and its kf_kk in the slice. Lanes walk the operand's unit-stride dimension fastest,
  // so that loads coalesce.
  std::string place(bool a, const std::string& I) const {
    const int T = t_.tm;
    const bool fast = a ? g_.a_m_fast : g_.b_n_fast;
    std::ostringstream os;
    os << I << "const int kf_q = (int)kf_lane + kf_w * " << t_.threads() << ";\n";
    if (fast) os << I << "const int kf_x = kf_q % " << T << ", kf_kk = kf_q / " << T << ";\n";
    else os << I << "const int kf_x = kf_q / " << t_.tk << ", kf_kk = kf_q % " << t_.tk << ";\n";
    return os.str();
  }

  // Once per tile, for an operand with a k_step: the step (kf_as / kf_bs) and the offset of each
  // of this lane's staged elements at k = its slice position (kf_ao / kf_bo), its row clamped
  // into the matrix.
  std::string prep(bool a) {
    const ExprRef& step = a ? g_.a_step : g_.b_step;
    if (!step) return "";
    const std::string I = "    ", J = I + "  ", n = a ? "a" : "b";
    const int dim = a ? md_ : md_ + 1;
    const std::string v = "kf_o" + std::to_string(dim), e = "kf_e" + std::to_string(dim);
    const std::string t0 = a ? "kf_m0" : "kf_n0";
    std::ostringstream os;
    {
      Emitter em(c_, os, I);
      const std::string st = em.val(step);
      os << I << "const kf_i64 kf_" << n << "s = " << st << ";\n";
    }
    os << I << "kf_i64 kf_" << n << "o[" << t_.per_lane() << "];\n";
    os << I << "for (int kf_w = 0; kf_w < " << t_.per_lane() << "; ++kf_w) {\n" << place(a, J);
    os << J << "const kf_i64 " << v << " = " << t0 << " + kf_x < " << e << " ? " << t0 << " + kf_x : " << e
       << " - 1;\n";
    os << J << "const kf_i64 kf_r0 = kf_kk;\n";
    const ExprRef& x = a ? g_.pa : g_.pb;
    Emitter em(c_, os, J);
    const std::string idx = em.val(x->args[0]);
    os << J << "kf_" << n << "o[kf_w] = " << idx << ";\n" << I << "}\n";
    return os.str();
  }

  // This lane's elements of the slice at kf_kl into kf_pa (kf_pb): the operand expression at
  // (m or n, k), or 0 outside the matrix (the loads are not evaluated there).
  std::string load(bool a) {
    const std::string I = "      ", J = I + "  ", L = J + "  ";
    const ExprRef& x = a ? g_.pa : g_.pb;
    if (a ? g_.a_step : g_.b_step) return load_stepped(a, x);
    const int dim = a ? md_ : md_ + 1;
    const std::string v = "kf_o" + std::to_string(dim), e = "kf_e" + std::to_string(dim);
    std::ostringstream os;
    os << I << "for (int kf_w = 0; kf_w < " << t_.per_lane() << "; ++kf_w) {\n" << place(a, J);
    os << J << "const kf_i64 " << v << " = " << (a ? "kf_m0" : "kf_n0") << " + kf_x;\n";
    os << J << "const kf_i64 kf_r0 = kf_kl + kf_kk;\n";
    os << J << ctype(g_.mt) << " kf_v = " << c_.lit(0, g_.mt) << ";\n";
    os << J << "if (" << v << " < " << e << " && kf_r0 < " << c_.int_lit(c_.k.reduce[0], DType::I64) << ") {\n";
    Emitter em(c_, os, L);
    const std::string val = em.val(x);
    os << L << "kf_v = " << c_.cast(val, x->dtype, g_.mt) << ";\n";
    os << J << "}\n" << J << (a ? "kf_pa" : "kf_pb") << "[kf_w] = kf_v;\n" << I << "}\n";
    return os.str();
  }

  // load() of an operand with a k_step, from prep()'s offsets: a slice inside K adds kl * step;
  // the tail slice clamps k to K - 1 (those elements are never multiplied).
  std::string load_stepped(bool a, const ExprRef& x) const {
    const std::string I = "      ", J = I + "  ", L = J + "  ", n = a ? "a" : "b";
    const std::string K = c_.int_lit(c_.k.reduce[0], DType::I64), per = std::to_string(t_.per_lane());
    const std::string dst = std::string(a ? "kf_pa" : "kf_pb") + "[kf_w] = ";
    auto value = [&](const std::string& off) {
      return c_.cast(load_text(x->index, "kf_" + n + "o[kf_w] + " + off, x->dtype), x->dtype, g_.mt);
    };
    std::ostringstream os;
    os << I << "if (kf_kl + " << t_.tk << " <= " << K << ") {\n";
    os << J << "const kf_i64 kf_" << n << "k = kf_kl * kf_" << n << "s;\n";
    os << J << "for (int kf_w = 0; kf_w < " << per << "; ++kf_w) " << dst << value("kf_" + n + "k") << ";\n";
    os << I << "} else {\n";
    os << J << "for (int kf_w = 0; kf_w < " << per << "; ++kf_w) {\n" << place(a, L);
    os << L << "const kf_i64 kf_kc = (kf_kl + kf_kk < " << K << " ? kf_kl : " << K << " - 1 - kf_kk);\n";
    os << L << dst << value("kf_kc * kf_" + n + "s") << ";\n";
    os << J << "}\n" << I << "}\n";
    return os.str();
  }

  // The loaded elements into the shared slice.
  std::string store(bool a) const {
    const std::string I = "      ", J = I + "  ";
    std::ostringstream os;
    os << I << "for (int kf_w = 0; kf_w < " << t_.per_lane() << "; ++kf_w) {\n" << place(a, J);
    os << J << (a ? "kf_As" : "kf_Bs") << "[kf_kk * " << t_.row() << " + kf_x] = " << (a ? "kf_pa" : "kf_pb")
       << "[kf_w];\n";
    os << I << "}\n";
    return os.str();
  }

  // The products of k = 0 .. bound-1 of the staged slice into the lane's elements, k ascending
  // in the accumulator itself (error <= K u, as cuBLAS; a per-slice partial, which bounded it by
  // (TK + K / TK) u, took as many registers as the accumulators and made the f32 kernel spill).
  std::string mac(const std::string& bound, bool full) {
    const std::string I = "        ", J = I + "  ";
    std::ostringstream os;
    // A full slice of the grouped tiling is unrolled, so that the next k's shared reads issue
    // under this k's products (the 8-byte tiling, unrolled, spilled on sm_90).
    if (full && t_.g > 1) os << I << "KF_UNROLL_ALL\n";
    os << I << "for (int kf_kk = 0; kf_kk < " << bound << "; ++kf_kk) {\n";
    os << J << ctype(g_.mt) << " kf_a[" << t_.mr << "], kf_b[" << t_.nr << "];\n";
    os << J << "for (int kf_i = 0; kf_i < " << t_.mr << "; ++kf_i) kf_a[kf_i] = kf_As[kf_kk * " << t_.row() << " + "
       << t_.at("kf_ty", "kf_i", t_.wy) << "];\n";
    os << J << "for (int kf_j = 0; kf_j < " << t_.nr << "; ++kf_j) kf_b[kf_j] = kf_Bs[kf_kk * " << t_.row() << " + "
       << t_.at("kf_tx", "kf_j", t_.wx) << "];\n";
    os << J << "for (int kf_i = 0; kf_i < " << t_.mr << "; ++kf_i)\n";
    os << J << "  for (int kf_j = 0; kf_j < " << t_.nr << "; ++kf_j) {\n";
    const std::string el = "kf_c[kf_i * " + std::to_string(t_.nr) + " + kf_j]";
    // Floats multiply-accumulate with one rounding (fma, as the CPU microkernels): the backends
    // compile without contraction, so el + a * b would be two roundings and two instructions.
    if (is_float(g_.mt) && g_.mt == g_.at) {
      os << J << "    " << el << " = " << c_.math("fma", g_.at) << "(kf_a[kf_i], kf_b[kf_j], " << el << ");\n";
    } else {
      const std::string prod = c_.cast(wrap_arith("mul", "*", g_.mt, "kf_a[kf_i]", "kf_b[kf_j]"), g_.mt, g_.at);
      os << J << "    " << el << " = " << wrap_arith("add", "+", g_.at, el, prod) << ";\n";
    }
    os << J << "  }\n" << I << "}\n";
    return os.str();
  }

  Ctx& c_;
  const GemmForm& g_;
  Tiling t_;
  int md_;
};

}  // namespace

bool render_gemm(rx::Ctx& c, const std::string& name, int gemm_tile, std::string& kernels, Stage& stage) {
  GemmForm g;
  if (!gemm_form(c.k, g)) return false;
  const Tiling t = tiling_for(g.mt, g.at, gemm_tile);
  kernels = GemmWriter(c, g, t).kernel(name);
  stage = {name, Team::Block, t.threads(), 1, false, t.tm, t.tm};
  stage.min_blocks = t.min_blocks;
  return true;
}

}  // namespace kfuse::detail::gpu
