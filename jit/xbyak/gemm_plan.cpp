// xbyak backend: recognising a contraction kernel (gemm.hpp) and building its epilogue kernel.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "gemm.hpp"
#include "ir/expr_util.hpp"
#include "kfuse/error.hpp"

namespace kfuse::detail::xb {

using ir::ExprKind;
using ir::ExprRef;

namespace {

[[noreturn]] void decline(const std::string& why) { throw DeclineError("xbyak: contraction: " + why); }

bool var_free(const ir::Expr* e) {
  if (e->kind == ExprKind::Var || e->kind == ExprKind::Load || e->kind == ExprKind::Acc) return false;
  for (const auto& a : e->args)
    if (!var_free(a.get())) return false;
  return true;
}

// Affine in the vars: the strides are then the differences of evaluations at unit points.
bool affine(const ir::Expr* e) {
  if (e->dtype != DType::I64) return false;
  switch (e->kind) {
    case ExprKind::Const:
    case ExprKind::Param:
    case ExprKind::Var: return true;
    case ExprKind::IDiv:
    case ExprKind::IMod: return var_free(e);
    case ExprKind::Op:
      if (e->op == Op::Add || e->op == Op::Sub) return affine(e->args[0].get()) && affine(e->args[1].get());
      if (e->op == Op::Mul)
        return (var_free(e->args[0].get()) && affine(e->args[1].get())) ||
               (var_free(e->args[1].get()) && affine(e->args[0].get()));
      return false;
    default: return false;
  }
}

// e with every Acc(0) replaced by `with` (shared subexpressions stay shared). `f32_casts`:
// every cast.f32(Acc(0)) replaced instead, and `all` cleared where Acc(0) is read otherwise.
ExprRef replace_acc(const ExprRef& e, const ExprRef& with, std::unordered_map<const ir::Expr*, ExprRef>& memo,
                    bool f32_casts, bool& all) {
  if (f32_casts && e->kind == ExprKind::Op && e->op == Op::Cast && e->dtype == DType::F32 &&
      e->args[0]->kind == ExprKind::Acc)
    return with;
  if (e->kind == ExprKind::Acc) {
    if (!f32_casts) return with;
    all = false;
  }
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  std::vector<ExprRef> args;
  bool changed = false;
  for (const auto& a : e->args) {
    args.push_back(replace_acc(a, with, memo, f32_casts, all));
    changed |= args.back() != a;
  }
  ExprRef r = e;
  if (changed) {
    auto c = std::make_shared<ir::Expr>(*e);
    c->args = std::move(args);
    r = c;
  }
  memo.emplace(e.get(), r);
  return r;
}

// The one load under an operand expression (element-wise ops and constants around it), or null.
const ir::Expr* operand_load(const ir::Expr* e) {
  if (e->kind == ExprKind::Load) return e;
  if (e->kind == ExprKind::Const) return nullptr;
  if (e->kind != ExprKind::Op) decline("operand expression of kind " + std::to_string(int(e->kind)));
  const ir::Expr* found = nullptr;
  for (const auto& a : e->args)
    if (const ir::Expr* l = operand_load(a.get())) {
      if (found && found != l) decline("operand expression " + std::string(op_name(e->op)) + " reads two loads");
      found = l;
    }
  return found;
}

// The operand expression with its load (through the Cast to f32 when the buffer is narrower or
// wider) replaced by `with`, the f32 value packing produced.
ExprRef replace_operand_load(const ExprRef& e, const ir::Expr* ld, const ExprRef& with,
                             std::unordered_map<const ir::Expr*, ExprRef>& memo) {
  if (ld->dtype != DType::F32 && e->kind == ExprKind::Op && e->op == Op::Cast && e->dtype == DType::F32 &&
      e->args[0].get() == ld)
    return with;
  if (e.get() == ld) {
    if (ld->dtype != DType::F32)
      decline(std::string("a ") + dtype_name(ld->dtype) + " operand used other than through a cast to f32");
    return with;
  }
  if (auto it = memo.find(e.get()); it != memo.end()) return it->second;
  std::vector<ExprRef> args;
  for (const auto& a : e->args) args.push_back(replace_operand_load(a, ld, with, memo));
  auto c = std::make_shared<ir::Expr>(*e);
  c->args = std::move(args);
  memo.emplace(e.get(), c);
  return c;
}

// The prologue kernel of an operand expression around its load, or null for the plain f32 load.
std::shared_ptr<const ir::Kernel> prologue_kernel(const std::string& name, const ExprRef& e, const ir::Expr* ld) {
  if (e.get() == ld && ld->dtype == DType::F32) return nullptr;
  auto pro = std::make_shared<ir::Kernel>();
  pro->name = name;
  pro->kind = ir::KernelKind::Pointwise;
  pro->buffers = {{"in0", DType::F32, false}, {"out0", DType::F32, true}};
  pro->params = {{"outer0", 0}};
  pro->outer = {ir::param(0)};
  const ExprRef i = ir::var(ir::Space::Outer, 0);
  std::unordered_map<const ir::Expr*, ExprRef> memo;
  ExprRef v = replace_operand_load(e, ld, ir::load(0, DType::F32, i), memo);
  if (v->kind == ExprKind::Load) return nullptr;  // only the conversion: packing does it
  if (v->dtype != DType::F32) decline("operand expression of dtype " + std::string(dtype_name(v->dtype)));
  ir::Phase ph;
  ph.stores.push_back({1, i, v});
  pro->phases.push_back(std::move(ph));
  return pro;
}

bool reads_buffer(const ir::Expr* e, int b) {
  if (e->kind == ExprKind::Load && e->index == b) return true;
  for (const auto& a : e->args)
    if (reads_buffer(a.get(), b)) return true;
  return false;
}

bool packable_dtype(DType d) {
  switch (d) {
    case DType::F32:
    case DType::F64:
    case DType::F16:
    case DType::BF16:
    case DType::I8:
    case DType::U8:
    case DType::I32:
    case DType::I64: return true;
    default: return false;
  }
}

void check_no_reduce_var(const ir::Expr* e, const char* what) {
  if (ir::depends_on(e, ir::Space::Reduce, 0)) decline(std::string(what) + " uses the reduce index");
}

}  // namespace

const std::vector<std::string>& gemm_variants() {
  // Packed copies A and B into panels once per block (pays off when reused from cache); direct
  // reads them in place (no copies, strided A). Which wins depends on shape and cache sizes
  // beyond the static L2 rule of gemm_run.cpp, so measured selection may pick either.
  static const std::vector<std::string> v{"by size", "packed", "direct"};
  return v;
}

GemmForce gemm_force(const Options& o) {
  GemmForce f;
  if (o.gemm_path == "packed") f.path = 1;
  else if (o.gemm_path == "direct") f.path = 2;
  else if (!o.gemm_path.empty() && o.gemm_path != "auto")
    throw UserError("Options::gemm_path (KFUSE_GEMM_PATH) is '" + o.gemm_path +
                    "': use auto, packed or direct (or leave it empty for auto)");
  f.blocking = {o.gemm_blocking.mc, o.gemm_blocking.kc, o.gemm_blocking.nc};
  return f;
}

int64_t eval_affine(const ExprRef& e, const int64_t* params, const int64_t* outer, int64_t red) {
  switch (e->kind) {
    case ExprKind::Const: return static_cast<int64_t>(e->value);
    case ExprKind::Param: return params[e->index];
    case ExprKind::Var: return e->space == ir::Space::Outer ? outer[e->index] : red;
    case ExprKind::IDiv:
    case ExprKind::IMod: {
      int64_t a = eval_affine(e->args[0], params, outer, red), b = eval_affine(e->args[1], params, outer, red);
      int64_t q = a / b, r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) {
        --q;
        r += b;
      }
      return e->kind == ExprKind::IDiv ? q : r;
    }
    case ExprKind::Op: {
      int64_t a = eval_affine(e->args[0], params, outer, red), b = eval_affine(e->args[1], params, outer, red);
      return e->op == Op::Add ? a + b : e->op == Op::Sub ? a - b : a * b;
    }
    default: return 0;  // unreachable: gemm_analyze checked affine()
  }
}

