// xbyak backend: Backend/CompiledKernel, threading and serialisation (executable memory: exec_memory.hpp).
#include <xbyak/xbyak_util.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "backend/thread_pool.hpp"
#include "backend/factories.hpp"
#include "exec_memory.hpp"
#include "gemm.hpp"
#include "segment.hpp"
#include "kfuse/error.hpp"
#include "kfuse/options.hpp"
#include "xbyak_backend.hpp"

namespace kfuse::detail {

namespace xb {

const char* isa_name(Isa isa) { return isa == Isa::Avx512 ? "avx512" : "avx2"; }

namespace {
// The host CPU's CPUID answers, read once.
const Xbyak::util::Cpu& host_cpu() {
  static const Xbyak::util::Cpu cpu;
  return cpu;
}
// AMD cores with AVX-512: Zen 4 and later (the AVX2-only EPYCs are Zen 2 and 3).
bool amd_with_avx512() { return host_cpu().has(Xbyak::util::Cpu::tAMD) && host_cpu().has(Xbyak::util::Cpu::tAVX512F); }
}  // namespace

bool stream_alias_check() { return host_cpu().has(Xbyak::util::Cpu::tAMD) && !amd_with_avx512(); }
bool interleave_streaming_rows() { return !amd_with_avx512(); }
bool direct_gemm_past_l2() { return host_cpu().has(Xbyak::util::Cpu::tAMD); }
namespace {
std::atomic<int> g_narrow_tails{-1};  // set_narrow_gemm_tails' forced answer, or -1
}  // namespace
bool narrow_gemm_tails() {
  const int forced = g_narrow_tails.load(std::memory_order_relaxed);
  return forced >= 0 ? forced == 1 : host_cpu().has(Xbyak::util::Cpu::tAMD);
}
void set_narrow_gemm_tails(std::optional<bool> on) {
  g_narrow_tails.store(on ? static_cast<int>(*on) : -1, std::memory_order_relaxed);
}
namespace {
std::atomic<int> g_dot{-1};  // set_dot_gemm's forced answer, or -1
}  // namespace
bool dot_gemm(DotKind d) {
  using Xbyak::util::Cpu;
  const bool cpu = cpu_supports(Isa::Avx512) && ((d == DotKind::Bf16 && host_cpu().has(Cpu::tAVX512_BF16)) ||
                                                 (d == DotKind::U8S8 && host_cpu().has(Cpu::tAVX512_VNNI)));
  return cpu && g_dot.load(std::memory_order_relaxed) != 0;
}
void set_dot_gemm(std::optional<bool> on) { g_dot.store(on ? static_cast<int>(*on) : -1, std::memory_order_relaxed); }

bool cpu_supports(Isa isa) {
  using Xbyak::util::Cpu;
  const Cpu& cpu = host_cpu();
  bool avx2 = cpu.has(Cpu::tAVX2) && cpu.has(Cpu::tFMA) && cpu.has(Cpu::tBMI2);
  if (isa == Isa::Avx2) return avx2;
  return avx2 && cpu.has(Cpu::tAVX512F) && cpu.has(Cpu::tAVX512DQ) && cpu.has(Cpu::tAVX512VL) &&
         cpu.has(Cpu::tAVX512BW);
}

namespace {

using Fn = void (*)(Frame*);

// Binary layout: "KFXB" | u32 version | u32 isa | u32 code bytes | machine code + constants.
// kVersion changes whenever emitted code or the binary layout changes (its history is in git log).
constexpr uint32_t kMagic = 0x4258464b, kVersion = 49;
constexpr size_t kHeader = 16;

// A segment kernel launched with more columns than its nibble rows' shifts are proven for
// (SegmentPlan::max_columns: an i32 arange of 2^31 columns): never wrong data.
[[noreturn]] __attribute__((noinline, cold)) void too_many_columns(int64_t cols, int64_t max) {
  std::string what = "xbyak: a 4-bit table's bag of ";
  what += std::to_string(cols);
  what += " columns: its nibble shifts are proven for at most ";
  what += std::to_string(max);
  throw BackendError(what + " columns");
}

// The calling thread's scratch row for Plan::reuse, at least `bytes`, 64-byte aligned. Per thread
// and reused: a kernel's tasks run one at a time on each thread and never call back into kfuse.
float* scratch_row(int64_t bytes) {
  thread_local std::vector<float> row;
  const size_t need = static_cast<size_t>(bytes) / sizeof(float) + 16;  // + room to align
  if (row.size() < need) row.resize(need);
  auto p = reinterpret_cast<uintptr_t>(row.data());
  return reinterpret_cast<float*>((p + 63) / 64 * 64);
}

constexpr int64_t kPointwiseGrain = 1 << 14;
// Segment kernels: columns of bags per task at least (a bag's ids are unknown before it runs).
constexpr int64_t kSegmentGrain = 4096;
// Outputs at least this big are written with streaming (non-temporal) stores: they cannot stay in
// the caches of these cores for a consumer anyway (L2 is 1-2 MiB per core), and skipping the
// read-for-ownership of every destination line saves a fifth to a quarter of the traffic of an
// element-wise kernel. Smaller outputs are kept in cache for the next kernel to read.
constexpr int64_t kStreamingStoreBytes = int64_t{16} << 20;

// Row kernels whose output streams past the caches (Frame::stream) and whose rows are at most this
// long take their rows from kRowWays sub-ranges in turn (Frame::ways), and prefetch the row run
// two rows later, another sub-range's (Frame::pf_rows). One core's bandwidth is bound by the
// misses it has in flight: in order, the software prefetch two rows ahead asks for lines the
// hardware prefetcher is already fetching on the same stream; from four places, it opens a
// stream of its own. Measured on the AVX-512 Xeon (README "Interleaved rows"), 128 Mi floats,
// 1 thread, 4 interleaved rounds, in order -> 4 ways: log_softmax rows of 512 78 -> 62 ms
// (another phase of the host 84 -> 81; 2 threads 41 -> 37), layer_norm 512 96 -> 69 (2 threads
// 49 -> 36), softmax 512 82 -> 77, log_softmax 2048 83 -> 76, 1024 76 -> 74, 4096 80 -> 85.
// Ways 2 and 8 measured between; prefetching the row 1 or 3 rows later, or the cursor's own row
// two rows down, less. On Zen 4 the rows go in order (interleave_streaming_rows): there 4 ways
// lost on every row kernel (2-vCPU EPYC with AVX-512, 1 thread, 64 MiB in and out, input at 0,
// 16 and 64 mod 4 KiB, streaming without the alias check, ms: layer_norm [16K,1024]
// 6.7-7.4 -> 4.5-4.9, [32K,512] 5.1-6.2 -> 4.5-4.8, log_softmax [16K,1024] 5.3-5.7 -> 4.7-5.0,
// softmax [32K,512] 5.1-7.4 -> 4.8-5.2).
constexpr int64_t kRowWaysMaxReduce = 2048;
constexpr int64_t kRowWays = 4;

class XbyakKernel final : public CompiledKernel {
 public:
  // `o`: the launch knobs the kernel keeps from its compile (Options::xbyak_alias_check,
  // xbyak_row_ways; part of the cache key when set).
  XbyakKernel(const ir::Kernel& k, Plan plan, const uint8_t* code, size_t n, const Options& o)
      : k_(k),
        plan_(std::move(plan)),
        mem_(code, n, k.name),
        alias_check_(o.xbyak_alias_check >= 0 ? o.xbyak_alias_check != 0 : stream_alias_check()),
        row_ways_force_(o.xbyak_row_ways >= 0 ? std::min(o.xbyak_row_ways, kMaxWays) : -1) {
    // Machine code in the IR's order: a point's loads, then its store; rows of a thread, its
    // pipelined previous row and the cursors of other ways are other points.
    in_order_writes = true;
    for (const auto& ph : k_.phases)  // once here, not per launch
      stored_per_point_ +=
          static_cast<int64_t>(ph.stores.size()) * (ph.over_reduce && plan_.mode == Mode::Row ? plan_.reduce_n : 1);
  }

