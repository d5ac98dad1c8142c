// The C-like GPU renderer's shared core, private to jit/gpu/: the dialect-independent text
// helpers, the per-kernel rendering state (Ctx) and the SSA expression emitter (Emitter), with
// the pieces of a kernel every writer needs (stores, parameter list, outer extents). Used by the
// kernel writers (gpu_render.cpp) and the tiled GEMM writer (gemm_render.cpp).
// Expressions are emitted in SSA form: every non-leaf node of a phase's DAG becomes one typed
// temporary, so shared subexpressions are computed once per point and masked loads never touch
// memory.
#pragma once
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpu_render.hpp"
#include "ir/expr_util.hpp"
#include "kfuse/error.hpp"

namespace kfuse::detail::gpu::rx {

using ir::ExprKind;
using ir::ExprRef;

// ---------------------------------------------------------------- dialect-independent text
// Element `idx` of buffer `b` (of dtype `t`) in its compute type: narrow dtypes widen.
inline std::string load_text(int b, const std::string& idx, DType t) {
  const std::string buf = "kf_b" + std::to_string(b);
  switch (t) {
    case DType::U8:
    case DType::I8: return "((kf_i32)" + buf + "[" + idx + "])";
    case DType::F16: return "KF_LD_F16(" + buf + ", " + idx + ")";
    case DType::BF16: return "kf_bf16_to_f32(" + buf + "[" + idx + "])";
    default: return buf + "[" + idx + "]";
  }
}
inline std::string fill(std::string t, const std::vector<std::pair<std::string, std::string>>& slots) {
  for (const auto& [key, val] : slots) {
    const std::string pat = "{{" + key + "}}";
    for (size_t p = t.find(pat); p != std::string::npos; p = t.find(pat, p + val.size())) t.replace(p, pat.size(), val);
  }
  if (t.find("{{") != std::string::npos) throw InternalError("gpu renderer: unfilled template slot in:\n" + t);
  return t;
}

inline const char* ctype(DType t) {
  switch (compute_type(t)) {  // narrow dtypes are computed in their compute type
    case DType::Bool: return "kf_bool";
    case DType::I32: return "kf_i32";
    case DType::I64: return "kf_i64";
    case DType::F32: return "float";
    case DType::F64: return "double";
    default: break;  // narrow: never a compute type
  }
  return "?";
}
// The element type of a buffer of `t` (narrow dtypes: their storage; f16 per dialect).
inline const char* mem_ctype(DType t) {
  switch (t) {
    case DType::U8: return "unsigned char";
    case DType::I8: return "signed char";
    case DType::F16: return "KF_F16_T";
    case DType::BF16: return "unsigned short";
    default: return ctype(t);
  }
}
// A compute-type value rounded to the narrow dtype `t` (lib/ir/widen_narrow.hpp).
inline std::string round_narrow(const std::string& x, DType t) {
  switch (t) {
    case DType::U8: return "((" + x + ") & 0xff)";
    case DType::I8: return "(((((" + x + ") & 0xff) ^ 0x80)) - 0x80)";
    case DType::F16: return "kf_rnd_f16(" + x + ")";
    case DType::BF16: return "kf_rnd_bf16(" + x + ")";
    default: return x;
  }
}
inline const char* sfx(DType t) {
  return t == DType::I32 ? "i32" : t == DType::I64 ? "i64" : t == DType::F32 ? "f32" : "f64";
}

// NaN-propagating maximum/minimum for floats (a helper); a select for integers and bools.
inline std::string max_min(bool is_max, DType t, const std::string& a, const std::string& b) {
  if (is_float(t)) return std::string(is_max ? "kf_max_" : "kf_min_") + sfx(t) + "(" + a + ", " + b + ")";
  return "(" + b + (is_max ? " > " : " < ") + a + " ? " + b + " : " + a + ")";
}
// a <sym> b for floats; the wrapping helper kf_<fn>_<type> for integers.
inline std::string wrap_arith(const char* fn, const char* sym, DType t, const std::string& a, const std::string& b) {
  if (is_float(t)) return "(" + a + " " + sym + " " + b + ")";
  return std::string("kf_") + fn + "_" + sfx(t) + "(" + a + ", " + b + ")";
}

struct Ctx {
  const ir::Kernel& k;
  const Dialect& d;
  bool f64 = false;
  int tmp = 0;

