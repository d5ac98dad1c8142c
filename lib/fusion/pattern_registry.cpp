// The pattern registry: built-ins first, then patterns registered from code and from plugins, in
// registration order. Process-wide, guarded by one mutex; a partition takes a snapshot.
#include "fusion/pattern_registry.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "fusion/partition.hpp"
#include "kfuse/error.hpp"
#include "kfuse/options.hpp"
#include "plugin/plugin_loader.hpp"

namespace kfuse {

// ---- GraphView ----

const std::vector<const Node*>& GraphView::consumers(const Node& n) const {
  static const std::vector<const Node*> none;
  auto it = consumers_->find(&n);
  return it == consumers_->end() ? none : it->second;
}

bool GraphView::is_input(const Node& n) { return n.op == Op::Buffer || n.realized() != nullptr; }
bool GraphView::is_inline_constant(const Node& n) { return detail::is_inlined_source(n) && !n.realized(); }

std::vector<const Node*> GraphView::outputs_of(const std::vector<const Node*>& nodes) const {
  std::unordered_set<const Node*> in(nodes.begin(), nodes.end());
  std::vector<const Node*> out;
  for (const Node* n : nodes) {
    if (is_input(*n) || is_inline_constant(*n)) continue;
    bool needed = is_output(*n);
    for (const Node* c : consumers(*n)) needed |= !in.count(c);
    if (needed && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

std::vector<const Node*> GraphView::inputs_of(const std::vector<const Node*>& nodes) const {
  std::unordered_set<const Node*> in(nodes.begin(), nodes.end());
  std::vector<const Node*> out;
  for (const Node* n : nodes)
    for (const auto& i : n->inputs) {
      const Node* x = i.get();
      if (in.count(x) || is_inline_constant(*x)) continue;
      if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
    }
  return out;
}

namespace {

// ---- the registry ----

struct Entry {
  std::shared_ptr<Pattern> pattern;
  std::string name, source;
  int benefit = 0;
  int order = 0;
  std::vector<Op> root_ops;
  bool enabled = true;
  std::string disabled_reason;
};

struct Registry {
  std::mutex mu;
  std::vector<Entry> entries;
  int next_order = 0;
  bool builtins_added = false;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: plugin patterns outlive static teardown
  return *r;
}

// Adds a pattern (lock held). Returns "" or why it was refused.
std::string add_locked(Registry& r, std::shared_ptr<Pattern> p, const std::string& source) {
  if (!p) return "null pattern";
  Entry e;
  try {
    e.name = p->name();
    e.benefit = p->benefit();
    e.root_ops = p->root_ops();
  } catch (const std::exception& ex) {
    return std::string("its name()/benefit()/root_ops() threw: ") + ex.what();
  } catch (...) { return "its name()/benefit()/root_ops() threw"; }
  if (e.name.empty()) return "a pattern needs a non-empty name";
  for (const auto& x : r.entries)
    if (x.name == e.name) return "a pattern named '" + e.name + "' is already registered (from " + x.source + ")";
  e.pattern = std::move(p);
  e.source = source;
  e.order = r.next_order++;
  r.entries.push_back(std::move(e));
  return {};
}

void ensure_builtins_locked(Registry& r) {
  if (r.builtins_added) return;
  r.builtins_added = true;
  for (auto& p : detail::builtin_patterns()) {
    std::string why = add_locked(r, p, "builtin");
    if (!why.empty()) throw InternalError("built-in pattern refused: " + why);
  }
}

std::atomic<uint64_t> g_generation{0};

// The set of patterns changed: plans made before may be wrong now (a custom kernel that is gone,
// a group that would be named or formed differently); the plan cache watches pattern_generation().
void patterns_changed() { g_generation.fetch_add(1); }

class LambdaPattern : public Pattern {
 public:
  LambdaPattern(std::string name, std::vector<Op> ops, int benefit,
                std::function<MatchResult(const Node&, const GraphView&)> fn)
      : name_(std::move(name)), ops_(std::move(ops)), benefit_(benefit), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::vector<Op> root_ops() const override { return ops_; }
  int benefit() const override { return benefit_; }
  MatchResult match(const Node& root, const GraphView& g) const override { return fn_(root, g); }

 private:
  std::string name_;
  std::vector<Op> ops_;
  int benefit_;
  std::function<MatchResult(const Node&, const GraphView&)> fn_;
};

}  // namespace

std::shared_ptr<Pattern> make_pattern(std::string name, std::vector<Op> root_ops, int benefit,
                                      std::function<MatchResult(const Node&, const GraphView&)> match) {
  return std::make_shared<LambdaPattern>(std::move(name), std::move(root_ops), benefit, std::move(match));
}

void register_pattern(std::shared_ptr<Pattern> p) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lk(r.mu);
    ensure_builtins_locked(r);
    std::string why = add_locked(r, std::move(p), "code");
    if (!why.empty()) throw UserError("register_pattern: " + why);
  }
  patterns_changed();
}

bool unregister_pattern(const std::string& name) {
  Registry& r = registry();
  std::shared_ptr<Pattern> gone;  // destroyed outside the lock
  {
    std::lock_guard<std::mutex> lk(r.mu);
    ensure_builtins_locked(r);
    for (auto it = r.entries.begin(); it != r.entries.end(); ++it)
      if (it->name == name) {
        gone = it->pattern;
        r.entries.erase(it);
        break;
      }
  }
  if (!gone) return false;
  patterns_changed();
  return true;
}

std::vector<PatternStatus> pattern_status() {
  detail::active_patterns();  // loads built-ins and KFUSE_PLUGINS
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<PatternStatus> out;
  for (const auto& e : r.entries) out.push_back({e.name, e.source, e.benefit, e.enabled, e.disabled_reason});
  return out;
}

namespace detail {

// Called by the plugin loader with the staged patterns of one plugin (all or none).
std::vector<std::string> register_plugin_patterns(const std::vector<std::shared_ptr<Pattern>>& ps,
                                                  const std::string& source, std::string& error) {
  Registry& r = registry();
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    ensure_builtins_locked(r);
    for (const auto& p : ps) {
      std::string why = add_locked(r, p, source);
      if (!why.empty()) {
        error += (error.empty() ? "" : "; ") + std::string("pattern refused: ") + why;
        continue;
      }
      names.push_back(r.entries.back().name);
    }
  }
  if (!names.empty()) patterns_changed();
  return names;
}

uint64_t pattern_generation() { return g_generation.load(); }

std::vector<ActivePattern> active_patterns() {
  load_env_plugins_once();
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  ensure_builtins_locked(r);
  std::vector<ActivePattern> out;
  for (const auto& e : r.entries)
    if (e.enabled) out.push_back({e.pattern, e.name, e.benefit, e.order, e.root_ops});
  return out;
}

MatchResult run_match(const ActivePattern& p, const Node& root, const GraphView& view) {
  std::string what;
  try {
    return p.pattern->match(root, view);
  } catch (const std::exception& e) { what = e.what(); } catch (...) {
    what = "an exception that is not a std::exception";
  }
  std::string why = "match() threw: " + what;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    for (auto& e : r.entries)
      if (e.pattern == p.pattern && e.enabled) {
        e.enabled = false;
        e.disabled_reason = why;
        std::fprintf(stderr, "[kfuse:patterns] pattern '%s' (from %s) disabled: %s\n", e.name.c_str(), e.source.c_str(),
                     why.c_str());
      }
  }
  return MatchResult::fail(why + " (pattern disabled)");
}

std::vector<PatternTrace> pattern_traces(const std::vector<PatternAttempt>& attempts,
                                         const std::vector<const Node*>& roots) {
  std::unordered_map<const Node*, int> id;
  int k = 0;
  for (const Node* n : topo_order(roots, true)) id[n] = k++;
  std::vector<PatternTrace> out;
  for (const auto& a : attempts) {
    auto it = id.find(a.node);
    std::string name = "%";
    name.append(it == id.end() ? std::string("?") : std::to_string(it->second)).append(" ").append(op_name(a.node->op));
    out.push_back({name, a.pattern, a.matched, a.reason});
  }
  return out;
}

std::vector<PatternTrace> pattern_traces(const std::vector<const Node*>& roots) {
  Partition p = partition_graph(roots);
  return pattern_traces(p.pattern_attempts, roots);
}

}  // namespace detail

