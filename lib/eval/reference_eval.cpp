// The double-precision graph evaluator (see include/kfuse/reference.hpp).
#include "reference_eval.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/random.hpp"
#include "../graph/ref_math.hpp"
#include "check_index.hpp"
#include "check_labels.hpp"
#include "exact_value.hpp"
#include "backend/backend.hpp"
#include "kfuse/error.hpp"
#include "kfuse/reference.hpp"

namespace kfuse::detail {

namespace {

// Calls fn(index, linear) for every multi-index of `shape` in row-major order.
template <typename F>
void for_each_index(const Shape& shape, F&& fn) {
  int64_t n = shape_numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    fn(idx, lin);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t offset_of(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t o = 0;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
  return o;
}

}  // namespace

// Case labels in a macro body: clang-format 14 would run them into the next line.
// clang-format off
double unary_ref(Op op, double x) {
  switch (op) {
#define KFUSE_UNARY_OP(name, str, rule, expr, tol) \
  case Op::name: return (expr);
#include "kfuse/ops.def"
    default: throw InternalError(std::string("unary_ref: ") + op_name(op));
  }
}
// clang-format on

// Case labels in a macro body: clang-format 14 would run them into the next line.
// clang-format off
double binary_ref(Op op, double a, double b) {
  switch (op) {
#define KFUSE_BINARY_OP(name, str, rule, expr, tol) \
  case Op::name: return (expr);
#include "kfuse/ops.def"
    default: throw InternalError(std::string("binary_ref: ") + op_name(op));
  }
}
// clang-format on

namespace {

Values reduce_ref(const Node& n, const Values& in) {
  const Node& x = *n.inputs[0];
  const auto& axes = n.attrs.ints;
  std::vector<bool> red(x.shape.size(), false);
  for (int64_t a : axes) red[a] = true;
  auto ostr = contiguous_strides(n.shape);
  Shape rshape;
  for (int64_t a : axes) rshape.push_back(x.shape[a]);
  auto rstr = contiguous_strides(rshape);
  std::vector<Fold> acc(n.numel(), Fold(ir::acc_kind(n.op), x.dtype, n.dtype));
  for_each_index(x.shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
    int64_t o = 0, r = 0, k = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      if (red[d]) r += idx[d] * rstr[k++];
      else o += idx[d] * ostr[d];
    }
    acc[o].add(in[lin], r);
  });
  Values out(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) out[i] = acc[i].result();
  return out;
}

// out[b, 0, d] folds values[r, d] over r in [starts[b], starts[b + 1]), the last bag ending at N,
// both bounds clamped into [0, N] (op.hpp: SegmentSum).
Values segment_ref(const Node& n, const std::vector<const Values*>& ins) {
  const Node& v = *n.inputs[0];
  const int64_t B = n.shape[0], N = v.shape[0], D = n.shape[2];
  auto bound = [&](int64_t b) { return b < B ? std::clamp<int64_t>((*ins[1])[b].i, 0, N) : N; };
  Values out(n.numel());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < D; ++d) {
      Fold f(ir::acc_kind(n.op), v.dtype, n.dtype);
      for (int64_t r = bound(b); r < bound(b + 1); ++r) f.add((*ins[0])[r * D + d], r);
      out[b * D + d] = f.result();
    }
  return out;
}