  // An output over an input (the runtime's outputs in place): its lines are in cache, just read,
  // so regular stores hit them, where streaming stores would flush each one first (layer_norm
  // [2048, 4096] f32 in place, 1 thread, Intel Xeon: 6.1 ms streaming, against 2.3-2.7 ms
  // streaming into a separate buffer).
  bool writes_over_input(const ir::LaunchArgs& args) const {
    const size_t n_in = static_cast<size_t>(k_.num_inputs());
    for (size_t o = n_in; o < args.buffers.size(); ++o)
      for (size_t i = 0; i < n_in; ++i)
        if (args.buffers[o] == args.buffers[i]) return true;
    return false;
  }

  int64_t row_ways(const Frame& base) const {
    if (row_ways_force_ >= 0) return row_ways_force_;
    // (rows across lanes run their own loop, which takes groups of rows in order)
    if (plan_.lanes || !(base.stream & kStreamStores) || plan_.reduce_n > kRowWaysMaxReduce ||
        !interleave_streaming_rows())
      return 1;
    return kRowWays;
  }

  void run(const ir::LaunchArgs& args) const override {
    Fn fn = reinterpret_cast<Fn>(const_cast<void*>(mem_.entry()));
    int64_t ext[kMaxOuterDims] = {};  // (no heap allocation per launch: small kernels pay for it)
    const size_t dims = k_.outer.size();
    int64_t outer_n = 1;
    for (size_t d = 0; d < dims; ++d) {
      ext[d] = ir::eval_index(k_.outer[d], args.params);
      outer_n *= ext[d];
    }
    Frame base{};
    if (outer_n * stored_per_point_ * 4 >= kStreamingStoreBytes && !writes_over_input(args))
      base.stream = kStreamStores | (alias_check_ ? kStreamAliasCheck : 0);
    base.bufs = args.buffers.data();
    base.params = args.params.data();
    for (size_t d = 0; d < dims; ++d) base.ext[d] = ext[d];
    auto decompose = [&](int64_t row, int64_t* idx) {
      for (int d = plan_.row_dims; d-- > 0;) {
        idx[d] = row % ext[d];
        row /= ext[d];
      }
    };
    auto frame_for_rows = [&](Frame& f, int64_t b, int64_t e) {
      f = base;
      f.row_begin = b;
      f.row_end = e;
      f.ways = 1;
      f.pf_rows = 2;
      decompose(b, f.idx);
    };
    switch (plan_.mode) {
      case Mode::Pointwise: {
        if (outer_n == 0) return;
        int64_t inner = plan_.scalar ? 1 : ext[dims - 1];
        int64_t rows = plan_.scalar ? 1 : outer_n / inner;
        if (rows == 1) {
          parallel_for(inner, kPointwiseGrain, [&](int64_t b, int64_t e) {
            Frame f;
            frame_for_rows(f, 0, 1);
            f.lo = b;
            f.hi = e;
            fn(&f);
          });
        } else {
          parallel_for(rows, std::max<int64_t>(1, kPointwiseGrain / std::max<int64_t>(inner, 1)),
                       [&](int64_t b, int64_t e) {
                         Frame f;
                         frame_for_rows(f, b, e);
                         f.lo = 0;
                         f.hi = inner;
                         fn(&f);
                       });
        }
        return;
      }
      case Mode::Row: {
        if (outer_n == 0) return;
        const int64_t ways = row_ways(base);
        parallel_for(outer_n, std::max<int64_t>(1, 4096 / plan_.reduce_n), [&](int64_t b, int64_t e) {
          Frame f;
          float accs[2 * kMaxAccs];  // this row's, the previous row's (Plan::pipeline)
          RowCursor cursors[kMaxWays];
          frame_for_rows(f, b, e);
          if (ways > 1 && e - b >= 2 * ways) {  // sub-ranges as equal as can be, larger first
            f.ways = ways;
            f.cursors = cursors;
            const int64_t per = (e - b) / ways, extra = (e - b) % ways;
            auto start = [&](int64_t w) { return b + w * per + std::min(w, extra); };
            for (int64_t w = 0; w < ways; ++w) {
              RowCursor& c = f.cursors[w];
              c.row = start(w);
              c.end = c.row + per + (w < extra ? 1 : 0);
              // the row run two rows later: cursor (w + 2) % ways, (w + 2) / ways rounds on (exact
              // while every cursor has rows; a prefetch of another row near the end is harmless)
              c.pf_rows = start((w + 2) % ways) + (w + 2) / ways - c.row;
              decompose(c.row, c.idx);
            }
            f.pf_rows = f.cursors[0].pf_rows;
          }
          f.accs = accs;
          if (plan_.scratch_bytes > 0) f.scratch = scratch_row(plan_.scratch_bytes);
          fn(&f);
        });
        return;
      }
      case Mode::Segment: {  // bags (all outer dims but the columns) split over threads
        if (outer_n == 0) return;
        const int64_t cols = ext[dims - 1], bags = outer_n / cols;
        // (a nibble row's lanes are right where the kernel's column arithmetic is exact)
        if (cols > plan_.segment->max_columns) too_many_columns(cols, plan_.segment->max_columns);
        parallel_for(bags, std::max<int64_t>(1, kSegmentGrain / cols), [&](int64_t b, int64_t e) {
          Frame f;
          frame_for_rows(f, b, e);
          fn(&f);
        });
        return;
      }
      case Mode::Global: {
        std::vector<float> accs(std::max<size_t>(k_.accs.size(), 1), 0.0f);
        const int64_t n = plan_.reduce_n;
        const int64_t nb = (n + kGlobalBlock - 1) / kGlobalBlock;
        for (size_t p = 0; p < k_.phases.size(); ++p) {
          const ir::Phase& ph = k_.phases[p];
          if (!ph.over_reduce) {
            Frame f;
            frame_for_rows(f, 0, 1);
            f.accs = accs.data();
            f.phase = static_cast<int64_t>(p);
            f.lo = 0;
            f.hi = 1;
            fn(&f);
            continue;
          }
          std::vector<float> part(static_cast<size_t>(nb) * accs.size());
          parallel_for(nb, 1, [&](int64_t b, int64_t e) {
            for (int64_t blk = b; blk < e; ++blk) {
              float* pa = part.data() + blk * accs.size();
              std::copy(accs.begin(), accs.end(), pa);
              Frame f;
              frame_for_rows(f, 0, 1);
              f.accs = pa;
              f.phase = static_cast<int64_t>(p);
              f.lo = blk * kGlobalBlock;
              f.hi = std::min(n, f.lo + kGlobalBlock);
              fn(&f);
            }
          });
          for (int a : ph.accs) {  // fixed combine order: block 0, 1, 2, ...
            ir::AccKind kind = k_.accs[a].kind;
            double s = kind == ir::AccKind::Prod ? 1.0 : 0.0;
            float m = part[a];
            bool nan = false;
            for (int64_t blk = 0; blk < nb; ++blk) {
              float v = part[blk * accs.size() + a];
              nan |= std::isnan(v);
              if (kind == ir::AccKind::Sum) s += v;
              else if (kind == ir::AccKind::Prod) s *= v;
              else if (kind == ir::AccKind::Max) m = std::max(m, v);
              else m = std::min(m, v);
            }
            if (kind == ir::AccKind::Sum || kind == ir::AccKind::Prod) accs[a] = static_cast<float>(s);
            else accs[a] = nan ? NAN : m;
          }
        }
        return;
      }
    }
  }