  void note(DType t) { f64 |= t == DType::F64; }

  std::string int_lit(int64_t x, DType t) const {
    if (t == DType::I32) {
      if (x == std::numeric_limits<int32_t>::min()) return "((kf_i32)(-2147483647 - 1))";
      return "((kf_i32)" + std::to_string(x) + ")";
    }
    if (x == std::numeric_limits<int64_t>::min())
      return std::string("((kf_i64)(-9223372036854775807") + d.i64_literal_suffix + " - 1))";
    return "((kf_i64)" + std::to_string(x) + d.i64_literal_suffix + ")";
  }

  std::string lit(double v, DType t) {
    t = compute_type(t);
    note(t);
    if (t == DType::Bool) return v != 0 ? "((kf_bool)1)" : "((kf_bool)0)";
    if (!is_float(t)) return int_lit(static_cast<int64_t>(v), t);
    const bool f = t == DType::F32;
    if (std::isnan(v)) return f ? "KF_NAN_F" : "KF_NAN_D";
    if (std::isinf(v)) return std::string(v < 0 ? "(-" : "(") + (f ? "KF_INF_F" : "KF_INF_D") + ")";
    char buf[64];
    std::snprintf(buf, sizeof buf, f ? "%.9g" : "%.17g", v);
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    if (f) s += "f";
    return "(" + s + ")";
  }

  bool heavy = false;  ///< an f64 math call was emitted (large inlined bodies)
  std::string math(const char* fn, DType t) {
    heavy |= t == DType::F64;
    return std::string(fn) + (t == DType::F32 ? d.f32_math_suffix : "");
  }

  std::string cast(const std::string& x, DType from, DType to) {
    note(to);
    if (from == to) return x;
    if (is_narrow(from) || is_narrow(to)) {
      std::string y = cast(x, compute_type(from), compute_type(to));
      return is_narrow(to) ? round_narrow(y, to) : y;
    }
    if (to == DType::Bool) return "((kf_bool)((" + x + ") != 0))";
    if (is_float(from) && is_integer(to)) return std::string("kf_") + sfx(from) + "_to_" + sfx(to) + "(" + x + ")";
    return std::string("((") + ctype(to) + ")(" + x + "))";
  }
};

// ---------------------------------------------------------------- expressions
// The index of a contiguous access of a one-dimensional outer domain: exactly kf_o0.
inline bool is_inner_var(const ir::Expr& e) {
  return e.kind == ExprKind::Var && e.space == ir::Space::Outer && e.index == 0;
}

// Row cache (row-warp kernels, gpu_render.cpp): a row that fits in registers is read from
// memory once. Loads that several phases make (structurally the same Load) get a per-lane array
// kf_row<slot>[n], indexed by the fully unrolled loop counter kf_i: the first phase that reads one
// fills it, later phases read the register instead of memory.
struct RowCache {
  std::unordered_map<ir::ExprRef, int, ir::ExprStructHash, ir::ExprStructEq> slot;  ///< cached loads
  std::vector<bool> filled;                                                         ///< by slot
};

class Emitter {
 public:
  Emitter(Ctx& c, std::ostringstream& os, std::string indent, Emitter* hoist = nullptr)
      : c_(c), os_(os), ind_(std::move(indent)), hoist_(hoist) {}

