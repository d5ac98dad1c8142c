// lower_group: FusionGroup -> kernel IR.
//
// The domain: a group with reductions iterates their full shape S, with the kept axes as the
// OUTER domain and the reduced axes as the REDUCE domain; a pointwise group iterates its output
// shape (flattened to one dimension when the group has no views, so every access is o0).
//
// Values are emitted by walking the graph from each output down to the inputs with an index
// vector (one i64 expression per dimension of the node) and the node's symbolic dims. Views fold
// into that index arithmetic: permute reorders it, expand zeroes broadcast dims, slice scales and
// offsets, pad and concat add masks, reshape re-linearises. Dims stay symbolic (outer extents are
// Params) wherever the view keeps them; otherwise the concrete size is used and so becomes part of
// the kernel text (and key).
//
// Phases: accumulator depth = 1 + deepest accumulator its value reads; phase d folds the
// accumulators of depth d; full-shape stores go in the first phase after everything they read;
// per-row stores go in a final once-phase.
//
// A group holding segment reductions (embedding_bag) lowers to a "segment" kernel: the domain
// [B, N, D] with outer (b, d) and a DYNAMIC reduce domain r0 in [starts[b], ends[b]) (clamped to
// [0, N); kernel.hpp); N is a run-time param. A gather lowers to a load whose index loads the
// (clamped) index value.
//
// A group holding a matmul lowers to a CONTRACTION kernel (the contract shared with the GEMM
// backends, see README "Matmul"): outer = the matmul's output dims [batch.., M, N], reduce = [K],
// one Sum accumulator of Mul(A at (batch, m, k), B at (batch, k, n)) in the matmul's dtype folded
// in phase 0, and every store (the epilogue, evaluated at (batch, m, n)) in a once-phase 1.
// Operand views fold into the two loads' indices like any view; a reshape of a buffer input
// reads the buffer at the linear index directly (a buffer is contiguous), which keeps the index
// affine in the loop vars.
#include "lower_group.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/reshape_runs.hpp"
#include "ir/collapse_reduce.hpp"
#include "ir/random.hpp"
#include "ir/widen_narrow.hpp"
#include "kfuse/error.hpp"

namespace kfuse::detail {

namespace {

using ir::ExprRef;

struct Access {
  std::vector<ExprRef> idx;   // one per dim of the node
  std::vector<ExprRef> dims;  // symbolic extents
};

ExprRef linearize(const std::vector<ExprRef>& idx, const std::vector<ExprRef>& dims) {
  ExprRef off = ir::iconst(0), stride = ir::iconst(1);
  for (size_t k = idx.size(); k-- > 0;) {
    off = ir::iadd(off, ir::imul(idx[k], stride));
    stride = ir::imul(stride, dims[k]);
  }
  return off;
}

ExprRef band(ExprRef a, ExprRef b) {
  if (!a) return b;
  if (!b) return a;
  return ir::op(Op::And, DType::Bool, {a, b});
}
ExprRef cmp(Op o, ExprRef a, ExprRef b) { return ir::op(o, DType::Bool, {std::move(a), std::move(b)}); }

class Lowerer {
 public:
  explicit Lowerer(const FusionGroup& g) : g_(g) {
    for (const Node* n : g.nodes) members_.insert(n);
  }

  LoweredKernel run() {
    LoweredKernel out;
    ir::Kernel& k = out.kernel;
    kernel_ = &k;
    k.name = kernel_stem(g_);
    sig_ = reduce_signature(g_);
    for (const Node* n : g_.nodes)
      if (n->op == Op::Matmul) contraction_ = n;
    bool has_red = !sig_.axes.empty() ||
                   std::any_of(g_.nodes.begin(), g_.nodes.end(), [](const Node* n) { return is_reduction(n->op); });
    if (contraction_ && has_red) throw InternalError("lower_group: a contraction group holds a reduction");
    // Inputs become buffers in order.
    for (const Node* in : g_.inputs) {
      buffer_id_[in] = static_cast<int>(k.buffers.size());
      k.buffers.push_back({"in" + std::to_string(k.buffers.size()), in->dtype, false});
      out.buffer_nodes.push_back(in);
    }
    int first_out = static_cast<int>(k.buffers.size());
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      k.buffers.push_back({"out" + std::to_string(i), g_.outputs[i]->dtype, true});
      out.buffer_nodes.push_back(g_.outputs[i]);
    }
    auto outer_param = [&](int64_t extent, const std::string& name) {
      int id = static_cast<int>(k.params.size());
      k.params.push_back({name, extent});
      return ir::param(id);
    };

