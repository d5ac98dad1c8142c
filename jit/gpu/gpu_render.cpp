// The C-like GPU renderer (see gpu_render.hpp): the kernel writer and render().
// ONE writer for every kernel form but the tiled GEMM (the vectorised pointwise form, kernel
// bodies), sharing the KernelWriter's state. Which form a kernel takes is gpu_plan.cpp's
// decision; the text helpers, Ctx and the expression emitter shared with the GEMM writer are in
// render_expr.hpp, the accumulators' text in render_accs.hpp, the dialect tables and launch
// arithmetic in dialects.cpp; the tiled GEMM writer is gemm_render.cpp.
#include "gpu_render.hpp"

#include <cctype>
#include <functional>
#include <algorithm>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "gemm_render.hpp"
#include "gpu_plan.hpp"
#include "ir/decompose.hpp"
#include "ir/expr_util.hpp"
#include "kfuse/error.hpp"
#include "render_accs.hpp"
#include "render_expr.hpp"

namespace kfuse::detail::gpu {

namespace {

using namespace rx;
using ir::AccKind;
using ir::ExprKind;
using ir::ExprRef;

// ---------------------------------------------------------------- vectorised pointwise form
// Why: a thread per element moves 4 bytes per load; GPUs move memory best in 16-byte accesses
// per thread. When every access of a one-dimensional pointwise kernel is at exactly kf_o0 (the
// buffer walked contiguously from its base; device allocations are at least 256-byte aligned and
// views fold into the index, never into the pointer) or does not depend on kf_o0 at all (a
// broadcast scalar, loaded as a scalar), a thread takes V consecutive elements: one 16-byte
// vector load per buffer, the scalar expressions V times in element order, one vector store per
// output; the last unit's tail runs the scalar form. Any other access (an offset, a stride, a
// mask, a gather) keeps the scalar kernel: then the vector accesses could be misaligned.
struct VecForm {
  int width = 0;                   ///< elements per thread: 16 bytes of the widest buffer, <= 8
  std::vector<int> loads, stores;  ///< buffers read / written at kf_o0 (ascending)
};

// False when `e` reads a buffer at an index that depends on kf_o0 other than kf_o0 itself.
bool vector_accesses(const ir::Expr& e, std::vector<int>& loads) {
  if (e.kind == ExprKind::Load) {
    if (e.args.size() == 1 && is_inner_var(*e.args[0])) {
      loads.push_back(e.index);
      return true;
    }
    return !ir::depends_on(&e, ir::Space::Outer, 0);
  }
  for (const auto& a : e.args)
    if (!vector_accesses(*a, loads)) return false;
  return true;
}

bool vector_form(const ir::Kernel& k, VecForm& v) {
  if (k.outer.size() != 1 || k.phases.size() != 1 || k.phases[0].over_reduce || k.dynamic_reduce() ||
      k.phases[0].stores.empty())
    return false;
  for (const auto& st : k.phases[0].stores) {
    if (!is_inner_var(*st.index) || !vector_accesses(*st.value, v.loads)) return false;
    v.stores.push_back(st.buffer);
  }
  for (auto* l : {&v.loads, &v.stores}) {
    std::sort(l->begin(), l->end());
    l->erase(std::unique(l->begin(), l->end()), l->end());
  }
  size_t widest = 1;
  for (auto* l : {&v.loads, &v.stores})
    for (int b : *l) widest = std::max(widest, dtype_size(k.buffers[b].dtype));
  v.width = static_cast<int>(std::min<size_t>(8, 16 / widest));
  return true;
}

// ---------------------------------------------------------------- kernel bodies
class KernelWriter {
 public:
  KernelWriter(Ctx& c, const Plan& p) : c_(c), p_(p), accs_(c) { T_ = team_size(p.team, p, c.d); }

  // stage: 0 single, 1 partials, 2 combine.
  std::string entry(int stage, const std::string& name) {
    body_.str("");
    shared_slots_ = 0;
    const std::string I = "    ";
    // Units of stage 1 (and of stage 2 with chunked stores) are (outer point, chunk kf_s).
    per_chunk_ = stage == 1 || (stage == 2 && p_.chunked_stores);
    if (per_chunk_) chunk_units(I);
    else decompose_outer("kf_u", I);
    if (stage == 0 && p_.row_cache) plan_row_cache(I);
    size_t first = 0;
    if (stage == 1) {
      phase_reduce(0, I, true);
      write_partials(0, I);
      first = k().phases.size();  // stage 1 ends with the partials
    } else if (stage == 2) {
      combine_partials(0, I);
      first = 1;
    }
    for (size_t i = first; i < k().phases.size(); ++i) {
      if (k().phases[i].over_reduce) phase_reduce(static_cast<int>(i), I, per_chunk_);
      else phase_once(static_cast<int>(i), I);
    }
    return fill_kernel(stage, name);
  }

