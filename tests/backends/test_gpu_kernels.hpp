// Hand-built kernel IRs covering every construct the GPU renderer handles, and a differential
// runner (reference interpreter vs a device backend) shared by the OpenCL and CUDA tests.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/factories.hpp"
#include "kfuse/half.hpp"
#include "ir/kernel.hpp"
#include "ir/random.hpp"
#include "kfuse/error.hpp"
#include "kfuse/node.hpp"

namespace kfuse::test::gpu {

using namespace kfuse::ir;

inline ExprRef O(int d) { return var(Space::Outer, d); }
inline ExprRef Rv(int d) { return var(Space::Reduce, d); }
inline ExprRef un(Op o, DType t, ExprRef a) { return op(o, t, {std::move(a)}); }
inline ExprRef bin(Op o, DType t, ExprRef a, ExprRef b) { return op(o, t, {std::move(a), std::move(b)}); }

struct GpuCase {
  Kernel k;
  /// Element count of every buffer for a param set.
  std::function<std::vector<int64_t>(const std::vector<int64_t>&)> numel;
  std::vector<std::vector<int64_t>> param_sets;
  double rtol = 2e-6, atol = 1e-6;
  bool specials = false;  ///< put NaN, +-inf, -0, huge and .5 values into float inputs
  int launches = 1;       ///< launches per run (outer domain non-empty)
};

inline int add_out(Kernel& k, DType t) {
  k.buffers.push_back({"out" + std::to_string(k.num_outputs()), t, true});
  return static_cast<int>(k.buffers.size()) - 1;
}

// ---------------------------------------------------------------- pointwise
// rand and randn (lib/ir/random.hpp) with the seed as a run-time param, alone and fused with a
// load. Uniform values are bit-exact; randn differs from the interpreter's fp64 log1p/cos by the
// device's f64 math error (README "Random numbers": a few ulp).
inline GpuCase random_values(DType t) {
  GpuCase c;
  Kernel& k = c.k;
  k.name = std::string("pw_random_") + dtype_name(t);
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"in0", t, false}};
  k.params = {{"outer0", 0}, {"seed", 0}};
  k.outer = {param(0)};
  Phase ph;
  ph.stores.push_back({add_out(k, t), O(0), random_value(t, false, param(1), O(0))});
  ph.stores.push_back({add_out(k, t), O(0), random_value(t, true, param(1), O(0))});
  ExprRef scaled = bin(Op::Mul, t, random_value(t, true, param(1), O(0)), constant(2, t));
  ph.stores.push_back({add_out(k, t), O(0), un(Op::Relu, t, bin(Op::Add, t, scaled, load(0, t, O(0))))});
  k.phases = {ph};
  c.numel = [](const std::vector<int64_t>& p) { return std::vector<int64_t>(4, p[0]); };
  // seeds: small, and one whose u64 bits have the top bit set (a negative i64)
  c.param_sets = {{0, 7}, {1, 7}, {37, 123456789}, {5003, -3}};
  c.rtol = t == DType::F32 ? 1.2e-7 : 1e-14;
  c.atol = t == DType::F32 ? 1e-7 : 1e-15;
  return c;
}

inline GpuCase pointwise_unary(DType t) {
  GpuCase c;
  Kernel& k = c.k;
  k.name = std::string("pw_unary_") + dtype_name(t);
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"in0", t, false}};
  k.params = {{"outer0", 0}};
  k.outer = {param(0)};
  ExprRef x = load(0, t, O(0));
  Phase ph;
  const Op ops[] = {
#define KFUSE_UNARY_OP(name, str, rule, expr, tol) Op::name,
#include "kfuse/ops.def"
  };
  for (Op o : ops) {
    if (is_bitwise(o)) continue;  // integers only (pointwise_int)
    DType rt = o == Op::Not ? DType::Bool : t;
    ph.stores.push_back({add_out(k, rt), O(0), un(o, rt, x)});
  }
  // a chain: sqrt(|sin x * cos x| + 1) * tanh(exp(x) * sigmoid(x)) - floor(x)
  ExprRef ch = bin(Op::Mul, t, un(Op::Sin, t, x), un(Op::Cos, t, x));
  ch = un(Op::Sqrt, t, bin(Op::Add, t, un(Op::Abs, t, ch), constant(1, t)));
  ch = bin(Op::Mul, t, ch, un(Op::Tanh, t, bin(Op::Mul, t, un(Op::Exp, t, x), un(Op::Sigmoid, t, x))));
  ch = bin(Op::Sub, t, ch, un(Op::Floor, t, x));
  ph.stores.push_back({add_out(k, t), O(0), ch});
  k.phases = {ph};
  c.numel = [n = k.buffers.size()](const std::vector<int64_t>& p) { return std::vector<int64_t>(n, p[0]); };
  c.param_sets = {{0}, {1}, {37}, {5003}};
  c.specials = true;
  c.rtol = t == DType::F32 ? 4e-6 : 1e-13;
  c.atol = t == DType::F32 ? 2e-6 : 1e-14;
  return c;
}

