// Note on the fusion algorithm
// ============================
// Every non-leaf node starts in a group of its own. Nodes are visited in topological order and
// each tries to merge its group with the group of each consumer (producer-into-consumer, as in
// TVM's FuseOps and Inductor's vertical fusion). A merge is committed only when the union is
// LEGAL; otherwise the edge becomes a kernel boundary and the failed rule is recorded as its
// reason (explain() prints it). The rules, checked on the union U:
//   1. kinds: Opaque ops never fuse; constants and ranges are inlined into their consumers
//      (never a boundary); random sources (rand, randn) are generator members that fuse like
//      element-wise ops with no inputs (lowered to counter-based IR, lib/ir/random.hpp).
//   2. convexity: no path leaves U and re-enters it (otherwise U could not run as one kernel:
//      the outside node would need U's output before U finished). This is the diamond problem.
//   3. one reduction domain: all reductions in U iterate the same full shape S over the same
//      axes A (softmax's max and sum do; a row sum and a column sum do not).
//   4. reductions are consumed per row: a value derived from a reduction inside U reaches other
//      members only through element-wise ops and broadcasts back over the reduced axes (the
//      x - max(x, keepdim) pattern) or as the input of a later reduction; a permute or reshape
//      of a reduced value would need it at other rows.
//   5. outputs fit the domain: values needed outside U have the full shape S or the kept shape
//      (per-row results) in reduction groups, and one common shape in pointwise groups.
//   6. size: at most PartitionLimits::max_nodes nodes.
//   7. cost: values used by several phases of a reduction kernel are recomputed in each (e.g.
//      softmax recomputes exp(x - max) in the sum phase and the store phase). The per-element
//      cost of such recomputation must stay within PartitionLimits::recompute_budget, otherwise
//      the expensive producer is materialised instead.
//   8. contractions (matmul, lowered as a "contraction" kernel): at most one per group, never
//      with a reduction. Members that feed it (its OPERAND side) are recomputed for every use,
//      an element of A once per output column (N times), of B once per row (M times), so only
//      cheap producers join: views that fold into the load index (permute, expand, slice,
//      reshapes that only split dims, and any reshape of a value read from memory, which is contiguous),
//      casts, negation, and scaling by a constant; anything else is materialised first. Operand
//      members feed only the contraction (they are not outputs). Values derived from its
//      result (the EPILOGUE) flow only through element-wise ops and size-1 reshapes at its
//      output shape, so each is needed at the contraction's own (batch, m, n) point; other
//      members (a bias and its broadcast) are evaluated at that point too.
//   9. rows across memory: a normalisation (a reduction whose derived values are stored back at
//      the full shape) does not take in a permute of a kernel input that moves the reduced axis
//      away from the input's innermost axis; the permute is materialised (a tiled copy) and the
//      normalisation reads contiguous rows.
//  10. transposed reads under math (CPU): a pointwise group with transcendental math does not take
//      in a permute of a kernel input that moves the innermost axis; the permute is materialised
//      (a tiled copy) and the math runs on contiguous vectors.
// Before the lattice, a PATTERN PHASE (matches from lib/fusion/pattern_phase.cpp) seeds groups: built-in and
// plugin patterns match at nodes, and their matches are committed highest benefit first. A match
// must pass the same rules (check) and may not create a cycle between groups; otherwise it is
// refused with the reason. Seeded groups carry the pattern's name; those with a custom kernel
// are closed to the lattice.
// After the greedy pass, a group whose consumers all ended up in ONE other group is tried against
// that group again (join_producers_into_merged_consumers: the greedy pass saw them apart). Then a
// reshape left at a group's end, beside its input that the group writes anyway, moves to its one
// consumer group (move_reshape_outputs_to_consumers: no second output of the same values).
// The greedy order is deterministic (topological order, consumers in topological order), so the
// same graph always gets the same plan.
#include "partition.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_set>

#include "core/reshape_runs.hpp"
#include "graph/node_map.hpp"
#include "kfuse/error.hpp"