 private:
  ir::Kernel k_;
  Plan plan_;
  ExecMem mem_;
  bool alias_check_;              ///< streaming stores check the 4K alias of the inputs
  int row_ways_force_;            ///< row cursors per call, or -1: by the row (row_ways)
  int64_t stored_per_point_ = 0;  ///< elements stored per outer point (streaming-store decision)
};

class XbyakBackend final : public Backend {
 public:
  explicit XbyakBackend(Isa isa) : isa_(isa) {}
  std::string name() const override { return "xbyak"; }
  std::string target() const override { return std::string("x86_64-") + isa_name(isa_); }
  int codegen_version() const override { return static_cast<int>(kVersion); }

  // The knobs change what a kernel runs (it keeps them from its compile): the GEMM's path and
  // blocking, the row kernels' cursors, the streaming stores' alias check.
  std::string options_key(const Options& o) const override {
    std::string key;
    const GemmForce f = gemm_force(o);
    if (f.path != 0 || f.blocking.kc > 0) {
      const GemmBlocking& b = f.blocking;
      key = "gemm_path=" + gemm_variants().at(static_cast<size_t>(f.path)) + ";gemm_blocking=" + std::to_string(b.mc) +
            "," + std::to_string(b.kc) + "," + std::to_string(b.nc);
    }
    if (o.xbyak_alias_check >= 0)
      key += (key.empty() ? "" : ";") + ("alias_check=" + std::to_string(o.xbyak_alias_check));
    if (o.xbyak_row_ways >= 0) key += (key.empty() ? "" : ";") + ("row_ways=" + std::to_string(o.xbyak_row_ways));
    return key;
  }

