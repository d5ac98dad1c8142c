// Executable memory for xbyak kernels: W^X pages from a shared arena.
//
// A kernel's code is copied into pages that are writable and not executable, then flipped to
// read+execute with one mprotect; they are never writable and executable at once. Pages come
// from 64-page chunks mapped (and faulted in) ahead, so a kernel costs a memcpy and an mprotect
// rather than an mmap, first-touch page faults and an munmap (measured on the 2-vCPU AMD VM:
// 11.3 us -> 3.5 us per kernel; freeing 6.4 us -> one mprotect). Freed pages go back to
// read+write and are reused; a chunk left empty is unmapped.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kfuse::detail::xb {

class ExecMem {
 public:
  /// Copies `n` bytes of code to fresh pages and makes them read+execute. Throws BackendError.
  /// `name` labels the code in the perf map when KFUSE_PERF_MAP=1 (perf_map_note); empty: no
  /// label (a block of several kernels names each itself).
  ExecMem(const uint8_t* code, size_t n, const std::string& name = "kfuse_xbyak");
  ~ExecMem();
  ExecMem(const ExecMem&) = delete;
  ExecMem& operator=(const ExecMem&) = delete;
  const void* entry() const { return mem_; }

 private:
  uint8_t* mem_ = nullptr;
  size_t pages_ = 0;
};

/// With KFUSE_PERF_MAP=1, appends "start size name" to /tmp/perf-<pid>.map, the file `perf
/// report` reads to name JIT code (else perf shows bare addresses under "[JIT]"). Entries are never
/// removed: perf reads the file after the process ends, and reused pages get a newer line.
void perf_map_note(const void* start, size_t n, const std::string& name);

/// Pages the arena holds mapped now (in use or free), for tests.
size_t exec_arena_mapped_pages();

}  // namespace kfuse::detail::xb