    if (contraction_) {
      lower_contraction(out, first_out, outer_param);
      return out;
    }
    if (has_red) {
      // Outer = kept axes, reduce = reduced axes of S.
      std::vector<bool> red(sig_.full.size(), false);
      for (int64_t a : sig_.axes) red[a] = true;
      for (const Node* n : g_.nodes)
        if (is_segment_reduction(n->op)) segment_ = n;
      for (size_t a = 0; a < sig_.full.size(); ++a) {
        if (red[a] && segment_) {  // the ids axis: a run-time extent, ranged per bag below
          full_idx_.push_back(ir::var(ir::Space::Reduce, 0));
          full_dims_.push_back(outer_param(sig_.full[a], "ids"));
          kept_idx_.push_back(ir::iconst(0));
          kept_dims_.push_back(ir::iconst(1));
        } else if (red[a]) {
          full_idx_.push_back(ir::var(ir::Space::Reduce, static_cast<int>(k.reduce.size())));
          full_dims_.push_back(ir::iconst(sig_.full[a]));
          k.reduce.push_back(sig_.full[a]);
          kept_idx_.push_back(ir::iconst(0));
          kept_dims_.push_back(ir::iconst(1));
        } else {
          ExprRef p = outer_param(sig_.full[a], "outer" + std::to_string(k.outer.size()));
          ExprRef v = ir::var(ir::Space::Outer, static_cast<int>(k.outer.size()));
          k.outer.push_back(p);
          full_idx_.push_back(v);
          full_dims_.push_back(p);
          kept_idx_.push_back(v);
          kept_dims_.push_back(p);
        }
      }
      bool inner_reduced = !sig_.full.empty() && red.back();
      k.kind = k.outer.empty() ? ir::KernelKind::Global : inner_reduced ? ir::KernelKind::Row : ir::KernelKind::Column;
      if (segment_) {
        // Bag b folds ids [starts[b], starts[b + 1]), the last bag up to N, clamped into [0, N]:
        // even unchecked offsets never make the kernel read outside the ids. The last bag ends at
        // N, below which every position is an id: backends prefetch across bags up to it
        // (ir/kernel.hpp). N is the ids extent, a launch parameter, so batches of any id count
        // share the kernel.
        ExprRef b = kept_idx_[0], bd = kept_dims_[0], n = full_dims_[1];
        ExprRef lo = emit(segment_->inputs[1].get(), {b}, {bd}, nullptr);
        ExprRef b1 = ir::iadd(b, ir::iconst(1));
        ExprRef has_next = cmp(Op::Lt, b1, bd);
        ExprRef next = emit(segment_->inputs[1].get(), {b1}, {bd}, has_next);
        ExprRef hi = ir::op(Op::Where, DType::I64, {has_next, next, n});
        k.reduce_begin = ir::op(Op::Maximum, DType::I64, {lo, ir::iconst(0)});
        k.reduce_end = ir::op(Op::Minimum, DType::I64, {hi, n});
        k.kind = ir::KernelKind::Segment;
      } else {
        out.specialised.push_back("reduce extents " + shape_str(k.reduce) + " (compile-time: unrolled/masked rows)");
      }
    } else {
      split_concat_ = concat_of_equal_parts();
      store_reshape_inputs_ = !split_concat_ && outputs_merge_one_shape();
      const Shape& s =
          split_concat_ || store_reshape_inputs_ ? g_.outputs[0]->inputs[0]->shape : g_.outputs.at(0)->shape;
      bool has_views = std::any_of(g_.nodes.begin(), g_.nodes.end(), [&](const Node* n) {
        return is_view(n->op) || n->op == Op::Iota ||
               std::any_of(n->inputs.begin(), n->inputs.end(), [&](const NodeRef& i) { return i->op == Op::Iota; });
      });
      flat_ = !has_views;
      if (flat_) {
        ExprRef p = outer_param(shape_numel(s), "outer0");
        k.outer.push_back(p);
        full_idx_ = {ir::var(ir::Space::Outer, 0)};
        full_dims_ = {p};
      } else {
        for (size_t a = 0; a < s.size(); ++a) {
          ExprRef p = outer_param(s[a], "outer" + std::to_string(a));
          k.outer.push_back(p);
          full_idx_.push_back(ir::var(ir::Space::Outer, static_cast<int>(a)));
          full_dims_.push_back(p);
        }
      }
      k.kind = ir::KernelKind::Pointwise;
    }

