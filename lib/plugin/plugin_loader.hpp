// Loading plugins (shared libraries exporting kfuse_plugin_init) and KFUSE_PLUGINS.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kfuse/pattern.hpp"

namespace kfuse::detail {

/// Loads every plugin listed in Options::plugins, once per process (failures are logged to
/// stderr: a plugin the user asked for must not be silently missing).
void load_env_plugins_once();

/// Registers one plugin's patterns (pattern_registry.cpp). Refusals are appended to `error`.
std::vector<std::string> register_plugin_patterns(const std::vector<std::shared_ptr<Pattern>>& ps,
                                                  const std::string& source, std::string& error);

}  // namespace kfuse::detail
