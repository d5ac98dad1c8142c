// The reference backend: an interpreter of the kernel IR. It runs any kernel, so it closes every
// CPU backend chain, and it is tested differentially against the graph evaluator: a mismatch
// there means the PLAN (partition or lowering) is wrong, not a code generator.
//
// Each phase's expression DAG is flattened once into a linear program (shared subexpressions
// computed once per point); values are doubles rounded to each expression's dtype after every
// op, as compiled f32/f64/integer code would round them. Accumulators fold in double and are
// rounded to their dtype at the end of their phase.
#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "../eval/reference_eval.hpp"
#include "../graph/ref_math.hpp"
#include "../runtime/thread_pool.hpp"
#include "backend/factories.hpp"
#include "kfuse/error.hpp"
#include "kfuse/tensor.hpp"

namespace kfuse::detail {

namespace {

using ir::ExprKind;
using ir::ExprRef;

// Float targets round to their width here (the graph evaluator keeps doubles); the rest is the
// evaluator's cast semantics.
double cast_to(double v, DType from, DType to) {
  return is_float(to) ? round_to_dtype(v, to) : cast_value(v, from, to);
}

double load_elem(const void* p, DType dt, int64_t i) {
  switch (dt) {
    case DType::Bool: return static_cast<const uint8_t*>(p)[i] ? 1.0 : 0.0;
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
  }
  return 0;
}
void store_elem(void* p, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::Bool: static_cast<uint8_t*>(p)[i] = v != 0.0; break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
  }
}

// One flattened expression DAG.
struct Program {
  std::vector<const ir::Expr*> code;  // topological order
  std::unordered_map<const ir::Expr*, int> slot;

  int add(const ExprRef& e) {
    auto it = slot.find(e.get());
    if (it != slot.end()) return it->second;
    // Masked loads must not evaluate their index when the mask is false, but an index is plain
    // arithmetic; it is the memory access that the mask guards (see eval below).
    for (const auto& a : e->args) add(a);
    int s = static_cast<int>(code.size());
    code.push_back(e.get());
    slot[e.get()] = s;
    return s;
  }
};

struct Ctx {
  const ir::Kernel* k;
  const ir::LaunchArgs* args;
  std::vector<int64_t> outer_idx, red_idx;
  std::vector<double> accs;
};

void run_program(const Program& p, Ctx& c, std::vector<double>& v) {
  v.resize(p.code.size());
  for (size_t i = 0; i < p.code.size(); ++i) {
    const ir::Expr* e = p.code[i];
    auto arg = [&](int j) { return v[p.slot.at(e->args[j].get())]; };
    double r = 0;
    switch (e->kind) {
      case ExprKind::Const: r = e->value; break;
      case ExprKind::Var:
        r = static_cast<double>(e->space == ir::Space::Outer ? c.outer_idx[e->index] : c.red_idx[e->index]);
        break;
      case ExprKind::Param: r = static_cast<double>(c.args->params[e->index]); break;
      case ExprKind::Acc: r = c.accs[e->index]; break;
      case ExprKind::Load:
        if (e->args.size() > 1 && arg(1) == 0.0) r = 0;
        else r = load_elem(c.args->buffers[e->index], e->dtype, static_cast<int64_t>(arg(0)));
        break;
      case ExprKind::IDiv: r = std::floor(arg(0) / arg(1)); break;
      case ExprKind::IMod: r = static_cast<double>(static_cast<int64_t>(arg(0)) % static_cast<int64_t>(arg(1))); break;
      case ExprKind::Op:
        if (e->op == Op::Cast) r = cast_to(arg(0), e->args[0]->dtype, e->dtype);
        else if (e->op == Op::Where) r = arg(0) != 0.0 ? arg(1) : arg(2);
        else if (e->args.size() == 1) r = round_to_dtype(unary_ref(e->op, arg(0)), e->dtype);
        else r = round_to_dtype(binary_ref(e->op, arg(0), arg(1)), e->dtype);
        break;
    }
    v[i] = r;
  }
}

struct PhaseCode {
  Program prog;
  std::vector<int> acc_slots;                 // per phase acc
  std::vector<std::pair<int, int>> store_slots;  // (index, value)
};

class ReferenceKernel final : public CompiledKernel {
 public:
  explicit ReferenceKernel(const ir::Kernel& k) : k_(k) {
    for (const auto& ph : k_.phases) {
      PhaseCode pc;
      for (int a : ph.accs) pc.acc_slots.push_back(pc.prog.add(k_.accs[a].value));
      for (const auto& s : ph.stores) pc.store_slots.emplace_back(pc.prog.add(s.index), pc.prog.add(s.value));
      code_.push_back(std::move(pc));
    }
    for (const auto& o : k_.outer) outer_prog_slots_.push_back(outer_prog_.add(o));
  }