MatchResult match_pattern(const Pattern& p, const Tensor& root, const std::vector<Tensor>& outputs) {
  if (!root.defined()) throw UserError("match_pattern: the root tensor is undefined");
  std::vector<const Node*> roots;
  for (const auto& t : outputs)
    if (t.defined()) roots.push_back(t.node().get());
  if (roots.empty()) roots.push_back(root.node().get());
  GraphView::ConsumerMap consumers;
  std::unordered_set<const Node*> root_set(roots.begin(), roots.end());
  std::vector<const Node*> topo = topo_order(roots, true);
  for (const Node* n : topo) {
    if (n->realized()) continue;
    for (const auto& i : n->inputs) {
      auto& v = consumers[i.get()];
      if (std::find(v.begin(), v.end(), n) == v.end()) v.push_back(n);
    }
  }
  GraphView view(consumers, root_set);
  try {
    return p.match(*root.node(), view);
  } catch (const std::exception& e) { return MatchResult::fail(std::string("match() threw: ") + e.what()); }
}

std::vector<PatternTrace> pattern_traces(const std::vector<Tensor>& ts) {
  std::vector<const Node*> roots;
  for (const auto& t : ts) {
    if (!t.defined()) throw UserError("pattern_traces: an undefined (default-constructed) Tensor was passed");
    if (!t.node()->realized()) roots.push_back(t.node().get());
  }
  return detail::pattern_traces(roots);
}

}  // namespace kfuse