inline GpuCase pointwise_binary(DType t) {
  GpuCase c;
  Kernel& k = c.k;
  k.name = std::string("pw_binary_") + dtype_name(t);
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"in0", t, false}, {"in1", t, false}};
  k.params = {{"outer0", 0}, {"bcast", 0}};
  k.outer = {param(0)};
  ExprRef a = load(0, t, O(0));
  ExprRef b = load(1, t, imod(O(0), param(1)));  // broadcast: b repeats with period $1
  Phase ph;
  const Op ops[] = {
#define KFUSE_BINARY_OP(name, str, rule, expr, tol) Op::name,
#include "kfuse/ops.def"
  };
  for (Op o : ops) {
    if (is_bitwise(o)) continue;  // integers only (pointwise_int)
    DType rt = (o >= Op::Eq && o <= Op::Or) ? DType::Bool : t;
    ph.stores.push_back({add_out(k, rt), O(0), bin(o, rt, a, b)});
  }
  ExprRef gt = bin(Op::Gt, DType::Bool, a, b);
  ph.stores.push_back({add_out(k, t), O(0), op(Op::Where, t, {gt, a, bin(Op::Mul, t, b, constant(2, t))})});
  ph.stores.push_back({add_out(k, t), O(0), op(Op::Fma, t, {a, b, bin(Op::Sub, t, constant(0, t), a)})});
  for (DType to : {DType::I32, DType::I64, DType::Bool, t == DType::F32 ? DType::F64 : DType::F32})
    ph.stores.push_back({add_out(k, to), O(0), un(Op::Cast, to, a)});
  k.phases = {ph};
  c.numel = [n = k.buffers.size()](const std::vector<int64_t>& p) {
    std::vector<int64_t> v(n, p[0]);
    v[1] = p[1];
    return v;
  };
  c.param_sets = {{0, 1}, {1, 1}, {37, 5}, {5003, 5003}};
  c.specials = true;
  c.rtol = t == DType::F32 ? 4e-6 : 1e-13;
  c.atol = t == DType::F32 ? 1e-6 : 1e-14;
  return c;
}

inline GpuCase pointwise_int() {
  GpuCase c;
  Kernel& k = c.k;
  k.name = "pw_int_bool_cast";
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"a", DType::I32, false}, {"b", DType::I64, false}, {"m", DType::Bool, false}, {"x", DType::F32, false}};
  k.params = {{"outer0", 0}};
  k.outer = {param(0)};
  ExprRef a = load(0, DType::I32, O(0)), b = load(1, DType::I64, O(0)), m = load(2, DType::Bool, O(0)),
          x = load(3, DType::F32, O(0));
  Phase ph;
  auto st = [&](DType t, ExprRef v) { ph.stores.push_back({add_out(k, t), O(0), std::move(v)}); };
  for (DType t : {DType::I32, DType::I64}) {
    ExprRef v = t == DType::I32 ? a : b;
    ExprRef w = t == DType::I32 ? un(Op::Cast, DType::I32, b) : un(Op::Cast, DType::I64, a);
    for (Op o : {Op::Neg, Op::Abs, Op::Square, Op::Relu, Op::Sign, Op::Floor, Op::Ceil, Op::Round}) st(t, un(o, t, v));
    for (Op o : {Op::Add, Op::Sub, Op::Mul, Op::Maximum, Op::Minimum, Op::BitAnd, Op::BitOr, Op::BitXor})
      st(t, bin(o, t, v, w));
    st(t, un(Op::BitNot, t, v));
    st(t, op(Op::Fma, t, {v, w, v}));  // wraps
    // shifts by counts in and out of [0, bits): v & 127 spans both for i32 and i64
    ExprRef count = bin(Op::BitAnd, t, w, constant(127, t));
    for (Op o : {Op::Shl, Op::Shr}) {
      st(t, bin(o, t, v, count));
      st(t, bin(o, t, v, w));  // negative and huge counts
    }
    for (Op o : {Op::Eq, Op::Ne, Op::Lt, Op::Ge}) st(DType::Bool, bin(o, DType::Bool, v, w));
    st(t, un(Op::Cast, t, x));  // NaN / out of range -> minimum
  }
  st(DType::I32, bin(Op::Mul, DType::I32, a, constant(123456789, DType::I32)));  // wraps
  st(DType::Bool, un(Op::Not, DType::Bool, m));
  st(DType::Bool, bin(Op::And, DType::Bool, m, bin(Op::Gt, DType::Bool, a, constant(0, DType::I32))));
  st(DType::Bool, bin(Op::Or, DType::Bool, m, bin(Op::Lt, DType::Bool, x, constant(0, DType::F32))));
  st(DType::Bool, bin(Op::Maximum, DType::Bool, m, un(Op::Cast, DType::Bool, a)));
  st(DType::I64, op(Op::Where, DType::I64, {m, un(Op::Cast, DType::I64, a), b}));
  st(DType::F32, bin(Op::Add, DType::F32, un(Op::Cast, DType::F32, a), un(Op::Cast, DType::F32, m)));
  st(DType::F64, un(Op::Cast, DType::F64, b));
  st(DType::Bool, un(Op::Cast, DType::Bool, x));
  k.phases = {ph};
  c.numel = [n = k.buffers.size()](const std::vector<int64_t>& p) { return std::vector<int64_t>(n, p[0]); };
  c.param_sets = {{0}, {1}, {1001}};
  c.specials = true;
  return c;
}