    // Stores: emit every output, then assign phases by accumulator depth.
    struct PendingStore {
      ir::Store st;
      bool per_row;
    };
    std::vector<PendingStore> stores;
    if (split_concat_) {  // part p at its offset p * extent along the axis (concat_of_equal_parts)
      const Node* o = g_.outputs[0];
      const size_t axis = static_cast<size_t>(o->attrs.ints[0]);
      std::vector<ExprRef> dims = full_dims_;
      dims[axis] = ir::imul(ir::iconst(static_cast<int64_t>(o->inputs.size())), full_dims_[axis]);
      for (size_t p = 0; p < o->inputs.size(); ++p) {
        std::vector<ExprRef> idx = full_idx_;
        idx[axis] = ir::iadd(full_idx_[axis], ir::imul(ir::iconst(static_cast<int64_t>(p)), full_dims_[axis]));
        ExprRef value = emit(o->inputs[p].get(), full_idx_, full_dims_, nullptr);
        stores.push_back({{first_out, linearize(idx, dims), value}, false});
      }
    }
    for (size_t i = 0; i < (split_concat_ ? 0 : g_.outputs.size()); ++i) {
      const Node* o = g_.outputs[i];
      bool per_row = has_red && o->shape != sig_.full;
      std::vector<ExprRef> idx = per_row ? kept_idx_ : full_idx_;
      std::vector<ExprRef> dims = per_row ? kept_dims_ : full_dims_;
      if (per_row && o->shape != kept_shape(sig_)) squeeze_access(o->shape, idx, dims);
      if (has_red && !per_row && o->shape != sig_.full)
        throw InternalError("lower_group: output shape does not fit the domain");
      ExprRef value = emit(store_reshape_inputs_ ? o->inputs[0].get() : o, idx, dims, nullptr);
      ExprRef index = flat_ ? full_idx_[0] : linearize(idx, dims);
      stores.push_back({{first_out + static_cast<int>(i), index, value}, per_row});
    }
    k.accs = accs_;
    // Depths.
    std::vector<int> depth(accs_.size(), -1);
    std::function<int(const ExprRef&)> need;  // max depth of accs read + 1 (0 if none)
    std::unordered_map<const ir::Expr*, int> memo;
    need = [&](const ExprRef& e) -> int {
      auto it = memo.find(e.get());
      if (it != memo.end()) return it->second;
      int d = 0;
      if (e->kind == ir::ExprKind::Acc) d = acc_depth(e->index, depth, need) + 1;
      for (const auto& a : e->args) d = std::max(d, need(a));
      memo[e.get()] = d;
      return d;
    };
    int max_depth = -1;
    for (size_t a = 0; a < accs_.size(); ++a)
      max_depth = std::max(max_depth, acc_depth(static_cast<int>(a), depth, need));
    int n_reduce_phases = max_depth + 1;
    for (const auto& s : stores)
      if (!s.per_row && has_red) n_reduce_phases = std::max(n_reduce_phases, need(s.st.value) + 1);
    if (has_red) {
      k.phases.resize(n_reduce_phases);
      for (auto& ph : k.phases) ph.over_reduce = true;
      for (size_t a = 0; a < accs_.size(); ++a) k.phases[depth[a]].accs.push_back(static_cast<int>(a));
    }
    ir::Phase once;
    for (auto& s : stores) {
      if (has_red && !s.per_row) k.phases[need(s.st.value)].stores.push_back(s.st);
      else once.stores.push_back(s.st);
    }
    if (!once.stores.empty()) k.phases.push_back(once);
    ir::collapse_reduce_dims(k);
    ir::widen_narrow(k);
    ir::verify_kernel(k);
    return out;
  }