  // The loads worth caching (RowCache): reduce-dependent Loads that two or more over-reduce
  // phases make, at most 64 registers per lane in all (n = elements per lane); their arrays are
  // declared per unit.
  void plan_row_cache(const std::string& I) {
    rc_ = RowCache{};
    const int64_t n = (k().reduce_numel() + T_ - 1) / T_;
    std::unordered_map<ir::ExprRef, std::vector<int>, ir::ExprStructHash, ir::ExprStructEq> phases_of;
    std::vector<ir::ExprRef> order;
    std::function<void(const ir::ExprRef&, int)> walk = [&](const ir::ExprRef& e, int p) {
      if (!e) return;
      if (e->kind == ExprKind::Load && depends_on_reduce(e.get())) {
        auto& ps = phases_of[e];
        if (ps.empty()) order.push_back(e);
        if (ps.empty() || ps.back() != p) ps.push_back(p);
      }
      for (const auto& a : e->args) walk(a, p);
    };
    for (size_t p = 0; p < k().phases.size(); ++p) {
      const ir::Phase& ph = k().phases[p];
      if (!ph.over_reduce) continue;
      for (int j : ph.accs) walk(k().accs[j].value, static_cast<int>(p));
      for (const auto& st : ph.stores) {
        walk(st.index, static_cast<int>(p));
        walk(st.value, static_cast<int>(p));
      }
    }
    for (const ir::ExprRef& e : order) {
      if (phases_of[e].size() < 2 || static_cast<int64_t>(rc_.slot.size() + 1) * n > 64) continue;
      const int slot = static_cast<int>(rc_.slot.size());
      rc_.slot.emplace(e, slot);
      body_ << I << ctype(e->dtype) << " kf_row" << slot << "[" << n << "];  // " << ir::print_expr(e) << "\n";
    }
    rc_.filled.assign(rc_.slot.size(), false);
  }
  bool depends_on_reduce(const ir::Expr* e) const {
    for (size_t d = 0; d < k().reduce.size(); ++d)
      if (ir::depends_on(e, ir::Space::Reduce, static_cast<int>(d))) return true;
    return false;
  }

  // Units (outer point, chunk kf_s) in chunk-major order, u = kf_s * kf_points + point. Why:
  // with a thread per unit (column kernels), neighbouring threads then take neighbouring points,
  // i.e. neighbouring columns of the same rows, and a warp's loads coalesce; point-major order
  // put the chunks of one column on neighbouring threads, 32 rows apart, one cache line each.
  // The partials keep the unit's index, so a point's partials are kf_points apart.
  void chunk_units(const std::string& I) {
    body_ << I << "const kf_i64 kf_points = kf_units / " << p_.split << ";\n";
    decompose_outer("(kf_u % kf_points)", I);
    body_ << I << "const kf_i64 kf_s = kf_u / kf_points;\n";
  }

  // Stage s (0-based) of a row-split kernel (Plan::row_folds): unit = (row, chunk kf_s).
  std::string split_entry(int s, const std::string& name) {
    body_.str("");
    shared_slots_ = 0;
    per_chunk_ = true;
    const std::string I = "    ";
    chunk_units(I);
    for (int q = 0; q < std::min(s, p_.row_folds); ++q) combine_partials(q, I);
    if (s < p_.row_folds) {
      phase_reduce(s, I, true);
      write_partials(s, I);
    } else {
      for (size_t i = p_.row_folds; i < k().phases.size(); ++i) {
        if (k().phases[i].over_reduce) phase_reduce(static_cast<int>(i), I, true);
        else phase_once(static_cast<int>(i), I);
      }
    }
    unit_doc_ = "unit = (row, chunk of " + std::to_string(p_.chunk) + "), stage " + std::to_string(s + 1) + " of " +
                std::to_string(p_.row_folds + 1);
    std::string out = fill_kernel(s + 1, name);
    unit_doc_.clear();
    return out;
  }

  // The pointwise-vec kernel (see VecForm): unit = `v.width` consecutive outer points.
  std::string vector_entry(const std::string& name, const VecForm& v) {
    body_.str("");
    shared_slots_ = 0;
    per_chunk_ = false;
    const std::string I = "    ", J = I + "  ", E = J + "  ", W = std::to_string(v.width);
    const ir::Phase& ph = k().phases[0];
    body_ << I << "const kf_i64 kf_base = kf_u * " << W << ";\n";
    body_ << I << "if (kf_base + " << W << " <= kf_e0) {  // a full vector\n";
    for (int b : v.loads) body_ << J << vec_load(b, v.width) << "\n";
    for (int b : v.stores) body_ << J << vec_out_declare(b, v.width) << "\n";
    for (int j = 0; j < v.width; ++j) {
      std::unordered_map<int, std::string> elems;
      for (int b : v.loads) elems[b] = vec_elem_value(b, j);
      body_ << J << "{\n" << E << "const kf_i64 kf_o0 = kf_base + " << j << ";\n";
      Emitter em(c_, body_, E);
      em.use_vector_loads(&elems);
      for (const auto& st : ph.stores) body_ << E << vec_out_set(st.buffer, j, em.val(st.value)) << "\n";
      body_ << J << "}\n";
    }
    for (int b : v.stores) body_ << J << vec_store(b, v.width) << "\n";
    body_ << I << "} else {  // the tail: scalar\n";
    body_ << J << "for (kf_i64 kf_o0 = kf_base; kf_o0 < kf_e0; ++kf_o0) {\n";
    Emitter em(c_, body_, E);
    emit_stores(em, ph, E, body_);
    body_ << J << "}\n" << I << "}\n";
    units_ = "(kf_e0 + " + W + " - 1) / " + W;
    unit_doc_ = "unit = " + W + " consecutive outer points";
    std::string out = fill_kernel(0, name);
    units_.clear();
    unit_doc_.clear();
    return out;
  }

