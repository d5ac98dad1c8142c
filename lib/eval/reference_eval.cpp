// The double-precision graph evaluator (see include/kfuse/reference.hpp).
#include "reference_eval.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "../graph/random.hpp"
#include "../graph/ref_math.hpp"
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

// Integer results wrap to their width; bools are 0/1; floats stay in double.
double canonical(double v, DType dt) {
  switch (dt) {
    case DType::Bool: return v != 0.0 ? 1.0 : 0.0;
    case DType::I32:
    case DType::I64: return round_to_dtype(v, dt);
    default: return v;
  }
}

}  // namespace

double unary_ref(Op op, double x) {
  switch (op) {
#define KFUSE_UNARY_OP(name, str, rule, expr, tol) \
  case Op::name: return (expr);
#include "kfuse/ops.def"
    default: throw InternalError(std::string("unary_ref: ") + op_name(op));
  }
}

double binary_ref(Op op, double a, double b) {
  switch (op) {
#define KFUSE_BINARY_OP(name, str, rule, expr, tol) \
  case Op::name: return (expr);
#include "kfuse/ops.def"
    default: throw InternalError(std::string("binary_ref: ") + op_name(op));
  }
}

namespace {

std::vector<double> reduce_ref(const Node& n, const std::vector<double>& in) {
  const Node& x = *n.inputs[0];
  const auto& axes = n.attrs.ints;
  std::vector<bool> red(x.shape.size(), false);
  for (int64_t a : axes) red[a] = true;
  auto ostr = contiguous_strides(n.shape);
  Shape rshape;
  for (int64_t a : axes) rshape.push_back(x.shape[a]);
  auto rstr = contiguous_strides(rshape);
  int64_t on = n.numel();
  std::vector<long double> acc(on);
  std::vector<int64_t> arg(on, 0);
  std::vector<bool> started(on, false);
  for (int64_t i = 0; i < on; ++i) acc[i] = n.op == Op::ReduceProd ? 1.0L : 0.0L;
  for_each_index(x.shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
    int64_t o = 0, r = 0, k = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      if (red[d]) r += idx[d] * rstr[k++];
      else o += idx[d] * ostr[d];
    }
    long double v = in[lin];
    long double& a = acc[o];
    switch (n.op) {
      case Op::ReduceSum: a += v; break;
      case Op::ReduceProd: a *= v; break;
      case Op::ReduceMax:
      case Op::ReduceMin: {
        bool better = n.op == Op::ReduceMax ? v > a : v < a;
        if (!started[o] || std::isnan(v) || (better && !std::isnan(a))) a = v;
        started[o] = true;
        break;
      }
      case Op::ArgMax:
      case Op::ArgMin: {  // first extreme; the first NaN counts as the extreme (as torch)
        bool better = n.op == Op::ArgMax ? v > a : v < a;
        if (!started[o] || (!std::isnan(a) && (std::isnan(v) || better))) {
          a = v;
          arg[o] = r;
        }
        started[o] = true;
        break;
      }
      default: throw InternalError("reduce_ref: not a reduction");
    }
  });
  std::vector<double> out(on);
  for (int64_t i = 0; i < on; ++i)
    out[i] = canonical((n.op == Op::ArgMax || n.op == Op::ArgMin) ? static_cast<double>(arg[i])
                                                                   : static_cast<double>(acc[i]),
                       n.dtype);
  return out;
}

std::vector<double> view_ref(const Node& n, const std::vector<const std::vector<double>*>& ins) {
  const Node& x = *n.inputs[0];
  const auto& in = *ins[0];
  std::vector<double> out(n.numel());
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
        out[lin] = inside ? in[offset_of(src, xs)] : canonical(n.attrs.reals[0], n.dtype);
      });
      return out;
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

std::vector<double> matmul_ref(const Node& n, const std::vector<double>& a, const std::vector<double>& b) {
  const Shape& sa = n.inputs[0]->shape;
  const Shape& sb = n.inputs[1]->shape;
  int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  int64_t batch = n.numel() / std::max<int64_t>(M * N, 1);
  std::vector<double> out(n.numel());
  if (M * N == 0) return out;
  for (int64_t t = 0; t < batch; ++t)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        long double s = 0;
        for (int64_t k = 0; k < K; ++k) s += static_cast<long double>(a[t * M * K + i * K + k]) * b[t * K * N + k * N + j];
        out[t * M * N + i * N + j] = canonical(static_cast<double>(s), n.dtype);
      }
  return out;
}

}  // namespace

// Cast semantics: float -> integer truncates toward zero (NaN and out-of-range values give the
// dtype's minimum, as x86's cvtt instructions); integer -> integer wraps; -> bool tests != 0.
double cast_value(double v, DType from, DType to) {
  if (is_float(to)) return v;
  if (to == DType::Bool) return v != 0.0 ? 1.0 : 0.0;
  if (!is_float(from)) return round_to_dtype(v, to);
  if (to == DType::I32) {
    int32_t t;
    convert_to(&v, DType::F64, &t, DType::I32, 1);
    return t;
  }
  int64_t t;
  convert_to(&v, DType::F64, &t, DType::I64, 1);
  return static_cast<double>(t);
}