// 2-D outer domain: transposed, broadcast, masked (shifted) loads, idiv/imod index maps.
inline GpuCase pointwise_views() {
  GpuCase c;
  Kernel& k = c.k;
  const DType t = DType::F32;
  k.name = "pw_views_f32";
  k.kind = ir::KernelKind::Pointwise;
  k.buffers = {{"x", t, false}, {"y", t, false}, {"z", t, false}, {"out0", t, true}, {"out1", t, true}};
  k.params = {{"outer0", 0}, {"outer1", 0}};
  k.outer = {param(0), param(1)};
  ExprRef lin = iadd(imul(O(0), param(1)), O(1));
  ExprRef x = load(0, t, lin);
  ExprRef yt = load(1, t, iadd(imul(O(1), param(0)), O(0)));  // y is [P1, P0]: a transposed read
  ExprRef z = load(2, t, O(0));                               // broadcast along the row
  ExprRef mask = bin(Op::Gt, DType::Bool, O(1), iconst(0));
  ExprRef shifted = load(0, t, isub(lin, iconst(1)), mask);  // index -1 at the row start: masked
  ExprRef v0 = bin(Op::Add, t, bin(Op::Add, t, x, bin(Op::Mul, t, yt, z)), shifted);
  ExprRef v1 = bin(Op::Add, t, un(Op::Cast, t, imod(lin, iconst(3))), load(0, t, idiv(lin, iconst(2))));
  k.phases = {Phase{false, {}, {{3, lin, v0}, {4, lin, v1}}}};
  c.numel = [](const std::vector<int64_t>& p) {
    int64_t n = p[0] * p[1];
    return std::vector<int64_t>{n, n, p[0], n, n};
  };
  c.param_sets = {{0, 5}, {1, 1}, {7, 13}, {129, 65}};
  return c;
}

// ---------------------------------------------------------------- rows
inline Kernel row_kernel(const std::string& name, DType t, int64_t C, int extra_inputs) {
  Kernel k;
  k.name = name;
  k.kind = ir::KernelKind::Row;
  k.buffers = {{"x", t, false}};
  for (int i = 0; i < extra_inputs; ++i) {
    std::string w = "w";
    w += std::to_string(i);  // (not "w" + std::to_string(i): a GCC 12 -Wrestrict false positive)
    k.buffers.push_back({w, t, false});
  }
  k.buffers.push_back({"y", t, true});
  k.params = {{"outer0", 0}};
  k.outer = {param(0)};
  k.reduce = {C};
  return k;
}
inline ExprRef row_x(DType t, int64_t C) { return load(0, t, iadd(imul(O(0), iconst(C)), Rv(0))); }

inline GpuCase finish_row(Kernel k, int64_t C, int extra_inputs) {
  GpuCase c;
  c.k = std::move(k);
  c.numel = [C, extra_inputs](const std::vector<int64_t>& p) {
    std::vector<int64_t> v{p[0] * C};
    for (int i = 0; i < extra_inputs; ++i) v.push_back(C);
    v.push_back(p[0] * C);
    return v;
  };
  c.param_sets = {{0}, {1}, {17}, {300}};
  c.rtol = c.k.buffers[0].dtype == DType::F32 ? 2e-5 : 1e-12;
  c.atol = c.k.buffers[0].dtype == DType::F32 ? 2e-6 : 1e-13;
  return c;
}