  CompileResult compile(const ir::Kernel& k, const Options& o) override {
    auto t0 = std::chrono::steady_clock::now();
    if (k.kind == ir::KernelKind::Contraction) return compile_gemm(k, gemm_force(o), t0);
    Plan plan;
    std::string why = analyze(k, plan);
    if (!why.empty()) return {nullptr, why};
    Code code;
    Isa isa = isa_;
    try {
      code = emit_code(k, plan, isa);
    } catch (const DeclineError& e) { return {nullptr, e.what()}; }
    auto ck = std::make_shared<XbyakKernel>(k, plan, code.bytes.data(), code.bytes.size(), o);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fill(*ck, k, code, ms, isa);
    return {ck, {}};
  }

  std::shared_ptr<CompiledKernel> load(const ir::Kernel& k, const std::vector<uint8_t>& bin,
                                       const Options& o) override {
    if (bin.size() < kHeader) return nullptr;
    uint32_t h[4];
    std::memcpy(h, bin.data(), sizeof h);
    // (AVX2 code on an AVX-512 backend: a kernel its zmm emitter declined, compile() above)
    const bool isa_ok =
        h[2] == static_cast<uint32_t>(isa_) || (isa_ == Isa::Avx512 && h[2] == static_cast<uint32_t>(Isa::Avx2));
    if (h[0] != kMagic || h[1] != kVersion || !isa_ok) return nullptr;
    // A GEMM is its microkernels (per process, not per kernel) and its epilogue: emitting that
    // again costs about what loading it would.
    if (k.kind == ir::KernelKind::Contraction)
      return compile_gemm(k, gemm_force(o), std::chrono::steady_clock::now()).kernel;
    Plan plan;
    if (!analyze(k, plan).empty()) return nullptr;
    auto t0 = std::chrono::steady_clock::now();
    auto ck = std::make_shared<XbyakKernel>(k, plan, bin.data() + kHeader, bin.size() - kHeader, o);
    Code code;
    code.bytes.assign(bin.begin() + kHeader, bin.end());
    code.code_bytes = h[3];
    fill(*ck, k, code, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
         static_cast<Isa>(h[2]));
    return ck;
  }