double round_to_dtype(double v, DType dt) {
  switch (dt) {
    case DType::Bool: return v != 0.0 ? 1.0 : 0.0;
    case DType::F32: return static_cast<double>(static_cast<float>(v));
    case DType::F64: return v;
    case DType::I64: {
      int64_t r;
      convert_to(&v, DType::F64, &r, DType::I64, 1);
      return static_cast<double>(r);
    }
    case DType::I32: {
      int32_t r;
      // Integral doubles wrap like integer arithmetic; others truncate (see convert_to).
      if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 0x1p63) {
        r = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(static_cast<int64_t>(v))));
      } else {
        convert_to(&v, DType::F64, &r, DType::I32, 1);
      }
      return static_cast<double>(r);
    }
  }
  return v;
}

std::vector<double> storage_to_double(const Storage& s) {
  std::vector<double> out(s.numel);
  if (s.device != Device::cpu()) {  // device memory: through the device's backend
    auto host = Storage::allocate(s.dtype, s.numel);
    memory_backend(s.device)->copy_to_host(s, host->data);
    convert_to(host->data, s.dtype, out.data(), DType::F64, s.numel);
    return out;
  }
  convert_to(s.data, s.dtype, out.data(), DType::F64, s.numel);
  return out;
}

std::shared_ptr<Storage> double_to_storage(const std::vector<double>& v, DType dt) {
  auto st = Storage::allocate(dt, static_cast<int64_t>(v.size()));
  if (dt == DType::I32) {  // integral values wrap (integer arithmetic in the oracle is exact)
    auto* p = static_cast<int32_t*>(st->data);
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<int32_t>(round_to_dtype(v[i], DType::I32));
  } else {
    convert_to(v.data(), DType::F64, st->data, dt, static_cast<int64_t>(v.size()));
  }
  return st;
}

std::vector<double> evaluate_node(const Node& n, const std::vector<const std::vector<double>*>& ins) {
  std::vector<double> out;
  int64_t N = n.numel();
  switch (op_kind(n.op)) {
    case OpKind::Source:
      if (n.op == Op::Buffer) return storage_to_double(*n.storage);
      out.resize(N);
      if (n.op == Op::Const) {
        std::fill(out.begin(), out.end(), n.attrs.reals[0]);
      } else if (n.op == Op::Iota) {
        for (int64_t i = 0; i < N; ++i)
          out[i] = canonical(n.attrs.reals[0] + n.attrs.reals[1] * static_cast<double>(i), n.dtype);
      } else {  // Rand
        uint64_t seed = static_cast<uint64_t>(n.attrs.ints[0]);
        for (int64_t i = 0; i < N; ++i)
          out[i] = n.attrs.ints[1] == 0 ? counter_uniform(seed, static_cast<uint64_t>(i), n.dtype)
                                        : counter_normal(seed, static_cast<uint64_t>(i));
      }
      return out;
    case OpKind::ElemWise: {
      out.resize(N);
      if (n.op == Op::Cast) {
        for (int64_t i = 0; i < N; ++i) out[i] = cast_value((*ins[0])[i], n.inputs[0]->dtype, n.dtype);
      } else if (n.op == Op::Where) {
        for (int64_t i = 0; i < N; ++i) out[i] = (*ins[0])[i] != 0.0 ? (*ins[1])[i] : (*ins[2])[i];
      } else if (n.inputs.size() == 1) {
        for (int64_t i = 0; i < N; ++i) out[i] = canonical(unary_ref(n.op, (*ins[0])[i]), n.dtype);
      } else {
        for (int64_t i = 0; i < N; ++i) out[i] = canonical(binary_ref(n.op, (*ins[0])[i], (*ins[1])[i]), n.dtype);
      }
      return out;
    }
    case OpKind::Reduce: return reduce_ref(n, *ins[0]);
    case OpKind::Broadcast:
    case OpKind::Injective: return view_ref(n, ins);
    case OpKind::Contraction: return matmul_ref(n, *ins[0], *ins[1]);
    case OpKind::Opaque: break;
  }
  throw InternalError("evaluate_node: unknown op");
}

ValueMap evaluate_reference(const std::vector<const Node*>& roots, bool use_realized) {
  ValueMap vals;
  for (const Node* n : topo_order(roots, use_realized)) {
    if (use_realized) {
      if (auto r = n->realized()) {
        vals[n] = storage_to_double(*r);
        continue;
      }
    }
    std::vector<const std::vector<double>*> ins;
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
  for (const Node* r : roots) out.push_back(vals.at(r));
  return out;
}

std::vector<double> reference_values(const Tensor& t) { return reference_values(std::vector<Tensor>{t})[0]; }

}  // namespace kfuse