inline GpuCase softmax(DType t, int64_t C, bool log_form) {
  Kernel k = row_kernel(std::string(log_form ? "log_softmax_" : "softmax_") + dtype_name(t) + "_" + std::to_string(C),
                        t, C, 0);
  ExprRef x = row_x(t, C);
  k.accs = {{AccKind::Max, t, x}, {AccKind::Sum, t, un(Op::Exp, t, bin(Op::Sub, t, x, acc(0, t)))}};
  ExprRef sh = bin(Op::Sub, t, x, acc(0, t));
  ExprRef y =
      log_form ? bin(Op::Sub, t, sh, un(Op::Log, t, acc(1, t))) : bin(Op::Div, t, un(Op::Exp, t, sh), acc(1, t));
  ExprRef yi = iadd(imul(O(0), iconst(C)), Rv(0));
  k.phases = {Phase{true, {0}, {}}, Phase{true, {1}, {}}, Phase{true, {}, {{1, yi, y}}}};
  return finish_row(std::move(k), C, 0);
}

inline GpuCase layer_norm(DType t, int64_t C) {
  Kernel k = row_kernel(std::string("layer_norm_") + dtype_name(t) + "_" + std::to_string(C), t, C, 2);
  ExprRef x = row_x(t, C);
  ExprRef mean = bin(Op::Div, t, acc(0, t), constant(static_cast<double>(C), t));
  ExprRef d = bin(Op::Sub, t, x, mean);
  k.accs = {{AccKind::Sum, t, x}, {AccKind::Sum, t, un(Op::Square, t, d)}};
  ExprRef var_ = bin(Op::Div, t, acc(1, t), constant(static_cast<double>(C), t));
  ExprRef inv = un(Op::Rsqrt, t, bin(Op::Add, t, var_, constant(1e-5, t)));
  ExprRef y = bin(Op::Add, t, bin(Op::Mul, t, bin(Op::Mul, t, d, inv), load(1, t, Rv(0))), load(2, t, Rv(0)));
  k.phases = {Phase{true, {0}, {}}, Phase{true, {1}, {}},
              Phase{true, {}, {{3, iadd(imul(O(0), iconst(C)), Rv(0)), y}}}};
  return finish_row(std::move(k), C, 2);
}

// Argmax/argmin/max/min of rows with NaNs, stored per row (i64 and t).
inline GpuCase arg_rows(DType t, int64_t C) {
  GpuCase c;
  Kernel& k = c.k;
  k.name = std::string("argmax_rows_") + dtype_name(t) + "_" + std::to_string(C);
  k.kind = ir::KernelKind::Row;
  k.buffers = {
      {"x", t, false}, {"amax", DType::I64, true}, {"amin", DType::I64, true}, {"mx", t, true}, {"mn", t, true}};
  k.params = {{"outer0", 0}};
  k.outer = {param(0)};
  k.reduce = {C};
  ExprRef x = row_x(t, C);
  k.accs = {
      {AccKind::ArgMax, DType::I64, x}, {AccKind::ArgMin, DType::I64, x}, {AccKind::Max, t, x}, {AccKind::Min, t, x}};
  k.phases = {
      Phase{true, {0, 1, 2, 3}, {}},
      Phase{
          false,
          {},
          {{1, O(0), acc(0, DType::I64)}, {2, O(0), acc(1, DType::I64)}, {3, O(0), acc(2, t)}, {4, O(0), acc(3, t)}}}};
  c.numel = [C](const std::vector<int64_t>& p) { return std::vector<int64_t>{p[0] * C, p[0], p[0], p[0], p[0]}; };
  c.param_sets = {{0}, {1}, {33}, {257}};
  c.specials = true;
  return c;
}

// A 2-D reduce domain with integer and bool accumulators (i32 sum wraps).
inline GpuCase int_reduce() {
  GpuCase c;
  Kernel& k = c.k;
  k.name = "int_reduce_4x6";
  k.kind = ir::KernelKind::Row;
  k.buffers = {{"a", DType::I32, false},  {"m", DType::Bool, false}, {"s", DType::I32, true},  {"p", DType::I64, true},
               {"mx", DType::Bool, true}, {"mn", DType::I32, true},  {"cnt", DType::I64, true}};
  k.params = {{"outer0", 0}};
  k.outer = {param(0)};
  k.reduce = {4, 6};
  ExprRef idx = iadd(imul(O(0), iconst(24)), iadd(imul(Rv(0), iconst(6)), Rv(1)));
  ExprRef a = load(0, DType::I32, idx), m = load(1, DType::Bool, idx);
  ExprRef big = bin(Op::Mul, DType::I32, a, constant(98765431, DType::I32));
  ExprRef small = bin(Op::Maximum, DType::I64, un(Op::Cast, DType::I64, a), iconst(-2));
  k.accs = {{AccKind::Sum, DType::I32, big},
            {AccKind::Prod, DType::I64, bin(Op::Minimum, DType::I64, un(Op::Abs, DType::I64, small), iconst(3))},
            {AccKind::Max, DType::Bool, m},
            {AccKind::Min, DType::I32, a},
            {AccKind::Sum, DType::I64, un(Op::Cast, DType::I64, m)}};
  k.phases = {Phase{true, {0, 1, 2, 3, 4}, {}}, Phase{false,
                                                      {},
                                                      {{2, O(0), acc(0, DType::I32)},
                                                       {3, O(0), acc(1, DType::I64)},
                                                       {4, O(0), acc(2, DType::Bool)},
                                                       {5, O(0), acc(3, DType::I32)},
                                                       {6, O(0), acc(4, DType::I64)}}}};
  c.numel = [](const std::vector<int64_t>& p) {
    return std::vector<int64_t>{p[0] * 24, p[0] * 24, p[0], p[0], p[0], p[0], p[0]};
  };
  c.param_sets = {{0}, {1}, {45}};
  return c;
}