  bool code_range(const std::vector<uint8_t>& bin, size_t* offset, size_t* size, std::string* what) const override {
    if (bin.size() < kHeader) return false;
    uint32_t h[4];
    std::memcpy(h, bin.data(), sizeof h);
    if (h[0] != kMagic || h[3] > bin.size() - kHeader) return false;
    *offset = kHeader;
    *size = h[3];
    *what = "xbyak x86-64 code, ";
    what->append(std::to_string(h[3])).append(" bytes (then ");
    what->append(std::to_string(bin.size() - kHeader - h[3])).append(" bytes of constants)");
    return true;
  }

 private:
  CompileResult compile_gemm(const ir::Kernel& k, const GemmForce& force, std::chrono::steady_clock::time_point t0) {
    GemmPlan gp;
    std::string why = gemm_analyze(k, gp);
    if (!why.empty()) return {nullptr, why};
    Code code;
    auto ck = make_gemm_kernel(k, std::move(gp), isa_, force, &why, &code);
    if (!ck) return {nullptr, why};
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fill(*ck, k, code, ms, isa_);
    ck->source = "; xbyak " + std::string(isa_name(isa_)) + " GEMM (microkernels per process; " +
                 std::to_string(code.code_bytes) + " bytes of epilogue code)\n" + ck->source;
    return {ck, {}};
  }