namespace kfuse::detail {

bool is_inlined_source(const Node& n) { return n.op == Op::Const || n.op == Op::Iota; }

namespace {

bool is_leaf(const Node& n) { return n.op == Op::Buffer || n.realized() != nullptr; }

const std::vector<const Node*> kNoConsumers;

double op_cost(const Node& n) {
  switch (n.op) {
    case Op::Exp:
    case Op::Exp2:
    case Op::Log:
    case Op::Log2:
    case Op::Log1p:
    case Op::Expm1:
    case Op::Sin:
    case Op::Cos:
    case Op::Tanh:
    case Op::Sigmoid:
    case Op::GeluTanh:
    case Op::GeluErf:
    case Op::Silu:
    case Op::Erf:
    case Op::Pow: return 10;
    case Op::Div:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Recip: return 3;
    // rand: two 64-bit mixes; randn: four, plus log1p, sqrt and cos in f64
    case Op::Rand: return n.attrs.ints.at(1) == 0 ? 3 : 30;
    default: return is_view(n.op) ? 0 : 1;
  }
}

class Partitioner {
 public:
  Partitioner(const std::vector<const Node*>& roots, const PartitionLimits& lim) : limits_(lim) {
    topo_ = topo_order(roots, true);
    for (size_t i = 0; i < topo_.size(); ++i) pos_.insert_absent(topo_[i], static_cast<uint32_t>(i));
    for (const Node* r : roots) roots_.insert(r);
    for (const Node* n : topo_) {
      if (is_leaf(*n) && !roots_.count(n)) continue;
      for (const auto& in : n->inputs) consumers_[in.get()].push_back(n);
    }
    for (auto& [k, v] : consumers_) {
      std::sort(v.begin(), v.end(), [&](const Node* a, const Node* b) { return pos(a) < pos(b); });
      v.erase(std::unique(v.begin(), v.end()), v.end());
    }
    // Dense per-node state, indexed by topological position (the walks below run for every
    // candidate merge; hash sets per check were most of the partitioner's time).
    const size_t n = topo_.size();
    cons_.assign(n, &kNoConsumers);
    for (const auto& [k, v] : consumers_)                    // the map is complete: its vectors stay put
      if (const uint32_t* p = pos_.find(k)) cons_[*p] = &v;  // (inputs of a realized root are not in topo_)
    is_root_.assign(n, 0);
    for (const Node* r : roots) is_root_[pos(r)] = 1;
    group_.assign(n, -1);
    in_mark_.assign(n, 0);
    seen_mark_.assign(n, 0);
    post_mark_.assign(n, 0);
    depth_.assign(n, 0);
  }

  Partition run() {
    // Initial groups.
    for (const Node* n : topo_) {
      if (!member(n)) continue;
      int g = static_cast<int>(sets_.size());
      sets_.push_back({n});
      parent_.push_back(g);
      group_[pos(n)] = g;
    }
    set_mark_.assign(sets_.size(), 0);
    set_pattern_.assign(sets_.size(), "lattice");
    set_kernel_.assign(sets_.size(), nullptr);
    if (limits_.use_patterns) attempts_ = run_patterns();
    // Greedy producer -> consumer merging.
    for (const Node* n : topo_) {
      if (!fusible(n)) continue;
      for (const Node* c : consumers(n)) {
        if (!fusible(c)) continue;
        int a = find(group_of(n)), b = find(group_of(c));
        if (a == b) continue;
        if (set_kernel_[a] || set_kernel_[b]) {  // a pattern's own kernel covers exactly its match
          reasons_[{n, c}] =
              "pattern " + set_pattern_[set_kernel_[a] ? a : b] + " supplies its own kernel for its match";
          continue;
        }
        std::string why = try_merge(a, b);
        if (!why.empty()) reasons_[{n, c}] = why;
      }
    }
    join_producers_into_merged_consumers();
    move_reshape_outputs_to_consumers();
    Partition p = build();
    p.pattern_attempts = std::move(attempts_);
    return p;
  }

 private:
  // Topological position of a node of this graph.
  int pos(const Node* n) const { return static_cast<int>(*pos_.find(n)); }
  const std::vector<const Node*>& consumers(const Node* n) const { return *cons_[pos(n)]; }
  bool is_root(const Node* n) const { return is_root_[pos(n)] != 0; }
  int group_of(const Node* n) const { return group_[pos(n)]; }
  bool member(const Node* n) const {
    if (is_leaf(*n)) return is_root(n) && !n->realized();
    // Kernels inline constants and ranges; a host step (matmul, check_labels) cannot, so a
    // constant it reads is materialised by its own kernel.
    if (is_inlined_source(*n))
      return is_root(n) || std::any_of(consumers(n).begin(), consumers(n).end(),
                                       [](const Node* c) { return op_kind(c->op) == OpKind::Opaque; });
    return true;
  }
  bool fusible(const Node* n) const {
    if (is_leaf(*n) || is_inlined_source(*n)) return false;
    OpKind k = op_kind(n->op);
    return (k != OpKind::Source || n->op == Op::Rand) && k != OpKind::Opaque;
  }
  int find(int g) const {
    while (parent_[g] != g) g = parent_[g];
    return g;
  }

  std::string try_merge(int a, int b) {
    std::vector<const Node*> u = sets_[a];
    u.insert(u.end(), sets_[b].begin(), sets_[b].end());
    std::sort(u.begin(), u.end(), [&](const Node* x, const Node* y) { return pos(x) < pos(y); });
    std::string why = check(u);
    if (!why.empty()) return why;
    parent_[b] = a;
    sets_[a] = std::move(u);
    sets_[b].clear();
    if (set_pattern_[a] == "lattice") set_pattern_[a] = set_pattern_[b];  // a pattern's group keeps its name
    for (const Node* n : sets_[a]) group_[pos(n)] = a;
    return {};
  }

