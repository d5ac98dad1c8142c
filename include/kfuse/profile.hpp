/** \file profile.hpp
 * The machine model (memory bandwidth and FMA peak, measured once and cached beside the kernel
 * cache) and the profiler: every kernel launch inside a profiled region with its time, the
 * bytes it must move (the plan's minimum traffic, reads and writes apart), the FLOPs counted from
 * its kernel IR, and the fraction of its roofline bound it reached. README "Profiling".
 *
 *   kfuse::Profile p = kfuse::profile([&] { y.eval(); });
 *   std::cout << p.table();              // sorted by time
 *   p.write("run");                      // run.txt, run.json, run.trace.json, run.svg
 *
 * KFUSE_PROFILE=<prefix> profiles a whole program and writes the same files at exit.
 */
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kfuse/device.hpp"
#include "kfuse/dtype.hpp"

namespace kfuse {

// ---------------------------------------------------------------- machine model

/// Roofs of the CPU with one thread count.
struct CpuRoofs {
  int threads = 1;
  double read_gbps = 0;       ///< sum over an array (reads only)
  double write_gbps = 0;      ///< ordinary stores (the write-allocate read is not counted as traffic)
  double write_nt_gbps = 0;   ///< streaming (non-temporal) stores
  double copy_gbps = 0;       ///< a = b, streaming stores (bytes read + bytes written)
  double triad_gbps = 0;      ///< a = b + s*c, streaming stores (the bench's former ceiling)
  double fma_f32_gflops = 0;  ///< independent FMA chains in registers
  double fma_f64_gflops = 0;
  /// bf16 dot products into f32 (AVX-512 BF16's vdpbf16ps chains; 0 without it): the ceiling of
  /// bf16 x bf16 contractions, which the xbyak GEMM runs on them (docs/xbyak-backend.md).
  double dot_bf16_gflops = 0;
  /// u8 x i8 dot products into i32 (AVX-512 VNNI's vpdpbusd chains; 0 without it), in 10^9
  /// integer ops (multiplies and adds) per second: the ceiling of u8 x i8 contractions.
  double dot_u8s8_gops = 0;
};

/// Roofs of a GPU device, measured with kfuse kernels on it (a copy and an FMA chain).
struct DeviceRoofs {
  std::string device;  ///< "opencl:0", "cuda:0"
  std::string name;
  double read_gbps = 0;  ///< bandwidth of a copy kernel (read + write bytes / time); used for both
  double write_gbps = 0;
  double fma_f32_gflops = 0;
};

struct MachineModel {
  std::string cpu;       ///< "AMD EPYC 9R14 (2 threads)"
  std::string isa;       ///< FMA form of the probe, "avx2 (ymm)"
  std::string measured;  ///< ISO 8601 date and time of the measurement
  int64_t measured_unix = 0;
  bool quick = false;                ///< measured in quick mode (small arrays, few passes)
  std::vector<CpuRoofs> cpu_roofs;   ///< by thread count, ascending
  std::vector<DeviceRoofs> devices;  ///< measured GPU devices