  void run(const ir::LaunchArgs& args) const override {
    Ctx c0{&k_, &args, {}, {}, {}};
    std::vector<double> ov;
    run_program(outer_prog_, c0, ov);
    std::vector<int64_t> extents;
    int64_t n = 1;
    for (int s : outer_prog_slots_) {
      extents.push_back(static_cast<int64_t>(ov[s]));
      n *= extents.back();
    }
    int64_t rn = k_.reduce_numel();
    parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(rn, 1)), [&](int64_t b, int64_t e) {
      Ctx c{&k_, &args, std::vector<int64_t>(extents.size()), std::vector<int64_t>(k_.reduce.size()),
            std::vector<double>(k_.accs.size())};
      std::vector<double> v;
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
  void run_point(Ctx& c, std::vector<double>& v, int64_t rn) const {
    for (size_t p = 0; p < k_.phases.size(); ++p) {
      const ir::Phase& ph = k_.phases[p];
      const PhaseCode& pc = code_[p];
      if (!ph.over_reduce) {
        run_program(pc.prog, c, v);
        do_stores(ph, pc, v, c);
        continue;
      }
      std::vector<long double> acc(ph.accs.size());
      std::vector<int64_t> arg(ph.accs.size(), 0);
      std::vector<bool> started(ph.accs.size(), false);
      for (size_t i = 0; i < ph.accs.size(); ++i) acc[i] = k_.accs[ph.accs[i]].kind == ir::AccKind::Prod ? 1 : 0;
      std::fill(c.red_idx.begin(), c.red_idx.end(), 0);
      for (int64_t r = 0; r < rn; ++r) {
        run_program(pc.prog, c, v);
        for (size_t i = 0; i < ph.accs.size(); ++i) {
          long double x = v[pc.acc_slots[i]];
          long double& a = acc[i];
          switch (k_.accs[ph.accs[i]].kind) {
            case ir::AccKind::Sum: a += x; break;
            case ir::AccKind::Prod: a *= x; break;
            case ir::AccKind::Max:
            case ir::AccKind::Min: {
              bool better = k_.accs[ph.accs[i]].kind == ir::AccKind::Max ? x > a : x < a;
              if (!started[i] || std::isnan(x) || (better && !std::isnan(a))) a = x;
              break;
            }
            case ir::AccKind::ArgMax:
            case ir::AccKind::ArgMin: {
              bool better = k_.accs[ph.accs[i]].kind == ir::AccKind::ArgMax ? x > a : x < a;
              if (!started[i] || (!std::isnan(a) && (std::isnan(x) || better))) {
                a = x;
                arg[i] = r;
              }
              break;
            }
          }
          started[i] = true;
        }
        do_stores(ph, pc, v, c);
        for (size_t d = c.red_idx.size(); d-- > 0;) {
          if (++c.red_idx[d] < k_.reduce[d]) break;
          c.red_idx[d] = 0;
        }
      }
      for (size_t i = 0; i < ph.accs.size(); ++i) {
        const ir::Accumulator& A = k_.accs[ph.accs[i]];
        bool is_arg = A.kind == ir::AccKind::ArgMax || A.kind == ir::AccKind::ArgMin;
        c.accs[ph.accs[i]] = is_arg ? static_cast<double>(arg[i]) : round_to_dtype(static_cast<double>(acc[i]), A.dtype);
      }
    }
  }

  void do_stores(const ir::Phase& ph, const PhaseCode& pc, const std::vector<double>& v, const Ctx& c) const {
    for (size_t s = 0; s < ph.stores.size(); ++s) {
      const ir::Store& st = ph.stores[s];
      store_elem(c.args->buffers[st.buffer], k_.buffers[st.buffer].dtype, static_cast<int64_t>(v[pc.store_slots[s].first]),
                 v[pc.store_slots[s].second]);
    }
  }

  ir::Kernel k_;
  std::vector<PhaseCode> code_;
  Program outer_prog_;
  std::vector<int> outer_prog_slots_;
};

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::string target() const override { return "interpreter"; }
  CompileResult compile(const ir::Kernel& k) override {
    auto t0 = std::chrono::steady_clock::now();
    auto ck = std::make_shared<ReferenceKernel>(k);
    ck->backend = name();
    ck->target = target();
    ck->compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return {ck, {}};
  }
  std::shared_ptr<CompiledKernel> load(const ir::Kernel& k, const std::vector<uint8_t>&) override {
    return compile(k).kernel;  // nothing to store: the IR is the program
  }
};

}  // namespace

std::shared_ptr<Backend> make_reference_backend() { return std::make_shared<ReferenceBackend>(); }

}  // namespace kfuse::detail