  // The greedy pass tries a producer against each consumer group alone, before the consumers
  // merge with each other: a value read by two consumers could join neither (its value was still
  // needed outside the union; rule 5). When the consumers end up in ONE group, the producer may
  // fit it now. Why this matters: embedding_bag's padding mask (and its bag bounds) feed both
  // the value fold and the count fold of the same bags, which only merge through their epilogue;
  // without this the mask would be a kernel writing an [ids, dim] temporary. Repeated until
  // nothing merges, since a merge can unite the consumers of an earlier producer.
  void join_producers_into_merged_consumers() {
    for (bool merged = true; merged;) {
      merged = false;
      std::unordered_set<int> tried;
      for (const Node* n : topo_) {
        if (!fusible(n)) continue;
        const int a = find(group_of(n));
        if (!tried.insert(a).second || set_kernel_[a]) continue;
        int target = -1;  // the single consumer group of a, or -2 when there are several / none fit
        for (const Node* m : sets_[a])
          for (const Node* c : consumers(m)) {
            const int b = group_of(c) >= 0 ? find(group_of(c)) : -2;
            if (b == a) continue;
            target = !fusible(c) || (target >= 0 && target != b) ? -2 : (target == -1 ? b : target);
          }
        if (target < 0 || set_kernel_[target]) continue;
        merged |= try_merge(target, a).empty();
      }
    }
  }

  // A reshape at a group's end whose input the group writes anyway (another kernel reads it) made
  // a second output of the same bytes: a recommender's features x, read by one concat as they are
  // and by another through reshape(x, [b, 1, D]), were both written by the matmul's kernel. Such a
  // reshape moves to its one consumer group, which reads x through it (a reshape of a value read
  // from memory folds into the load index), when both groups still pass the rules.
  void move_reshape_outputs_to_consumers() {
    for (const Node* v : topo_) {
      if (v->op != Op::Reshape || is_root(v) || group_of(v) < 0) continue;
      const int a = find(group_of(v));
      const Node* x = v->inputs[0].get();
      if (set_kernel_[a] || group_of(x) < 0 || find(group_of(x)) != a) continue;
      bool x_written = is_root(x);
      for (const Node* c : consumers(x)) x_written |= c != v && (group_of(c) < 0 || find(group_of(c)) != a);
      if (!x_written) continue;
      int target = -1;  // the single consumer group of v outside a, or -2
      for (const Node* c : consumers(v)) {
        const int b = group_of(c) >= 0 ? find(group_of(c)) : -2;
        target = b == a || !fusible(c) || (target >= 0 && target != b) ? -2 : (target == -1 ? b : target);
      }
      if (target < 0 || set_kernel_[target]) continue;
      std::vector<const Node*> rest, joined = sets_[target];
      for (const Node* n : sets_[a])
        if (n != v) rest.push_back(n);
      joined.insert(std::upper_bound(joined.begin(), joined.end(), v,
                                     [&](const Node* p, const Node* q) { return pos(p) < pos(q); }),
                    v);
      // (the checks walk the sets: v is moved first, and moved back when either group fails)
      std::swap(sets_[a], rest);
      std::swap(sets_[target], joined);
      group_[pos(v)] = target;
      if (check(sets_[a]).empty() && check(sets_[target]).empty()) {
        reasons_[{x, v}] = std::string(op_name(x->op)) + " " + shape_str(x->shape) +
                           " is written for another kernel anyway: the reshape reads it there (a view), not as a "
                           "second output of the same values";
        continue;
      }
      std::swap(sets_[a], rest);
      std::swap(sets_[target], joined);
      group_[pos(v)] = a;
    }
  }