// An empty reduce domain: accumulators keep the reference's initial values.
inline GpuCase empty_reduce() {
  GpuCase c;
  Kernel& k = c.k;
  k.name = "empty_reduce";
  k.kind = ir::KernelKind::Row;
  k.buffers = {{"x", DType::F32, false}, {"y", DType::F32, true}};
  k.params = {{"outer0", 0}};
  k.outer = {param(0)};
  k.reduce = {0};
  k.accs = {{AccKind::Sum, DType::F32, load(0, DType::F32, Rv(0))},
            {AccKind::Prod, DType::F32, load(0, DType::F32, Rv(0))}};
  k.phases = {Phase{true, {0, 1}, {}},
              Phase{false, {}, {{1, O(0), bin(Op::Add, DType::F32, acc(0, DType::F32), acc(1, DType::F32))}}}};
  c.numel = [](const std::vector<int64_t>& p) { return std::vector<int64_t>{1, p[0]}; };
  c.param_sets = {{0}, {3}};
  return c;
}

// ---------------------------------------------------------------- columns and global
inline GpuCase column_mean_max(DType t, int64_t R) {
  GpuCase c;
  Kernel& k = c.k;
  k.name = std::string("column_") + dtype_name(t) + "_" + std::to_string(R);
  k.kind = ir::KernelKind::Column;
  k.buffers = {{"x", t, false}, {"mean", t, true}, {"max", t, true}};
  k.params = {{"outer0", 0}};
  k.outer = {param(0)};
  k.reduce = {R};
  ExprRef x = load(0, t, iadd(imul(Rv(0), param(0)), O(0)));
  k.accs = {{AccKind::Sum, t, x}, {AccKind::Max, t, x}};
  k.phases = {
      Phase{true, {0, 1}, {}},
      Phase{false,
            {},
            {{1, O(0), bin(Op::Div, t, acc(0, t), constant(static_cast<double>(R), t))}, {2, O(0), acc(1, t)}}}};
  c.numel = [R](const std::vector<int64_t>& p) { return std::vector<int64_t>{R * p[0], p[0], p[0]}; };
  c.param_sets = {{0}, {1}, {19}, {260}};
  c.launches = R > 256 ? 2 : 1;
  c.rtol = 2e-5;
  c.atol = 2e-5;
  return c;
}

/// Centred columns x - mean(x, 0) over a [R, C] input (the column fold, then a phase of element
/// stores over the reduce domain), and the mean itself once per column: with R > 256 the stores
/// are split into row chunks like the fold (strategy two-stage-stores).
inline GpuCase column_centre(DType t, int64_t R) {
  GpuCase c;
  Kernel& k = c.k;
  k.name = std::string("centre_") + dtype_name(t) + "_" + std::to_string(R);
  k.kind = ir::KernelKind::Column;
  k.buffers = {{"x", t, false}, {"centred", t, true}, {"mean", t, true}};
  k.params = {{"outer0", 0}};
  k.outer = {param(0)};
  k.reduce = {R};
  const ExprRef at = iadd(imul(Rv(0), param(0)), O(0));
  ExprRef x = load(0, t, at);
  k.accs = {{AccKind::Sum, t, x}};
  ExprRef mean = bin(Op::Div, t, acc(0, t), constant(static_cast<double>(R), t));
  k.phases = {Phase{true, {0}, {}}, Phase{true, {}, {{1, at, bin(Op::Sub, t, x, mean)}}},
              Phase{false, {}, {{2, O(0), mean}}}};
  c.numel = [R](const std::vector<int64_t>& p) { return std::vector<int64_t>{R * p[0], R * p[0], p[0]}; };
  c.param_sets = {{0}, {1}, {19}, {260}};
  c.launches = R > 256 ? 2 : 1;
  c.rtol = 2e-5;
  c.atol = 2e-5;
  return c;
}

