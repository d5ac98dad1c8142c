// A plugin built for a different plugin ABI (as if compiled against a future kfuse): its
// patterns must never be registered.
#include <kfuse/pattern.hpp>

extern "C" __attribute__((visibility("default"))) int kfuse_plugin_init(kfuse_plugin_api* api) {
  api->plugin_abi_version = 999;
  api->name = "bad_abi";
  if (api->abi_version != 999) return KFUSE_PLUGIN_ABI_MISMATCH;
  return KFUSE_PLUGIN_OK;
}
