// KFUSE_PROFILE=<prefix>: the whole program under a Profiler, written at exit as
// <prefix>.txt/.json/.trace.json/.svg (no code changes). The table also goes to stderr.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "kfuse/profile.hpp"

namespace kfuse::detail::prof {
namespace {

Profiler* g_env_profiler = nullptr;
const char* g_prefix = nullptr;

void write_at_exit() {
  if (!g_env_profiler) return;
  try {
    Profile p = g_env_profiler->stop();
    p.write(g_prefix);
    std::fprintf(stderr, "[kfuse:profile] %s.{txt,json,trace.json,svg}\n%s", g_prefix, p.table().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kfuse:profile] KFUSE_PROFILE=%s: %s\n", g_prefix, e.what());
  }
}

// Started when the library loads. The profiler (and the machine model it reads) are created
// before atexit() registers the writer, so the writer runs while they still exist; the
// Profiler itself is leaked on purpose.
struct EnvProfile {
  EnvProfile() {
    const char* p = std::getenv("KFUSE_PROFILE");
    if (!p || !*p) return;
    g_prefix = p;
    try {
      g_env_profiler = new Profiler();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[kfuse:profile] KFUSE_PROFILE=%s not started: %s\n", p, e.what());
      return;
    }
    std::atexit(write_at_exit);
  }
} g_env_profile;

}  // namespace
}  // namespace kfuse::detail::prof
