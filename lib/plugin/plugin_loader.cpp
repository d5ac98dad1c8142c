// load_plugin: dlopen + the C entry point handshake (pattern.hpp, "the C ABI of plugins").
//
//   1. dlopen(path, RTLD_NOW | RTLD_LOCAL); dlsym("kfuse_plugin_init").
//   2. kfuse fills kfuse_plugin_api {abi_version, context, register_pattern} and calls init;
//      the plugin writes plugin_abi_version and name, checks abi_version, and registers its
//      patterns, which kfuse STAGES (nothing is visible to evaluations yet).
//   3. Only when init returned KFUSE_PLUGIN_OK and both sides agree on the ABI are the staged
//      patterns registered. Otherwise they are destroyed and the library is closed again.
// A plugin that registered patterns is never dlclose'd: their code lives in it.
#include <dlfcn.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "kfuse/options.hpp"
#include "plugin/plugin_loader.hpp"

namespace kfuse {

namespace {

struct Staging {
  std::vector<std::shared_ptr<Pattern>> patterns;
};

int stage_pattern(void* context, const void* pattern) {
  if (!context || !pattern) return 1;
  try {
    const auto& p = *static_cast<const std::shared_ptr<Pattern>*>(pattern);
    if (!p) return 1;
    static_cast<Staging*>(context)->patterns.push_back(p);
    return 0;
  } catch (...) { return 1; }
}

std::mutex g_load_mu;
std::set<std::string>& loaded_paths() {
  static auto* s = new std::set<std::string>;
  return *s;
}

}  // namespace

PluginLoadResult load_plugin(const std::string& path) {
  PluginLoadResult res;
  auto fail = [&](const std::string& why) {
    res.ok = false;
    res.message = "plugin " + path + ": " + why;
    return res;
  };
  std::lock_guard<std::mutex> lk(g_load_mu);
  char real[PATH_MAX];
  std::string key = ::realpath(path.c_str(), real) ? std::string(real) : path;
  if (loaded_paths().count(key)) {
    res.ok = true;
    res.message = "plugin " + path + ": already loaded";
    return res;
  }
  dlerror();
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    return fail(std::string("cannot be loaded: ") + (e ? e : "unknown dlopen error"));
  }
  auto init = reinterpret_cast<kfuse_plugin_init_fn>(::dlsym(h, "kfuse_plugin_init"));
  if (!init) {
    ::dlclose(h);
    return fail("has no entry point kfuse_plugin_init (define it with KFUSE_PLUGIN(name, fn) from kfuse/pattern.hpp)");
  }
  Staging staging;
  kfuse_plugin_api api{};
  api.abi_version = KFUSE_PLUGIN_ABI_VERSION;
  api.plugin_abi_version = 0;
  api.name = nullptr;
  api.context = &staging;
  api.register_pattern = &stage_pattern;
  int rc = KFUSE_PLUGIN_INIT_FAILED;
  std::string thrown;
  try {
    rc = init(&api);
  } catch (const std::exception& e) { thrown = e.what(); } catch (...) {
    thrown = "unknown exception";
  }
  api.error[sizeof(api.error) - 1] = '\0';
  std::string name = api.name ? std::string(api.name) : path;
  std::string why;
  if (!thrown.empty()) {
    why = "kfuse_plugin_init threw: " + thrown;
  } else if (api.plugin_abi_version != KFUSE_PLUGIN_ABI_VERSION) {
    why = "plugin ABI version mismatch: the plugin was built for ABI " + std::to_string(api.plugin_abi_version) +
          ", this kfuse speaks ABI " + std::to_string(KFUSE_PLUGIN_ABI_VERSION) +
          "; rebuild the plugin against this kfuse";
  } else if (rc != KFUSE_PLUGIN_OK) {
    why = "kfuse_plugin_init failed (code " + std::to_string(rc) + ")" +
          (api.error[0] ? std::string(": ") + api.error : std::string());
  }
  if (!why.empty()) {
    staging.patterns.clear();  // destroy plugin objects while their code is still mapped
    ::dlclose(h);
    return fail(why);
  }
  std::string error;
  res.patterns = detail::register_plugin_patterns(staging.patterns, name + " (" + path + ")", error);
  staging.patterns.clear();
  loaded_paths().insert(key);  // keep the handle open for the life of the process
  res.ok = error.empty();
  res.message = "plugin " + path + ": loaded '" + name + "' with " + std::to_string(res.patterns.size()) + " pattern" +
                (res.patterns.size() == 1 ? "" : "s") + (error.empty() ? "" : "; " + error);
  return res;
}

namespace detail {

void load_env_plugins_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const auto& p : options().plugins) {
      PluginLoadResult r = load_plugin(p);
      if (!r.ok) std::fprintf(stderr, "[kfuse:patterns] KFUSE_PLUGINS: %s\n", r.message.c_str());
      else log("patterns", "KFUSE_PLUGINS: " + r.message);
    }
  });
}

}  // namespace detail

}  // namespace kfuse