Values view_ref(const Node& n, const std::vector<const Values*>& ins) {
  const Node& x = *n.inputs[0];
  const auto& in = *ins[0];
  Values out(n.numel());
  auto xs = contiguous_strides(x.shape);
  std::vector<int64_t> src(x.shape.size());
  switch (n.op) {
    case Op::Reshape: return in;
    case Op::Permute:
      for_each_index(n.shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
        for (size_t i = 0; i < idx.size(); ++i) src[n.attrs.ints[i]] = idx[i];
        out[lin] = in[offset_of(src, xs)];
      });
      return out;
    case Op::Expand:
      for_each_index(n.shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
        for (size_t i = 0; i < idx.size(); ++i) src[i] = x.shape[i] == 1 ? 0 : idx[i];
        out[lin] = in[offset_of(src, xs)];
      });
      return out;
    case Op::Slice:
      for_each_index(n.shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
        for (size_t i = 0; i < idx.size(); ++i) src[i] = n.attrs.ints[2 * i] + idx[i] * n.attrs.ints[2 * i + 1];
        out[lin] = in[offset_of(src, xs)];
      });
      return out;
    case Op::Pad:
      for_each_index(n.shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
        bool inside = true;
        for (size_t i = 0; i < idx.size(); ++i) {
          src[i] = idx[i] - n.attrs.ints[2 * i];
          inside &= src[i] >= 0 && src[i] < x.shape[i];
        }
        out[lin] = inside ? in[offset_of(src, xs)] : num_from_double(n.attrs.reals[0], n.dtype);
      });
      return out;
    case Op::Gather: {
      const size_t axis = static_cast<size_t>(n.attrs.ints[0]);
      for_each_index(n.shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
        src = idx;
        src[axis] = (*ins[1])[lin].i;
        if (src[axis] < 0 || src[axis] >= x.shape[axis]) throw InternalError("gather: unchecked index out of range");
        out[lin] = in[offset_of(src, xs)];
      });
      return out;
    }
    case Op::Concat: {
      int64_t axis = n.attrs.ints[0];
      for_each_index(n.shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
        int64_t pos = idx[axis];
        for (size_t k = 0; k < n.inputs.size(); ++k) {
          const Node& p = *n.inputs[k];
          if (pos < p.shape[axis]) {
            std::vector<int64_t> s = idx;
            s[axis] = pos;
            out[lin] = (*ins[k])[offset_of(s, contiguous_strides(p.shape))];
            return;
          }
          pos -= p.shape[axis];
        }
      });
      return out;
    }
    default: throw InternalError("view_ref: not a view");
  }
}

// Float products accumulate in long double; integer ones wrap in int64 (the same residue as
// wrapping in the dtype), then wrap to the dtype.
Values matmul_ref(const Node& n, const Values& a, const Values& b) {
  const Shape& sa = n.inputs[0]->shape;
  const Shape& sb = n.inputs[1]->shape;
  int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  int64_t batch = n.numel() / std::max<int64_t>(M * N, 1);
  Values out(n.numel(), int_num(0));
  if (M * N == 0) return out;
  const bool fl = is_float(n.dtype);
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        long double s = 0;
        uint64_t si = 0;
        for (int64_t k = 0; k < K; ++k) {
          Num x = a[t * M * K + i * K + k], y = b[t * K * N + k * N + j];
          if (fl) s += static_cast<long double>(x.f) * y.f;
          else si += static_cast<uint64_t>(x.i) * static_cast<uint64_t>(y.i);
        }
        out[t * M * N + i * N + j] = fl ? float_num(static_cast<double>(s)) : int_num(wrap_to(si, n.dtype));
      }
  return out;
}

}  // namespace

double round_to_dtype(double v, DType dt) {
  if (dt == DType::F32) return static_cast<double>(static_cast<float>(v));
  if (dt == DType::F16) return static_cast<double>(half(v));  // through f32 (kfuse/half.hpp)
  if (dt == DType::BF16) return static_cast<double>(bfloat16(v));
  return num_to_double(num_from_double(v, dt), dt);
}

Values storage_values(const Storage& s) {
  Values out(s.numel);
  std::shared_ptr<Storage> host;
  const void* p = s.data;
  if (s.device != Device::cpu()) {  // device memory: through the device's backend
    host = Storage::allocate(s.dtype, s.numel);
    memory_backend(s.device)->copy_to_host(s, host->data);
    p = host->data;
  }
  for (int64_t i = 0; i < s.numel; ++i) out[i] = load_num(p, s.dtype, i);
  return out;
}

std::shared_ptr<Storage> values_storage(const Values& v, DType dt) {
  auto st = Storage::allocate(dt, static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) store_num(st->data, dt, static_cast<int64_t>(i), v[i]);
  return st;
}