 private:
  template <class OuterParam>
  void lower_contraction(LoweredKernel& out, int first_out, OuterParam&& outer_param) {
    ir::Kernel& k = out.kernel;
    const Node* c = contraction_;
    const Shape& s = c->shape;
    const size_t nd = s.size();
    const int64_t K = c->inputs[0]->shape.back();
    for (size_t a = 0; a < nd; ++a) {
      ExprRef p = outer_param(s[a], "outer" + std::to_string(a));
      k.outer.push_back(p);
      full_idx_.push_back(ir::var(ir::Space::Outer, static_cast<int>(a)));
      full_dims_.push_back(p);
    }
    k.reduce = {K};
    k.kind = ir::KernelKind::Contraction;
    out.specialised.push_back("reduce extents " + shape_str(k.reduce) + " (compile-time: the contraction length K)");
    // The accumulator, emitted when the epilogue first reaches c (emit_uncached).
    ir::Phase fold{true, {}, {}}, once;
    for (size_t i = 0; i < g_.outputs.size(); ++i) {
      const Node* o = g_.outputs[i];
      // Outputs differ from c's shape only by size-1 dims (partition rule 8): same linear index.
      std::vector<ExprRef> idx, dims;
      size_t a = 0;
      for (int64_t d : o->shape) {
        if (d == 1) {
          idx.push_back(ir::iconst(0));
          dims.push_back(ir::iconst(1));
          continue;
        }
        while (a < nd && s[a] == 1) ++a;
        if (a >= nd) throw InternalError("lower_group: output shape does not fit the contraction");
        idx.push_back(full_idx_[a]);
        dims.push_back(full_dims_[a]);
        ++a;
      }
      ExprRef value = emit(o, idx, dims, nullptr);
      once.stores.push_back({first_out + static_cast<int>(i), linearize(full_idx_, full_dims_), value});
    }
    if (accs_.size() != 1) throw InternalError("lower_group: a contraction kernel needs its one accumulator");
    k.accs = accs_;
    fold.accs = {0};
    k.phases = {fold, once};
    ir::widen_narrow(k);
    ir::verify_kernel(k);
  }

  // The contraction's accumulator: Sum over k of A[batch, m, k] * B[batch, k, n].
  ExprRef emit_contraction(const Node* c, const std::vector<ExprRef>& idx) {
    for (size_t a = 0; a < idx.size(); ++a)
      if (idx[a].get() != full_idx_[a].get() && !(ir::is_const(idx[a], 0) && c->shape[a] == 1))
        throw InternalError("lower_group: a matmul result consumed at a non-canonical index");
    // A narrow dtype's products and sum are computed in its compute type and rounded once, at
    // the end (docs/semantics.md): an f16/bf16 product is exact in f32 (11 + 11 or 8 + 8
    // significant bits), as in the hardware's dot products (AVX-512 BF16) and PyTorch's matmul.
    // Rounding every product to the dtype (the element-wise rule) cost up to 2^-9 of each term.
    const DType ct = compute_type(c->dtype);
    auto result = [&] {
      ExprRef a = ir::acc(0, ct);
      return ct == c->dtype ? a : ir::op(Op::Cast, c->dtype, {a});
    };
    if (!accs_.empty()) return result();
    const size_t nd = c->shape.size();
    const int64_t K = c->inputs[0]->shape.back();
    ExprRef r = ir::var(ir::Space::Reduce, 0);
    std::vector<ExprRef> ai(full_idx_.begin(), full_idx_.end() - 1), ad(full_dims_.begin(), full_dims_.end() - 1);
    ai.push_back(r);
    ad.push_back(ir::iconst(K));
    std::vector<ExprRef> bi(full_idx_.begin(), full_idx_.end() - 2), bd(full_dims_.begin(), full_dims_.end() - 2);
    bi.push_back(r);
    bd.push_back(ir::iconst(K));
    bi.push_back(full_idx_[nd - 1]);
    bd.push_back(full_dims_[nd - 1]);
    ExprRef pa = emit(c->inputs[0].get(), ai, ad, nullptr);
    ExprRef pb = emit(c->inputs[1].get(), bi, bd, nullptr);
    if (ct != c->dtype) {
      pa = ir::op(Op::Cast, ct, {pa});
      pb = ir::op(Op::Cast, ct, {pb});
    }
    accs_.push_back({ir::AccKind::Sum, ct, ir::op(Op::Mul, ct, {pa, pb})});
    return result();
  }

  // The seed of a rand node is a run-time parameter (its value is not in the kernel's text or
  // key), so a new seed reuses the compiled kernel; one parameter per rand node.
  ExprRef seed_param(const Node* n) {
    auto it = seed_param_.find(n);
    if (it != seed_param_.end()) return it->second;
    int id = static_cast<int>(kernel_->params.size());
    kernel_->params.push_back({"seed", n->attrs.ints[0]});
    return seed_param_[n] = ir::param(id);
  }

  int acc_depth(int a, std::vector<int>& depth, const std::function<int(const ExprRef&)>& need) {
    if (depth[a] < 0) depth[a] = need(accs_[a].value);
    return depth[a];
  }

  // Re-expresses a kept-shape access for a shape that differs only by size-1 dims.
  void squeeze_access(const Shape& to, std::vector<ExprRef>& idx, std::vector<ExprRef>& dims) {
    std::vector<ExprRef> ni, nd;
    size_t k = 0;
    Shape kept = kept_shape(sig_);
    for (int64_t d : to) {
      if (d == 1) {
        ni.push_back(ir::iconst(0));
        nd.push_back(ir::iconst(1));
        continue;
      }
      while (kept[k] == 1) ++k;
      ni.push_back(idx[k]);
      nd.push_back(dims[k]);
      ++k;
    }
    idx = std::move(ni);
    dims = std::move(nd);
  }

