// A plugin whose registration function throws: init fails with the message, nothing registered.
#include <kfuse/pattern.hpp>

#include <stdexcept>

namespace {
void register_patterns(kfuse::PluginRegistrar& r) {
  r.add(
      kfuse::make_pattern("init_fails_never_registered", {kfuse::Op::Add}, 1,
                          [](const kfuse::Node&, const kfuse::GraphView&) { return kfuse::MatchResult::fail("no"); }));
  throw std::runtime_error("this plugin needs a GPU it cannot find");
}
}  // namespace

KFUSE_PLUGIN("init_fails", register_patterns)