  std::string val(const ExprRef& e) {
    auto it = names_.find(e.get());
    if (it != names_.end()) return it->second;
    // Inside a reduce loop, work that does not depend on the reduce index is done once before it.
    if (hoist_ && !e->args.empty() && !reduce_dependent(e)) return hoist_->val(e);
    c_.note(e->dtype);
    std::string s;
    switch (e->kind) {
      case ExprKind::Const: return c_.lit(e->value, e->dtype);
      case ExprKind::Var: return std::string(e->space == ir::Space::Outer ? "kf_o" : "kf_r") + std::to_string(e->index);
      case ExprKind::Param: return "kf_p.v[" + std::to_string(e->index) + "]";
      case ExprKind::Acc: return "kf_acc" + std::to_string(e->index);
      case ExprKind::Load: {
        if (vec_loads_ && e->args.size() == 1 && is_inner_var(*e->args[0])) {
          auto it = vec_loads_->find(e->index);  // this element of the unit's vector load
          if (it != vec_loads_->end()) return it->second;
        }
        int row_slot = -1;
        if (row_cache_) {
          auto it = row_cache_->slot.find(e);
          if (it != row_cache_->slot.end()) {
            row_slot = it->second;
            if (row_cache_->filled[row_slot]) return "kf_row" + std::to_string(row_slot) + "[kf_i]";
          }
        }
        if (row_slot >= 0) {  // first read: load it, and keep it for the later phases
          RowCache* rc = row_cache_;
          rc->filled[row_slot] = true;
          row_cache_ = nullptr;  // the load itself (its index, its mask) is emitted plainly
          std::string t = val(e);
          row_cache_ = rc;
          os_ << ind_ << "kf_row" << row_slot << "[kf_i] = " << t << ";\n";
          return t;
        }
        s = load_text(e->index, val(e->args[0]), e->dtype);
        if (e->args.size() > 1) s = "(" + val(e->args[1]) + " ? " + s + " : " + c_.lit(0, e->dtype) + ")";
        break;
      }
      case ExprKind::IDiv: s = "kf_idiv(" + val(e->args[0]) + ", " + val(e->args[1]) + ")"; break;
      case ExprKind::IMod: s = "kf_imod(" + val(e->args[0]) + ", " + val(e->args[1]) + ")"; break;
      case ExprKind::Op: s = op(*e, e->dtype); break;
      case ExprKind::Rand:  // helpers.tmpl
        s = std::string("kf_rand_") + sfx(e->dtype) + "(" + val(e->args[0]) + ", " + val(e->args[1]) + ")";
        break;
    }
    std::string name = "t" + std::to_string(c_.tmp++);
    os_ << ind_ << "const " << ctype(e->dtype) << " " << name << " = " << s << ";\n";
    names_[e.get()] = name;
    return name;
  }

  DType buffer_dtype(int b) const { return c_.k.buffers.at(b).dtype; }
  /// Vector form (pointwise-vec): loads of buffer b at exactly kf_o0 read this element's value
  /// (already in the compute type) from the unit's vector load instead.
  void use_vector_loads(const std::unordered_map<int, std::string>* m) { vec_loads_ = m; }
  /// Row cache (RowCache): this emitter is inside the unrolled loop over kf_i.
  void use_row_cache(RowCache* rc) { row_cache_ = rc; }
  // Operand `i` of `e` converted to `t`.
  std::string arg(const ir::Expr& e, size_t i, DType t) { return c_.cast(val(e.args[i]), e.args[i]->dtype, t); }

 private:
  static bool bool_native(Op o) {
    switch (o) {
      case Op::Maximum:
      case Op::Minimum:
      case Op::Eq:
      case Op::Ne:
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
      case Op::And:
      case Op::Or:
      case Op::Not:
      case Op::BitNot:  // (on bools: logical not; the other bitwise ops are exact on 0/1 in i32)
      case Op::Where:
      case Op::Cast: return true;
      default: return false;
    }
  }