  // CUDA vector types: an aligned struct of V elements (ld/st.global.v2/v4 when 8/16 bytes).
  std::string vector_typedefs(const VecForm& v) const {
    if (!is_cuda()) return "";
    std::vector<std::string> seen;
    std::string out;
    for (auto* l : {&v.loads, &v.stores})
      for (int b : *l) {
        const DType t = k().buffers[b].dtype;
        const std::string ty = vec_type(t, v.width);
        if (std::find(seen.begin(), seen.end(), ty) != seen.end()) continue;
        seen.push_back(ty);
        out += "struct alignas(" + std::to_string(v.width * dtype_size(t)) + ") " + ty + " { " + mem_ctype(t) + " x[" +
               std::to_string(v.width) + "]; };\n";
      }
    return out;
  }

 private:
  bool is_cuda() const { return std::string(d().name) == "cuda"; }
  DType bdt(int b) const { return k().buffers[b].dtype; }
  std::string vec_type(DType t, int w) const {
    return std::string("kf_vec_") + dtype_name(t) + "x" + std::to_string(w);
  }
  // OpenCL C vector element type of a buffer (f16: vload_halfN gives floats).
  static const char* cl_elem(DType t) {
    switch (t) {
      case DType::Bool:
      case DType::U8: return "uchar";
      case DType::I8: return "char";
      case DType::BF16: return "ushort";
      case DType::F16:
      case DType::F32: return "float";
      case DType::I32: return "int";
      case DType::I64: return "long";
      default: return "double";
    }
  }
  std::string vec_load(int b, int w) const {
    const std::string bs = "kf_b" + std::to_string(b), W = std::to_string(w), v = "kf_v" + std::to_string(b);
    if (is_cuda())
      return "const " + vec_type(bdt(b), w) + " " + v + " = ((const " + vec_type(bdt(b), w) + "*)" + bs + ")[kf_u];";
    const std::string fn = bdt(b) == DType::F16 ? "vload_half" : "vload";
    // i8 buffers are `signed char`, a type distinct from OpenCL's `char`: vloadN has overloads for
    // char and uchar, so the call would be ambiguous without the cast.
    const std::string src = bdt(b) == DType::I8 ? "(const __global char*)" + bs : bs;
    return std::string("const ") + cl_elem(bdt(b)) + W + " " + v + " = " + fn + W + "((size_t)kf_u, " + src + ");";
  }
  // Element j of buffer b's vector load in the compute type (as the scalar Load would give it).
  std::string vec_elem_value(int b, int j) const {
    const char* hex = "0123456789abcdef";
    const std::string c =
        "kf_v" + std::to_string(b) + (is_cuda() ? ".x[" + std::to_string(j) + "]" : std::string(".s") + hex[j]);
    switch (bdt(b)) {
      case DType::U8:
      case DType::I8: return "((kf_i32)" + c + ")";
      case DType::F16: return is_cuda() ? "kf_f16_to_f32(" + c + ")" : c;
      case DType::BF16: return "kf_bf16_to_f32(" + c + ")";
      default: return c;
    }
  }
  std::string vec_out_declare(int b, int w) const {
    const std::string o = "kf_w" + std::to_string(b);
    if (is_cuda()) return vec_type(bdt(b), w) + " " + o + ";";
    return std::string(cl_elem(bdt(b))) + " " + o + "[" + std::to_string(w) + "];";
  }
  // Element j of output b's vector: the value in the buffer's storage form (as emit_stores).
  std::string vec_out_set(int b, int j, const std::string& v) const {
    const std::string o = "kf_w" + std::to_string(b) + (is_cuda() ? ".x" : "") + "[" + std::to_string(j) + "]";
    switch (bdt(b)) {
      case DType::F16: return o + " = " + (is_cuda() ? "kf_f32_to_f16(" + v + ")" : v) + ";";
      case DType::BF16: return o + " = kf_f32_to_bf16(" + v + ");";
      case DType::U8:
      case DType::I8: return o + " = (" + mem_ctype(bdt(b)) + ")(" + v + ");";
      default: return o + " = " + v + ";";
    }
  }
  std::string vec_store(int b, int w) const {
    const std::string bs = "kf_b" + std::to_string(b), W = std::to_string(w), o = "kf_w" + std::to_string(b);
    if (is_cuda()) return "((" + vec_type(bdt(b), w) + "*)" + bs + ")[kf_u] = " + o + ";";
    std::string parts;
    for (int j = 0; j < w; ++j) parts += (j ? ", " : "") + o + "[" + std::to_string(j) + "]";
    const std::string fn = bdt(b) == DType::F16 ? "vstore_half" + W + "_rte" : "vstore" + W;
    const std::string dst = bdt(b) == DType::I8 ? "(__global char*)" + bs : bs;  // (as in vec_load)
    return fn + "((" + cl_elem(bdt(b)) + W + ")(" + parts + "), (size_t)kf_u, " + dst + ");";
  }

