// Plugins as shared libraries: the two example plugins (examples/plugins) fire, respect benefit
// order against the built-ins and agree with the reference; broken plugins are refused with a
// clear message and never break eval().
#include <gtest/gtest.h>

#include <cstdlib>

#include <kfuse/kfuse.hpp>
#include <kfuse/pattern.hpp>
#include <kfuse/pattern_testkit.hpp>

#include "fusion/lower_group.hpp"
#include "fusion/partition.hpp"
#include "test_util.hpp"

namespace kfuse {
namespace {

std::string plugin_path(const std::string& name) {
  return std::string(KFUSE_TEST_PLUGIN_DIR) + "/kfuse_" + name + ".so";
}

Tensor input(Shape s, uint64_t seed = 1) {
  return test::make_tensor(test::random_values(static_cast<size_t>(shape_numel(s)), seed), s);
}

bool registered(const std::string& name) {
  for (const auto& s : pattern_status())
    if (s.name == name) return true;
  return false;
}

std::vector<std::string> fused_stems(const std::vector<Tensor>& ts) {
  std::vector<const Node*> roots;
  for (const auto& t : ts) roots.push_back(t.node().get());
  std::vector<std::string> out;
  for (const auto& g : detail::partition_graph(roots).groups)
    if (g.kind == detail::GroupKind::Fused) out.push_back(detail::kernel_stem(g));
  return out;
}

// The example plugins are loaded once per process and their patterns removed after the suite,
// so that other suites see only the built-ins.
class ExamplePlugins : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* p : {"scaled_residual", "row_softmax"}) {
      if (registered(p)) continue;
      PluginLoadResult r = load_plugin(plugin_path(p));
      ASSERT_TRUE(r.ok) << r.message;
      ASSERT_EQ(r.patterns, std::vector<std::string>{p});
    }
  }
  static void TearDownTestSuite() {
    unregister_pattern("scaled_residual");
    unregister_pattern("row_softmax");
  }
};

TEST_F(ExamplePlugins, GroupingOnlyPluginNamesItsGroup) {
  Tensor x = input({4, 8}, 1), y = input({4, 8}, 2);
  Tensor z = x + 0.5 * tanh(y);
  EXPECT_TRUE(testkit::fires("scaled_residual", {z}));
  EXPECT_EQ(fused_stems({z}), std::vector<std::string>{"k_scaled_residual_f32"});
  EXPECT_TRUE(testkit::does_not_fire("scaled_residual", {x + y}, "neither operand of the add is alpha * f(y)"));
  EXPECT_TRUE(testkit::does_not_fire("scaled_residual", {x + y * y}, "the product has no constant factor alpha"));
  EXPECT_TRUE(testkit::check_against_reference(
      "scaled_residual", {{{4, 8}, {4, 8}}, {{1}, {1}}, {{3, 1, 5}, {3, 1, 5}}, {{129}, {129}}},
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{in[0] + 0.5 * tanh(in[1]), sigmoid(in[1]) * 3.0 + in[0]};
      }));
}

TEST_F(ExamplePlugins, CustomKernelPluginOutranksTheBuiltInSoftmax) {
  Tensor x = input({6, 10});
  Tensor y = softmax(x, -1);
  EXPECT_TRUE(testkit::fires("row_softmax", {y}));
  EXPECT_TRUE(testkit::does_not_fire("softmax", {y}, "refused: overlaps the match of row_softmax at div f32[6, 10]"));
  std::vector<const Node*> roots{y.node().get()};
  auto p = detail::partition_graph(roots);
  ASSERT_EQ(p.groups.size(), 1u);
  ASSERT_TRUE(p.groups[0].custom_kernel);
  EXPECT_EQ(detail::lower_group(p.groups[0]).specialised.back(), "custom kernel of pattern row_softmax");
  EXPECT_TRUE(testkit::check_against_reference(
      "row_softmax", {{{6, 10}}, {{1, 1}}, {{3, 4, 33}}, {{257}}},
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{softmax(in[0], -1)}; }));
  // Where it does not apply, the built-in still names the group.
  Tensor c = softmax(x, 0);
  EXPECT_TRUE(testkit::does_not_fire("row_softmax", {c}, "only softmax over the last axis is supported"));
  EXPECT_TRUE(testkit::fires("softmax", {c}));
  Tensor both = softmax(x, -1);
  Tensor m = max(x, -1, true);  // an intermediate needed outside: its kernel would not write it
  EXPECT_TRUE(testkit::does_not_fire("row_softmax", {both, m}, "an intermediate value is also used outside"));
  EXPECT_TRUE(testkit::fires("softmax", {both, m}));
}

