// The reference backend: an interpreter of the kernel IR. It runs any kernel, so it closes every
// CPU backend chain, and it is tested differentially against the graph evaluator: a mismatch
// there means the PLAN (partition or lowering) is wrong, not a code generator.
//
// Each phase's expression DAG is flattened once into a linear program (shared subexpressions
// computed once per point). Values are exact elements of each expression's dtype
// (lib/eval/exact_value.hpp): integers in int64, wrapped to their dtype by every op, so i64
// beyond 2^53 stays exact; floats in double, rounded to f32 after every f32 op, as compiled code
// rounds them. Accumulators fold exactly (integers) or in long double and are rounded to their
// dtype at the end of their phase.
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "../eval/exact_value.hpp"
#include "../eval/reference_eval.hpp"
#include "core/random.hpp"
#include "backend/thread_pool.hpp"
#include "backend/factories.hpp"
#include "kfuse/error.hpp"
#include "kfuse/tensor.hpp"

namespace kfuse::detail {

namespace {

using ir::ExprKind;
using ir::ExprRef;

// The interpreter rounds every f32 (and f16/bf16) result, as compiled code does (the evaluator
// keeps doubles).
Num rounded(Num v, DType dt) { return is_float(dt) && dt != DType::F64 ? float_num(round_to_dtype(v.f, dt)) : v; }

// One flattened expression DAG.
struct Program {
  std::vector<const ir::Expr*> code;        // topological order
  std::vector<std::vector<int>> arg_slots;  // per code entry: its arguments' slots
  std::unordered_map<const ir::Expr*, int> slot;

  int add(const ExprRef& e) {
    auto it = slot.find(e.get());
    if (it != slot.end()) return it->second;
    // Masked loads must not evaluate their index when the mask is false, but an index is plain
    // arithmetic; it is the memory access that the mask guards (see eval below).
    std::vector<int> args;
    for (const auto& a : e->args) args.push_back(add(a));
    int s = static_cast<int>(code.size());
    code.push_back(e.get());
    arg_slots.push_back(std::move(args));
    slot[e.get()] = s;
    return s;
  }
};

struct Ctx {
  const ir::Kernel* k;
  const ir::LaunchArgs* args;
  std::vector<int64_t> outer_idx, red_idx;
  std::vector<Num> accs;
};

void run_program(const Program& p, Ctx& c, std::vector<Num>& v) {
  v.resize(p.code.size());
  for (size_t i = 0; i < p.code.size(); ++i) {
    const ir::Expr* e = p.code[i];
    const std::vector<int>& as = p.arg_slots[i];
    Num r = int_num(0);
    switch (e->kind) {
      case ExprKind::Const: r = num_from_double(e->value, e->dtype); break;
      case ExprKind::Var:
        r = int_num(e->space == ir::Space::Outer ? c.outer_idx[e->index] : c.red_idx[e->index]);
        break;
      case ExprKind::Param: r = int_num(c.args->params[e->index]); break;
      case ExprKind::Acc: r = c.accs[e->index]; break;
      case ExprKind::Load:
        if (as.size() > 1 && v[as[1]].i == 0) r = num_cast(int_num(0), DType::I64, e->dtype);
        else r = load_num(c.args->buffers[e->index], e->dtype, v[as[0]].i);
        break;
      case ExprKind::IDiv: {  // floor division (the operands are non-negative in practice)
        int64_t a = v[as[0]].i, b = v[as[1]].i, q = a / b;
        r = int_num(q - ((a % b != 0) && ((a < 0) != (b < 0))));
        break;
      }
      case ExprKind::IMod: r = int_num(v[as[0]].i % v[as[1]].i); break;
      case ExprKind::Rand:  // exact in the dtype (24 or 53 bits)
        r = float_num(counter_uniform(static_cast<uint64_t>(v[as[0]].i), static_cast<uint64_t>(v[as[1]].i), e->dtype));
        break;
      case ExprKind::Op: {
        Num args[3];
        for (size_t k = 0; k < as.size(); ++k) args[k] = v[as[k]];
        r = rounded(apply_elementwise(e->op, e->dtype, e->args[0]->dtype, args), e->dtype);
        break;
      }
    }
    v[i] = r;
  }
}

struct PhaseCode {
  Program prog;
  std::vector<int> acc_slots;                    // per phase acc
  std::vector<std::pair<int, int>> store_slots;  // (index, value)
};

class ReferenceKernel final : public CompiledKernel {
 public:
  explicit ReferenceKernel(const ir::Kernel& k) : k_(k) {
    in_order_writes = true;  // each point evaluates its phase's values, then stores them
    for (const auto& ph : k_.phases) {
      PhaseCode pc;
      for (int a : ph.accs) pc.acc_slots.push_back(pc.prog.add(k_.accs[a].value));
      for (const auto& s : ph.stores) pc.store_slots.emplace_back(pc.prog.add(s.index), pc.prog.add(s.value));
      code_.push_back(std::move(pc));
    }
    for (const auto& o : k_.outer) outer_prog_slots_.push_back(outer_prog_.add(o));
    if (k_.dynamic_reduce()) range_slots_ = {range_prog_.add(k_.reduce_begin), range_prog_.add(k_.reduce_end)};
  }