  const ir::Kernel& k() const { return c_.k; }
  const Dialect& d() const { return c_.d; }

  void decompose_outer(const std::string& o, const std::string& I) {
    const size_t n = k().outer.size();
    if (n == 0) return;
    body_ << I << "kf_i64 kf_rem = " << o << ";\n";
    for (size_t i = n; i-- > 1;)
      body_ << I << "const kf_i64 kf_o" << i << " = kf_rem % kf_e" << i << "; kf_rem /= kf_e" << i << ";\n";
    body_ << I << "const kf_i64 kf_o0 = kf_rem;\n";
  }

  void decompose_reduce(const std::string& I) {
    const auto& red = k().reduce;
    body_ << I << "kf_i64 kf_rr = kf_r;\n";
    for (size_t i = red.size(); i-- > 1;)
      body_ << I << "const kf_i64 kf_r" << i << " = kf_rr % " << red[i] << "; kf_rr /= " << red[i] << ";\n";
    body_ << I << "const kf_i64 kf_r0 = kf_rr;\n";
  }

  void phase_once(int p, const std::string& I) {
    const ir::Phase& ph = k().phases[p];
    if (ph.stores.empty()) return;
    // (per chunk: the point's first chunk stores, once)
    body_ << I << (per_chunk_ ? "if (kf_lane == 0 && kf_s == 0) {" : "if (kf_lane == 0) {") << "  // phase " << p
          << " (once)\n";
    Emitter em(c_, body_, I + "  ");
    emit_stores(em, ph, I + "  ", body_);
    body_ << I << "}\n";
  }

  // An over-reduce phase: a strided loop of the team's lanes, then the team reduction.
  void phase_reduce(int p, const std::string& I, bool chunked) {
    const ir::Phase& ph = k().phases[p];
    const int64_t R = k().reduce_numel();
    if (k().dynamic_reduce()) {
      phase_dynamic(p, I);
      return;
    }
    if (R == 0) {
      for (int j : ph.accs) body_ << I << accs_.empty_result(j) << "\n";
      return;
    }
    body_ << I << "// phase " << p << " over reduce (" << R << " points)\n";
    for (int j : ph.accs) body_ << I << accs_.declare(j) << "\n";
    std::string first = "kf_lane", end = std::to_string(R);
    if (chunked) {
      const std::string rend = "kf_rend" + std::to_string(p);
      body_ << I << "const kf_i64 " << rend << " = kf_s * " << p_.chunk << " + " << p_.chunk << " < " << R
            << " ? kf_s * " << p_.chunk << " + " << p_.chunk << " : " << R << ";\n";
      first = "kf_s * " + std::to_string(p_.chunk) + " + kf_lane";
      end = rend;
    }
    const std::string J = I + "  ";
    std::ostringstream loop;
    Emitter pre(c_, body_, I);
    Emitter em(c_, loop, J, &pre);
    if (!rc_.slot.empty() && !chunked) em.use_row_cache(&rc_);
    c_.heavy = false;
    for (int j : ph.accs) {
      const auto& A = k().accs[j];
      std::string x = em.val(A.value);
      loop << J << accs_.fold(j, x, A.value->dtype, "kf_r") << "\n";
    }
    emit_stores(em, ph, J, loop);
    const std::string tag = std::to_string(p);
    const int levels = cascade_levels(((chunked ? p_.chunk : R) + T_ - 1) / T_);
    cascade_declare(ph.accs, levels, tag, I);
    loop << cascade_step(ph.accs, levels, tag, J);
    if (!rc_.slot.empty() && !chunked) {
      row_cached_loop(loop.str(), R, I);
      cascade_end(ph.accs, levels, tag, I);
      team_reduce(ph.accs, I);
      for (int j : ph.accs) body_ << I << accs_.result(j) << "\n";
      return;
    }
    // Unrolled f64 exp/log bodies make ptxas spill; keep such loops rolled. Others unroll by 4:
    // a lane's loads do not depend on its accumulators, so four are in flight instead of one
    // (a chunked column or a long row is latency-bound otherwise).
    body_ << I << (c_.heavy ? "KF_NO_UNROLL\n" : "KF_UNROLL4\n");
    body_ << I << "for (kf_i64 kf_r = " << first << "; kf_r < " << end << "; kf_r += " << T_ << ") {\n";
    decompose_reduce(J);
    body_ << loop.str() << I << "}\n";
    cascade_end(ph.accs, levels, tag, I);
    team_reduce(ph.accs, I);
    if (!chunked)
      for (int j : ph.accs) body_ << I << accs_.result(j) << "\n";
  }