  // `isa`: the code's (isa_, or AVX2 for a kernel the AVX-512 emitter declined).
  void fill(CompiledKernel& ck, const ir::Kernel& k, const Code& code, double ms, Isa isa) const {
    ck.backend = name();
    ck.target = target();
    ck.compile_ms = ms;
    // A header only: the kernel IR this code implements is the cache entry's IR section (printing
    // it again here was ~8% of a kernel's emit time), and the instructions are the disassembly.
    ck.source = "; xbyak " + std::string(isa_name(isa)) + ": " + std::to_string(code.code_bytes) + " bytes of code, " +
                std::to_string(code.bytes.size() - code.code_bytes) +
                " bytes of constants (RIP-relative), entry at 0\n"
                "; void fn(Frame*) -- frame layout in jit/xbyak/xbyak_backend.hpp; kernel " +
                k.name + "\n";
    ck.source_kind = "asm";
    ck.binary.resize(kHeader + code.bytes.size());
    uint32_t h[4] = {kMagic, kVersion, static_cast<uint32_t>(isa), static_cast<uint32_t>(code.code_bytes)};
    std::memcpy(ck.binary.data(), h, sizeof h);
    if (!code.bytes.empty())  // (a GEMM without an epilogue has no code of its own)
      std::memcpy(ck.binary.data() + kHeader, code.bytes.data(), code.bytes.size());
    ck.binary_kind = "x86-raw";
  }

  Isa isa_;
};

}  // namespace

std::shared_ptr<Backend> make_backend(Isa isa) {
  if (!cpu_supports(isa)) return nullptr;
  return std::make_shared<XbyakBackend>(isa);
}

}  // namespace xb

std::shared_ptr<Backend> make_xbyak_backend(const Options& opts) {
  const std::string& want = opts.isa;
  if (!xb::cpu_supports(xb::Isa::Avx2)) {
    log("backend", "xbyak: CPU lacks AVX2/FMA/BMI2; backend unavailable");
    return nullptr;
  }
  xb::Isa isa = xb::cpu_supports(xb::Isa::Avx512) ? xb::Isa::Avx512 : xb::Isa::Avx2;
  if (want == "avx2") isa = xb::Isa::Avx2;
  else if (want == "avx512" && isa != xb::Isa::Avx512)
    log("backend", "xbyak: KFUSE_ISA=avx512 but the CPU lacks AVX-512; using avx2");
  return xb::make_backend(isa);
}

}  // namespace kfuse::detail
