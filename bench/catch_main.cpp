// Catch2 v2 main for kfuse_micro, with benchmarking enabled (Debian's prebuilt Catch2WithMain
// was built without it). Kept alone in its own TU: it is slow to compile and compiled once.
#define CATCH_CONFIG_MAIN
#define CATCH_CONFIG_ENABLE_BENCHMARKING
#include <catch2/catch.hpp>