  std::string op(const ir::Expr& e, DType t) {
    const Op o = e.op;
    if (t == DType::Bool && !bool_native(o)) return c_.cast(op(e, DType::I32), DType::I32, DType::Bool);
    const bool F = is_float(t);
    const std::string one = c_.lit(1, t), zero = c_.lit(0, t);
    auto need_float = [&] {
      if (!F) throw Unsupported(std::string("op ") + op_name(o) + " with non-float result " + dtype_name(t));
    };
    auto cmp = [&](const char* sym) {
      DType ct = promote_types(e.args[0]->dtype, e.args[1]->dtype);
      std::string s = "(";  // (built in steps: GCC 12 warns falsely on "lit" + temporary chains)
      s += arg(e, 0, ct);
      s += std::string(" ") + sym + " ";
      s += arg(e, 1, ct);
      return c_.cast(s + ")", DType::Bool, t);
    };
    auto truth = [&](size_t i) {
      std::string s = "(";
      s += val(e.args[i]);
      return s + " != 0)";
    };
    if (o == Op::Cast) return c_.cast(val(e.args[0]), e.args[0]->dtype, t);
    if (o == Op::Where) return "(" + truth(0) + " ? " + arg(e, 1, t) + " : " + arg(e, 2, t) + ")";
    if (o == Op::Fma) {  // one rounding: fma() (CUDA fmaf for f32); integers wrap as * and + do
      const std::string a = arg(e, 0, t), b = arg(e, 1, t), c = arg(e, 2, t);
      if (F) return c_.math("fma", t) + "(" + a + ", " + b + ", " + c + ")";
      return wrap_arith("add", "+", t, wrap_arith("mul", "*", t, a, b), c);
    }
    if (e.args.size() == 1) {
      if (o == Op::Not || (o == Op::BitNot && t == DType::Bool))
        return c_.cast("(" + val(e.args[0]) + " == 0)", DType::Bool, t);
      const std::string x = arg(e, 0, t);
      auto m = [&](const char* fn) {
        need_float();
        return c_.math(fn, t) + "(" + x + ")";
      };
      switch (o) {
        case Op::Neg: return F ? "(-" + x + ")" : std::string("kf_sub_") + sfx(t) + "(" + zero + ", " + x + ")";
        case Op::Abs:
          return F ? m("fabs") : "(" + x + " < 0 ? kf_sub_" + sfx(t) + "(" + zero + ", " + x + ") : " + x + ")";
        case Op::Exp: return m("exp");
        case Op::Exp2: return m("exp2");
        case Op::Log: return m("log");
        case Op::Log2: return m("log2");
        case Op::Log1p: return m("log1p");
        case Op::Expm1: return m("expm1");
        case Op::Sqrt: return m("sqrt");
        case Op::Rsqrt: return m("rsqrt");
        case Op::Recip: need_float(); return "(" + one + " / " + x + ")";
        case Op::Square:
          return F ? "(" + x + " * " + x + ")" : std::string("kf_mul_") + sfx(t) + "(" + x + ", " + x + ")";
        case Op::Sin: return m("sin");
        case Op::Cos: return m("cos");
        case Op::Tanh: return m("tanh");
        case Op::Erf: return m("erf");
        case Op::Relu:
          return F ? "(" + x + " > " + zero + " ? " + x + " : (isnan(" + x + ") ? " + x + " : " + zero + "))"
                   : "(" + x + " > " + zero + " ? " + x + " : " + zero + ")";
        case Op::Floor: return F ? m("floor") : x;
        case Op::Ceil: return F ? m("ceil") : x;
        case Op::Round: return F ? m("rint") : x;  // round half to even
        case Op::Sign:
          return "(" + x + " > " + zero + " ? " + one + " : (" + x + " < " + zero + " ? " + c_.lit(-1, t) + " : " +
                 (F ? x : zero) + "))";
        case Op::BitNot:
          if (F) break;
          return "(~" + x + ")";
        default: break;
      }
      throw Unsupported(std::string("unary op ") + op_name(o));
    }
    switch (o) {
      case Op::Eq: return cmp("==");
      case Op::Ne: return cmp("!=");
      case Op::Lt: return cmp("<");
      case Op::Le: return cmp("<=");
      case Op::Gt: return cmp(">");
      case Op::Ge: return cmp(">=");
      case Op::And: return c_.cast("(" + truth(0) + " && " + truth(1) + ")", DType::Bool, t);
      case Op::Or: return c_.cast("(" + truth(0) + " || " + truth(1) + ")", DType::Bool, t);
      default: break;
    }
    const std::string a = arg(e, 0, t), b = arg(e, 1, t);
    switch (o) {
      case Op::Add: return wrap_arith("add", "+", t, a, b);
      case Op::Sub: return wrap_arith("sub", "-", t, a, b);
      case Op::Mul: return wrap_arith("mul", "*", t, a, b);
      case Op::Div: need_float(); return "(" + a + " / " + b + ")";
      case Op::Pow: need_float(); return c_.math("pow", t) + "(" + a + ", " + b + ")";
      case Op::Maximum:
      case Op::Minimum: return max_min(o == Op::Maximum, t, a, b);
      default: break;
    }
    if (!F) {
      // Shifts follow ops.def's rule for counts outside [0, bits): C leaves them undefined
      // (OpenCL masks the count), so the count is tested as unsigned (a negative count is a huge
      // one) and never reaches the operator. The left shift is unsigned: no signed overflow.
      const bool i64 = t == DType::I64;
      const std::string u = i64 ? "kf_u64" : "kf_u32", bits = i64 ? "64" : "32", top = i64 ? "63" : "31";
      switch (o) {
        case Op::BitAnd: return "(" + a + " & " + b + ")";
        case Op::BitOr: return "(" + a + " | " + b + ")";
        case Op::BitXor: return "(" + a + " ^ " + b + ")";
        case Op::Shl:
          return "((" + u + ")" + b + " < " + bits + "u ? (" + ctype(t) + ")((" + u + ")" + a + " << " + b +
                 ") : " + zero + ")";
        case Op::Shr: return "(" + a + " >> ((" + u + ")" + b + " < " + top + "u ? " + b + " : " + top + "))";
        default: break;
      }
    }
    throw Unsupported(std::string("binary op ") + op_name(o));
  }