inline GpuCase global_sum_argmax(DType t, int64_t N) {
  GpuCase c;
  Kernel& k = c.k;
  k.name = std::string("global_") + dtype_name(t) + "_" + std::to_string(N);
  k.kind = ir::KernelKind::Global;
  k.buffers = {{"x", t, false}, {"sum", t, true}, {"argmax", DType::I64, true}, {"min", t, true}};
  k.reduce = {N};
  ExprRef x = load(0, t, Rv(0));
  k.accs = {{AccKind::Sum, t, x}, {AccKind::ArgMax, DType::I64, x}, {AccKind::Min, t, x}};
  k.phases = {
      Phase{true, {0, 1, 2}, {}},
      Phase{false, {}, {{1, iconst(0), acc(0, t)}, {2, iconst(0), acc(1, DType::I64)}, {3, iconst(0), acc(2, t)}}}};
  c.numel = [N](const std::vector<int64_t>&) { return std::vector<int64_t>{N, 1, 1, 1}; };
  c.param_sets = {{}};
  c.launches = N > 4096 ? 2 : 1;
  c.rtol = 1e-5;
  c.atol = 1e-4;
  return c;
}

// ---------------------------------------------------------------- contractions (matmul)
/// C[batch.., m, n] = sum_k A * B, or relu(that + bias[n]) (kind "contraction", the GPU's
/// gemm-tiled form). Params: the batch extents, M, N. Buffers: A, B, bias [N], C. ta: A stored
/// [K, M]; tb: B stored [N, K]; a_bcast / b_bcast: per batch dim, the operand does not move along
/// it (stride 0; it holds only the other batch dims).
struct GemmSpec {
  DType t = DType::F32;
  int nbatch = 0;
  int64_t K = 1;
  bool ta = false, tb = false;
  std::vector<bool> a_bcast, b_bcast;
  bool relu_bias = false;
};

/// Element offset of an operand's batch point (the same rule as gemm_kernel's index expressions).
inline int64_t gemm_batch_offset(const std::vector<int64_t>& ext, const std::vector<int64_t>& at,
                                 const std::vector<bool>& bc, int64_t mat) {
  int64_t off = 0, run = mat;
  for (size_t d = ext.size(); d-- > 0;)
    if (!(d < bc.size() && bc[d])) {
      off += at[d] * run;
      run *= ext[d];
    }
  return off;
}

inline Kernel gemm_kernel(const GemmSpec& s) {
  Kernel k;
  k.name = std::string("gemm_") + dtype_name(s.t) + "_k" + std::to_string(s.K) + (s.ta ? "_ta" : "") +
           (s.tb ? "_tb" : "") + "_b" + std::to_string(s.nbatch);
  k.kind = ir::KernelKind::Contraction;
  const DType t = s.t;
  k.buffers = {{"a", t, false}, {"b", t, false}, {"bias", t, false}, {"c", t, true}};
  const int nb = s.nbatch;
  for (int d = 0; d < nb + 2; ++d) {
    k.params.push_back({"outer" + std::to_string(d), 1});
    k.outer.push_back(param(d));
  }
  k.reduce = {s.K};
  const ExprRef M = param(nb), N = param(nb + 1), Kc = iconst(s.K), m = O(nb), n = O(nb + 1), kk = Rv(0);
  auto boff = [&](const std::vector<bool>& bc, ExprRef mat) {
    ExprRef off = iconst(0), run = std::move(mat);
    for (int d = nb; d-- > 0;)
      if (!(static_cast<size_t>(d) < bc.size() && bc[d])) {
        off = iadd(off, imul(O(d), run));
        run = imul(run, param(d));
      }
    return off;
  };
  ExprRef ai = iadd(boff(s.a_bcast, imul(M, Kc)), s.ta ? iadd(imul(kk, M), m) : iadd(imul(m, Kc), kk));
  ExprRef bi = iadd(boff(s.b_bcast, imul(Kc, N)), s.tb ? iadd(imul(n, Kc), kk) : iadd(imul(kk, N), n));
  ExprRef ci = iadd(boff({}, imul(M, N)), iadd(imul(m, N), n));
  k.accs = {{AccKind::Sum, t, bin(Op::Mul, t, load(0, t, ai), load(1, t, bi))}};
  Phase red;
  red.over_reduce = true;
  red.accs = {0};
  Phase epi;
  ExprRef a = acc(0, t);
  epi.stores.push_back({3, ci, s.relu_bias ? un(Op::Relu, t, bin(Op::Add, t, a, load(2, t, n))) : a});
  k.phases = {red, epi};
  return k;
}