  // The row-cache form of a phase's loop: lane element kf_i of n, fully unrolled so that the
  // kf_row arrays are registers; a row that is not a multiple of the team guards the last one.
  void row_cached_loop(const std::string& loop, int64_t R, const std::string& I) {
    const int64_t n = (R + T_ - 1) / T_;
    const std::string J = I + "  ";
    body_ << I << "KF_UNROLL_ALL\n";
    body_ << I << "for (int kf_i = 0; kf_i < " << n << "; ++kf_i) {\n";
    body_ << J << "const kf_i64 kf_r = kf_lane + (kf_i64)kf_i * " << T_ << ";\n";
    if (R % T_ != 0) body_ << J << "if (kf_r >= " << R << ") break;\n";
    decompose_reduce(J);
    body_ << loop << I << "}\n";
  }

  // An over-reduce phase of a dynamic domain: the team's lanes stride over this point's
  // [begin, end) (kernel.hpp); an empty range gives the empty-domain values.
  void phase_dynamic(int p, const std::string& I) {
    const ir::Phase& ph = k().phases[p];
    body_ << I << "// phase " << p << " over the dynamic reduce domain\n";
    Emitter pre(c_, body_, I);
    const std::string lo = pre.val(k().reduce_begin), hi = pre.val(k().reduce_end);
    for (int j : ph.accs) body_ << I << accs_.declare(j) << "\n";
    const std::string J = I + "  ";
    std::ostringstream loop;
    Emitter em(c_, loop, J, &pre);
    c_.heavy = false;
    for (int j : ph.accs) {
      const auto& A = k().accs[j];
      std::string x = em.val(A.value);
      loop << J << accs_.fold(j, x, A.value->dtype, "kf_r0") << "\n";
    }
    emit_stores(em, ph, J, loop);
    if (c_.heavy) body_ << I << "KF_NO_UNROLL\n";
    body_ << I << "for (kf_i64 kf_r0 = " << lo << " + kf_lane; kf_r0 < " << hi << "; kf_r0 += " << T_ << ") {\n";
    body_ << loop.str() << I << "}\n";
    team_reduce(ph.accs, I);
    for (int j : ph.accs) body_ << I << accs_.result_if(j, "(" + hi + " > " + lo + ")") << "\n";
  }

  // Cascaded sums. Why: a lane folds its strided elements one after the other, so a float sum's
  // rounding error would grow like (elements per lane) * u (u = 2^-24 for f32): a row of 2^20
  // over 256 lanes is 4096 additions per lane, a column chunk up to 4096 on one thread.
  // How: a lane's float Sum partial closes every kCascadeFan (F) of its elements into a level-1
  // partial, which closes every F^2 into level 2, and so on (private variables; as many levels as
  // the lane's element count needs); after the loop the lane's value is acc + c1 + c2 + ....
  // At most F - 1 roundings per level, then log2(team) in the tree, the two-stage combine
  // cascaded alike: |sum - exact| <= (8 * ceil(log8 n) + 8) * u * sum|x|. The levels close on the
  // lane's own element count: the order depends on the lane and the domain only, not on the grid.
  static constexpr int64_t kCascadeFan = 8;

  std::vector<int> cascade_accs(const std::vector<int>& js) const {
    std::vector<int> out;
    for (int j : js)
      if (k().accs[j].kind == AccKind::Sum && is_float(accs_.vtype(j))) out.push_back(j);
    return out;
  }
  static int cascade_levels(int64_t per_lane) {
    int l = 0;
    for (int64_t s = kCascadeFan; s < per_lane; s *= kCascadeFan) ++l;
    return l;
  }
  std::string cvar(int l, int j, const std::string& tag) const {
    return "kf_c" + std::to_string(l) + "_" + std::to_string(j) + "_" + tag;
  }
  void cascade_declare(const std::vector<int>& js, int levels, const std::string& tag, const std::string& I) {
    if (levels == 0 || cascade_accs(js).empty()) return;
    body_ << I << "kf_i64 kf_cn" << tag << " = 0;\n";
    for (int j : cascade_accs(js))
      for (int l = 1; l <= levels; ++l)
        body_ << I << ctype(accs_.vtype(j)) << " " << cvar(l, j, tag) << " = " << accs_.init(j) << ";\n";
  }
  // After one element of the lane: close the levels that end here.
  std::string cascade_step(const std::vector<int>& js, int levels, const std::string& tag, const std::string& I) {
    const std::vector<int> cs = cascade_accs(js);
    if (levels == 0 || cs.empty()) return "";
    std::string s, close;
    int64_t block = 1;
    for (int l = 1; l <= levels; ++l) {
      block *= kCascadeFan;
      s += (l == 1 ? "if ((++kf_cn" + tag + " & " : " if ((kf_cn" + tag + " & ") + std::to_string(block - 1) +
           ") == 0) {";
      for (int j : cs) {
        const std::string lower = l == 1 ? accs_.a(j) : cvar(l - 1, j, tag);
        s.append(" ").append(accs_.combine(j, cvar(l, j, tag), "", lower, "")).append(" ").append(lower).append(" = ");
        s.append(accs_.init(j)).append(";");
      }
      close += "}";
    }
    return I + s + " " + close + "\n";
  }
  void cascade_end(const std::vector<int>& js, int levels, const std::string& tag, const std::string& I) {
    if (levels == 0) return;
    for (int j : cascade_accs(js))
      for (int l = 1; l <= levels; ++l) body_ << I << accs_.combine(j, accs_.a(j), "", cvar(l, j, tag), "") << "\n";
  }