  // The pattern phase: candidates are the fusible nodes and opaque ones (a pattern with its own
  // kernel may cover a matmul). Matches (pattern_phase.cpp) are committed highest benefit first
  // when they pass the same rules as the lattice's merges and do not overlap an earlier one.
  std::vector<PatternAttempt> run_patterns() {
    std::vector<const Node*> cands;
    for (const Node* n : topo_)
      if (fusible(n) || (!is_leaf(*n) && op_kind(n->op) == OpKind::Opaque)) cands.push_back(n);
    GraphView view(consumers_, roots_);
    PatternMatches pm = find_pattern_matches(cands, view, pos_);
    std::unordered_map<const Node*, std::string> taken;  // member -> the match that took it
    for (const PatternCandidate& c : pm.ordered) {
      std::vector<const Node*> u;
      std::string why = match_members(c, pos_, u);
      for (size_t i = 0; why.empty() && i < u.size(); ++i)
        if (auto it = taken.find(u[i]); it != taken.end())
          why = "overlaps " + it->second + " (committed first: higher benefit or registered earlier)";
      if (why.empty()) why = check(u);
      if (why.empty() && !acyclic_with(u)) why = "fusing would create a cycle between kernels (through another match)";
      if (why.empty() && c.match.kernel) why = validate_custom_kernel(*c.match.kernel, u, view);
      PatternAttempt& a = pm.attempts[c.attempt];
      if (!why.empty()) {
        a.reason = "refused: " + why;
        continue;
      }
      a.matched = true;
      a.reason.clear();
      const std::string by = "the match of " + c.pattern + " at " + describe_node(*c.root);
      for (const Node* n : u) taken[n] = by;
      commit_pattern(u, c.pattern, c.match.kernel);
    }
    log_pattern_attempts(pm.attempts, pos_);
    return std::move(pm.attempts);
  }

  // Makes the (legal, disjoint) members `u` one group named `pattern`, closed when `kernel` is set.
  void commit_pattern(const std::vector<const Node*>& u, const std::string& pattern,
                      std::shared_ptr<const CustomKernel> kernel) {
    int a = find(group_of(u.front()));
    for (const Node* n : u) {
      int b = find(group_of(n));
      if (b == a) continue;
      parent_[b] = a;
      sets_[b].clear();
    }
    sets_[a] = u;
    for (const Node* n : u) group_[pos(n)] = a;
    set_pattern_[a] = pattern;
    set_kernel_[a] = std::move(kernel);
  }

  // Whether the groups stay acyclic when `u` becomes one group (matches are not built along
  // edges, so two convex matches could still depend on each other).
  bool acyclic_with(const std::vector<const Node*>& u) {
    std::unordered_set<const Node*> in(u.begin(), u.end());
    auto gid = [&](const Node* n) { return in.count(n) ? -2 : find(group_of(n)); };
    std::unordered_map<int, std::vector<int>> out;
    std::unordered_map<int, int> indeg;
    for (const Node* n : topo_) {
      if (group_of(n) < 0) continue;
      int g = gid(n);
      indeg.emplace(g, 0);
      for (const auto& i : n->inputs) {
        if (group_of(i.get()) < 0) continue;
        int h = gid(i.get());
        if (h == g) continue;
        out[h].push_back(g);
        ++indeg[g];
      }
    }
    std::vector<int> ready;
    for (auto& [g, d] : indeg)
      if (!d) ready.push_back(g);
    size_t seen = 0;
    while (!ready.empty()) {
      int g = ready.back();
      ready.pop_back();
      ++seen;
      for (int h : out[g])
        if (--indeg[h] == 0) ready.push_back(h);
    }
    return seen == indeg.size();
  }