  void run(const ir::LaunchArgs& args) const override {
    Ctx c0{&k_, &args, {}, {}, {}};
    std::vector<Num> ov;
    run_program(outer_prog_, c0, ov);
    std::vector<int64_t> extents;
    int64_t n = 1;
    for (int s : outer_prog_slots_) {
      extents.push_back(ov[s].i);
      n *= extents.back();
    }
    int64_t rn = k_.reduce_numel();
    parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(rn, 1)), [&](int64_t b, int64_t e) {
      Ctx c{&k_, &args, std::vector<int64_t>(extents.size()),
            std::vector<int64_t>(k_.dynamic_reduce() ? 1 : k_.reduce.size()), std::vector<Num>(k_.accs.size())};
      std::vector<Num> v;
      for (int64_t o = b; o < e; ++o) {
        int64_t rem = o;
        for (size_t d = extents.size(); d-- > 0;) {
          c.outer_idx[d] = rem % extents[d];
          rem /= extents[d];
        }
        run_point(c, v, rn);
      }
    });
  }

 private:
  void run_point(Ctx& c, std::vector<Num>& v, int64_t rn) const {
    for (size_t p = 0; p < k_.phases.size(); ++p) {
      const ir::Phase& ph = k_.phases[p];
      const PhaseCode& pc = code_[p];
      if (!ph.over_reduce) {
        run_program(pc.prog, c, v);
        do_stores(ph, pc, v, c);
        continue;
      }
      std::vector<Fold> acc;
      for (int a : ph.accs) acc.emplace_back(k_.accs[a].kind, k_.accs[a].value->dtype, k_.accs[a].dtype);
      std::fill(c.red_idx.begin(), c.red_idx.end(), 0);
      if (k_.dynamic_reduce()) {  // r0 runs over this point's [begin, end)
        run_program(range_prog_, c, v);
        for (int64_t r = v[range_slots_[0]].i, end = v[range_slots_[1]].i; r < end; ++r) {
          c.red_idx[0] = r;
          run_program(pc.prog, c, v);
          for (size_t i = 0; i < ph.accs.size(); ++i) acc[i].add(v[pc.acc_slots[i]], r);
          do_stores(ph, pc, v, c);
        }
      }
      for (int64_t r = 0; r < (k_.dynamic_reduce() ? 0 : rn); ++r) {
        run_program(pc.prog, c, v);
        for (size_t i = 0; i < ph.accs.size(); ++i) acc[i].add(v[pc.acc_slots[i]], r);
        do_stores(ph, pc, v, c);
        for (size_t d = c.red_idx.size(); d-- > 0;) {
          if (++c.red_idx[d] < k_.reduce[d]) break;
          c.red_idx[d] = 0;
        }
      }
      for (size_t i = 0; i < ph.accs.size(); ++i)
        c.accs[ph.accs[i]] = rounded(acc[i].result(), k_.accs[ph.accs[i]].dtype);
    }
  }

  void do_stores(const ir::Phase& ph, const PhaseCode& pc, const std::vector<Num>& v, const Ctx& c) const {
    for (size_t s = 0; s < ph.stores.size(); ++s) {
      const ir::Store& st = ph.stores[s];
      store_num(c.args->buffers[st.buffer], k_.buffers[st.buffer].dtype, v[pc.store_slots[s].first].i,
                v[pc.store_slots[s].second]);
    }
  }

  ir::Kernel k_;
  std::vector<PhaseCode> code_;
  Program outer_prog_;
  std::vector<int> outer_prog_slots_;
  Program range_prog_;  ///< a dynamic reduce domain's [begin, end)
  std::vector<int> range_slots_;
};

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::string target() const override { return "interpreter"; }
  CompileResult compile(const ir::Kernel& k, const Options&) override {
    auto t0 = std::chrono::steady_clock::now();
    auto ck = std::make_shared<ReferenceKernel>(k);
    ck->backend = name();
    ck->target = target();
    ck->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return {ck, {}};
  }
  std::shared_ptr<CompiledKernel> load(const ir::Kernel& k, const std::vector<uint8_t>&, const Options& o) override {
    return compile(k, o).kernel;  // nothing to store: the IR is the program
  }
};

}  // namespace

std::shared_ptr<Backend> make_reference_backend(const Options&) { return std::make_shared<ReferenceBackend>(); }

}  // namespace kfuse::detail