  /// Roofs for `threads` threads: the largest thread count measured that is <= threads.
  const CpuRoofs& cpu_at(int threads) const;
  /// The device's roofs, or null when it was not measured.
  const DeviceRoofs* device_roofs(Device d) const;
  std::string text() const;
  std::string to_json() const;
  /// Throws UserError naming the problem when `json` is not a machine model.
  static MachineModel from_json(const std::string& json);
};

struct MachineOptions {
  bool remeasure = false;       ///< measure again even when the cached model matches this machine
  bool quick = false;           ///< small arrays and few passes (tests); not written to the disk cache
  std::vector<Device> devices;  ///< GPU devices to measure as well (beside those already cached)
};

/// The machine model: from `<KFUSE_CACHE_DIR>/machine.json` when it was measured on this CPU,
/// else measured (about 1 s) and written there. Cached in the process after the first call.
const MachineModel& machine(const MachineOptions& o = {});
/// Measures without reading or writing the disk cache.
MachineModel measure_machine(const MachineOptions& o = {});
/// Replaces the process's model (tests inject a fixed one; nothing is written to disk).
void set_machine(const MachineModel& m);
/// Where machine() keeps the model.
std::string machine_path();

/// The roofline of one kernel launch, the one definition of a ceiling for the profiler and the
/// bench: memory time = read bytes / read bandwidth + write bytes / write bandwidth (reads and
/// writes share the memory bus; the write roof is the better of ordinary and streaming stores),
/// compute time = FLOPs / FMA peak of the dtype; the bound is the larger of the two.
struct Roof {
  double read_gbps = 0, write_gbps = 0, peak_gflops = 0;
  /// Lower bound on the time of a launch; 0 when the roofs are unknown.
  double seconds(double read_bytes, double write_bytes, double flops) const;
  double memory_seconds(double read_bytes, double write_bytes) const;
  double compute_seconds(double flops) const;
  /// The effective bandwidth ceiling for that read/write mix (GB/s).
  double gbps(double read_bytes, double write_bytes) const;
};
/// The roofs of one CpuRoofs row for `dtype`.
Roof roof_of(const CpuRoofs& c, DType dtype);
/// Measures one CpuRoofs row (what machine() stores per thread count; the bench re-measures it
/// before each workload because the ceiling of a shared host drifts).
CpuRoofs measure_cpu_roofs(int threads, bool quick = false);

/// Roofs of `device` with `threads` CPU threads (0: Options::num_threads or all) for `dtype`
/// (f64 uses the f64 FMA peak, bf16 the bf16 dot-product peak and i32 the u8 x i8 one where the
/// CPU has them; every other dtype the f32 FMA peak).
Roof roof_for(const MachineModel& m, Device device, DType dtype, int threads = 0);

/// The probes machine() runs, public for the bench (kfuse_compare measures them per workload).
namespace probe {
enum class Stream { Read, Write, WriteNT, Copy, Triad };
/// Best-of-`passes` GB/s of one streaming kernel on `threads` threads over arrays of `n`
/// floats (allocated once per size and reused).
double stream_gbps(Stream kind, int threads, int64_t n, int passes);
double triad_gbps(int threads, int64_t n, int passes);
/// GFLOP/s of `threads` threads of independent FMA chains (f32 or f64), best of `trials`; bf16:
/// chains of bf16 pair dot products into f32 (vdpbf16ps, 4 FLOPs per lane), 0 on a CPU without
/// AVX512_BF16; i8: u8 x i8 quad dot products into i32 (vpdpbusd, 8 ops per lane), 0 without
/// AVX512_VNNI.
double fma_peak_gflops(DType dtype, int threads, int trials = 5, int64_t iters = 10'000'000);
bool avx512();
const char* fma_kind();     ///< "avx2 (ymm)" or "avx512 (zmm)"
const char* stream_kind();  ///< the stores the streaming kernels use

/// Data cache sizes in bytes: L1d and L2 of one core, L3 of one core's cache complex.
struct CacheSizes {
  int64_t l1d = 0, l2 = 0, l3 = 0;
};
/// From /sys/devices/system/cpu/cpu0/cache (what the kernel read from CPUID), else sysconf, else
/// 32 KiB / 512 KiB / 8 MiB. glibc's sysconf can be far off on VMs: it gave an L3 of 320 MiB on a
/// 2-vCPU Zen 4 guest whose sysfs (and CPUID leaf 0x8000001D) says 32 MiB. Read once.
const CacheSizes& cache_sizes();
}  // namespace probe

// ---------------------------------------------------------------- profiler

/// One kernel launch (or host step) inside a profiled region.
struct KernelLaunch {
  std::string kernel;                      ///< readable stem, e.g. k_log_softmax_f32
  std::string kind;                        ///< pointwise | row | column | global | contraction | host
  std::string backend;                     ///< xbyak, llvm, opencl, cuda, reference, host
  std::string device;                      ///< "cpu", "opencl:0"
  std::string shape;                       ///< output shapes, "f32[4096, 10]"
  std::string dtype;                       ///< the dtype of the roof ("f32")
  int64_t eval = 0;                        ///< which evaluation of the region it belongs to (0-based)
  double start_us = 0;                     ///< since the region started
  double seconds = 0;                      ///< device events on GPUs, the host clock around the call on CPUs
  double read_bytes = 0, write_bytes = 0;  ///< the plan's minimum traffic
  double flops = 0;                        ///< from the kernel IR
  int threads = 1;                         ///< CPU threads it could use (the pool's at launch): its roofs
  double bound_seconds = 0;                ///< the roofline bound of this launch (0: no roofs for its device)
  std::string bound_by;                    ///< "memory" or "compute": the roof that gives bound_seconds
};

/// A kernel compiled or loaded from the disk cache inside the region.
struct CompileEvent {
  std::string kernel, backend;
  bool disk_load = false;
  double start_us = 0, seconds = 0;
};

/// Launches of one kernel (same stem, backend, device, shapes and thread count) summed.
struct KernelSummary {
  std::string kernel, kind, backend, device, shape;
  int threads = 1;
  int64_t launches = 0;
  double seconds = 0, read_bytes = 0, write_bytes = 0, flops = 0, bound_seconds = 0;
  double gbps() const { return seconds > 0 ? (read_bytes + write_bytes) / seconds / 1e9 : 0; }
  double gflops() const { return seconds > 0 ? flops / seconds / 1e9 : 0; }
  double intensity() const { return read_bytes + write_bytes > 0 ? flops / (read_bytes + write_bytes) : 0; }
  /// bound / time: 1.0 runs at the roof.
  double roof_fraction() const { return seconds > 0 ? bound_seconds / seconds : 0; }
  std::string bound_by;  ///< "memory" or "compute" (of its first launch)
};

struct Profile {
  std::vector<KernelLaunch> launches;
  std::vector<CompileEvent> compiles;
  int64_t evaluations = 0;
  double eval_seconds = 0;    ///< wall time inside evaluations (eval() to the published values)
  double region_seconds = 0;  ///< wall time of the whole region
  int threads = 1;            ///< CPU threads when the region started (each launch keeps its own)
  MachineModel machine;

  /// The CPU thread counts of the roofs the launches were bounded by, ascending: one per count
  /// the pool had at a CPU launch (set_options can change it inside a region); `threads` when
  /// no CPU kernel ran.
  std::vector<int> cpu_thread_counts() const;
  /// Time inside evaluations not spent in kernels or compiling: recording is outside, planning,
  /// hashing, cache lookups, allocation and dispatch are in.
  double host_overhead_seconds() const;
  /// Per kernel, sorted by total time, longest first.
  std::vector<KernelSummary> summary() const;
  std::string table() const;
  std::string json() const;
  /// Chrome/Perfetto trace events (open in chrome://tracing or ui.perfetto.dev).
  std::string chrome_trace() const;
  /// A roofline chart: the machine's roofs and every kernel as a point.
  std::string roofline_svg() const;
  /// Writes <prefix>.txt, .json, .trace.json and .svg; throws UserError when it cannot.
  void write(const std::string& prefix) const;
};

/// Records every launch from construction to stop() (or destruction). One profiler at a time in
/// a process; starting a second throws UserError. Launches on every thread are recorded.
class Profiler {
 public:
  Profiler();
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;
  Profile stop();

 private:
  bool active_ = false;
};

/// Runs `fn` under a Profiler and returns what it recorded.
Profile profile(const std::function<void()>& fn);

}  // namespace kfuse
