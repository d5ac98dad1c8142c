// explain() and to_dot(): the plan, reported for people and tests.
#include "kfuse/explain.hpp"

#include <sstream>
#include <unordered_map>

#include "fusion/traffic.hpp"
#include "graph/print_graph.hpp"
#include "kfuse/options.hpp"
#include "fusion/pattern_registry.hpp"
#include "runtime/graph_signature.hpp"
#include "runtime/plan.hpp"
#include "runtime/program.hpp"

namespace kfuse {

namespace detail {
namespace {

const char* group_kind_name(const FusionGroup& g, const PlannedKernel& pk) {
  switch (g.kind) {
    case GroupKind::Opaque: return "opaque";
    case GroupKind::Fused: return ir::kernel_kind_name(pk.lowered.kernel.kind);
  }
  return "?";
}

// Kernels an op-by-op library launches: one per op that is not free (views and constants are
// free in eager libraries too; leaves are inputs).
int64_t unfused_count(const std::vector<const Node*>& roots) {
  int64_t n = 0;
  for (const Node* x : topo_order(roots, true)) {
    if (x->realized() || x->op == Op::Buffer || x->op == Op::Const) continue;
    if (op_kind(x->op) == OpKind::Broadcast || x->op == Op::Reshape || x->op == Op::Permute || x->op == Op::Slice)
      continue;
    ++n;
  }
  return n;
}

}  // namespace

Explanation explain_plan(const Plan& plan, const std::vector<const Node*>& original_roots) {
  Explanation ex;
  ex.graph = print_graph(plan.keepalive);
  ex.unfused_kernels = unfused_count(original_roots);
  std::unordered_map<const Node*, std::string> name;
  // Names match print_graph's numbering (%k by first visit in topological order).
  std::vector<const Node*> rr;
  for (const auto& r : plan.keepalive) rr.push_back(r.get());
  int id = 0;
  for (const Node* n : topo_order(rr, true)) name[n] = "%" + std::to_string(id++);
  auto label = [&](const Node* n) { return name[n] + " " + dtype_name(n->dtype) + shape_str(n->shape); };
  for (size_t i = 0; i < plan.partition.groups.size(); ++i) {
    const FusionGroup& g = plan.partition.groups[i];
    const PlannedKernel& pk = plan.kernels[i];
    KernelReport k;
    k.name = g.kind == GroupKind::Fused ? pk.lowered.kernel.name : std::string("k_") + op_name(g.nodes[0]->op);
    k.kind = group_kind_name(g, pk);
    k.pattern = g.pattern;
    k.backend = pk.backend;
    for (const Node* n : g.nodes) k.ops.push_back(name[n] + " " + op_name(n->op));
    for (const Node* n : g.inputs) k.inputs.push_back(label(n));
    for (const Node* n : g.outputs) k.outputs.push_back(label(n));
    Traffic t = min_traffic(g);
    k.read_bytes = t.read_bytes;
    k.write_bytes = t.write_bytes;
    k.min_bytes = t.total();
    if (g.kind == GroupKind::Fused) k.flops = pk.flops();
    ex.kernels.push_back(std::move(k));
  }
  ex.patterns = pattern_traces(plan.partition.pattern_attempts, rr);
  for (const auto& b : plan.partition.boundaries)
    ex.boundaries.push_back(
        {name[b.producer] + " " + op_name(b.producer->op), name[b.consumer] + " " + op_name(b.consumer->op), b.reason});
  return ex;
}

}  // namespace detail

double Explanation::bound_seconds(const Roof& roof) const {
  double s = 0;
  for (const KernelReport& k : kernels)
    s += roof.seconds(static_cast<double>(k.read_bytes), static_cast<double>(k.write_bytes), k.flops);
  return s;
}

std::string Explanation::text() const {
  std::ostringstream os;
  os << "graph after passes:\n" << graph;
  os << "plan: " << kernels.size() << " kernel" << (kernels.size() == 1 ? "" : "s")
     << " (an op-by-op library would launch " << unfused_kernels << ")\n";
  for (size_t i = 0; i < kernels.size(); ++i) {
    const KernelReport& k = kernels[i];
    os << "  kernel " << i << ": " << k.name << " [" << k.kind
       << (k.pattern != "lattice" ? ", pattern " + k.pattern : "")
       << (k.backend.empty() ? "" : ", backend " + k.backend) << "]\n";
    os << "    ops:";
    for (const auto& o : k.ops) os << " " << o << ";";
    os << "\n    reads:";
    for (const auto& s : k.inputs) os << " " << s;
    os << "\n    writes:";
    for (const auto& s : k.outputs) os << " " << s;
    if (!k.writes_over.empty()) os << " (over " << k.writes_over << ")";
    os << "\n    minimum traffic: " << k.min_bytes << " bytes\n";
  }
  for (const auto& b : boundaries)
    os << "  boundary " << b.producer << " -> " << b.consumer << ": " << b.reason << "\n";
  for (const auto& p : patterns)
    os << "  pattern " << p.pattern << " at " << p.node << ": " << (p.matched ? "matched" : "no: " + p.reason) << "\n";
  return os.str();
}

namespace {
std::vector<NodeRef> roots_of(const std::vector<Tensor>& ts) {
  std::vector<NodeRef> r;
  for (const auto& t : ts) {
    if (!t.defined()) throw UserError("explain: an undefined (default-constructed) Tensor was passed");
    r.push_back(t.node());
  }
  return r;
}
}  // namespace

Explanation explain(const std::vector<Tensor>& ts) {
  auto roots = roots_of(ts);
  auto plan = detail::make_plan(roots, /*compile=*/false, options());
  std::vector<const Node*> raw;
  for (const auto& r : roots) raw.push_back(r.get());
  Explanation ex = detail::explain_plan(*plan, raw);
  // Planning compiles nothing; when the same structure was evaluated before, its cached program
  // says which backend took each kernel (one step per group, in the same order).
  if (auto prog = detail::find_program(detail::graph_signature(roots)))
    if (prog->steps.size() == ex.kernels.size())
      for (size_t i = 0; i < ex.kernels.size(); ++i) {
        const detail::Step& st = prog->steps[i];
        ex.kernels[i].backend = st.backend;
        if (st.in_place < 0) continue;
        // The input slot holding that temporary, its node, and that node's place in the report.
        const auto& g = plan->partition.groups[i];
        const auto& buffer_nodes = plan->kernels[i].lowered.buffer_nodes;
        for (size_t s = 0; s < st.inputs.size() && s < buffer_nodes.size(); ++s) {
          if (st.inputs[s].leaf || st.inputs[s].index != static_cast<uint32_t>(st.in_place)) continue;
          for (size_t j = 0; j < g.inputs.size() && j < ex.kernels[i].inputs.size(); ++j)
            if (g.inputs[j] == buffer_nodes[s]) ex.kernels[i].writes_over = ex.kernels[i].inputs[j];
        }
      }
  return ex;
}

std::string to_dot(const std::vector<Tensor>& ts) {
  auto roots = roots_of(ts);
  auto plan = detail::make_plan(roots, false, options());
  std::vector<const Node*> rr;
  for (const auto& r : plan->keepalive) rr.push_back(r.get());
  std::unordered_map<const Node*, int> id;
  std::ostringstream os;
  os << "digraph kfuse {\n  rankdir=TB;\n  node [shape=box, fontname=monospace];\n";
  int next = 0;
  for (const Node* n : topo_order(rr, true)) id[n] = next++;
  for (const auto& g : plan->partition.groups) {
    const auto& pk = plan->kernels[g.id];
    os << "  subgraph cluster_" << g.id << " {\n    label=\""
       << (g.kind == detail::GroupKind::Fused ? pk.lowered.kernel.name : std::string(op_name(g.nodes[0]->op)))
       << "\";\n";
    for (const Node* n : g.nodes)
      os << "    n" << id[n] << " [label=\"%" << id[n] << " " << op_name(n->op) << "\\n"
         << dtype_name(n->dtype) << shape_str(n->shape) << "\"];\n";
    os << "  }\n";
  }
  for (const auto& [n, i] : id) {
    if (!plan->partition.group_of.count(n))
      os << "  n" << i << " [label=\"%" << i << " " << op_name(n->op) << "\\n"
         << dtype_name(n->dtype) << shape_str(n->shape) << "\", style=dashed];\n";
    for (const auto& in : n->inputs)
      if (id.count(in.get())) os << "  n" << id[in.get()] << " -> n" << i << ";\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace kfuse