  // Returns the violated rule, or "" when the union is legal.
  std::string check(const std::vector<const Node*>& u) {
    // Membership marks for this check: a node is marked when its mark equals this epoch.
    const uint32_t ep = ++epoch_;
    for (const Node* n : u) in_mark_[pos(n)] = ep;
    auto in = [&](const Node* n) { return in_mark_[pos(n)] == ep; };
    if (u.size() > limits_.max_nodes)
      return "kernel size limit: " + std::to_string(u.size()) + " nodes > " + std::to_string(limits_.max_nodes);
    // 2. convexity, at the level of groups: search forward from U's external consumers for a
    //    way back into U. A node of another group stands for its whole group (a kernel runs as
    //    a unit), so two groups that feed each other through different members are a cycle too.
    // (No pruning by topological position: a group member late in the order can stand for an
    // earlier member of the same group.)
    stack_.clear();
    auto push = [&](const Node* c) {
      int i = pos(c);
      if (in_mark_[i] != ep && seen_mark_[i] != ep) {
        seen_mark_[i] = ep;
        stack_.push_back(c);
      }
    };
    for (const Node* n : u)
      for (const Node* c : consumers(n)) push(c);
    while (!stack_.empty()) {
      const Node* x = stack_.back();
      stack_.pop_back();
      auto visit = [&](const Node* y) -> bool {  // true: y feeds U
        for (const Node* c : consumers(y)) {
          if (in(c)) return true;
          push(c);
        }
        return false;
      };
      bool cycle = false;
      const int g = group_of(x) >= 0 ? find(group_of(x)) : -1;
      if (g >= 0 && set_mark_[g] != ep) {
        set_mark_[g] = ep;
        for (const Node* y : sets_[g]) cycle = cycle || visit(y);
      } else {
        cycle = visit(x);
      }
      if (cycle) return "convexity: fusing would create a cycle through " + std::string(op_name(x->op));
    }
    // 3. one reduction domain.
    const Node* first_red = nullptr;
    for (const Node* n : u) {
      if (!is_reduction(n->op)) continue;
      if (!first_red) {
        first_red = n;
      } else if (reduce_full_shape(*n) != reduce_full_shape(*first_red) || n->attrs.ints != first_red->attrs.ints) {
        return "reduction domains differ: " + std::string(op_name(first_red->op)) + " over " +
               shape_str(reduce_full_shape(*first_red)) + " axes " + shape_str(first_red->attrs.ints) + " vs " +
               op_name(n->op) + " over " + shape_str(reduce_full_shape(*n)) + " axes " + shape_str(n->attrs.ints);
      } else if (is_segment_reduction(n->op) != is_segment_reduction(first_red->op) ||
                 (is_segment_reduction(n->op) &&
                  (n->inputs[1] != first_red->inputs[1] || n->inputs[0]->shape[0] != first_red->inputs[0]->shape[0]))) {
        // A segment reduction's extent is data: only segment reductions over the same bags share it.
        return "reduction domains differ: " + std::string(op_name(first_red->op)) + " and " + op_name(n->op) +
               " do not iterate the same bags";
      }
    }
    const Node* contraction = nullptr;
    for (const Node* n : u) {
      if (op_kind(n->op) != OpKind::Contraction) continue;
      if (contraction) return "one contraction per kernel: a second matmul cannot fuse into a matmul's kernel";
      if (first_red)
        return "a reduction (" + std::string(op_name(first_red->op)) +
               ") and a contraction (matmul) cannot share a kernel";
      contraction = n;
    }
    if (contraction) {
      std::string why = check_contraction(u, contraction, ep);
      if (!why.empty()) return why;
    }
    Shape full, kept;
    if (first_red) {
      full = reduce_full_shape(*first_red);
      kept = first_red->shape;
    }
    // 4. values derived from reductions flow only through element-wise ops, broadcasts over the
    //    reduced axes, and later reductions.
    auto post = [&](const Node* n) { return post_mark_[pos(n)] == ep; };
    bool any_post = false, post_full = false;  // post_full: a derived value at the full shape
    for (const Node* n : u) {
      bool from_red = false;
      for (const auto& i : n->inputs) from_red |= in(i.get()) && (is_reduction(i->op) || post(i.get()));
      if (!from_red) continue;
      if (is_reduction(n->op)) continue;  // a later reduction consumes per-element values: fine
      bool ok = is_elementwise(n->op) && (n->shape == full || same_squeezed(n->shape, kept));
      ok |= n->op == Op::Expand && n->shape == full && n->inputs[0]->shape == kept;
      // keepdim=false: dropping the reduced size-1 dims keeps the per-row layout.
      ok |= n->op == Op::Reshape && same_squeezed(n->inputs[0]->shape, kept) && same_squeezed(n->shape, kept);
      if (!ok)
        return std::string("a reduced value reaches ") + op_name(n->op) + " " + shape_str(n->shape) +
               ", which would need it at other rows (only element-wise ops and broadcasts over the reduced axes "
               "may follow a reduction in one kernel)";
      post_mark_[pos(n)] = ep;
      any_post = true;
      post_full |= n->shape == full;
    }
    // 5. outputs fit the domain.
    Shape out_shape;
    bool have_out = false;
    for (const Node* n : u) {
      bool needed = is_root(n);
      for (const Node* c : consumers(n)) needed |= !in(c);
      if (!needed) continue;
      if (contraction) {
        if (!same_squeezed(n->shape, contraction->shape))
          return "output " + std::string(op_name(n->op)) + " " + shape_str(n->shape) +
                 " does not fit the contraction's output shape " + shape_str(contraction->shape);
        continue;
      }
      if (first_red) {
        if (is_segment_reduction(first_red->op) && !same_squeezed(n->shape, kept))  // bags visit only their own ids
          return "output " + std::string(op_name(n->op)) + " " + shape_str(n->shape) +
                 " does not fit the per-bag shape " + shape_str(kept) + " of a segment reduction";
        if (n->shape != full && !same_squeezed(n->shape, kept))
          return "output " + std::string(op_name(n->op)) + " " + shape_str(n->shape) +
                 " fits neither the reduction's full shape " + shape_str(full) + " nor its kept shape " +
                 shape_str(kept);
      } else if (have_out && n->shape != out_shape) {
        return "outputs of different shapes (" + shape_str(out_shape) + " and " + shape_str(n->shape) +
               ") cannot share one pointwise domain";
      }
      out_shape = n->shape;
      have_out = true;
    }
    if (first_red && post_full && !first_red->attrs.ints.empty()) {  // (a 0-d input reduces over no axis)
      // 9. rows across memory: a normalisation (values derived from the reduction stored back at
      //    the full shape: softmax, layer_norm) of a permuted kernel input whose reduced axis is
      //    not the input's innermost would read every row across memory and store it so, one
      //    element per cache line each way (layer_norm of a transposed [1024, 4096] f32: 54 ms,
      //    1.7 ms contiguous). The permute is materialised first: a transposed copy (tiled) then
      //    the contiguous kernel.
      const int64_t last = *std::max_element(first_red->attrs.ints.begin(), first_red->attrs.ints.end());
      for (const Node* n : u) {
        if (n->op != Op::Permute || n->shape != full || in(n->inputs[0].get()) || full[last] <= 1) continue;
        const int64_t src_last = static_cast<int64_t>(n->attrs.ints.size()) - 1;
        if (n->attrs.ints[last] != src_last && n->inputs[0]->shape[src_last] > 1)
          return "rows across memory: the reduction over axis " + std::to_string(last) + " of permute " +
                 shape_str(n->inputs[0]->shape) + " perm=" + shape_str(n->attrs.ints) +
                 " would read and store every row one element per cache line (the permute is materialised "
                 "first)";
      }
    }
    if (!first_red && !contraction && !u.empty() && u.front()->device == Device::cpu()) {
      // 10. transposed reads under transcendental math (CPU): a pointwise kernel that reads a
      //     kernel input permuted away from its innermost axis walks it in transposed tiles
      //     (LLVM, the backend that takes transposed reads). Their points were computed one by
      //     one (tanh(transpose(x) * y) over [1024, 4096]: 117 ms); since the tile's rows are
      //     vectors it takes 24-34 ms, still above the split form's 13-14 ms (Intel Xeon,
      //     1 thread): each tile reads its 16 transposed lines, 4 KiB apart in one L1 set, and
      //     the math calls between them keep those misses from overlapping. The group stops before
      //     the math: the permute (with any cheap arithmetic over it, `transpose(x) * y`) is
      //     materialised by one tiled kernel and the math runs on contiguous vectors.
      const bool costly =
          std::any_of(u.begin(), u.end(), [&](const Node* n) { return op_cost(*n) >= 10 && n->op != Op::Rand; });
      if (costly)
        for (const Node* n : u) {
          if (n->op != Op::Permute || in(n->inputs[0].get()) || n->shape.empty() || n->shape.back() <= 1) continue;
          const int64_t src_last = static_cast<int64_t>(n->attrs.ints.size()) - 1;
          if (n->attrs.ints.back() != src_last && n->inputs[0]->shape[src_last] > 1)
            return "transposed read under transcendental math: permute " + shape_str(n->inputs[0]->shape) +
                   " perm=" + shape_str(n->attrs.ints) +
                   " would be walked in tiles computed point by point (the permute is materialised first)";
        }
    }
    if (first_red && any_post) {
      // 7. recomputation cost: pre-reduction members used by several phases. Phase of a
      //    consumer = 1 + number of reductions it (transitively) depends on inside U.
      auto depth = [&](const Node* n) -> int& { return depth_[pos(n)]; };
      for (const Node* n : u) depth(n) = 0;
      for (const Node* n : u) {  // u is in topological order: inputs in U come first
        int d = 0;
        for (const auto& i : n->inputs)
          if (in(i.get())) d = std::max(d, depth(i.get()) + (is_reduction(i->op) ? 1 : 0));
        depth(n) = d;
      }
      double cost = 0;
      std::string worst;
      for (const Node* n : u) {
        if (is_reduction(n->op) || post(n)) continue;
        std::unordered_set<int> phases;
        for (const Node* c : consumers(n))
          if (in(c)) phases.insert(depth(c));
        if (phases.size() > 1) {
          cost += op_cost(*n) * static_cast<double>(phases.size() - 1);
          if (op_cost(*n) >= 10) worst = op_name(n->op);
        }
      }
      if (cost > limits_.recompute_budget)
        return "recompute cost: fusing would recompute " + (worst.empty() ? std::string("producers") : worst) +
               " in several phases (" + std::to_string(static_cast<int>(cost)) + " > budget " +
               std::to_string(static_cast<int>(limits_.recompute_budget)) + " per element)";
    }
    return {};
  }