/// Element counts of gemm_kernel's buffers for params {batch.., M, N}.
inline std::vector<int64_t> gemm_numel(const GemmSpec& s, const std::vector<int64_t>& p) {
  const std::vector<int64_t> ext(p.begin(), p.begin() + s.nbatch);
  const int64_t M = p[s.nbatch], N = p[s.nbatch + 1];
  auto size = [&](const std::vector<bool>& bc, int64_t mat) {
    for (size_t d = 0; d < ext.size(); ++d)
      if (!(d < bc.size() && bc[d])) mat *= ext[d];
    return mat;
  };
  return {size(s.a_bcast, M * s.K), size(s.b_bcast, s.K * N), N, size({}, M * N)};
}

inline GpuCase gemm_case(const GemmSpec& s, std::vector<std::vector<int64_t>> param_sets) {
  GpuCase c;
  c.k = gemm_kernel(s);
  c.numel = [s](const std::vector<int64_t>& p) { return gemm_numel(s, p); };
  c.param_sets = std::move(param_sets);
  c.rtol = 1e-5;  // the reference sums in another order
  c.atol = 2e-4;
  return c;
}

/// Every case (the render test compiles all of them; the device tests run them).
inline std::vector<GpuCase> all_cases() {
  std::vector<GpuCase> v;
  for (DType t : {DType::F32, DType::F64}) {
    v.push_back(pointwise_unary(t));
    v.push_back(pointwise_binary(t));
  }
  v.push_back(pointwise_int());
  v.push_back(pointwise_views());
  v.push_back(random_values(DType::F32));
  v.push_back(random_values(DType::F64));
  v.push_back(softmax(DType::F32, 1, false));
  v.push_back(softmax(DType::F32, 7, false));
  v.push_back(softmax(DType::F32, 1000, false));
  v.push_back(softmax(DType::F32, 3000, true));  // long rows: a block per row on CUDA too
  v.push_back(softmax(DType::F64, 129, true));
  v.push_back(layer_norm(DType::F32, 300));
  v.push_back(layer_norm(DType::F32, 2050));
  v.push_back(arg_rows(DType::F32, 37));
  v.push_back(arg_rows(DType::F64, 1500));
  v.push_back(int_reduce());
  v.push_back(empty_reduce());
  v.push_back(column_mean_max(DType::F32, 5));
  v.push_back(column_mean_max(DType::F32, 1000));
  v.push_back(column_centre(DType::F32, 7));
  v.push_back(column_centre(DType::F32, 1000));
  v.push_back(column_centre(DType::F64, 333));
  v.push_back(global_sum_argmax(DType::F32, 10007));
  v.push_back(global_sum_argmax(DType::F64, 100));
  v.push_back(gemm_case({DType::F32, 1, 19, true, false, {}, {}, true}, {{2, 5, 70}, {0, 3, 3}, {1, 1, 1}}));
  v.push_back(gemm_case({DType::I64, 2, 33, false, true, {true}, {false, true}, false}, {{2, 3, 65, 9}}));
  return v;
}

// ---------------------------------------------------------------- differential runner
/// Device memory hooks of one backend (opencl_alloc & co., cuda_alloc & co.).
struct DeviceOps {
  std::function<std::shared_ptr<Storage>(DType, int64_t)> alloc;
  std::function<void(const Storage&, const void*)> to_device;
  std::function<void(const Storage&, void*)> to_host;
  std::function<uint64_t()> launches;
};

inline double get(const std::vector<uint8_t>& b, DType t, int64_t i) {
  switch (t) {
    case DType::Bool: return b[i];
    case DType::I32: return reinterpret_cast<const int32_t*>(b.data())[i];
    case DType::I64: return static_cast<double>(reinterpret_cast<const int64_t*>(b.data())[i]);
    case DType::F32: return reinterpret_cast<const float*>(b.data())[i];
    case DType::F64: return reinterpret_cast<const double*>(b.data())[i];
    case DType::U8: return b[i];
    case DType::I8: return static_cast<int8_t>(b[i]);
    case DType::F16: return f16_bits_to_float(reinterpret_cast<const uint16_t*>(b.data())[i]);
    case DType::BF16: return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(b.data())[i]);
  }
  return 0;
}