  void team_reduce(const std::vector<int>& js, const std::string& I) {
    if (js.empty() || p_.team == Team::Thread) return;
    if (p_.team == Team::Warp) {
      for (int j : js) {
        const DType t = accs_.vtype(j);
        const char* tt = ctype(t);
        std::string sh = t == DType::Bool ? "(int)" + accs_.a(j) : accs_.a(j);
        body_ << I << "for (int kf_m = " << d().warp_size / 2 << "; kf_m > 0; kf_m >>= 1) {\n";
        body_ << I << "  const " << tt << " kf_b = (" << tt << ")KF_SHFL_XOR(" << sh << ", kf_m);\n";
        std::string bi = "-1";
        if (is_arg(k().accs[j].kind)) {
          body_ << I << "  const kf_i64 kf_bi = KF_SHFL_XOR(" << accs_.ai(j) << ", kf_m);\n";
          bi = "kf_bi";
        }
        body_ << I << "  " << accs_.combine(j, accs_.a(j), accs_.ai(j), "kf_b", bi) << "\n";
        body_ << I << "}\n";
      }
      return;
    }
    // Block: one fixed tree over shared/local memory for every accumulator of the phase.
    const int B = p_.block;
    int slots = 0;
    std::vector<std::pair<std::string, std::string>> ptr;  // (value array, index array)
    for (int j : js) {
      std::string lq = d().local_qual;
      std::string v =
          std::string("((") + lq + ctype(accs_.vtype(j)) + "*)(kf_smem + " + std::to_string(slots * B) + "))";
      std::string ix = "0";
      ++slots;
      if (is_arg(k().accs[j].kind)) {
        ix = std::string("((") + lq + "kf_i64*)(kf_smem + " + std::to_string(slots * B) + "))";
        ++slots;
      }
      ptr.emplace_back(v, ix);
    }
    shared_slots_ = std::max(shared_slots_, slots);
    max_shared_slots_ = std::max(max_shared_slots_, slots);
    for (size_t n = 0; n < js.size(); ++n) {
      body_ << I << ptr[n].first << "[kf_lane] = " << accs_.a(js[n]) << ";";
      if (ptr[n].second != "0") body_ << " " << ptr[n].second << "[kf_lane] = " << accs_.ai(js[n]) << ";";
      body_ << "\n";
    }
    body_ << I << "KF_BARRIER();\n";
    body_ << I << "for (int kf_h = " << B / 2 << "; kf_h > 0; kf_h >>= 1) {\n";
    body_ << I << "  if (kf_lane < kf_h) {\n";
    for (size_t n = 0; n < js.size(); ++n) {
      const int j = js[n];
      const char* tt = ctype(accs_.vtype(j));
      const bool ar = ptr[n].second != "0";
      const auto& [v, ix] = ptr[n];
      body_ << I << "    { " << tt << " kf_x = " << v << "[kf_lane]; const " << tt << " kf_y = " << v
            << "[kf_lane + kf_h];";
      if (ar) body_ << " kf_i64 kf_xi = " << ix << "[kf_lane]; const kf_i64 kf_yi = " << ix << "[kf_lane + kf_h];";
      body_ << "\n" << I << "      " << accs_.combine(j, "kf_x", "kf_xi", "kf_y", "kf_yi") << "\n";
      body_ << I << "      " << v << "[kf_lane] = kf_x;";
      if (ar) body_ << " " << ix << "[kf_lane] = kf_xi;";
      body_ << " }\n";
    }
    body_ << I << "  }\n" << I << "  KF_BARRIER();\n" << I << "}\n";
    for (size_t n = 0; n < js.size(); ++n) {
      body_ << I << accs_.a(js[n]) << " = " << ptr[n].first << "[0];";
      if (ptr[n].second != "0") body_ << " " << accs_.ai(js[n]) << " = " << ptr[n].second << "[0];";
      body_ << "\n";
    }
    body_ << I << "KF_BARRIER();\n";
  }

