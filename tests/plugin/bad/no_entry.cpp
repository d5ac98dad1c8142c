// A shared library without the kfuse_plugin_init entry point.
extern "C" __attribute__((visibility("default"))) int not_a_kfuse_plugin() { return 42; }