  // Rule 8 on the union `u` (marked with epoch `ep`) holding the contraction `c`.
  std::string check_contraction(const std::vector<const Node*>& u, const Node* c, uint32_t ep) {
    auto in = [&](const Node* n) { return in_mark_[pos(n)] == ep; };
    // Operand side: members from which c is reachable inside U (u is in topological order, so
    // walking it backwards sees every consumer before its producers).
    std::unordered_set<const Node*> operand{c};
    for (size_t i = u.size(); i-- > 0;) {
      const Node* n = u[i];
      if (n == c) continue;
      bool feeds = false;
      for (const Node* x : consumers(n)) feeds |= in(x) && operand.count(x);
      if (!feeds) continue;
      if (!cheap_operand_op(*n, in))
        return std::string(op_name(n->op)) + " " + shape_str(n->shape) +
               " feeds a matmul operand and would be recomputed for every output row or column (only views, casts, "
               "negation and scaling by a constant fuse into an operand)";
      for (const Node* x : consumers(n))
        if (!in(x) || !operand.count(x))
          return std::string(op_name(n->op)) + " " + shape_str(n->shape) +
                 " feeds a matmul operand and is also needed elsewhere (it is materialised instead)";
      if (is_root(n)) return std::string(op_name(n->op)) + " feeds a matmul operand and is also a requested result";
      operand.insert(n);
    }
    // Epilogue: values derived from c stay at c's output points.
    std::unordered_set<const Node*> derived{c};
    for (const Node* n : u) {
      if (n == c || operand.count(n)) continue;
      bool from_c = false;
      for (const auto& i : n->inputs) from_c |= derived.count(i.get()) > 0;
      if (!from_c) continue;
      bool ok = (is_elementwise(n->op) || n->op == Op::Reshape) && same_squeezed(n->shape, c->shape);
      if (!ok)
        return std::string("a matmul result reaches ") + op_name(n->op) + " " + shape_str(n->shape) +
               ", which would need it at other points (only element-wise ops at its output shape fuse after a matmul)";
      derived.insert(n);
    }
    return {};
  }