std::string gemm_analyze(const ir::Kernel& k, GemmPlan& plan) {
  try {
    plan = GemmPlan{};
    const int nouter = static_cast<int>(k.outer.size());
    if (nouter < 2 || nouter > kMaxOuterDims) decline("needs 2 to 8 outer dims (batch..., M, N)");
    if (k.reduce.size() != 1) decline("needs exactly one reduce dim");
    if (k.accs.size() != 1 || k.accs[0].kind != ir::AccKind::Sum) decline("needs exactly one Sum accumulator");
    // i32 sums: u8 x i8 (a quantised activation times a quantised weight) on VNNI's dot product.
    const bool i32 = k.accs[0].dtype == DType::I32;
    if (k.accs[0].dtype != DType::F32 && !(i32 && dot_gemm(DotKind::U8S8)))
      decline(std::string(dtype_name(k.accs[0].dtype)) + " accumulator (the GEMM path is f32, and i32 of u8 x i8 " +
              "on AVX512_VNNI)");
    if (k.phases.size() != 2 || !k.phases[0].over_reduce || k.phases[0].accs != std::vector<int>{0} ||
        !k.phases[0].stores.empty() || k.phases[1].over_reduce || k.phases[1].stores.empty())
      decline("phases are not [reduce {acc 0}, once {stores}]");
    const ExprRef& v = k.accs[0].value;
    if (v->kind != ExprKind::Op || v->op != Op::Mul || v->args.size() != 2)
      decline("accumulated value is not a product");
    const int mdim = nouter - 2, ndim = nouter - 1;
    plan.nbatch = mdim;
    plan.K = k.reduce[0];
    // A: the factor without the N var; B: the one without the M var.
    const ExprRef* fa = &v->args[0];
    const ExprRef* fb = &v->args[1];
    if (ir::depends_on(fa->get(), ir::Space::Outer, ndim) || ir::depends_on(fb->get(), ir::Space::Outer, mdim))
      std::swap(fa, fb);
    const ir::Expr* loads[2];
    for (int side = 0; side < 2; ++side) {
      const ExprRef& f = side == 0 ? *fa : *fb;
      const ir::Expr* l = operand_load(f.get());
      if (!l) decline("an operand without a load");
      if (l->args.size() > 1) decline("masked operand load");
      if (!packable_dtype(l->dtype) || k.buffers[l->index].dtype != l->dtype)
        decline(std::string(dtype_name(l->dtype)) + " operand");
      if (!affine(l->args[0].get())) decline("operand index is not affine in the loop indices");
      loads[side] = l;
    }
    if (ir::depends_on(fa->get(), ir::Space::Outer, ndim) || ir::depends_on(fb->get(), ir::Space::Outer, mdim))
      decline("an operand depends on both M and N");
    plan.a_buf = loads[0]->index;
    plan.b_buf = loads[1]->index;
    plan.a_idx = loads[0]->args[0];
    plan.b_idx = loads[1]->args[0];
    plan.a_dt = loads[0]->dtype;
    plan.b_dt = loads[1]->dtype;
    plan.acc_dt = k.accs[0].dtype;
    if (i32) {  // exactly cast.i32(load u8) x cast.i32(load i8): no prologue, A the unsigned one
      auto widened = [](const ExprRef& f, const ir::Expr* l) {
        return f->kind == ExprKind::Op && f->op == Op::Cast && f->args[0].get() == l;
      };
      if (!widened(*fa, loads[0]) || !widened(*fb, loads[1]) || plan.a_dt != DType::U8 || plan.b_dt != DType::I8)
        decline("i32 accumulator of other operands than u8 (A, the M side) times i8 (B)");
    } else {
      plan.a_pro = prologue_kernel(k.name + "_prologue_a", *fa, loads[0]);
      plan.b_pro = prologue_kernel(k.name + "_prologue_b", *fb, loads[1]);
    }

    const auto& stores = k.phases[1].stores;
    for (const auto& s : stores) {
      if (!affine(s.index.get())) decline("output index is not affine in the outer indices");
      check_no_reduce_var(s.index.get(), "output index");
      check_no_reduce_var(s.value.get(), "epilogue");
    }
    const ir::Store& s0 = stores[0];
    const bool contiguous = ir::affine_step(s0.index.get(), ir::Space::Outer, ndim) == std::optional<int64_t>(1);
    const bool acc_out = k.buffers[s0.buffer].dtype == plan.acc_dt;
    if (stores.size() == 1 && contiguous && acc_out) {
      plan.c_buf = s0.buffer;
      plan.c_idx = s0.index;
      if (s0.value->kind == ExprKind::Acc) return {};  // C = A B: no epilogue
    }
    // The epilogue kernel: inputs, the accumulator, outputs.
    auto epi = std::make_shared<ir::Kernel>();
    const int nin = k.num_inputs();
    epi->name = k.name + "_epilogue";
    epi->kind = ir::KernelKind::Pointwise;
    epi->buffers.assign(k.buffers.begin(), k.buffers.begin() + nin);
    // Operand buffers the epilogue does not read keep their slot with an f32 type: the pointwise
    // emitter declines any kernel naming a buffer it cannot load (f16 weights, say).
    for (int b : {plan.a_buf, plan.b_buf}) {
      bool read = false;
      for (const auto& s : stores) read |= reads_buffer(s.value.get(), b);
      if (!read) epi->buffers[b].dtype = DType::F32;
    }
    epi->buffers.push_back({"acc", plan.acc_dt, false});
    epi->buffers.insert(epi->buffers.end(), k.buffers.begin() + nin, k.buffers.end());
    epi->params = k.params;
    epi->outer = k.outer;
    ExprRef acc_idx = plan.c_idx;
    if (plan.c_buf < 0) {
      // The scratch C's rows are the flat outer rows (batch dims, then M: how a launch whose
      // batch dims fold into M counts them), acc_ld apart. Indexed by M alone, every batch of a
      // folded launch had read the first batch's rows.
      epi->params.push_back({"acc_ld", 0});
      ExprRef row = ir::var(ir::Space::Outer, 0);
      for (int d = 1; d <= mdim; ++d) row = ir::iadd(ir::imul(row, k.outer[d]), ir::var(ir::Space::Outer, d));
      acc_idx = ir::iadd(ir::imul(row, ir::param(static_cast<int>(k.params.size()))), ir::var(ir::Space::Outer, ndim));
    }
    plan.epi_acc = nin;
    ir::Phase ph;
    if (plan.acc_dt == DType::I32) {
      // i32 sums read only as f32 (a dequantising epilogue, cast.f32(acc) * scale + bias): the
      // GEMM converts its block of C to f32 before the epilogue (one rounding, as the cast's), so
      // that the f32 emitter takes the rest. Other uses of the sums keep an i32 accumulator.
      bool all = true;
      std::unordered_map<const ir::Expr*, ExprRef> memo;
      const ExprRef accf = ir::load(nin, DType::F32, acc_idx);
      for (const auto& s : stores)
        ph.stores.push_back({s.buffer + 1, s.index, replace_acc(s.value, accf, memo, true, all)});
      if (all) {
        plan.acc_to_f32 = true;
        epi->buffers[nin].dtype = DType::F32;
      } else {
        ph.stores.clear();
      }
    }
    if (!plan.acc_to_f32) {
      const ExprRef accv = ir::load(nin, plan.acc_dt, acc_idx);
      std::unordered_map<const ir::Expr*, ExprRef> memo;
      bool unused = true;
      for (const auto& s : stores)
        ph.stores.push_back({s.buffer + 1, s.index, replace_acc(s.value, accv, memo, false, unused)});
    }
    epi->phases.push_back(std::move(ph));
    plan.epi = std::move(epi);
    return {};
  } catch (const DeclineError& d) { return d.what(); }
}

}  // namespace kfuse::detail::xb
