// Property test over seeded random DAGs (element-wise ops, broadcasts, views, reductions over
// random axes, several outputs, shapes with 1 and odd sizes): the partition is disjoint, convex
// and covering, and the evaluated result equals the fp64 reference within tolerance. A failing
// seed prints the graph, the plan and how to rerun just that seed.
#include <kfuse/explain.hpp>

#include <cstdlib>
#include <unordered_set>

#include "fusion/partition.hpp"
#include "graph/print_graph.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

struct Dag {
  std::vector<Tensor> roots;
};

Dag random_dag(uint64_t seed) {
  std::mt19937_64 g(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(g() % n); };
  const int64_t sizes[] = {1, 2, 3, 5, 7, 16, 17};
  Shape base = {sizes[pick(7)], sizes[pick(7)]};
  std::vector<Tensor> pool;
  int n_inputs = 1 + static_cast<int>(pick(3));
  for (int i = 0; i < n_inputs; ++i)
    pool.push_back(make_tensor(random_values(static_cast<size_t>(count_of(base)), seed * 31 + i, -1.5, 1.5), base));
  int n_ops = 3 + static_cast<int>(pick(10));
  for (int k = 0; k < n_ops; ++k) {
    const Tensor& a = pool[pick(pool.size())];
    Tensor r;
    switch (pick(8)) {
      case 0: {
        static const std::function<Tensor(const Tensor&)> un[] = {
            [](const Tensor& x) { return neg(x); },     [](const Tensor& x) { return tanh(x); },
            [](const Tensor& x) { return sigmoid(x); }, [](const Tensor& x) { return relu(x); },
            [](const Tensor& x) { return abs(x); },     [](const Tensor& x) { return sin(x); },
            [](const Tensor& x) { return x * 0.5 + 0.25; }};
        r = un[pick(7)](a);
        break;
      }
      case 1:
      case 2: {
        // A binary op with another value of a broadcast-compatible shape.
        std::vector<Tensor> ok;
        for (const auto& b : pool)
          if (numpy_broadcast(a.shape(), b.shape())) ok.push_back(b);
        const Tensor& b = ok[pick(ok.size())];
        switch (pick(4)) {
          case 0: r = a + b; break;
          case 1: r = a * b; break;
          case 2: r = maximum(a, b); break;
          default: r = a - b; break;
        }
        break;
      }
      case 3:
        if (a.ndim() == 2) r = transpose(a);
        break;
      case 4:
        if (a.ndim() >= 1) r = sum(a, static_cast<int64_t>(pick(a.ndim())), true);
        break;
      case 5:
        if (a.ndim() >= 1) r = max(a, static_cast<int64_t>(pick(a.ndim())), true);
        break;
      case 6:
        if (a.ndim() == 2 && a.shape()[1] > 1) r = a.slice({Range::all(), Range{0, std::nullopt, 2}});
        break;
      default:
        if (a.ndim() == 2 && a.shape()[1] > 0) r = softmax(a, -1);
        break;
    }
    if (r.defined() && r.numel() > 0) pool.push_back(r);
  }
  Dag d;
  size_t n_out = 1 + pick(3);
  for (size_t i = 0; i < n_out && i < pool.size(); ++i) d.roots.push_back(pool[pool.size() - 1 - pick(std::min<size_t>(pool.size(), 4))]);
  return d;
}

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

TEST(RandomDags, PartitionIsValidAndResultsMatchTheReference) {
  // KFUSE_TEST_SEED=<n> reruns one seed.
  const char* one = std::getenv("KFUSE_TEST_SEED");
  const uint64_t first = one ? std::strtoull(one, nullptr, 10) : 1, count = one ? 1 : 500;
  int failures = 0;
  for (uint64_t seed = first; seed < first + count && failures < 3; ++seed) {
    Dag d = random_dag(seed);
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
    } catch (const std::exception& e) {
      why = std::string("planning threw: ") + e.what();
    }
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

}  // namespace
}  // namespace kfuse::test