  // Scratch layout: accumulator j of folding phase q owns 8-byte slot columns [slot, slot + 1
  // (+1 for the index of arg accumulators)), each (stage-1 units) long; the columns of phase q
  // follow those of phases 0..q-1 (row-split keeps the partials of every folding phase).
  static int acc_slots(const ir::Kernel& k, int q) {
    int n = 0;
    for (int j : k.phases[q].accs) n += is_arg(k.accs[j].kind) ? 2 : 1;
    return n;
  }
  std::vector<std::pair<std::string, std::string>> scratch_ptrs(int q, const std::string& nunits) {
    std::vector<std::pair<std::string, std::string>> out;
    int s = 0;
    for (int e = 0; e < q; ++e) s += acc_slots(k(), e);
    const std::string gq = d().global_qual;
    for (int j : k().phases[q].accs) {
      std::string v =
          "((" + gq + ctype(accs_.vtype(j)) + "*)(kf_scratch + " + std::to_string(s) + " * " + nunits + "))";
      ++s;
      std::string ix;
      if (is_arg(k().accs[j].kind)) {
        ix = "((" + gq + "kf_i64*)(kf_scratch + " + std::to_string(s) + " * " + nunits + "))";
        ++s;
      }
      out.emplace_back(v, ix);
    }
    scratch_slots_ = std::max(scratch_slots_, s);
    return out;
  }

  void write_partials(int q, const std::string& I) {
    auto ptrs = scratch_ptrs(q, "kf_units");
    body_ << I << "if (kf_lane == 0) {\n";
    const auto& js = k().phases[q].accs;
    for (size_t n = 0; n < js.size(); ++n) {
      body_ << I << "  " << ptrs[n].first << "[kf_u] = " << accs_.a(js[n]) << ";";
      if (!ptrs[n].second.empty()) body_ << " " << ptrs[n].second << "[kf_u] = " << accs_.ai(js[n]) << ";";
      body_ << "\n";
    }
    body_ << I << "}\n";
  }

  void combine_partials(int q, const std::string& I) {
    const auto& js = k().phases[q].accs;
    const std::string S = std::to_string(p_.split), tag = "c" + std::to_string(q);
    // The partials of (point, chunk) sit at chunk * points + point (chunk_units).
    auto ptrs = scratch_ptrs(q, per_chunk_ ? "kf_units" : "(kf_units * " + S + ")");
    const std::string point = per_chunk_ ? "(kf_u % kf_points)" : "kf_u";
    const std::string points = per_chunk_ ? "kf_points" : "kf_units";
    body_ << I << "// combine the " << S << " partials of this outer point in fixed order\n";
    for (int j : js) body_ << I << accs_.declare(j) << "\n";
    const int levels = cascade_levels((p_.split + T_ - 1) / T_);
    cascade_declare(js, levels, tag, I);
    body_ << I << "for (kf_i64 kf_t = kf_lane; kf_t < " << S << "; kf_t += " << T_ << ") {\n";
    body_ << I << "  const kf_i64 kf_q = kf_t * " << points << " + " << point << ";\n";
    for (size_t n = 0; n < js.size(); ++n) {
      const int j = js[n];
      const char* tt = ctype(accs_.vtype(j));
      body_ << I << "  { const " << tt << " kf_b = " << ptrs[n].first << "[kf_q];";
      std::string bi = "-1";
      if (!ptrs[n].second.empty()) {
        body_ << " const kf_i64 kf_bi = " << ptrs[n].second << "[kf_q];";
        bi = "kf_bi";
      }
      body_ << " " << accs_.combine(j, accs_.a(j), accs_.ai(j), "kf_b", bi) << " }\n";
    }
    body_ << cascade_step(js, levels, tag, I + "  ");
    body_ << I << "}\n";
    cascade_end(js, levels, tag, I);
    team_reduce(js, I);
    for (int j : js) body_ << I << accs_.result(j) << "\n";
  }

  std::string fill_kernel(int stage, const std::string& name) {
    std::string args = kernel_args(c_);
    if (stage != 0) args += std::string(", ") + d().global_qual + "kf_i64* kf_scratch";
    std::string units;
    const std::string ext = outer_extents(c_, k().outer.size(), units);
    if (per_chunk_) units = "(" + units + ") * " + std::to_string(p_.split);
    if (!units_.empty()) units = units_;

    const std::string W = std::to_string(d().warp_size);
    std::string lane, first, step;
    switch (p_.team) {
      case Team::Thread:
        lane = "0";
        first = "KF_GROUP * KF_LSIZE + KF_LID";
        step = "KF_NUM_GROUPS * KF_LSIZE";
        break;
      case Team::Warp:
        lane = "KF_LID % " + W;
        first = "(KF_GROUP * KF_LSIZE + KF_LID) / " + W;
        step = "KF_NUM_GROUPS * (KF_LSIZE / " + W + ")";
        break;
      case Team::Block:
        lane = "KF_LID";
        first = "KF_GROUP";
        step = "KF_NUM_GROUPS";
        break;
    }
    std::string shared;
    if (shared_slots_ > 0) shared = "  KF_SHARED kf_i64 kf_smem[" + std::to_string(shared_slots_ * p_.block) + "];\n";
    std::string doc = !unit_doc_.empty() ? unit_doc_
                      : stage == 1       ? "unit = (outer point, chunk of " + std::to_string(p_.chunk) + ")"
                      : stage == 2
                          ? std::string(per_chunk_ ? "unit = (outer point, chunk), " : "unit = outer point, ") +
                                "combines " + std::to_string(p_.split) + " partials"
                          : "unit = outer point";
    return fill(template_text("gpu/kernel.tmpl"),
                {{"ENTRY", name},
                 {"STRATEGY", p_.strategy + (stage ? " stage " + std::to_string(stage) : "")},
                 {"TEAM", team_name(p_.team)},
                 {"TEAM_SIZE", std::to_string(T_)},
                 {"UNITS_DOC", doc},
                 {"ARGS", args},
                 {"SHARED", shared},
                 {"LANE", lane},
                 {"EXTENTS", ext},
                 {"UNITS", units},
                 {"UNIT_FIRST", first},
                 {"UNIT_STEP", step},
                 {"BODY", body_.str()}});
  }