  // The value of `n` at index `idx` (dims: n's symbolic extents), loads masked by `guard`.
  ExprRef emit(const Node* n, const std::vector<ExprRef>& idx, const std::vector<ExprRef>& dims, ExprRef guard) {
    std::vector<const void*> key{n, guard.get()};
    for (const auto& i : idx) key.push_back(i.get());
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    ExprRef r = emit_uncached(n, idx, dims, guard);
    memo_[key] = r;
    return r;
  }

  ExprRef emit_uncached(const Node* n, const std::vector<ExprRef>& idx, const std::vector<ExprRef>& dims,
                        ExprRef guard) {
    auto bid = buffer_id_.find(n);
    if (bid != buffer_id_.end()) {
      ExprRef index = flat_ ? idx[0] : linearize(idx, dims);
      return ir::load(bid->second, n->dtype, index, guard);
    }
    if (n->op == Op::Const) return ir::constant(n->attrs.reals[0], n->dtype);
    if (n->op == Op::Iota) {
      // An integer arange whose values are integers the f64 form computes exactly (|v| < 2^53;
      // i32: within i32, where both casts agree) is index arithmetic: start + step * i in i64,
      // which the backends see through (affine in the loop variables: masks from positions,
      // jit/xbyak/index_masks.cpp) and compute without a float round trip.
      const double start = n->attrs.reals[0], step = n->attrs.reals[1];
      const double reach = std::fabs(start) + std::fabs(step) * static_cast<double>(n->shape.empty() ? 1 : n->shape[0]);
      const double exact = n->dtype == DType::I64 ? 0x1p53 : 0x1p31;
      if ((n->dtype == DType::I64 || n->dtype == DType::I32) && start == std::trunc(start) &&
          step == std::trunc(step) && reach < exact) {
        ExprRef v =
            ir::iadd(ir::iconst(static_cast<int64_t>(start)), ir::imul(idx[0], ir::iconst(static_cast<int64_t>(step))));
        return n->dtype == DType::I64 ? v : ir::op(Op::Cast, DType::I32, {v});
      }
      ExprRef i = ir::op(Op::Cast, DType::F64, {idx[0]});
      ExprRef v = ir::op(Op::Add, DType::F64,
                         {ir::constant(n->attrs.reals[0], DType::F64),
                          ir::op(Op::Mul, DType::F64, {ir::constant(n->attrs.reals[1], DType::F64), i})});
      return n->dtype == DType::F64 ? v : ir::op(Op::Cast, n->dtype, {v});
    }
    if (!members_.count(n)) throw InternalError(std::string("lower_group: value outside the group: ") + op_name(n->op));
    if (n == contraction_) return emit_contraction(n, idx);
    if (n->op == Op::Rand) {  // counter = the element's row-major index in the rand node's own shape
      ExprRef counter = flat_ ? idx[0] : linearize(idx, dims);
      return ir::random_value(n->dtype, n->attrs.ints[1] != 0, seed_param(n), counter);
    }
    if (is_elementwise(n->op)) {
      std::vector<ExprRef> args;
      for (const auto& in : n->inputs) args.push_back(emit(in.get(), idx, dims, guard));
      return ir::op(n->op, n->dtype, std::move(args));
    }
    if (is_reduction(n->op)) {
      // Consumed at the canonical outer index only (partition rule 4).
      for (size_t a = 0; a < idx.size(); ++a)
        if (idx[a].get() != kept_idx_[a].get() && !ir::is_const(idx[a], 0) && sig_.full[a] != 1)
          throw InternalError("lower_group: reduction consumed at a non-canonical index");
      auto ai = acc_id_.find(n);
      if (ai != acc_id_.end()) return ir::acc(ai->second, n->dtype);
      // A segment reduction reads its values [N, D] at (id, d) of the domain [B, N, D].
      ExprRef v = is_segment_reduction(n->op)
                      ? emit(n->inputs[0].get(), {full_idx_[1], full_idx_[2]}, {full_dims_[1], full_dims_[2]}, nullptr)
                      : emit(n->inputs[0].get(), full_idx_, full_dims_, nullptr);
      int id = static_cast<int>(accs_.size());
      accs_.push_back({ir::acc_kind(n->op), n->dtype, v});
      acc_id_[n] = id;
      return ir::acc(id, n->dtype);
    }
    const Node* x = n->inputs[0].get();
    std::vector<ExprRef> xi(x->shape.size()), xd(x->shape.size());
    switch (n->op) {
      case Op::Expand:
        for (size_t a = 0; a < xi.size(); ++a) {
          bool bcast = x->shape[a] == 1 && n->shape[a] != 1;
          xi[a] = bcast ? ir::iconst(0) : idx[a];
          xd[a] = bcast ? ir::iconst(1) : dims[a];
        }
        return emit(x, xi, xd, guard);
      case Op::Permute:
        for (size_t a = 0; a < idx.size(); ++a) {
          xi[n->attrs.ints[a]] = idx[a];
          xd[n->attrs.ints[a]] = dims[a];
        }
        return emit(x, xi, xd, guard);
      case Op::Slice:
        for (size_t a = 0; a < xi.size(); ++a) {
          int64_t start = n->attrs.ints[2 * a], step = n->attrs.ints[2 * a + 1];
          bool whole = start == 0 && step == 1 && x->shape[a] == n->shape[a];
          xi[a] = ir::iadd(ir::iconst(start), ir::imul(idx[a], ir::iconst(step)));
          xd[a] = whole ? dims[a] : ir::iconst(x->shape[a]);
        }
        return emit(x, xi, xd, guard);
      case Op::Pad: {
        ExprRef mask;
        for (size_t a = 0; a < xi.size(); ++a) {
          int64_t before = n->attrs.ints[2 * a], after = n->attrs.ints[2 * a + 1];
          if (before == 0 && after == 0) {
            xi[a] = idx[a];
            xd[a] = dims[a];
            continue;
          }
          xi[a] = ir::isub(idx[a], ir::iconst(before));
          xd[a] = ir::iconst(x->shape[a]);
          mask = band(mask, band(cmp(Op::Ge, xi[a], ir::iconst(0)), cmp(Op::Lt, xi[a], ir::iconst(x->shape[a]))));
        }
        ExprRef inner = emit(x, xi, xd, band(guard, mask));
        return ir::op(Op::Where, n->dtype, {mask, inner, ir::constant(n->attrs.reals[0], n->dtype)});
      }
      case Op::Concat: {
        int64_t axis = n->attrs.ints[0];
        ExprRef result;
        int64_t offset = n->shape[axis];
        for (size_t p = n->inputs.size(); p-- > 0;) {
          const Node* part = n->inputs[p].get();
          offset -= part->shape[axis];
          std::vector<ExprRef> pi = idx, pd = dims;
          pi[axis] = ir::isub(idx[axis], ir::iconst(offset));
          pd[axis] = ir::iconst(part->shape[axis]);
          ExprRef m = band(cmp(Op::Ge, idx[axis], ir::iconst(offset)),
                           cmp(Op::Lt, idx[axis], ir::iconst(offset + part->shape[axis])));
          ExprRef v = emit(part, pi, pd, band(guard, m));
          result = result ? ir::op(Op::Where, n->dtype, {m, v, result}) : v;
        }
        return result;
      }
      case Op::Reshape: return emit_reshape(n, x, idx, dims, guard);
      case Op::Gather: return emit_gather(n, x, idx, dims, guard);
      default: throw InternalError(std::string("lower_group: cannot lower ") + op_name(n->op));
    }
  }