  bool reduce_dependent(const ExprRef& e) {
    auto it = dep_.find(e.get());
    if (it != dep_.end()) return it->second;
    bool d = e->kind == ExprKind::Var && e->space == ir::Space::Reduce;
    for (const auto& a : e->args) d = reduce_dependent(a) || d;
    return dep_[e.get()] = d;
  }

  Ctx& c_;
  std::ostringstream& os_;
  std::string ind_;
  Emitter* hoist_;
  const std::unordered_map<int, std::string>* vec_loads_ = nullptr;
  RowCache* row_cache_ = nullptr;
  std::unordered_map<const ir::Expr*, std::string> names_;
  std::unordered_map<const ir::Expr*, bool> dep_;
};

// Stores of a phase at the current point.
inline void emit_stores(Emitter& em, const ir::Phase& ph, const std::string& I, std::ostringstream& os) {
  for (const auto& s : ph.stores) {
    std::string idx = em.val(s.index);
    std::string v = em.val(s.value);
    const std::string b = "kf_b" + std::to_string(s.buffer);
    switch (em.buffer_dtype(s.buffer)) {  // narrow values are already rounded: exact
      case DType::F16: os << I << "KF_ST_F16(" << b << ", " << idx << ", " << v << ");\n"; break;
      case DType::BF16: os << I << b << "[" << idx << "] = kf_f32_to_bf16(" << v << ");\n"; break;
      case DType::U8:
      case DType::I8:
        os << I << b << "[" << idx << "] = (" << mem_ctype(em.buffer_dtype(s.buffer)) << ")(" << v << ");\n";
        break;
      default: os << I << b << "[" << idx << "] = " << v << ";\n"; break;
    }
  }
}

// The kernel's parameter list: its buffers, then the params struct.
// `restrict`: KF_RESTRICT on every buffer (they never alias). The tiled GEMM goes without: its
// operands go through shared memory anyway, and the freedom to hoist loads made ptxas spill there.
inline std::string kernel_args(Ctx& c, bool restrict = true) {
  std::string args;
  for (size_t i = 0; i < c.k.buffers.size(); ++i) {
    const auto& b = c.k.buffers[i];
    c.note(b.dtype);
    args += std::string(i ? ", " : "") + c.d.global_qual + (b.output ? "" : "const ") + mem_ctype(b.dtype) +
            (restrict ? "* KF_RESTRICT kf_b" : "* kf_b") + std::to_string(i);
  }
  return args + (args.empty() ? "" : ", ") + "const kf_params kf_p";
}

// Declarations kf_e<i> of the first n outer extents; `units` gets their product ("1" for none).
inline std::string outer_extents(Ctx& c, size_t n, std::string& units) {
  std::ostringstream ext;
  Emitter em(c, ext, "  ");
  units.clear();
  for (size_t i = 0; i < c.k.outer.size(); ++i) {
    std::string e = em.val(c.k.outer[i]);
    ext << "  const kf_i64 kf_e" << i << " = " << e << ";\n";
    if (i < n) units += (i ? " * " : "") + std::string("kf_e") + std::to_string(i);
  }
  if (units.empty()) units = "1";
  return ext.str();
}

}  // namespace kfuse::detail::gpu::rx
