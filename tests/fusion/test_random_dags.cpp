// Property test over seeded random DAGs (element-wise ops, broadcasts, views, reductions over
// random axes, matmuls, several outputs, shapes with 1 and odd sizes): the partition is disjoint, convex
// and covering, and the evaluated result equals the fp64 reference within tolerance. A failing
// seed prints the graph, the plan and how to rerun just that seed.
#include <kfuse/explain.hpp>

#include <cstdlib>
#include <unordered_set>

#include "fusion/partition.hpp"
#include "graph/print_graph.hpp"
#include "random_dag.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

std::string check_partition(const std::vector<const Node*>& roots) {
  auto p = detail::partition_graph(roots);
  std::unordered_map<const Node*, int> seen;
  for (const auto& g : p.groups)
    for (const Node* n : g.nodes)
      if (!seen.emplace(n, g.id).second) return "node in two groups";
  // Covering: every computed node (not a leaf, constant or range) is in a group.
  for (const Node* n : topo_order(roots, true)) {
    bool leaf = n->op == Op::Buffer || n->realized() || detail::is_inlined_source(*n);
    if (!leaf && !seen.count(n)) return std::string("uncovered node ") + op_name(n->op);
  }
  // Convexity: no path leaves a group and re-enters it.
  std::unordered_map<const Node*, std::vector<const Node*>> users;
  for (const Node* n : topo_order(roots, true))
    for (const auto& i : n->inputs) users[i.get()].push_back(n);
  for (const auto& g : p.groups) {
    std::vector<const Node*> stack;
    std::unordered_set<const Node*> visited;
    for (const Node* n : g.nodes)
      for (const Node* u : users[n])
        if (!seen.count(u) || seen[u] != g.id) stack.push_back(u);
    while (!stack.empty()) {
      const Node* x = stack.back();
      stack.pop_back();
      if (!visited.insert(x).second) continue;
      for (const Node* u : users[x]) {
        if (seen.count(u) && seen[u] == g.id) return "group " + std::to_string(g.id) + " is not convex";
        stack.push_back(u);
      }
    }
  }
  return {};
}

// Checks seeds [first, first + count); KFUSE_TEST_SEED=<n> reruns one seed instead, and
// KFUSE_TEST_SEED=<n>:<count> sweeps others in one process.
void check_seeds(uint64_t first, uint64_t count, const std::vector<DType>& input_dtypes = {DType::F32}) {
  const auto [begin, end] = seed_range("KFUSE_TEST_SEED", first, count);
  int failures = 0;
  for (uint64_t seed = begin; seed < end && failures < 3; ++seed) {
    Dag d = random_dag(seed, input_dtypes);
    std::vector<const Node*> raw;
    std::vector<NodeRef> refs;
    for (const auto& t : d.roots) {
      raw.push_back(t.node().get());
      refs.push_back(t.node());
    }
    // Printed before evaluation (afterwards the roots are realized values).
    std::string plan_text = detail::print_graph(refs);
    std::string why;
    try {
      why = check_partition(raw);
      plan_text += explain(d.roots).text();
    } catch (const std::exception& e) { why = std::string("planning threw: ") + e.what(); }
    auto repro = [&] {
      return "seed " + std::to_string(seed) + " (rerun: KFUSE_TEST_SEED=" + std::to_string(seed) + ")\n" + plan_text;
    };
    if (!why.empty()) {
      ADD_FAILURE() << why << "\n" << repro();
      ++failures;
      continue;
    }
    try {
      eval(d.roots);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "eval threw: " << e.what() << "\n" << repro();
      ++failures;
      continue;
    }
    auto ref = reference_values(d.roots);
    for (size_t i = 0; i < d.roots.size(); ++i) {
      auto r = all_close(values(d.roots[i]), ref[i], 1e-4, 1e-5);
      if (!r) {
        ADD_FAILURE() << "root " << i << ": " << r.message() << "\n" << repro();
        ++failures;
        break;
      }
    }
  }
}

TEST(RandomDags, PartitionIsValidAndResultsMatchTheReference) { check_seeds(1, 500); }

// A build without LLVM runs xbyak with the reference interpreter behind it (integer kernels,
// and whatever xbyak declines): the same property on that chain.
TEST(RandomDags, XbyakReferenceChainMatchesTheReference) {
  Options saved = options(), o = saved;
  o.backends = {"xbyak", "reference"};
  set_options(o);
  check_seeds(501, 150);
  set_options(saved);
}

// Integer inputs: integer arithmetic, bitwise ops and shifts (small counts, negative and past
// a u8's width among them), mixed dtypes promoting, fused with float ops and reductions.
TEST(RandomDags, IntegerInputsWithBitwiseOpsMatchTheReference) {
  check_seeds(2001, 60, {DType::U8, DType::I8, DType::I32, DType::I64, DType::F32});
}

}  // namespace
}  // namespace kfuse::test