  // x at idx with the gather axis replaced by the index value: a load whose index holds a load.
  ExprRef emit_gather(const Node* n, const Node* x, const std::vector<ExprRef>& idx, const std::vector<ExprRef>& dims,
                      ExprRef guard) {
    const size_t axis = static_cast<size_t>(n->attrs.ints[0]);
    const int64_t size = x->shape[axis];
    if (size == 0) return ir::constant(0, n->dtype);  // nothing to read (only reached with no index)
    ExprRef at = emit(n->inputs[1].get(), idx, dims, guard);
    if (at->dtype != DType::I64) at = ir::op(Op::Cast, DType::I64, {at});
    // Clamped: an unchecked index still reads inside x (CheckIndex is what reports it).
    at = ir::op(Op::Minimum, DType::I64, {ir::op(Op::Maximum, DType::I64, {at, ir::iconst(0)}), ir::iconst(size - 1)});
    std::vector<ExprRef> xi(idx.size()), xd(idx.size());
    for (size_t a = 0; a < idx.size(); ++a) {
      xi[a] = a == axis ? at : idx[a];
      xd[a] = a != axis && x->shape[a] == n->shape[a] ? dims[a] : ir::iconst(x->shape[a]);
    }
    return emit(x, xi, xd, guard);
  }

  ExprRef emit_reshape(const Node* n, const Node* x, const std::vector<ExprRef>& idx, const std::vector<ExprRef>& dims,
                       ExprRef guard) {
    // Squeeze/unsqueeze (only size-1 dims differ): map the other dims one to one, keeping them
    // symbolic.
    std::vector<size_t> nn, xn;
    for (size_t a = 0; a < n->shape.size(); ++a)
      if (n->shape[a] != 1) nn.push_back(a);
    for (size_t a = 0; a < x->shape.size(); ++a)
      if (x->shape[a] != 1) xn.push_back(a);
    std::vector<ExprRef> xi(x->shape.size(), ir::iconst(0)), xd(x->shape.size(), ir::iconst(1));
    bool same = nn.size() == xn.size();
    for (size_t k = 0; same && k < nn.size(); ++k) same = n->shape[nn[k]] == x->shape[xn[k]];
    if (same) {
      for (size_t k = 0; k < nn.size(); ++k) {
        xi[xn[k]] = idx[nn[k]];
        xd[xn[k]] = dims[nn[k]];
      }
      return emit(x, xi, xd, guard);
    }
    // General: linearise in the output's order, unravel over the input's concrete shape.
    ExprRef lin = linearize(idx, dims);
    // A contraction reads a reshaped buffer at the linear index (contiguous): no idiv/imod, so
    // the operand index stays affine (other kernels keep the unravelled form their prints pin).
    if (contraction_) {
      auto bid = buffer_id_.find(x);
      if (bid != buffer_id_.end()) return ir::load(bid->second, x->dtype, lin, guard);
    }
    if (x->shape.size() == 1) {
      ExprRef total = ir::iconst(1);
      for (const auto& d : dims) total = ir::imul(total, d);
      return emit(x, {lin}, {total}, guard);
    }
    if (reshape_groups(n, x, idx, dims, xi, xd)) return emit(x, xi, xd, guard);
    auto st = contiguous_strides(x->shape);
    for (size_t a = 0; a < x->shape.size(); ++a) {
      ExprRef q = ir::idiv(lin, ir::iconst(st[a]));
      xi[a] = a == 0 ? q : ir::imod(q, ir::iconst(x->shape[a]));
      xd[a] = ir::iconst(x->shape[a]);
    }
    return emit(x, xi, xd, guard);
  }