std::shared_ptr<Storage> double_to_storage(const std::vector<double>& v, DType dt) {
  Values n(v.size());
  for (size_t i = 0; i < v.size(); ++i) n[i] = num_from_double(v[i], dt);
  return values_storage(n, dt);
}

Values evaluate_node(const Node& n, const std::vector<const Values*>& ins) {
  Values out;
  int64_t N = n.numel();
  switch (op_kind(n.op)) {
    case OpKind::Source:
      if (n.op == Op::Buffer) return storage_values(*n.storage);
      out.resize(N);
      if (n.op == Op::Const) {
        std::fill(out.begin(), out.end(), num_from_double(n.attrs.reals[0], n.dtype));
      } else if (n.op == Op::Iota) {  // in f64, then cast, as kernels compute it (lower_group.cpp)
        for (int64_t i = 0; i < N; ++i)
          out[i] =
              num_cast(float_num(n.attrs.reals[0] + n.attrs.reals[1] * static_cast<double>(i)), DType::F64, n.dtype);
      } else {  // Rand
        uint64_t seed = static_cast<uint64_t>(n.attrs.ints[0]);
        for (int64_t i = 0; i < N; ++i)
          out[i] = float_num(n.attrs.ints[1] == 0 ? counter_uniform(seed, static_cast<uint64_t>(i), n.dtype)
                                                  : counter_normal(seed, static_cast<uint64_t>(i)));
      }
      return out;
    case OpKind::ElemWise: {
      out.resize(N);
      const DType first = n.inputs[0]->dtype;
      Num args[3];
      for (int64_t i = 0; i < N; ++i) {
        for (size_t k = 0; k < ins.size(); ++k) args[k] = (*ins[k])[i];
        out[i] = apply_elementwise(n.op, n.dtype, first, args);
      }
      return out;
    }
    case OpKind::Reduce: return is_segment_reduction(n.op) ? segment_ref(n, ins) : reduce_ref(n, *ins[0]);
    case OpKind::Broadcast:
    case OpKind::Injective: return view_ref(n, ins);
    case OpKind::Contraction: return matmul_ref(n, *ins[0], *ins[1]);
    case OpKind::Opaque:
      if (n.op == Op::CheckLabels) {
        check_class_labels(*ins[0], n.attrs.ints.at(0), n.attrs.ints.at(1));
        return *ins[0];
      }
      if (n.op == Op::CheckIndex) {
        check_indices(*ins[0], n.shape, n.attrs.ints.at(0), static_cast<IndexUse>(n.attrs.ints.at(1)));
        return *ins[0];
      }
      break;
  }
  throw InternalError("evaluate_node: unknown op");
}

ValueMap evaluate_reference(const std::vector<const Node*>& roots, bool use_realized) {
  ValueMap vals;
  for (const Node* n : topo_order(roots, use_realized)) {
    if (use_realized) {
      if (auto r = n->realized()) {
        vals[n] = storage_values(*r);
        continue;
      }
    }
    std::vector<const Values*> ins;
    for (const auto& i : n->inputs) ins.push_back(&vals.at(i.get()));
    vals[n] = evaluate_node(*n, ins);
  }
  return vals;
}

}  // namespace kfuse::detail

namespace kfuse {

std::vector<std::vector<double>> reference_values(const std::vector<Tensor>& ts) {
  std::vector<const Node*> roots;
  for (const auto& t : ts) {
    if (!t.defined()) throw UserError("reference_values: undefined tensor");
    roots.push_back(t.node().get());
  }
  auto vals = detail::evaluate_reference(roots, false);
  std::vector<std::vector<double>> out;
  for (const Node* r : roots) {
    const detail::Values& v = vals.at(r);
    std::vector<double> d(v.size());
    for (size_t i = 0; i < v.size(); ++i) d[i] = detail::num_to_double(v[i], r->dtype);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<double> reference_values(const Tensor& t) { return reference_values(std::vector<Tensor>{t})[0]; }

}  // namespace kfuse
