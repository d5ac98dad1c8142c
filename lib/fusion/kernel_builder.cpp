// The public kernel builder (pattern.hpp) over the kernel IR (ir/kernel.hpp): every call checks
// its operands and throws UserError naming the mistake; build() runs the IR verifier.
#include <algorithm>

#include "ir/kernel.hpp"
#include "ir/widen_narrow.hpp"
#include "kfuse/error.hpp"
#include "kfuse/pattern.hpp"

namespace kfuse {

struct KernelBuilder::State {
  ir::Kernel k;
  std::vector<const Node*> inputs, outputs;
  bool in_phase = false;
};

namespace {
[[noreturn]] void fail(const std::string& what) { throw UserError("KernelBuilder: " + what); }
const ir::ExprRef& need(const std::shared_ptr<const ir::Expr>& e, const char* what) {
  if (!e) fail(std::string(what) + ": undefined expression (a default-constructed KExpr)");
  return e;
}
}  // namespace

DType KExpr::dtype() const {
  if (!e_) throw UserError("KExpr::dtype: undefined expression");
  return e_->dtype;
}

std::string CustomKernel::text() const { return kernel_ ? ir::print_kernel(*kernel_) : std::string(); }

KernelBuilder::KernelBuilder() : s_(std::make_unique<State>()) {}
KernelBuilder::~KernelBuilder() = default;

int KernelBuilder::input(const Node& n) {
  if (!s_->outputs.empty()) fail("input() after output(): declare every input first");
  if (std::find(s_->inputs.begin(), s_->inputs.end(), &n) != s_->inputs.end())
    fail(std::string("input() bound twice to the same ") + op_name(n.op) + " value");
  int id = static_cast<int>(s_->k.buffers.size());
  s_->k.buffers.push_back({"in" + std::to_string(s_->inputs.size()), n.dtype, false});
  s_->inputs.push_back(&n);
  return id;
}

int KernelBuilder::output(const Node& n) {
  if (std::find(s_->outputs.begin(), s_->outputs.end(), &n) != s_->outputs.end())
    fail(std::string("output() bound twice to the same ") + op_name(n.op) + " node");
  int id = static_cast<int>(s_->k.buffers.size());
  s_->k.buffers.push_back({"out" + std::to_string(s_->outputs.size()), n.dtype, true});
  s_->outputs.push_back(&n);
  return id;
}

KExpr KernelBuilder::outer(int64_t extent) {
  if (extent < 0) fail("outer(): negative extent");
  int pid = static_cast<int>(s_->k.params.size());
  s_->k.params.push_back({"outer" + std::to_string(s_->k.outer.size()), extent});
  s_->k.outer.push_back(ir::param(pid));
  return KExpr(ir::var(ir::Space::Outer, static_cast<int>(s_->k.outer.size()) - 1));
}

KExpr KernelBuilder::outer_extent(int k) const {
  if (k < 0 || k >= static_cast<int>(s_->k.outer.size()))
    fail("outer_extent(" + std::to_string(k) + "): no such dimension");
  return KExpr(s_->k.outer[k]);
}

KExpr KernelBuilder::reduce(int64_t extent) {
  if (extent < 0) fail("reduce(): negative extent");
  s_->k.reduce.push_back(extent);
  return KExpr(ir::var(ir::Space::Reduce, static_cast<int>(s_->k.reduce.size()) - 1));
}

KExpr KernelBuilder::index(int64_t v) const { return KExpr(ir::iconst(v)); }
KExpr KernelBuilder::constant(double v, DType dt) const { return KExpr(ir::constant(v, dt)); }

KExpr KernelBuilder::load(int buffer, const KExpr& index, const KExpr& mask) const {
  if (buffer < 0 || buffer >= static_cast<int>(s_->k.buffers.size()) || s_->k.buffers[buffer].output)
    fail("load(" + std::to_string(buffer) + "): not an input buffer id");
  if (need(index.e_, "load index")->dtype != DType::I64) fail("load(): the index must be an i64 expression");
  if (mask.e_ && mask.e_->dtype != DType::Bool) fail("load(): the mask must be bool");
  return KExpr(ir::load(buffer, s_->k.buffers[buffer].dtype, index.e_, mask.e_));
}

KExpr KernelBuilder::apply(Op op, DType dt, std::vector<KExpr> args) const {
  int arity = op == Op::Where || op == Op::Fma ? 3
              : op == Op::Cast                 ? 1
              : is_unary_elementwise(op)       ? 1
              : is_binary_elementwise(op)      ? 2
                                               : -1;
  if (arity < 0) fail(std::string("apply(") + op_name(op) + "): not an element-wise op");
  if (static_cast<int>(args.size()) != arity)
    fail(std::string("apply(") + op_name(op) + "): takes " + std::to_string(arity) + " operands, got " +
         std::to_string(args.size()));
  std::vector<ir::ExprRef> a;
  for (auto& x : args) a.push_back(need(x.e_, "apply operand"));
  return KExpr(ir::op(op, dt, std::move(a)));
}

#define KFUSE_INDEX_OP(fn, irfn)                                                      \
  KExpr KernelBuilder::fn(const KExpr& a, const KExpr& b) const {                     \
    if (need(a.e_, #fn)->dtype != DType::I64 || need(b.e_, #fn)->dtype != DType::I64) \
      fail(#fn "(): index arithmetic needs i64 operands (use apply() for values)");   \
    return KExpr(ir::irfn(a.e_, b.e_));                                               \
  }
KFUSE_INDEX_OP(add, iadd)
KFUSE_INDEX_OP(sub, isub)
KFUSE_INDEX_OP(mul, imul)
KFUSE_INDEX_OP(div, idiv)
KFUSE_INDEX_OP(mod, imod)
#undef KFUSE_INDEX_OP

void KernelBuilder::begin_phase(bool over_reduce) {
  ir::Phase p;
  p.over_reduce = over_reduce;
  s_->k.phases.push_back(p);
  s_->in_phase = true;
}

KExpr KernelBuilder::accumulate(Reduce kind, const KExpr& value) {
  if (!s_->in_phase || !s_->k.phases.back().over_reduce)
    fail("accumulate(): call begin_phase(true) first (accumulators fold over the reduce domain)");
  const ir::ExprRef& v = need(value.e_, "accumulate value");
  ir::AccKind k = kind == Reduce::Sum    ? ir::AccKind::Sum
                  : kind == Reduce::Prod ? ir::AccKind::Prod
                  : kind == Reduce::Max  ? ir::AccKind::Max
                                         : ir::AccKind::Min;
  int id = static_cast<int>(s_->k.accs.size());
  s_->k.accs.push_back({k, v->dtype, v});
  s_->k.phases.back().accs.push_back(id);
  return KExpr(ir::acc(id, v->dtype));
}

void KernelBuilder::store(int buffer, const KExpr& index, const KExpr& value) {
  if (!s_->in_phase) fail("store(): call begin_phase() first");
  if (buffer < 0 || buffer >= static_cast<int>(s_->k.buffers.size()) || !s_->k.buffers[buffer].output)
    fail("store(" + std::to_string(buffer) + "): not an output buffer id");
  if (need(index.e_, "store index")->dtype != DType::I64) fail("store(): the index must be an i64 expression");
  if (need(value.e_, "store value")->dtype != s_->k.buffers[buffer].dtype)
    fail(std::string("store(): the value is ") + dtype_name(value.e_->dtype) + " but buffer " +
         s_->k.buffers[buffer].name + " is " + dtype_name(s_->k.buffers[buffer].dtype) + " (apply Op::Cast)");
  s_->k.phases.back().stores.push_back({buffer, index.e_, value.e_});
}

CustomKernel KernelBuilder::build(const std::string& name) const {
  if (s_->outputs.empty()) fail("build(): the kernel writes no output");
  auto k = std::make_shared<ir::Kernel>(s_->k);
  k->name = name;
  k->kind = k->reduce.empty()  ? ir::KernelKind::Pointwise
            : k->outer.empty() ? ir::KernelKind::Global
                               : ir::KernelKind::Row;
  try {
    ir::widen_narrow(*k);
    ir::verify_kernel(*k);
  } catch (const InternalError& e) { throw UserError(std::string("KernelBuilder: build(): ") + e.what()); }
  CustomKernel c;
  c.kernel_ = std::move(k);
  c.inputs_ = s_->inputs;
  c.outputs_ = s_->outputs;
  return c;
}

}  // namespace kfuse