inline std::vector<uint8_t> random_buffer(DType t, int64_t n, uint64_t seed, bool specials) {
  std::vector<uint8_t> b(static_cast<size_t>(n) * dtype_size(t));
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  std::uniform_int_distribution<int> ui(-50, 50);
  static const double sp[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 2.5, -0.5, 3e9, -3e9, 1e19, 0.5, 1.5};
  for (int64_t i = 0; i < n; ++i) {
    double v = u(g);
    if (specials && i % 7 == 3) v = sp[(i / 7) % (sizeof sp / sizeof sp[0])];
    switch (t) {
      case DType::Bool: b[i] = ui(g) > 0; break;
      case DType::I32: reinterpret_cast<int32_t*>(b.data())[i] = ui(g); break;
      case DType::I64: reinterpret_cast<int64_t*>(b.data())[i] = ui(g); break;
      case DType::F32: reinterpret_cast<float*>(b.data())[i] = static_cast<float>(v); break;
      case DType::F64: reinterpret_cast<double*>(b.data())[i] = v; break;
      case DType::U8: b[i] = static_cast<uint8_t>(ui(g) + 50); break;
      case DType::I8: b[i] = static_cast<uint8_t>(static_cast<int8_t>(ui(g))); break;
      case DType::F16: reinterpret_cast<uint16_t*>(b.data())[i] = float_to_f16_bits(static_cast<float>(v)); break;
      case DType::BF16: reinterpret_cast<uint16_t*>(b.data())[i] = float_to_bf16_bits(static_cast<float>(v)); break;
    }
  }
  return b;
}

/// Runs `c` on `be` (device memory through `dev`) and on the reference interpreter for every
/// param set and compares every output element. Returns the number of launches per run seen.
inline void run_differential(const GpuCase& c, detail::Backend& be, const DeviceOps& dev) {
  SCOPED_TRACE(c.k.name);
  auto ref = detail::make_reference_backend()->compile(c.k).kernel;
  auto res = be.compile(c.k);
  ASSERT_TRUE(res.kernel) << "declined: " << res.declined;
  for (const auto& params : c.param_sets) {
    SCOPED_TRACE("params " + ::testing::PrintToString(params));
    const auto numel = c.numel(params);
    std::vector<std::vector<uint8_t>> host(c.k.buffers.size());
    std::vector<std::shared_ptr<Storage>> devbuf;
    for (size_t i = 0; i < c.k.buffers.size(); ++i) {
      const auto& b = c.k.buffers[i];
      host[i] = random_buffer(b.dtype, numel[i], 1000 + i * 7919 + params.size(), c.specials && !b.output);
      devbuf.push_back(dev.alloc(b.dtype, numel[i]));
      dev.to_device(*devbuf.back(), host[i].data());
    }
    ir::LaunchArgs ha, da;
    ha.params = da.params = params;
    for (size_t i = 0; i < host.size(); ++i) {
      ha.buffers.push_back(host[i].data());
      da.buffers.push_back(devbuf[i]->data);
    }
    ref->run(ha);
    const uint64_t before = dev.launches();
    res.kernel->run(da);
    int64_t outer = 1;
    for (const auto& e : c.k.outer)
      outer *= e->kind == ExprKind::Const ? static_cast<int64_t>(e->value) : params[e->index];
    EXPECT_EQ(dev.launches() - before, outer > 0 ? static_cast<uint64_t>(c.launches) : 0u);
    for (size_t i = 0; i < host.size(); ++i) {
      const auto& b = c.k.buffers[i];
      if (!b.output) continue;
      std::vector<uint8_t> got(host[i].size());
      dev.to_host(*devbuf[i], got.data());
      int bad = 0;
      for (int64_t j = 0; j < numel[i] && bad < 5; ++j) {
        const double e = get(host[i], b.dtype, j), g = get(got, b.dtype, j);
        bool ok = e == g || (std::isnan(e) && std::isnan(g));
        if (!ok && is_float(b.dtype) && std::isfinite(e)) ok = std::fabs(e - g) <= c.atol + c.rtol * std::fabs(e);
        if (!ok) {
          ++bad;
          ADD_FAILURE() << c.k.name << " " << b.name << "[" << j << "]: expected " << e << ", got " << g;
        }
      }
    }
  }
}

/// Runs each row kernel (4 rows, inputs of up to 4 x 3000 elements) and expects ONE launch.
inline void expect_one_launch(detail::Backend& be, const std::vector<GpuCase>& cases, const DeviceOps& dev,
                              const std::function<void()>& sync) {
  for (const GpuCase& c : cases) {
    auto k = be.compile(c.k).kernel;
    ASSERT_TRUE(k) << c.k.name;
    auto x = dev.alloc(DType::F32, 4 * 3000), w = dev.alloc(DType::F32, 3000);
    ir::LaunchArgs a;
    a.params = {4};
    for (const auto& b : c.k.buffers) a.buffers.push_back(b.name == "x" || b.name == "y" ? x->data : w->data);
    const uint64_t n0 = dev.launches();
    k->run(a);
    sync();
    EXPECT_EQ(dev.launches() - n0, 1u) << c.k.name;
  }
}

}  // namespace kfuse::test::gpu
