// A plugin whose pattern throws from match(): kfuse must disable it and carry on.
#include <kfuse/pattern.hpp>

#include <stdexcept>

namespace {
class Throwing : public kfuse::Pattern {
 public:
  std::string name() const override { return "throwing"; }
  std::vector<kfuse::Op> root_ops() const override { return {kfuse::Op::Add}; }
  kfuse::MatchResult match(const kfuse::Node&, const kfuse::GraphView&) const override {
    throw std::runtime_error("deliberate failure in match()");
  }
};
void register_patterns(kfuse::PluginRegistrar& r) { r.add(std::make_shared<Throwing>()); }
}  // namespace

KFUSE_PLUGIN("throwing", register_patterns)