TEST_F(ExamplePlugins, LoadingTwiceIsHarmless) {
  PluginLoadResult r = load_plugin(plugin_path("scaled_residual"));
  EXPECT_TRUE(r.ok);
  EXPECT_NE(r.message.find("already loaded"), std::string::npos) << r.message;
}

TEST(BadPlugins, WrongAbiVersionIsRefused) {
  PluginLoadResult r = load_plugin(plugin_path("bad_abi"));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "plugin " + plugin_path("bad_abi") +
                           ": plugin ABI version mismatch: the plugin was built for ABI 999, this kfuse speaks ABI 1; "
                           "rebuild the plugin against this kfuse");
}

TEST(BadPlugins, MissingEntryPointIsRefused) {
  PluginLoadResult r = load_plugin(plugin_path("no_entry"));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "plugin " + plugin_path("no_entry") +
                           ": has no entry point kfuse_plugin_init (define it with KFUSE_PLUGIN(name, fn) from "
                           "kfuse/pattern.hpp)");
}

TEST(BadPlugins, MissingFileIsRefused) {
  PluginLoadResult r = load_plugin("/nonexistent/kfuse_nothing.so");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message.rfind("plugin /nonexistent/kfuse_nothing.so: cannot be loaded: ", 0), 0u) << r.message;
}

TEST(BadPlugins, FailingInitRegistersNothing) {
  PluginLoadResult r = load_plugin(plugin_path("init_fails"));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("kfuse_plugin_init failed (code 3): this plugin needs a GPU it cannot find"),
            std::string::npos)
      << r.message;
  EXPECT_FALSE(registered("init_fails_never_registered"));
}

TEST(BadPlugins, ThrowingPatternIsDisabledAndEvalIsCorrect) {
  if (!registered("throwing")) {
    PluginLoadResult r = load_plugin(plugin_path("throwing"));
    ASSERT_TRUE(r.ok) << r.message;
  }
  Tensor x = input({4, 8}, 1), y = input({4, 8}, 2);
  Tensor z = exp(x) + y;
  testing::internal::CaptureStderr();
  std::vector<double> got = test::values(z);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(test::all_close(got, reference_values(z), 1e-6, 1e-6));
  EXPECT_NE(err.find("pattern 'throwing' (from throwing (" + plugin_path("throwing") +
                     ")) disabled: match() threw: deliberate failure in match()"),
            std::string::npos)
      << err;
  for (const auto& s : pattern_status())
    if (s.name == "throwing") { EXPECT_FALSE(s.enabled); }
  unregister_pattern("throwing");
}

// Run by the ctest "plugin.out_of_tree" (tests/plugin/run_plugin_build_test.sh) with
// KFUSE_PLUGINS naming the example plugins built against an installed kfuse.
TEST(OutOfTreePlugins, LoadedFromKfusePluginsAtFirstEval) {
  if (!std::getenv("KFUSE_PLUGIN_OUT_OF_TREE")) GTEST_SKIP() << "run by the plugin.out_of_tree ctest";
  Tensor x = input({4, 8}, 1), y = input({4, 8}, 2);
  Tensor z = x + 0.25 * exp(y);
  Tensor s = softmax(x, -1);
  EXPECT_TRUE(test::all_close(test::values(x * 2.0), reference_values(x * 2.0), 1e-6, 1e-6));  // loads them
  bool sr = false, rs = false;
  for (const auto& st : pattern_status()) {
    sr |= st.name == "scaled_residual" && st.source.find("plugin-test") != std::string::npos;
    rs |= st.name == "row_softmax" && st.source.find("plugin-test") != std::string::npos;
  }
  EXPECT_TRUE(sr && rs);
  EXPECT_TRUE(testkit::fires("scaled_residual", {z}));
  EXPECT_TRUE(testkit::fires("row_softmax", {s}));
  EXPECT_TRUE(test::all_close(test::values(z), reference_values(z), 1e-5, 1e-6));
  EXPECT_TRUE(test::all_close(test::values(s), reference_values(s), 1e-5, 1e-6));
}

}  // namespace
}  // namespace kfuse