  // Whether the group's one output is a concat of parts of one shape along an axis other than the
  // innermost (torch.cat of [B, 1, D] features, of heads): the kernel then iterates over a part's
  // shape and stores each part's value at its offset along the axis, T stores per point. At
  // every output element it had selected its part through a chain of T - 1 wheres over T masked
  // loads, O(T) work per element: 9 parts [2048, 1, 64] (a recommender's interaction) ran at 7
  // GB/s and 64 parts [512, 1, 64] at 1.2 GB/s, where two parts ran at 29 (Zen 4, 2 threads).
  bool concat_of_equal_parts() const {
    if (g_.outputs.size() != 1) return false;
    const Node* o = g_.outputs[0];
    if (o->op != Op::Concat || o->inputs.size() < 2) return false;
    const Shape& part = o->inputs[0]->shape;
    if (static_cast<size_t>(o->attrs.ints[0]) + 1 >= o->shape.size() || shape_numel(part) == 0) return false;
    return std::all_of(o->inputs.begin(), o->inputs.end(), [&](const NodeRef& p) { return p->shape == part; });
  }

  // Whether every output of a pointwise group is a reshape that merges dims of values of one
  // shape T: the kernel then iterates over T and stores each value at its row-major offset,
  // which is where the reshape puts it. The reshapes cost nothing: merging attention's heads,
  // [B, S, H, D] -> [B, S, H*D] read through a permute, would otherwise divide every index by D
  // (and xbyak declines a load that is not affine in the innermost index: 4.5x slower on LLVM).
  bool outputs_merge_one_shape() const {
    const Shape* t = nullptr;
    for (const Node* o : g_.outputs) {
      if (o->op != Op::Reshape) return false;
      const Shape& in = o->inputs[0]->shape;
      if ((t && in != *t) || reshape_only_splits(o->shape, in)) return false;
      t = &in;
    }
    return t && shape_numel(*t) > 0;
  }

