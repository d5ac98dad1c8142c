// The GPU renderer's accumulators, private to jit/gpu/: the text that declares a lane's state,
// folds an element into it, combines two partial states (a fixed, commutative order with ties to
// the lower index) and reads the result, per accumulator kind. Used by the kernel writer
// (gpu_render.cpp).
#pragma once
#include <cmath>
#include <limits>
#include <string>

#include "render_expr.hpp"

namespace kfuse::detail::gpu::rx {

using ir::AccKind;

inline bool is_arg(AccKind k) { return k == AccKind::ArgMax || k == AccKind::ArgMin; }

class Accs {
 public:
  Accs(Ctx& c) : c_(c) {}

  // The type a lane keeps for accumulator j (the compared value's type for arg accumulators).
  DType vtype(int j) const {
    const auto& a = c_.k.accs[j];
    return is_arg(a.kind) ? a.value->dtype : a.dtype;
  }
  std::string a(int j) const { return "kf_a" + std::to_string(j); }
  std::string ai(int j) const { return "kf_ai" + std::to_string(j); }

  std::string init(int j) {
    const DType t = vtype(j);
    switch (c_.k.accs[j].kind) {
      case AccKind::Sum: return c_.lit(0, t);
      case AccKind::Prod: return c_.lit(1, t);
      case AccKind::Max: return extreme(t, false);
      case AccKind::Min: return extreme(t, true);
      default: return c_.lit(0, t);
    }
  }
  // Declares the lane state of accumulator j.
  std::string declare(int j) {
    std::string s = std::string(ctype(vtype(j))) + " " + a(j) + " = " + init(j) + ";";
    if (is_arg(c_.k.accs[j].kind)) s += " kf_i64 " + ai(j) + " = -1;";
    return s;
  }
  // Folds the element value x (index r) into the lane state (reference order within a lane).
  std::string fold(int j, const std::string& x_raw, DType xt, const std::string& r) {
    const auto& A = c_.k.accs[j];
    const DType t = vtype(j);
    const std::string x = c_.cast(x_raw, xt, t);
    if (!is_arg(A.kind)) return a(j) + " = " + binop(A.kind, t, a(j), x) + ";";
    const char* gt = A.kind == AccKind::ArgMax ? " > " : " < ";
    std::string cond = is_float(t) ? "(!isnan(" + a(j) + ") && (isnan(" + x + ") || " + x + gt + a(j) + "))"
                                   : "(" + x + gt + a(j) + ")";
    return "if (" + ai(j) + " < 0 || " + cond + ") { " + a(j) + " = " + x + "; " + ai(j) + " = " + r + "; }";
  }
  // Combines partial (b, bi) into (av, aiv); commutative, and ties go to the lower index.
  std::string combine(int j, const std::string& av, const std::string& aiv, const std::string& b,
                      const std::string& bi) {
    const auto& A = c_.k.accs[j];
    const DType t = vtype(j);
    if (!is_arg(A.kind)) return av + " = " + binop(A.kind, t, av, b) + ";";
    const char* gt = A.kind == AccKind::ArgMax ? " > " : " < ";
    std::string better = "(" + b + gt + av + " || (" + b + " == " + av + " && " + bi + " < " + aiv + "))";
    if (is_float(t))
      better = "(isnan(" + b + ") ? (!isnan(" + av + ") || " + bi + " < " + aiv + ") : (!isnan(" + av + ") && " +
               better + "))";
    return "if (" + bi + " >= 0 && (" + aiv + " < 0 || " + better + ")) { " + av + " = " + b + "; " + aiv + " = " + bi +
           "; }";
  }
  // The final value of accumulator j from the lane state.
  std::string result(int j) const {
    const auto& A = c_.k.accs[j];
    std::string v = is_arg(A.kind) ? ai(j) : a(j);
    return std::string("const ") + ctype(A.dtype) + " kf_acc" + std::to_string(j) + " = " + v + ";";
  }
  // The value of accumulator j over an empty reduce domain (reference: 0, prod 1, arg 0).
  std::string empty_result(int j) {
    const auto& A = c_.k.accs[j];
    return std::string("const ") + ctype(A.dtype) + " kf_acc" + std::to_string(j) + " = " + empty_value(j) + ";";
  }
  // result(j) where `nonempty` holds, else empty_result's value (dynamic reduce domains).
  std::string result_if(int j, const std::string& nonempty) {
    const auto& A = c_.k.accs[j];
    return std::string("const ") + ctype(A.dtype) + " kf_acc" + std::to_string(j) + " = " + nonempty + " ? " +
           (is_arg(A.kind) ? ai(j) : a(j)) + " : " + empty_value(j) + ";";
  }

 private:
  std::string empty_value(int j) {
    const auto& A = c_.k.accs[j];
    return c_.lit(A.kind == AccKind::Prod ? 1 : 0, A.dtype);
  }
  std::string extreme(DType t, bool high) {
    switch (t) {
      case DType::Bool: return c_.lit(high ? 1 : 0, t);
      case DType::I32:
        return c_.int_lit(high ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int32_t>::min(), t);
      case DType::I64:
        return c_.int_lit(high ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min(), t);
      default: return c_.lit(high ? INFINITY : -INFINITY, t);
    }
  }
  std::string binop(AccKind k, DType t, const std::string& x, const std::string& y) {
    switch (k) {
      case AccKind::Sum:
        return t == DType::Bool ? "((kf_bool)(" + x + " | " + y + "))" : wrap_arith("add", "+", t, x, y);
      case AccKind::Prod:
        return t == DType::Bool ? "((kf_bool)(" + x + " & " + y + "))" : wrap_arith("mul", "*", t, x, y);
      case AccKind::Max:
      case AccKind::Min: return max_min(k == AccKind::Max, t, x, y);
      default: break;
    }
    throw InternalError("gpu renderer: binop of an arg accumulator");
  }
  Ctx& c_;
};

}  // namespace kfuse::detail::gpu::rx
