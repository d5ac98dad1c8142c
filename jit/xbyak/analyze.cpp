// xbyak backend: kernel analysis. Decides whether a kernel is in the supported subset and
// splits every Load/Store index into base(outer vars, params) + coeff * inner, coeff in {0, 1}.
#include <cstddef>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "ir/expr_util.hpp"
#include "segment.hpp"
#include "xbyak_backend.hpp"

namespace kfuse::detail::xb {

using ir::ExprKind;
using ir::ExprRef;

namespace {

// (the emitter's DeclineError: one type for every reason xbyak gives a kernel back)
[[noreturn]] void decline(const std::string& why) { throw DeclineError("xbyak: " + why); }

// Buffers whose elements the kernels hold in f32 lanes: f32, the narrow types (their values),
// and bool (lane masks; narrow.cpp converts the bytes).
bool stored_in_lanes(DType t) { return t == DType::F32 || t == DType::Bool || is_narrow(t); }

// Index expressions must be host-side integer arithmetic: the loops compute them from the
// outer indices and params, never from data.
void check_index(const ExprRef& e) {
  for (ExprKind k : {ExprKind::Load, ExprKind::Acc, ExprKind::Rand})
    if (ir::contains(e.get(), k)) decline("data-dependent index (load or accumulator inside an index)");
}

struct Affine {
  ExprRef base;  // null = 0
  int64_t coeff = 0;
};

ExprRef or_zero(const ExprRef& e) { return e ? e : ir::iconst(0); }

Affine split(const ExprRef& e, ir::Space s, int dim) {
  if (e->dtype != DType::I64) decline("index expression of dtype " + std::string(dtype_name(e->dtype)));
  check_index(e);
  auto a = ir::affine_split(e, s, dim);
  if (!a) decline("index not affine in the innermost loop variable: " + ir::print_expr(e));
  return {a->base, a->step};
}

// Comparison e of two i64 index expressions as D + k <pred> 0 with D = lhs - rhs = base + coeff *
// inner, coeff 0 or 1 (-1 is negated into 1; other strides decline); then k is folded into the
// base, and a comparison its constant base decides (the inner index is >= 0) is `known`.
struct CmpForm {
  ExprRef base;
  int coeff = 0;
  int64_t k = 0;
  IndexCmp::Pred pred = IndexCmp::Pred::Lt;
  int known = -1;
};
CmpForm index_compare(const ir::Expr& e, ir::Space s, int dim) {
  using P = IndexCmp::Pred;
  CmpForm f;
  switch (e.op) {
    case Op::Lt: f.pred = P::Lt; break;
    case Op::Le: f.pred = P::Lt, f.k = -1; break;  // D <= 0: D - 1 < 0
    case Op::Gt: f.pred = P::Ge, f.k = -1; break;  // D > 0: D - 1 >= 0
    case Op::Ge: f.pred = P::Ge; break;
    case Op::Eq: f.pred = P::Eq; break;
    case Op::Ne: f.pred = P::Ne; break;
    default: decline(std::string("i64 operand of ") + op_name(e.op) + " not supported");
  }
  const Affine a = split(ir::op(Op::Sub, DType::I64, {e.args[0], e.args[1]}), s, dim);
  f.base = or_zero(a.base);
  if (a.coeff == -1) {  // D + k <pred> 0 with D = -D': D' - k - 1 >= 0 for <, < 0 for >=; D' - k == 0
    f.base = ir::op(Op::Sub, DType::I64, {ir::iconst(0), f.base});
    f.k = f.pred == P::Eq || f.pred == P::Ne ? -f.k : -f.k - 1;
    if (f.pred == P::Lt) f.pred = P::Ge;
    else if (f.pred == P::Ge) f.pred = P::Lt;
  } else if (a.coeff != 0 && a.coeff != 1) {
    decline("comparison of an index with stride " + std::to_string(a.coeff) + " in the innermost loop variable");
  }
  f.coeff = a.coeff == 0 ? 0 : 1;
  if (f.k > (int64_t{1} << 40) || f.k < -(int64_t{1} << 40)) decline("index comparison with a constant beyond 2^40");
  f.base = ir::iadd(f.base, ir::iconst(f.k));
  f.k = 0;
  if (f.base->kind == ExprKind::Const) {  // X = c (+ inner >= 0)
    const double c = f.base->value;
    const bool lt = c < 0, eq = c == 0;
    if (f.coeff == 0) {
      const bool v = f.pred == P::Lt ? lt : f.pred == P::Ge ? !lt : f.pred == P::Eq ? eq : !eq;
      f.known = v ? 1 : 0;
    } else if (c >= 0 && !(eq && (f.pred == P::Eq || f.pred == P::Ne))) {
      f.known = f.pred == P::Ge || (f.pred == P::Ne && c > 0) ? 1 : 0;  // X >= c >= 0 (> 0 for Eq/Ne)
    }
  }
  return f;
}

bool supported_value_op(Op op) {
  switch (op) {
    case Op::Pow:
    case Op::Sin:
    case Op::Cos:
    // Integer ops (recording gives bools the logical ops instead): LLVM takes the kernel.
    case Op::BitAnd:
    case Op::BitOr:
    case Op::BitXor:
    case Op::BitNot:
    case Op::Shl:
    case Op::Shr: return false;
    default: return true;
  }
}

// Rows across lanes: every base must be base(o) + c * o in the single row variable, stores of
// different rows must not overlap, and no buffer may be both loaded and stored (rows of one
// 16-row group run phase by phase together).
void lane_plan(const ir::Kernel& k, Plan& plan) {
  if (plan.mode != Mode::Row || plan.row_dims != 1 || plan.reduce_n > kLaneMaxReduce) return;
  for (const auto& a : plan.addrs)  // (gathers and scatters of f32 lanes)
    if (a.dtype != DType::F32) return;
  std::vector<int64_t> stride;
  for (const auto& b : plan.bases) {
    try {
      Affine a = split(b, ir::Space::Outer, 0);
      if (a.coeff > (1 << 22) || a.coeff < -(1 << 22)) return;  // byte offsets of 2W rows fit in 32 bits
      stride.push_back(a.coeff);
    } catch (const DeclineError&) { return; }
  }
  std::unordered_set<int> loaded;
  for (const auto& [e, a] : plan.loads) loaded.insert(plan.addrs[a.addr].buffer);
  std::map<int, int> store_addr;  // buffer -> the one address it is stored through
  for (const auto& ph : plan.stores)
    for (const auto& s : ph) {
      int buf = plan.addrs[s.addr].buffer;
      if (loaded.count(buf)) return;
      auto [it, fresh] = store_addr.emplace(buf, s.addr);
      if (!fresh && it->second != s.addr) return;
      int64_t c = stride[plan.addrs[s.addr].base];
      int64_t span = s.coeff ? plan.reduce_n : 1;
      if (c < span && -c < span) return;
    }
  plan.lanes = true;
  plan.lane_stride = std::move(stride);
}

// e with every subexpression structurally equal to `what` replaced by `with` (found: any was).
ExprRef substitute(const ExprRef& e, const ir::Expr* what, const ExprRef& with, bool& found) {
  if (ir::same_expr(e.get(), what)) {
    found = true;
    return with;
  }
  std::vector<ExprRef> args;
  bool changed = false;
  for (const auto& a : e->args) {
    args.push_back(substitute(a, what, with, found));
    changed |= args.back() != a;
  }
  if (!changed) return e;
  auto c = std::make_shared<ir::Expr>(*e);
  c->args = std::move(args);
  return c;
}

bool has_math_function(const ir::Expr* e) {
  if (scratch_count(e) > 1) return true;
  for (const auto& a : e->args)
    if (has_math_function(a.get())) return true;
  return false;
}

bool depends_on_row(const ExprRef& e) {
  if (e->kind == ExprKind::Var && e->space == ir::Space::Outer) return true;
  for (const auto& a : e->args)
    if (depends_on_row(a)) return true;
  return false;
}

// Plan::reuse for a pipelined kernel: one store, recomputing the value the loop it joins sums.
// Only for values with a math function: for cheap ones (x*x) a store and a load cost more than
// they save. Per-row code only (not rows across lanes), rows of at most kReuseMaxReduce (the
// row and the scratch row stay in L2), and a pointer register free for the scratch row (one
// pointer: the same row serves this row and the previous one). softmax, 1 thread, kernel
// alone: [4096,1024] 2.1 -> 1.5-1.7 ms (log_softmax: 1.5 ms), in cache [64,1024] 30 -> 19-25 us. Against the online
// loop (whose terms are relative to a running maximum, so the store computes the exps again: twice the exps, but one
// loop that reads row i while it writes row i-1, where this plan reads row i in its max loop and writes in the next):
// on the AVX-512 Xeon the online loop wins from kOnlineOverReuse on (softmax, kernel alone, 1 / 2 threads, reuse vs
// online: [8192,32000] 164-173 vs 138-142 / 87 vs 82 ms, [21845,12288] 168-171 vs 128-146 / 85-89 vs 75-76,
// [2048,16384] 20-22 vs 17-19, [4096,8192] 21.4-21.6 vs 18.2-19.9 / 8.7-9.4 vs 8.0-8.3; [5461,6144] 18.2 vs 19.3 / 8.8
// vs 9.4 and [43690,6144] 142-151 vs 144 / 80-83 vs 82-83 stay with this plan). (Session 4 measured on the AMD VM,
// before the online loop prefetched and kept its constants in registers, this plan ahead everywhere.)
void reuse_plan(const ir::Kernel& k, Plan& plan) {
  const size_t q = k.phases.size() - 1, j = q - 1;
  if (plan.lanes || plan.reduce_n > kReuseMaxReduce || stream_pointers(plan, true) + 1 > kPipelinePointers) return;
  const ir::Phase &join = k.phases[j], &last = k.phases[q];
  if (last.stores.size() != 1 || join.accs.size() != 1) return;
  const ir::Accumulator& a = k.accs[static_cast<size_t>(join.accs[0])];
  if (a.kind != ir::AccKind::Sum || !has_math_function(a.value.get())) return;
  const ir::Store& st = last.stores[0];
  bool found = false;
  ExprRef ld = ir::load(st.buffer, DType::F32, st.index);
  ExprRef value = substitute(st.value, a.value.get(), ld, found);
  if (!found) return;
  const Access scratch{static_cast<int>(plan.addrs.size()), 1};
  plan.addrs.push_back({kScratchBuffer, -1});
  plan.loads[ld.get()] = scratch;
  plan.reuse = std::make_shared<const Plan::Reuse>(
      Plan::Reuse{{st.buffer, st.index, a.value}, {st.buffer, st.index, value}, ld, scratch});
  plan.scratch_bytes = (plan.reduce_n * 4 + 63) / 64 * 64;
}

// Online softmax (online.cpp) for rows of at least kOnlineMinReduce elements. A shorter row
// stays in L1 between the max loop and the exp-sum loop, so the second pass costs little, while
// the online loop pays a rescale per block in which the maximum grew (most blocks of a short
// row: often a mispredicted branch) and per-row work (horizontal reductions, an exp, the
// fix-ups). log_softmax, 1 thread, kernel alone, both pipelined: [16384,1024] 7.2 ms online vs
// 5.5 two loops, [8192,2048] 6.2 vs 5.5, [4096,4096] 6.1-6.3 vs 6.0, [2730,6144] 5.8-6.0 vs
// 6.0, [2048,8192] 5.7 vs 6.2, [524,32000] 5.3 vs 6.2.
// The row pipeline: the last loop only stores, the loop before it accumulates (or is the online
// pair), the ones before that only accumulate; the pointers (this row's, and the previous row's
// of the streams that move with the row) must fit the registers kept for them. layer_norm
// (x, weight, bias, y: 6 pointers) in cache, 1 thread, [512,512]: 0.053 -> 0.047 ms.
bool pipelinable(const ir::Kernel& k, const Plan& plan) {
  const size_t np = k.phases.size();
  if (np < 2 || stream_pointers(plan, true) > kPipelinePointers) return false;
  const ir::Phase &last = k.phases[np - 1], &join = k.phases[np - 2];
  if (!last.over_reduce || !last.accs.empty() || last.stores.empty()) return false;
  if (!join.over_reduce || join.accs.empty() || !join.stores.empty()) return false;
  for (size_t p = 0; p + 2 < np; ++p)
    if (!k.phases[p].over_reduce || !k.phases[p].stores.empty()) return false;
  return true;
}

void row_plan(const ir::Kernel& k, Plan& plan) {
  if (plan.mode != Mode::Row) return;
  plan.pipeline = pipelinable(k, plan);
  if (plan.reduce_n >= kOnlineMinReduce) plan.online = ir::find_online_exp_sum(k);
  if (plan.pipeline && (plan.online.phase < 0 || plan.reduce_n < kOnlineOverReuse)) reuse_plan(k, plan);
  if (plan.reuse) plan.online = ir::OnlineExpSum{};
}
}  // namespace

int stream_pointers(const Plan& plan, bool pipeline, std::vector<int>* prev_ptr) {
  const int naddr = static_cast<int>(plan.addrs.size());
  int n = naddr;
  for (int a = 0; a < naddr; ++a) {
    const int b = plan.addrs[a].base;
    const bool moves = pipeline && plan.addrs[a].buffer != kScratchBuffer && depends_on_row(plan.bases[b]);
    if (prev_ptr) prev_ptr->push_back(moves ? n : a);
    n += moves ? 1 : 0;
  }
  return n;
}

std::string analyze(const ir::Kernel& k, Plan& plan) {
  try {
    plan = Plan{};
    // Contractions (matmul) need GEMM code (register tiles over M and N), not this row walk.
    if (k.kind == ir::KernelKind::Contraction)
      decline("contraction: runs on the GEMM path (gemm_plan.cpp), not as rows");
    // Bags walk their dynamic id ranges (segment.hpp); the LLVM backend runs what they decline.
    if (k.dynamic_reduce()) return analyze_segment(k, plan);
    if (k.has_gather()) decline("gather (a load index that reads memory): runs on LLVM");
    if (k.outer.size() > static_cast<size_t>(kMaxOuterDims)) decline("more than 8 outer dimensions");
    if (k.accs.size() > static_cast<size_t>(kMaxAccs)) decline("more than 64 accumulators");
    // Narrow storage (narrow.cpp): values held in f32 lanes, converted at loads and stores (bool
    // bytes to and from lane masks).
    for (const auto& b : k.buffers)
      if (!stored_in_lanes(b.dtype))
        decline(std::string(dtype_name(b.dtype)) + " buffer '" + b.name +
                "' (f32, bool, u8, i8, f16 and bf16 buffers only)");
    if (k.reduce.size() > 1) decline("more than one reduce dimension");
    for (const auto& o : k.outer) check_index(o);
    bool has_reduce = !k.reduce.empty();
    if (has_reduce && k.reduce[0] <= 0) decline("empty reduce domain");
    if (has_reduce && k.reduce[0] >= (int64_t{1} << 31)) decline("reduce extent >= 2^31");
    for (const auto& a : k.accs) {
      if (a.kind == ir::AccKind::ArgMax || a.kind == ir::AccKind::ArgMin)
        decline(std::string(ir::acc_kind_name(a.kind)) + " accumulators are not supported");
      if (a.dtype != DType::F32) decline(std::string(dtype_name(a.dtype)) + " accumulator");
    }
    ir::Space is = ir::Space::Reduce;
    int idim = 0;
    if (!has_reduce) {
      plan.mode = Mode::Pointwise;
      if (k.outer.empty()) {
        plan.scalar = true;
        is = ir::Space::Outer;
        idim = -1;  // no inner variable
      } else {
        is = ir::Space::Outer;
        idim = static_cast<int>(k.outer.size()) - 1;
      }
      plan.row_dims = k.outer.empty() ? 0 : idim;
      for (const auto& ph : k.phases)
        if (ph.over_reduce) decline("reduce phase without a reduce domain");
    } else {
      plan.mode = k.outer.empty() ? Mode::Global : Mode::Row;
      plan.row_dims = static_cast<int>(k.outer.size());
      plan.reduce_n = k.reduce[0];
    }

    std::unordered_map<ExprRef, int, ir::ExprStructHash, ir::ExprStructEq> base_ids;  // structural identity
    std::map<std::pair<int, int>, int> addr_ids;                                      // (buffer, base) -> id
    auto access = [&](int buffer, const ExprRef& index, bool in_loop) -> Access {
      Affine a = split(index, is, idim);
      if (a.coeff != 0 && a.coeff != 1)
        decline("stride " + std::to_string(a.coeff) + " in the innermost loop variable (only 0 and 1)");
      if (!in_loop && a.coeff != 0) decline("internal: inner variable outside a loop");
      ExprRef base = or_zero(a.base);
      auto [bit, bnew] = base_ids.emplace(base, static_cast<int>(plan.bases.size()));
      if (bnew) plan.bases.push_back(base);
      auto [ait, anew] = addr_ids.emplace(std::make_pair(buffer, bit->second), static_cast<int>(plan.addrs.size()));
      if (anew) plan.addrs.push_back({buffer, bit->second, k.buffers[static_cast<size_t>(buffer)].dtype});
      return {ait->second, static_cast<int>(a.coeff)};
    };

    // An index stream (kIndexBuffer): the value of `base` per row, e.g. a comparison's or a random
    // counter's (index_masks.cpp, random.cpp).
    auto index_stream = [&](const ExprRef& base) {
      auto [bit, bnew] = base_ids.emplace(base, static_cast<int>(plan.bases.size()));
      if (bnew) plan.bases.push_back(base);
      auto [ait, anew] =
          addr_ids.emplace(std::make_pair(kIndexBuffer, bit->second), static_cast<int>(plan.addrs.size()));
      if (anew) plan.addrs.push_back({kIndexBuffer, bit->second, DType::I64});
      return ait->second;
    };

    std::unordered_set<const ir::Expr*> seen;
    std::function<void(const ExprRef&, bool)> value = [&](const ExprRef& e, bool in_loop) {
      if (!seen.insert(e.get()).second) return;
      switch (e->kind) {
        case ExprKind::Const:
          if (e->dtype != DType::F32 && e->dtype != DType::Bool)
            decline(std::string(dtype_name(e->dtype)) + " arithmetic not supported");
          return;
        case ExprKind::Acc: return;
        case ExprKind::Load:
          if (e->args.size() > 1) {  // (an op over its condition: index_masks.cpp)
            if (k.buffers[static_cast<size_t>(e->index)].dtype != DType::F32) decline("masked load of a narrow buffer");
            if (e->args[1]->dtype != DType::Bool) decline("load masked by a non-bool condition");
            value(e->args[1], in_loop);
          }
          plan.loads[e.get()] = access(e->index, e->args[0], in_loop);
          if (e->args.size() > 1 && plan.loads[e.get()].coeff == 0) decline("masked broadcast load");
          return;
        case ExprKind::Var:
        case ExprKind::Param:
        case ExprKind::IDiv:
        case ExprKind::IMod: decline("i64 arithmetic not supported (index used as a value)");
        case ExprKind::Rand: {  // f32 uniform: the counter hash in 64-bit lanes (random.cpp)
          if (e->dtype != DType::F32) decline(std::string(dtype_name(e->dtype)) + " random numbers");
          const Affine seed = split(e->args[0], is, idim), counter = split(e->args[1], is, idim);
          if (seed.coeff != 0) decline("random seed that varies along the row");
          if (counter.coeff != 0 && counter.coeff != 1)
            decline("random counter with stride " + std::to_string(counter.coeff) + " in the innermost loop variable");
          if (!in_loop && counter.coeff != 0) decline("internal: inner variable outside a loop");
          plan.rands[e.get()] = {index_stream(or_zero(seed.base)), index_stream(or_zero(counter.base)),
                                 static_cast<int>(counter.coeff)};
          return;
        }
        case ExprKind::Op: break;
      }
      const bool compares = e->op == Op::Lt || e->op == Op::Le || e->op == Op::Gt || e->op == Op::Ge ||
                            e->op == Op::Eq || e->op == Op::Ne;
      if (compares && e->args[0]->dtype == DType::I64) {  // (index_masks.cpp)
        CmpForm f = index_compare(*e, is, idim);
        if (!in_loop && f.coeff != 0) decline("internal: inner variable outside a loop");
        plan.cmps[e.get()] = {index_stream(f.base), f.coeff, f.pred, f.known};
        return;
      }
      // Narrow values (f32 lanes holding values of the narrow type): only casts to a narrow type
      // of an f32 or narrow value (f16/bf16 round; u8/i8 truncate and wrap: exact in f32) and
      // cast.f32 of a narrow value (exact) compute with them.
      const bool rounds =
          e->op == Op::Cast && is_narrow(e->dtype) && (e->args[0]->dtype == DType::F32 || is_narrow(e->args[0]->dtype));
      const bool widens = e->op == Op::Cast && e->dtype == DType::F32 && is_narrow(e->args[0]->dtype);
      if (e->dtype != DType::F32 && e->dtype != DType::Bool && !rounds)
        decline(std::string(dtype_name(e->dtype)) + " arithmetic not supported (" + op_name(e->op) + ")");
      if (!supported_value_op(e->op)) decline(std::string("op ") + op_name(e->op) + " not supported");
      if (e->op == Op::Fma && e->dtype != DType::F32) decline("fma of bools");
      for (const auto& a : e->args) {
        if (a->dtype != DType::F32 && a->dtype != DType::Bool && !widens && !rounds)
          decline(std::string(dtype_name(a->dtype)) + " operand of " + op_name(e->op) + " not supported");
        value(a, in_loop);
      }
      if (e->op == Op::Cast && e->dtype == DType::F32 && e->args[0]->dtype != DType::F32 &&
          e->args[0]->dtype != DType::Bool && !widens)
        decline("cast not supported");
    };

    plan.stores.resize(k.phases.size());
    for (size_t p = 0; p < k.phases.size(); ++p) {
      const auto& ph = k.phases[p];
      bool in_loop = ph.over_reduce || (plan.mode == Mode::Pointwise);
      seen.clear();
      for (int a : ph.accs) {
        if (k.accs[a].value->dtype != DType::F32) decline("non-f32 accumulated value");
        value(k.accs[a].value, in_loop);
      }
      for (const auto& s : ph.stores) {
        const DType to = k.buffers[static_cast<size_t>(s.buffer)].dtype;
        if (s.value->dtype != to || !stored_in_lanes(to))
          decline(std::string(dtype_name(s.value->dtype)) + " store into a " + dtype_name(to) + " buffer");
        value(s.value, in_loop);
        Access acc = access(s.buffer, s.index, in_loop);
        if (in_loop && acc.coeff == 0 && !plan.scalar)
          decline("store not contiguous in the innermost loop variable (same element stored repeatedly)");
        plan.stores[p].push_back(acc);
      }
    }
    if (plan.mode == Mode::Row && plan.row_dims >= 1)
      for (const auto& b : plan.bases) {
        int64_t stride = 0;
        try {
          stride = split(b, ir::Space::Outer, plan.row_dims - 1).coeff;
        } catch (const DeclineError&) {  // not affine in the row index: no prefetch for this stream
        }
        plan.row_stride.push_back(stride);
      }
    lane_plan(k, plan);
    row_plan(k, plan);
    return {};
  } catch (const DeclineError& d) { return d.what(); }
}

}  // namespace kfuse::detail::xb