  Ctx& c_;
  const Plan& p_;
  Accs accs_;
  int T_ = 1;
  std::ostringstream body_;
  int shared_slots_ = 0;
  bool per_chunk_ = false;        // the current stage's units are (outer point, chunk)
  RowCache rc_;                   // the row cache of the current unit (Plan::row_cache)
  std::string units_, unit_doc_;  // the unit count and its description when not the defaults

 public:
  int max_shared_slots_ = 0;
  int scratch_slots_ = 0;
};

std::string sanitize(const std::string& s) {
  std::string o;
  for (char ch : s) o += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') ? ch : '_';
  if (o.empty() || std::isdigit(static_cast<unsigned char>(o[0]))) o = "k_" + o;
  return o;
}

}  // namespace

Rendered render(const ir::Kernel& kernel, const Dialect& d, const RenderKnobs& knobs) {
  ir::verify_kernel(kernel);
  ir::Kernel k = kernel;  // composites in primitive ops: the one definition every backend computes
  ir::decompose_composites(k);
  Ctx c{k, d};
  Plan p = choose(k, d);
  KernelWriter w(c, p);
  Rendered r;
  r.strategy = p.strategy;
  r.split = p.split;
  r.num_params = static_cast<int>(k.params.size());
  const std::string base = sanitize(k.name.empty() ? "kfuse_kernel" : k.name);
  std::string kernels;
  if (Stage gs; render_gemm(c, base, knobs.gemm_tile, kernels, gs)) {
    p.block = gs.block;
    r.strategy = "gemm-tiled";
    r.stages.push_back(gs);
  } else if (VecForm vf; p.strategy == "pointwise" && vector_form(k, vf)) {
    p.strategy = r.strategy = "pointwise-vec" + std::to_string(vf.width);
    kernels = w.vector_typedefs(vf) + w.vector_entry(base, vf);
    r.stages.push_back({base, Team::Thread, p.block, 1, false});
    r.stages.back().vec = vf.width;
  } else if (p.row_folds > 0) {
    for (int s = 0; s <= p.row_folds; ++s) {
      const std::string name = base + "_s" + std::to_string(s + 1);
      kernels += w.split_entry(s, name);
      r.stages.push_back({name, p.team, p.block, p.split, true});
    }
    r.scratch_slots = w.scratch_slots_;
  } else if (!p.two_stage) {
    kernels = w.entry(0, base);
    r.stages.push_back({base, p.team, p.block, 1, false});
  } else {
    kernels = w.entry(1, base + "_partials");
    kernels += w.entry(2, base + "_combine");
    r.stages.push_back({base + "_partials", p.team, p.block, p.split, true});
    r.stages.push_back({base + "_combine", p.team, p.block, p.chunked_stores ? p.split : 1, true});
    r.scratch_slots = w.scratch_slots_;
  }
  r.uses_f64 = c.f64;
  std::ostringstream td;
  td << "typedef " << d.t_bool << " kf_bool;\ntypedef " << d.t_i32 << " kf_i32;\ntypedef " << d.t_i64
     << " kf_i64;\ntypedef " << d.t_u32 << " kf_u32;\ntypedef " << d.t_u64 << " kf_u64;\n"
     << "typedef struct { kf_i64 v[" << std::max(1, r.num_params) << "]; } kf_params;\n";
  r.source = fill(template_text(d.prelude_template), {{"NAME", base},
                                                      {"BLOCK", std::to_string(p.block)},
                                                      {"MIN_BLOCKS", r.stages.size() == 1 && r.stages[0].min_blocks > 1
                                                                         ? ", " + std::to_string(r.stages[0].min_blocks)
                                                                         : std::string()},
                                                      {"TYPEDEFS", td.str()}}) +
             fill(template_text("gpu/helpers.tmpl"),
                  {{"I64", d.i64_literal_suffix}, {"U64", std::string("U") + d.i64_literal_suffix}}) +
             kernels;
  if (r.uses_f64) r.source = "#define KF_USES_FP64 1\n" + r.source;
  return r;
}

bool try_render(const ir::Kernel& k, const Dialect& d, Rendered& out, std::string& declined, const RenderKnobs& knobs) {
  try {
    out = render(k, d, knobs);
    return true;
  } catch (const Unsupported& e) {
    declined = std::string(d.name) + ": " + e.what();
    return false;
  }
}

}  // namespace kfuse::detail::gpu