  // A reshape splits and merges runs of adjacent dims whose products match (core/reshape_runs.hpp):
  // [B*S, H*D] -> [B, S, H, D] is the runs [B*S] <- [B, S] and [H*D] <- [H, D]. Each input dim is indexed
  // from its own run alone: a run of one input dim takes the run's linear index (a split needs
  // no division: the head split of attention stays affine, so xbyak takes it and LLVM
  // vectorises it), a run of several input dims unravels the run's index (a merge: [64] <-
  // [32, 2] is o / 2 and o % 2). Linearising the whole index and unravelling it over the whole
  // input put an idiv/imod by the row length into every load of a split. False (the caller
  // takes the whole-index form) when an extent is 0 or no run is shorter than the whole shape.
  bool reshape_groups(const Node* n, const Node* x, const std::vector<ExprRef>& idx, const std::vector<ExprRef>& dims,
                      std::vector<ExprRef>& xi, std::vector<ExprRef>& xd) const {
    const auto& xs = x->shape;
    const auto runs = reshape_runs(n->shape, xs);
    if (runs.size() < 2) return false;
    size_t i0 = 0, j0 = 0;
    for (auto [i1, j1] : runs) {
      std::vector<ExprRef> ri(idx.begin() + i0, idx.begin() + i1), rd(dims.begin() + i0, dims.begin() + i1);
      ExprRef lin = linearize(ri, rd);
      if (j1 - j0 == 1) {
        xi[j0] = lin;
        xd[j0] = i1 - i0 == 1 ? dims[i0] : ir::iconst(xs[j0]);
      } else {
        int64_t st = 1;
        for (size_t a = j1; a-- > j0;) {
          ExprRef q = ir::idiv(lin, ir::iconst(st));
          xi[a] = a == j0 ? q : ir::imod(q, ir::iconst(xs[a]));
          xd[a] = ir::iconst(xs[a]);
          st *= xs[a];
        }
      }
      i0 = i1;
      j0 = j1;
    }
    return true;
  }

  const FusionGroup& g_;
  ir::Kernel* kernel_ = nullptr;       ///< the kernel being built (run's result)
  const Node* contraction_ = nullptr;  ///< the group's matmul, if any
  const Node* segment_ = nullptr;      ///< a segment reduction: the reduce domain is dynamic
  std::unordered_map<const Node*, ExprRef> seed_param_;
  std::unordered_set<const Node*> members_;
  std::unordered_map<const Node*, int> buffer_id_;
  ReduceSig sig_;
  bool flat_ = false;
  bool store_reshape_inputs_ = false;  ///< outputs_merge_one_shape(): the domain is the reshapes' input shape
  bool split_concat_ = false;          ///< concat_of_equal_parts(): the domain is a part's shape
  std::vector<ExprRef> full_idx_, full_dims_, kept_idx_, kept_dims_;
  std::vector<ir::Accumulator> accs_;
  std::unordered_map<const Node*, int> acc_id_;
  std::map<std::vector<const void*>, ExprRef> memo_;
};

}  // namespace

std::string kernel_stem(const FusionGroup& g) {
  std::string stem = "k";
  if (g.pattern != "lattice") {
    stem += "_" + g.pattern;
  } else {
    // The most telling ops: reductions and transcendental math first, at most three.
    std::vector<std::string> names;
    for (const Node* n : g.nodes)
      if ((is_reduction(n->op) || n->op == Op::Matmul) && names.size() < 3 &&
          std::find(names.begin(), names.end(), op_name(n->op)) == names.end())
        names.push_back(op_name(n->op));
    for (const Node* n : g.nodes)
      if (is_elementwise(n->op) && names.size() < 3 &&
          std::find(names.begin(), names.end(), op_name(n->op)) == names.end())
        names.push_back(op_name(n->op));
    if (names.empty() && !g.nodes.empty()) names.push_back(op_name(g.nodes.back()->op));
    for (const auto& s : names) stem += "_" + s;
  }
  DType dt = g.outputs.empty() ? DType::F32 : g.outputs[0]->dtype;
  return stem + "_" + dtype_name(dt);
}

LoweredKernel lower_group(const FusionGroup& g) {
  if (g.kind != GroupKind::Fused) throw InternalError("lower_group: only fused groups have kernel IR");
  if (g.custom_kernel) {  // a pattern supplied the kernel (lib/plugin); the partitioner checked its bindings
    LoweredKernel out;
    out.kernel = g.custom_kernel->kernel();
    if (out.kernel.name.empty()) out.kernel.name = kernel_stem(g);
    out.buffer_nodes = g.custom_kernel->inputs();
    out.buffer_nodes.insert(out.buffer_nodes.end(), g.custom_kernel->outputs().begin(),
                            g.custom_kernel->outputs().end());
    out.specialised.push_back("custom kernel of pattern " + g.pattern);
    return out;
  }
  return Lowerer(g).run();
}

}  // namespace kfuse::detail
