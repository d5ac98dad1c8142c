// The concurrent-interning suite also runs in kfuse_tests (without ThreadSanitizer): the one
// source lives in tests/tsan/, which kfuse_tsan_tests builds on its own.
#include "tsan/test_concurrent_intern.cpp"