  // Whether an operand-side producer is cheap enough to recompute per use (rule 8).
  template <class In>
  static bool cheap_operand_op(const Node& n, const In& in) {
    switch (n.op) {
      case Op::Permute:
      case Op::Expand:
      case Op::Slice:
      case Op::Cast:
      case Op::Neg: return true;
      // A reshape of a value read from memory (contiguous) reads it at the linear index; one that
      // only splits dims keeps any strided index affine (lower_group.cpp, reshape_groups).
      case Op::Reshape:
        return !in(n.inputs[0].get()) || same_squeezed(n.inputs[0]->shape, n.shape) ||
               reshape_only_splits(n.shape, n.inputs[0]->shape);
      case Op::Mul:
      case Op::Div: {
        auto scalar = [](const Node* x) {
          while (x->op == Op::Expand || x->op == Op::Reshape) x = x->inputs[0].get();
          return x->op == Op::Const;
        };
        return scalar(n.inputs[1].get()) || (n.op == Op::Mul && scalar(n.inputs[0].get()));
      }
      default: return false;
    }
  }

  Partition build() {
    Partition p;
    std::unordered_map<int, int> index;  // set id -> group index (unordered yet)
    std::vector<FusionGroup> groups;
    for (const Node* n : topo_) {
      if (group_of(n) < 0) continue;
      int s = find(group_of(n));
      if (!index.count(s)) {
        index[s] = static_cast<int>(groups.size());
        FusionGroup g;
        g.pattern = set_pattern_[s];
        g.custom_kernel = set_kernel_[s];
        OpKind k = g.custom_kernel ? OpKind::ElemWise : op_kind(n->op);  // a custom kernel is a fused group
        g.kind = k == OpKind::Opaque ? GroupKind::Opaque : GroupKind::Fused;
        groups.push_back(g);
      }
      FusionGroup& g = groups[index[s]];
      g.nodes.push_back(n);
      // A generator (rand) joins the lattice as an element-wise op.
      if (!is_inlined_source(*n))
        g.lattice = std::max(g.lattice, n->op == Op::Rand ? OpKind::ElemWise : op_kind(n->op));
    }
    std::vector<int> gof(topo_.size(), -1);  // by position: the group index (unordered yet)
    for (size_t i = 0; i < groups.size(); ++i)
      for (const Node* n : groups[i].nodes) gof[pos(n)] = static_cast<int>(i);
    // Inputs, outputs and group dependencies.
    std::vector<std::vector<int>> deps(groups.size());
    for (size_t i = 0; i < groups.size(); ++i) {
      FusionGroup& g = groups[i];
      std::unordered_set<const Node*> seen_in;
      for (const Node* n : g.nodes) {
        for (const auto& inp : n->inputs) {
          const Node* x = inp.get();
          const int gx = gof[pos(x)];
          if (gx == static_cast<int>(i)) continue;
          if (is_inlined_source(*x) && !x->realized()) continue;  // emitted inline
          if (seen_in.insert(x).second) g.inputs.push_back(x);
          if (gx >= 0) deps[i].push_back(gx);
        }
        bool needed = is_root(n);
        for (const Node* c : consumers(n)) needed |= gof[pos(c)] != static_cast<int>(i);
        if (needed) g.outputs.push_back(n);
      }
      if (g.custom_kernel) g.outputs = g.custom_kernel->outputs();  // validated: covers the needed ones
    }
    // Kahn topological order of groups (ties by first member position: deterministic).
    std::vector<int> indeg(groups.size(), 0);
    std::vector<std::vector<int>> users(groups.size());
    for (size_t i = 0; i < groups.size(); ++i) {
      std::sort(deps[i].begin(), deps[i].end());
      deps[i].erase(std::unique(deps[i].begin(), deps[i].end()), deps[i].end());
      for (int d : deps[i]) {
        users[d].push_back(static_cast<int>(i));
        ++indeg[i];
      }
    }
    std::vector<int> ready, order;
    for (size_t i = 0; i < groups.size(); ++i)
      if (!indeg[i]) ready.push_back(static_cast<int>(i));
    while (!ready.empty()) {
      auto it = std::min_element(ready.begin(), ready.end(), [&](int a, int b) {
        return pos(groups[a].nodes.front()) < pos(groups[b].nodes.front());
      });
      int g = *it;
      ready.erase(it);
      order.push_back(g);
      for (int u : users[g])
        if (--indeg[u] == 0) ready.push_back(u);
    }
    if (order.size() != groups.size()) throw InternalError("partition: the group graph has a cycle");
    for (size_t k = 0; k < order.size(); ++k) {
      p.groups.push_back(std::move(groups[order[k]]));
      p.groups.back().id = static_cast<int>(k);
      for (const Node* n : p.groups.back().nodes) p.group_of[n] = static_cast<int>(k);
    }
    // Boundaries: every edge between two groups, with the rule that kept them apart.
    for (const auto& g : p.groups)
      for (const Node* n : g.nodes)
        for (const auto& inp : n->inputs) {
          const Node* x = inp.get();
          auto it = p.group_of.find(x);
          if (it == p.group_of.end() || it->second == g.id) continue;
          std::string why;
          auto r = reasons_.find({x, n});
          if (r != reasons_.end()) why = r->second;
          else if (op_kind(x->op) == OpKind::Opaque || op_kind(n->op) == OpKind::Opaque)
            why = std::string(op_name(op_kind(x->op) == OpKind::Opaque ? x->op : n->op)) +
                  " is opaque: it runs as its own kernel";
          else why = "producer already fused with another consumer";
          p.boundaries.push_back({x, n, why});
        }
    return p;
  }

