/** \file pattern_testkit.hpp
 * Helpers for testing a fusion pattern (built-in or plugin), header-only, public API only and
 * independent of any test framework: each check returns a Result (true, or false with a message).
 *
 *   kfuse::testkit::ScopedPattern reg(std::make_shared<MyPattern>());   // or load_plugin(...)
 *   auto x = kfuse::Tensor::from_vector<float>(..., {4, 8});
 *   EXPECT_TRUE(kfuse::testkit::fires("my_pattern", {x + 2.0f * kfuse::tanh(x)}));
 *   EXPECT_TRUE(kfuse::testkit::does_not_fire("my_pattern", {x * 2.0f}, "root is not"));
 *   EXPECT_TRUE(kfuse::testkit::check_against_reference(
 *       "my_pattern", {{{4, 8}}, {{1, 3}}, {{33, 17}}},              // shapes of the inputs, per case
 *       [](const std::vector<kfuse::Tensor>& in) { return std::vector<kfuse::Tensor>{in[0] + 2.0f *
 * kfuse::tanh(in[0])}; }));
 *
 * With GoogleTest, `EXPECT_TRUE(r) << r.message` also prints the message (a Result converts to
 * bool and prints itself through operator<<).
 */
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kfuse/explain.hpp"
#include "kfuse/pattern.hpp"
#include "kfuse/reference.hpp"
#include "kfuse/tensor.hpp"

namespace kfuse::testkit {

struct Result {
  bool ok = true;
  std::string message;
  explicit operator bool() const { return ok; }
  static Result pass(std::string m = {}) { return {true, std::move(m)}; }
  static Result failure(std::string m) { return {false, std::move(m)}; }
};
inline std::ostream& operator<<(std::ostream& os, const Result& r) { return os << r.message; }

/// Registers a pattern for the lifetime of this object.
class ScopedPattern {
 public:
  explicit ScopedPattern(std::shared_ptr<Pattern> p) : name_(p->name()) { register_pattern(std::move(p)); }
  ~ScopedPattern() { unregister_pattern(name_); }
  ScopedPattern(const ScopedPattern&) = delete;
  ScopedPattern& operator=(const ScopedPattern&) = delete;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

/// Every trace of `pattern` on the (unevaluated) graph of `outputs`.
inline std::vector<PatternTrace> traces_of(const std::string& pattern, const std::vector<Tensor>& outputs) {
  std::vector<PatternTrace> out;
  for (auto& t : pattern_traces(outputs))
    if (t.pattern == pattern) out.push_back(t);
  return out;
}

inline std::string traces_text(const std::vector<PatternTrace>& ts) {
  std::ostringstream os;
  for (const auto& t : ts) os << "\n  " << t.pattern << " at " << t.node << ": " << (t.matched ? "matched" : t.reason);
  return os.str();
}

/// The registered pattern commits at least `times` matches on the graph of `outputs`.
inline Result fires(const std::string& pattern, const std::vector<Tensor>& outputs, size_t times = 1) {
  auto ts = traces_of(pattern, outputs);
  size_t n = 0;
  for (const auto& t : ts) n += t.matched ? 1 : 0;
  if (n >= times) return Result::pass();
  std::string msg = "pattern " + pattern + " committed ";
  msg.append(std::to_string(n)).append(" match(es), expected ").append(std::to_string(times));
  if (ts.empty()) msg += " (never tried: not registered, or no node has one of its root ops)";
  else msg.append(":").append(traces_text(ts));
  return Result::failure(msg);
}

/// The registered pattern commits nothing on the graph of `outputs`; when `reason_contains` is
/// given, some attempt failed (or was refused) with a reason containing it.
inline Result does_not_fire(const std::string& pattern, const std::vector<Tensor>& outputs,
                            const std::string& reason_contains = {}) {
  auto ts = traces_of(pattern, outputs);
  bool found = reason_contains.empty();
  for (const auto& t : ts) {
    if (t.matched) return Result::failure("pattern " + pattern + " fired at " + t.node + traces_text(ts));
    found |= t.reason.find(reason_contains) != std::string::npos;
  }
  if (!found) {
    std::string msg = "pattern " + pattern + " did not fire, but no reason contains \"" + reason_contains + "\"";
    if (ts.empty()) msg += " (never tried)";
    else msg.append(":").append(traces_text(ts));
    return Result::failure(msg);
  }
  return Result::pass();
}

struct DiffOptions {
  double rtol = 1e-5;
  double atol = 1e-6;
  uint64_t seed = 1;
  double lo = -2.0, hi = 2.0;  ///< input values are uniform in [lo, hi)
  DType dtype = DType::F32;    ///< of every input
  bool require_fire = true;    ///< also check that the pattern fires in every case
};

/// Random inputs of the given shapes (f32 unless `o.dtype`).
inline std::vector<Tensor> random_inputs(const std::vector<Shape>& shapes, const DiffOptions& o = {}) {
  std::mt19937_64 g(o.seed);
  std::uniform_real_distribution<double> d(o.lo, o.hi);
  std::vector<Tensor> in;
  for (const auto& s : shapes) {
    std::vector<double> v(static_cast<size_t>(shape_numel(s)));
    for (auto& x : v) x = d(g);
    in.push_back(Tensor::from_vector<double>(v, s).cast(o.dtype));
    in.back().eval();
  }
  return in;
}

/// For each case (the shapes of the inputs), builds `build(random inputs)`, checks that
/// `pattern` fires (unless !o.require_fire), evaluates, and compares every output with
/// kfuse::reference_values within |got - want| <= atol + rtol * |want| (NaN only matches NaN).
inline Result check_against_reference(const std::string& pattern, const std::vector<std::vector<Shape>>& cases,
                                      const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& build,
                                      DiffOptions o = {}) {
  for (size_t c = 0; c < cases.size(); ++c) {
    std::string where = "case ";
    where.append(std::to_string(c)).append(" (inputs");
    for (const auto& s : cases[c]) where.append(" ").append(shape_str(s));
    where += ")";
    std::vector<Tensor> in = random_inputs(cases[c], o);
    std::vector<Tensor> out = build(in);
    if (o.require_fire) {
      Result f = fires(pattern, out);
      if (!f) return Result::failure(where + ": " + f.message);
    }
    std::vector<std::vector<double>> want = reference_values(out);
    eval(out);
    for (size_t k = 0; k < out.size(); ++k) {
      std::vector<double> got = out[k].to_vector<double>();
      if (got.size() != want[k].size())
        return Result::failure(where + ": output " + std::to_string(k) + " size differs");
      for (size_t i = 0; i < got.size(); ++i) {
        double w = want[k][i], v = got[i];
        bool same = std::isnan(w)   ? std::isnan(v)
                    : std::isinf(w) ? v == w
                                    : std::isfinite(v) && std::fabs(v - w) <= o.atol + o.rtol * std::fabs(w);
        if (!same) {
          std::ostringstream os;
          os << where << ": output " << k << " element " << i << ": got " << v << ", reference " << w << " (rtol "
             << o.rtol << ", atol " << o.atol << ")";
          return Result::failure(os.str());
        }
      }
    }
    o.seed += 1;
  }
  return Result::pass();
}

/// The kernels explain() plans for `outputs`, as "name" strings (e.g. k_softmax_f32).
inline std::vector<std::string> kernel_names(const std::vector<Tensor>& outputs) {
  std::vector<std::string> names;
  for (const auto& k : explain(outputs).kernels) names.push_back(k.name);
  return names;
}

}  // namespace kfuse::testkit
