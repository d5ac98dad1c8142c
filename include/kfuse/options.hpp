/** \file options.hpp
 * Run-time options, read from the environment once (first use) into one value. Tests and tools
 * may replace them with set_options(). Variables:
 *   KFUSE_BACKEND      comma list in order of preference (xbyak,llvm,opencl,cuda,reference);
 *                      default: every CPU backend built in, fastest first, reference last
 *   KFUSE_ISA          avx512 | avx2: force the x86 ISA level (avx2 on an AVX-512 machine)
 *   KFUSE_NUM_THREADS  CPU threads (default: hardware concurrency)
 *   KFUSE_LOG          comma list of channels: fusion, patterns, cache, codegen, passes, backend
 *   KFUSE_DUMP         directory for per-kernel IR, source and binary dumps (lib/runtime/kernel_dump.hpp)
 *   KFUSE_CACHE        off | memory | disk (default disk)
 *   KFUSE_CACHE_DIR    default $XDG_CACHE_HOME/kfuse or ~/.cache/kfuse
 *   KFUSE_CACHE_MAX_BYTES  disk cache bound (default 1 GiB)
 *   KFUSE_POOL_MAX_BYTES   freed host buffers kept for reuse (default: an eighth of the
 *                      physical memory, at least 512 MiB)
 *   KFUSE_PLUGINS      colon-separated plugin .so paths loaded at start
 *   KFUSE_PROFILE      file prefix: profile the whole program, write <prefix>.txt/.json/.trace.json/.svg
 *                      at exit (kfuse/profile.hpp)
 *   KFUSE_GEMM_PATH    auto | packed | direct: the xbyak GEMM path of every launch (default auto)
 *   KFUSE_GEMM_BLOCKING  mc,kc,nc: the xbyak packed GEMM's cache blocking (default: from the caches)
 *   KFUSE_LLVM_COLUMN_TILE  lanes per LLVM column tile (default: automatic)
 *   KFUSE_LLVM_LAUNCH_CHUNK LLVM launches run their points sequentially in chunks of this many
 *
 * The process-wide value is read once where an evaluation, plan, compile or tool starts (the API
 * boundary); below it the options are passed down (planning, the kernel cache, Backend::compile).
 */
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kfuse {

struct Options {
  std::vector<std::string> backends;  ///< empty: default order
  std::string isa;                    ///< empty: detect
  int num_threads = 0;                ///< 0: hardware concurrency
  std::vector<std::string> log;       ///< enabled log channels
  std::string dump_dir;
  std::string cache_mode = "disk";
  std::string cache_dir;
  uint64_t cache_max_bytes = uint64_t{1} << 30;
  /// Freed host buffers kept for reuse by later evaluations (a fresh buffer pays a page fault per
  /// 4 KiB: about 0.6 s per GiB on the 2-vCPU VMs, six times the kernel that fills it). 0: an
  /// eighth of the physical memory, at least 512 MiB.
  uint64_t pool_max_bytes = 0;
  /// Host buffers of 4 MiB and more start on a 2 MiB boundary and ask the kernel for transparent
  /// huge pages (madvise MADV_HUGEPAGE; Linux's default THP mode only backs such ranges). A
  /// gather from a big table (an embedding bag) then misses the TLB once per 2 MiB, not per
  /// 4 KiB page. false (KFUSE_HUGE_PAGES=0): plain pages.
  bool huge_pages = true;
  std::vector<std::string> plugins;

  // Knobs of the generated code (tests, benchmarks): each is part of the kernel cache key of the
  // backend it changes when set, so a kernel made under another value is never reused.
  /// xbyak GEMM path: "" or "auto" (by size), "packed", "direct" (where B is contiguous along N).
  std::string gemm_path;
  /// xbyak packed GEMM blocking; all 0: derived from the cache sizes (kc need not be a multiple of 4).
  /// mc and nc are rounded down to whole micro-tiles of the running ISA, at least one tile.
  struct GemmBlocking {
    int64_t mc = 0, kc = 0, nc = 0;
  } gemm_blocking;
  /// GPU tiled GEMM (CUDA, OpenCL) of 4-byte accumulators: 0 the default (128 x 128 tiles on 256
  /// lanes), 64 the 64 x 64 tiling on 64 lanes, kept to time the two against each other.
  int gpu_gemm_tile = 0;
  /// > 0: every eligible LLVM column kernel uses tiles of this many lanes (0: automatic).
  int64_t llvm_column_tile = 0;
  /// > 0: LLVM launches run their outer points (or reduce blocks) sequentially in chunks of this
  /// many, emulating any thread split (0: the pool's split).
  int64_t llvm_launch_chunk = 0;
  /// xbyak streaming stores: the 4K-alias check (emitter.cpp streaming_check) forced on (1) or
  /// off (0); -1: the CPU's answer (on for AMD).
  int xbyak_alias_check = -1;
  /// xbyak row kernels: row cursors per call (Frame::ways; 1: in order, at most kMaxWays);
  /// -1: the default (4 for short rows whose output streams, 1 otherwise).
  int xbyak_row_ways = -1;

  bool logging(const char* channel) const;
  /// Options from the environment (ignores the current process-wide value).
  static Options from_env();
};

/// The process-wide options (from the environment on first use).
const Options& options();
/// Replaces the process-wide options (for tests and tools; not while evaluating).
void set_options(const Options& o);

/// Incremented by every set_options(): state derived from the options (the plan cache) is
/// dropped when it changes.
uint64_t options_generation();

/// Writes one log line "[kfuse:<channel>] <msg>" to stderr when the channel is enabled. Log
/// channels are process-wide state: log() and log_enabled() read the process-wide options.
void log(const char* channel, const std::string& msg);
/// Whether log() writes lines of `channel` (to skip building a costly message).
bool log_enabled(const char* channel);

}  // namespace kfuse