  struct PairHash {
    size_t operator()(const std::pair<const Node*, const Node*>& p) const {
      return std::hash<const void*>()(p.first) * 31 + std::hash<const void*>()(p.second);
    }
  };

  PartitionLimits limits_;
  std::vector<const Node*> topo_;
  NodeMap pos_;  ///< node -> topological position
  std::unordered_set<const Node*> roots_;
  std::unordered_map<const Node*, std::vector<const Node*>> consumers_;
  std::vector<std::vector<const Node*>> sets_;
  // By topological position (dense: the checks run for every candidate merge).
  std::vector<const std::vector<const Node*>*> cons_;  ///< consumers_ entries (kNoConsumers if none)
  std::vector<char> is_root_;
  std::vector<int> group_;                                 ///< initial set of a member, -1 for non-members
  std::vector<uint32_t> in_mark_, seen_mark_, post_mark_;  ///< == epoch_: in U / visited / after a reduction
  std::vector<int> depth_;
  std::vector<uint32_t> set_mark_;  ///< per set: visited by this check's convexity search
  std::vector<const Node*> stack_;
  uint32_t epoch_ = 0;
  std::vector<int> parent_;  ///< union-find over the sets
  std::unordered_map<std::pair<const Node*, const Node*>, std::string, PairHash> reasons_;
  std::vector<std::string> set_pattern_;                         // per set: the pattern that formed it
  std::vector<std::shared_ptr<const CustomKernel>> set_kernel_;  // per set: a pattern's own kernel
  std::vector<PatternAttempt> attempts_;
};

}  // namespace

Partition partition_graph(const std::vector<const Node*>& roots, const PartitionLimits& limits) {
  return Partitioner(roots, limits).run();
}

ReduceSig reduce_signature(const FusionGroup& g) {
  for (const Node* n : g.nodes)
    if (is_reduction(n->op)) return {reduce_full_shape(*n), n->attrs.ints};
  return {};
}

Shape reduce_full_shape(const Node& n) {
  if (is_segment_reduction(n.op)) return {n.shape[0], n.inputs[0]->shape[0], n.shape[2]};
  return n.inputs[0]->shape;
}

bool same_squeezed(const Shape& a, const Shape& b) {
  Shape x, y;
  for (int64_t d : a)
    if (d != 1) x.push_back(d);
  for (int64_t d : b)
    if (d != 1) y.push_back(d);
  return x == y;
}

Shape kept_shape(const ReduceSig& s) {
  Shape k = s.full;
  for (int64_t a : s.axes) k[a] = 1;
  return k;
}

}  // namespace kfuse::detail
