// kfuse_compare: kfuse (each backend) against LibTorch, oneDNN, Eigen and (GEMM) OpenBLAS on the
// workloads of PERFORMANCE.md, with the library's roofline ceiling (kfuse::Roof: read and write
// bandwidth, or for the GEMM workloads the FMA peak; lib/prof) measured in the same run.
//
//   kfuse_compare [--quick] [--filter SUBSTR[|SUBSTR...]] [--json FILE] [--threads 1,2]
//                 [--backends xbyak,llvm,opencl,reference] [--peers torch,onednn,eigen,openblas]
//                 [--min-time SECONDS] [--max-reps N] [--strict] [--list]
//   kfuse_compare --device opencl|cuda [--quick] [--json FILE] [--torch-json FILE]
//                 (the GPU workloads: bench/device_bench.cpp)
//
// Every result is checked against kfuse::reference_values (fp64) before it is timed; a result
// that fails is reported as FAIL and not timed.
#include <kfuse/kfuse.hpp>
#include <kfuse/reference.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "device_bench.hpp"
#include "harness.hpp"
#include "kfuse/profile.hpp"
#include "bag_tables.hpp"
#include "kfuse_impl.hpp"
#include "profile_agreement.hpp"
#include "peers/peers.hpp"
#include "workload.hpp"

using namespace kbench;

namespace {

#ifdef KFUSE_BENCH_HAVE_TORCH
constexpr bool kHaveTorch = true;
#else
constexpr bool kHaveTorch = false;
#endif
#ifdef KFUSE_BENCH_HAVE_DNNL
constexpr bool kHaveDnnl = true;
#else
constexpr bool kHaveDnnl = false;
#endif
#ifdef KFUSE_BENCH_HAVE_EIGEN
constexpr bool kHaveEigen = true;
#else
constexpr bool kHaveEigen = false;
#endif
#ifdef KFUSE_BENCH_HAVE_OPENBLAS
constexpr bool kHaveOpenblas = true;
#else
constexpr bool kHaveOpenblas = false;
#endif

// The agreement between the profiler's roofline fraction and the bench's (per call, medians).
constexpr double kProfileTolerance = 0.10;

struct Cli {
  bool quick = false;
  bool strict = false;
  bool list = false;
  std::vector<std::string> filters;
  std::string json;
  std::vector<int> threads{1, 2};
  std::vector<std::string> backends{"xbyak", "llvm", "opencl", "reference"};
  std::vector<std::string> peers{"torch", "onednn", "eigen", "openblas"};
  double min_time = -1;
  int max_reps = -1;
  int64_t scale = 1;           // rows (or elements) of the 16M+ workloads multiplied by this
  bool profile = false;        // kfuse rows: also the profiler's roofline fraction (same roofs)
  bool check_profile = false;  // --profile, and exit 1 when the profiler and the bench disagree
  bool check_timing = true;    // ... on the fractions too, not only on the accounting
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

[[noreturn]] void usage(int rc) {
  std::printf(
      "usage: kfuse_compare [options]\n"
      "  --quick              small sizes, few repetitions (smoke test)\n"
      "  --filter S[|S...]    run workloads whose name contains any S (names hold commas: use |)\n"
      "  --json FILE          write every row as JSON\n"
      "  --threads LIST       thread counts (default 1,2)\n"
      "  --backends LIST      kfuse backends (default xbyak,llvm,opencl,reference)\n"
      "  --peers LIST         peers to run (default torch,onednn,eigen,openblas)\n"
      "  --min-time S         seconds of sampling per row (default 0.5, quick 0.02)\n"
      "  --max-reps N         samples per row at most (default 200, quick 10)\n"
      "  --scale N            multiply the rows (1-D: elements) of the 16M+ workloads by N, to measure\n"
      "                       out of cache where the L3 holds them (e.g. 8 on a 480 MiB L3)\n"
      "  --strict             exit 1 when any result fails verification or errors\n"
      "  --profile            kfuse rows: the profiler's roofline fraction beside the bench's (same roofs)\n"
      "  --check-profile      --profile, and exit 1 unless both count the same bytes, FLOPs and bound and\n"
      "                       their fractions per call agree within 10%% (medians; needs a quiet host)\n"
      "  --check-profile-accounting  the same on bytes, FLOPs and bound only (fractions printed)\n"
      "  --list               list the workloads and exit\n"
      "  --device opencl|cuda the GPU workloads on that device instead (with --quick, --filter, --json FILE,\n"
      "                       --torch-json FILE from bench/torch_gpu.py)\n");
  std::exit(rc);
}

Cli parse(int argc, char** argv) {
  Cli c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kfuse_compare: %s needs a value\n", a.c_str());
        usage(2);
      }
      return argv[++i];
    };
    if (a == "--quick") c.quick = true;
    else if (a == "--strict") c.strict = true;
    else if (a == "--profile") c.profile = true;
    else if (a == "--check-profile") c.profile = c.check_profile = true;
    else if (a == "--check-profile-accounting") c.profile = c.check_profile = true, c.check_timing = false;
    else if (a == "--list") c.list = true;
    else if (a == "--filter") c.filters = split(val(), '|');
    else if (a == "--json") c.json = val();
    else if (a == "--threads") {
      c.threads.clear();
      for (auto& t : split(val(), ',')) c.threads.push_back(std::max(1, std::atoi(t.c_str())));
    } else if (a == "--backends") c.backends = split(val(), ',');
    else if (a == "--peers") c.peers = split(val(), ',');
    else if (a == "--min-time") c.min_time = std::atof(val().c_str());
    else if (a == "--max-reps") c.max_reps = std::atoi(val().c_str());
    else if (a == "--scale") c.scale = std::max<int64_t>(1, std::atoll(val().c_str()));
    else if (a == "-h" || a == "--help") usage(0);
    else {
      std::fprintf(stderr, "kfuse_compare: unknown argument %s\n", a.c_str());
      usage(2);
    }
  }
  return c;
}

Workload wl(std::string name, Kind k, int64_t r, int64_t c, Target t = Target::None) {
  Workload w;
  w.name = std::move(name);
  w.kind = k;
  w.rows = r;
  w.cols = c;
  w.target = t;
  return w;
}

std::string shape2(int64_t r, int64_t c) { return "[" + std::to_string(r) + "," + std::to_string(c) + "]"; }
std::string count_str(int64_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

// `scale` multiplies the rows of the 16M+ workloads (the elements of the 1-D ones); their targets
// stay.
std::vector<Workload> workloads(bool quick, int64_t scale) {
  std::vector<Workload> v;
  auto rc = [&](int64_t full, int64_t q) { return quick ? q : full; };
  auto big = [&](int64_t n) { return !quick && n >= (int64_t{1} << 24) ? scale : 1; };
  auto rowwise = [&](const char* op, Kind k, int64_t r, int64_t c, Target t = Target::None) {
    r *= big(r * c);
    v.push_back(wl(std::string(op) + " " + shape2(r, c), k, r, c, t));
  };
  rowwise("log_softmax", Kind::LogSoftmax, 256, 10);
  rowwise("log_softmax", Kind::LogSoftmax, 1024, 10);
  rowwise("log_softmax", Kind::LogSoftmax, 4096, 10, Target::FasterThanBestPeer4x);
  rowwise("log_softmax", Kind::LogSoftmax, rc(4096, 256), 1024);
  rowwise("log_softmax", Kind::LogSoftmax, rc(32768, 512), 512, Target::Ceiling75);
  rowwise("log_softmax", Kind::LogSoftmax, rc(1024, 16), 32000);
  rowwise("softmax", Kind::Softmax, rc(4096, 256), 1024);
  rowwise("softmax", Kind::Softmax, rc(1024, 16), 32000);  // a vocabulary-sized row (sampling)
  rowwise("layer_norm", Kind::LayerNorm, rc(4096, 256), 1024);
  rowwise("layer_norm", Kind::LayerNorm, rc(32768, 512), 512, Target::Ceiling75);
  struct Ew {
    const char* name;
    Kind k;
  };
  for (Ew e : {Ew{"relu(a*b+c)", Kind::ReluFma}, Ew{"gelu_tanh(x)", Kind::Gelu},
               Ew{"tanh(a*0.5+b)*sigmoid(c)-exp(-a*a)", Kind::Chain3}}) {
    for (int64_t n : {rc(1 << 20, 1 << 14), rc(1 << 24, 1 << 16)}) {
      Target t = (!quick && n == (1 << 24)) || (quick && n == (1 << 16)) ? Target::Chain16M : Target::None;
      const int64_t m = n * big(n);
      v.push_back(wl(std::string(e.name) + " " + count_str(m), e.k, 1, m, t));
    }
  }
  for (int64_t s : {int64_t{256}, rc(1024, 512)}) {
    v.push_back(wl("add " + shape2(s, s), Kind::Add, s, s));
    v.push_back(wl("relu " + shape2(s, s), Kind::Relu, s, s));
    v.push_back(wl("add+relu " + shape2(s, s), Kind::AddRelu, s, s));
  }
  const int64_t S = rc(4096, 256);
  v.push_back(wl("sum axis 0 " + shape2(S, S), Kind::SumAxis0, S, S, Target::Ceiling90));
  v.push_back(wl("sum axis 1 " + shape2(S, S), Kind::SumAxis1, S, S, Target::Ceiling90));
  v.push_back(wl("sum all " + shape2(S, S), Kind::SumAll, S, S, Target::Ceiling90));
  v.push_back(wl("chain10 8 floats (record+eval)", Kind::Chain10, 1, 8, Target::Under1us));
  // GEMM (f32, through matmul): GFLOP/s and % of the FMA peak. Each name holds its shapes.
  auto mm = [&](int64_t m, int64_t k, int64_t n, Kind kind = Kind::Matmul, Target t = Target::None,
                const char* tail = "") {
    Workload g = wl("", kind, m, n, t);
    g.inner = k;
    g.name = std::string(kind == Kind::Mlp ? "mlp layer_norm(gelu(x@W+b)) " : "matmul ") + shape2(m, k) + "x" +
             shape2(k, n) + tail;
    return g;
  };
  v.push_back(mm(4, 4, 4, Kind::Matmul, Target::Under5us, " record+eval"));
  for (int64_t s : {int64_t{64}, int64_t{256}, int64_t{512}, rc(1024, 128), rc(2048, 192)}) v.push_back(mm(s, s, s));
  v.push_back(mm(rc(1000, 100), rc(999, 99), rc(1001, 101)));
  v.push_back(mm(1, rc(4096, 512), rc(4096, 512), Kind::Matmul, Target::None, " (GEMV)"));
  // A linear layer's weight as stored (PyTorch, ONNX): W [N, K], x @ W^T, at batch 1, 4 and 16
  // (the GEMV kernel, and the swapped form that reads W in place: jit/xbyak/gemm_swapped.cpp).
  for (int64_t m : {1, 4, 16}) {
    Workload t = mm(m, rc(4096, 512), rc(4096, 512), Kind::Matmul, Target::None, "");
    t.b_t = true;
    t.name = "matmul " + shape2(m, t.inner) + "x" + shape2(t.cols, t.inner) + "^T (linear)";
    v.push_back(t);
  }
  // bf16 operands and result (f32 sums): on AVX-512 BF16 the xbyak GEMM's pair kernels; the
  // ceiling is the bf16 dot-product probe where the CPU has one (else the FMA peak).
  for (int64_t s : {rc(1024, 128), rc(2048, 192)}) {
    v.push_back(mm(s, s, s, Kind::Matmul, Target::None, " bf16"));
    v.back().bf16 = true;
  }
  // u8 x i8 with i32 results (a quantised layer's product): on AVX-512 VNNI the xbyak GEMM's
  // vpdpbusd kernels; the ceiling is that instruction's probe where the CPU has it.
  for (int64_t s : {rc(1024, 128), rc(2048, 192)}) {
    v.push_back(mm(s, s, s, Kind::Matmul, Target::None, " u8 x i8"));
    v.back().u8s8 = true;
  }
  for (const char* ty : {"bf16", "u8 x i8"}) {
    Workload t = mm(rc(16, 4), rc(4096, 512), rc(4096, 512), Kind::Matmul, Target::None, "");
    t.b_t = true;
    (ty[0] == 'b' ? t.bf16 : t.u8s8) = true;
    t.name = "matmul " + shape2(t.rows, t.inner) + "x" + shape2(t.cols, t.inner) + "^T (linear) " + ty;
    v.push_back(t);
  }
  const int64_t bm = rc(512, 64), bk = rc(1024, 128), bn = rc(4096, 256);
  v.push_back(mm(bm, bk, bn));
  Workload mlp = mm(bm, bk, bn, Kind::Mlp, Target::Epilogue5pct);
  mlp.bare = v.back().name;
  v.push_back(mlp);
  // Attention without a mask, [batch x heads, T, 64]: two batched products and a softmax between
  // (P @ V has N = 64). T = 1024 puts K's rows 4 KiB apart.
  for (const auto& [b, t] : {std::pair<int64_t, int64_t>{rc(64, 4), rc(256, 64)}, {rc(16, 2), rc(1024, 128)}}) {
    Workload a = wl("", Kind::Attention, t, 64);
    a.batch = b;
    a.name = "attention softmax(q@k^T/8)@v [" + std::to_string(b) + "," + std::to_string(t) + ",64]";
    v.push_back(a);
  }
  // Embedding bags (sum) over a table beyond the L3, its rows stored as f32, f16, 8-bit and 4-bit
  // (as quantize_rowwise's two tensors, and in PyTorch's fused rows; bench/bag_problem.hpp), bags
  // of 20-100 ids drawn uniformly and Zipf-like. Rows of 64 and of 128 columns (the two widths of
  // recommendation models' tables), 512 MiB as f32 either way: an 8-bit row of 64 codes and its
  // scale and bias (72 bytes) spans two cache lines, one of 128 spans three for 136 bytes.
  const int64_t bags = rc(4096, 256);
  for (const auto& [bag_rows, bag_cols] : {std::pair<int64_t, int64_t>{rc(2'000'000, 20'000), 64},
                                           std::pair<int64_t, int64_t>{rc(1'000'000, 10'000), 128}})
    for (bool zipf : {false, true}) {
      std::string f32_name;
      for (const std::string& table : bag_formats()) {
        Workload b = wl("embedding_bag " + table + " " + shape2(bag_rows, bag_cols) + ", " + std::to_string(bags) +
                            " bags, " + (zipf ? "Zipf" : "uniform") + " ids",
                        Kind::EmbeddingBag, bag_rows, bag_cols);
        b.table = table;
        b.bags = bags;
        b.zipf = zipf;
        if (b.table == "f32") {
          b.target = Target::BagVsTorch;
          f32_name = b.name;
        } else if (b.table.rfind("8-bit", 0) == 0) {
          b.target = Target::Bag8Bit;
          b.bare = f32_name;
        }
        v.push_back(b);
      }
    }
  // Stacking T parts [R, D] into [R, T, D] (a concat along rows: a recommender's features before
  // their pairwise interaction, heads side by side): in cache, and the same bytes out of it.
  for (const auto& [r, t] : {std::pair<int64_t, int64_t>{rc(2048, 256), 9}, {rc(512, 64), 64}, {rc(65536, 1024), 9}}) {
    Workload st = wl("stack " + std::to_string(t) + " x " + shape2(r, 64) + " along axis 1", Kind::Stack, r, 64);
    st.inner = t;
    v.push_back(st);
  }
  v.push_back(wl("compile time per kernel", Kind::Compile, 1, 1024, Target::Compile100us));
  v.push_back(wl("cache-hit overhead 8 floats", Kind::CacheHit, 1, 8));
  return v;
}

bool selected(const Workload& w, const Cli& c) {
  if (c.filters.empty()) return true;
  for (auto& f : c.filters)
    if (w.name.find(f) != std::string::npos) return true;
  return false;
}

bool want_peer(const Cli& c, const char* p) { return std::find(c.peers.begin(), c.peers.end(), p) != c.peers.end(); }

bool is_kfuse(const Row& r) { return r.impl.rfind("kfuse", 0) == 0; }

// Medians of the rows run so far, by workload, implementation and thread count: the MLP block's
// rows are read against the bare GEMM of the same shape.
std::map<std::string, double>& medians() {
  static std::map<std::string, double> m;
  return m;
}
std::string median_key(const std::string& w, const std::string& impl, int threads) {
  return w + "|" + impl + "|" + std::to_string(threads);
}

std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", f * 100);
  return b;
}
std::string ratio(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2fx", x);
  return b;
}

// Fills Row::target of the kfuse rows of one (workload, threads) group.
void apply_targets(const Workload& w, std::vector<Row>& group, bool quick) {
  // Every row of the MLP block (8-bit bag): its time over the same implementation's bare GEMM (f32 bag).
  if (!w.bare.empty())
    for (Row& r : group) {
      auto it = medians().find(median_key(w.bare, r.impl, r.threads));
      if (r.status != "ok" || it == medians().end()) continue;
      r.vs_bare = r.st.median / it->second;
      if (w.kind != Kind::Mlp) continue;  // (a bag's target text gives its speed ratio)
      std::string n = ratio(r.vs_bare) + " its bare GEMM";
      r.note = r.note.empty() ? n : n + "; " + r.note;
    }
  if (w.target == Target::None) return;
  const Row* best = nullptr;
  const Row* eigen = nullptr;
  const Row* torch_nat = nullptr;
  for (const Row& r : group) {
    if (is_kfuse(r) || r.status != "ok") continue;
    if (!best || r.st.median < best->st.median) best = &r;
    if (r.impl == "eigen") eigen = &r;
    if (r.impl == "torch natural") torch_nat = &r;
  }
  for (Row& r : group) {
    if (!is_kfuse(r)) continue;
    if (quick) {
      r.target = "target n/a (--quick)";
      continue;
    }
    if (r.status != "ok") {
      r.target = "MISS (no result)";
      continue;
    }
    std::vector<std::string> why;
    bool pass = true;
    auto need = [&](bool ok, const std::string& what) {
      pass = pass && ok;
      why.push_back(what);
    };
    switch (w.target) {
      case Target::FasterThanBestPeer4x:
        if (!best) {
          r.target = "n/a (no peer ran)";
          continue;
        }
        need(r.st.median * 4 <= best->st.median,
             ratio(best->st.median / r.st.median) + " vs best peer " + best->impl + " (need >=4x)");
        break;
      case Target::Ceiling75: need(r.frac >= 0.75, pct(r.frac) + " of ceiling (need 75%)"); break;
      case Target::Ceiling90: need(r.frac >= 0.90, pct(r.frac) + " of ceiling (need 90%)"); break;
      case Target::Chain16M:
        need(r.frac >= 0.90, pct(r.frac) + " of ceiling (need 90%)");
        if (eigen)
          need(r.st.median <= eigen->st.median, ratio(eigen->st.median / r.st.median) + " vs eigen (need >=1x)");
        else why.push_back("eigen n/a");
        if (torch_nat)
          need(r.st.median * 4 <= torch_nat->st.median,
               ratio(torch_nat->st.median / r.st.median) + " vs torch natural (need >=4x)");
        else why.push_back("torch natural n/a");
        break;
      case Target::Under1us: need(r.st.median <= 1e-6, fmt_time(r.st.median) + " (need <=1 us)"); break;
      case Target::Under5us: need(r.st.median <= 5e-6, fmt_time(r.st.median) + " (need <=5 us)"); break;
      case Target::Epilogue5pct:
        if (r.vs_bare < 0) {
          r.target = "n/a (bare GEMM " + w.bare + " not run)";
          continue;
        }
        need(r.vs_bare <= 1.05, "(need <=1.05x the bare GEMM)");
        break;
      case Target::BagVsTorch:
        if (!torch_nat) {
          r.target = "n/a (LibTorch not run)";
          continue;
        }
        need(r.st.median * 1.5 <= torch_nat->st.median,
             ratio(torch_nat->st.median / r.st.median) + " vs torch at::embedding_bag (need >=1.5x)");
        break;
      case Target::Bag8Bit:
        if (r.vs_bare > 0) need(r.vs_bare <= 0.5, ratio(1 / r.vs_bare) + " the f32 bag's speed (need >=2x)");
        else need(false, "f32 bag not run (need >=2x its speed)");
        need(r.frac >= 0.70, pct(r.frac) + " of ceiling (need 70%)");
        break;
      case Target::Compile100us:
        if (r.impl != "kfuse[xbyak]") continue;
        if (r.kernels <= 0) {
          r.target = "MISS (no kernel compiled: xbyak not in use)";
          continue;
        }
        // The figure: the backend's emit time per kernel (median). The row's time, the
        // whole first-evaluation overhead, is printed beside it.
        need(r.extra_value >= 0 && r.extra_value <= 100e-6,
             "emit " + fmt_time(r.extra_value) + " median (need <=100 us)");
        break;
      case Target::None: break;
    }
    std::string s = pass ? "PASS" : "MISS";
    for (size_t i = 0; i < why.size(); ++i) s += (i ? ", " : " ") + why[i];
    r.target = s;
  }
}

// Verifies, then times one implementation. `after` fills implementation-specific fields.
// `ceiling`: the roof's GB/s for the workload's read/write mix, or for GEMM workloads the FMA peak
// GFLOP/s, with `threads` threads.
Row run_impl(Impl& im, const Workload& w, const Reference& ref, int threads, double ceiling, const TimingConfig& cfg,
             const std::function<void(Row&)>& after = {}) {
  Row r;
  r.workload = w.name;
  r.impl = im.name;
  r.threads = threads;
  r.note = im.note;
  r.bytes = w.compulsory_bytes;
  r.ceiling_gbps = ceiling;
  try {
    if (im.setup) im.setup();
    im.run();
    Verdict v = verify(im.result(), ref);
    r.max_abs_err = v.max_abs_err;
    if (!v.ok) {
      r.status = "FAIL";
      r.note = "verification failed, not timed: " + v.message;
      if (after) after(r);
      return r;
    }
    r.st = measure(im.run, cfg);
    r.status = "ok";
    r.gbps = r.bytes / r.st.median / 1e9;
    r.frac = ceiling > 0 ? r.gbps / ceiling : 0;
    if (w.flops > 0) {
      r.gflops = w.flops / r.st.median * 1e-9;
      r.peak_gflops = ceiling;
      r.frac = ceiling > 0 ? r.gflops / ceiling : 0;
    }
    if (w.rowwise()) {  // short rows are bound by per-row work: show it (PERFORMANCE.md)
      std::string b = fmt_time(r.st.median / static_cast<double>(w.rows)) + "/row";
      r.note = r.note.empty() ? b : b + "; " + r.note;
    }
    if (after) after(r);
  } catch (const std::exception& e) {
    r.status = "ERROR";
    r.note = e.what();
  }
  return r;
}

void print_group(const std::vector<Row>& g) {
  for (const Row& r : g) print_row(r);
}

// The largest GEMM a kfuse backend is timed on: xbyak runs a blocked GEMM and LLVM register
// blocks of rows x columns (jit/llvm, row_block); OpenCL on the CPU (PoCL) runs the GPU's tiled
// kernel at about 1 GFLOP/s here, the reference interpreter is slower still.
double gemm_flops_limit(const std::string& backend) {
  if (backend == "xbyak" || backend == "llvm") return 1e30;
  if (backend == "reference") return 1e6;
  return 6e8;
}

Row skipped_row(const Workload& w, const char* impl, int threads, const char* peer) {
  Row r;
  r.workload = w.name;
  r.impl = impl;
  r.threads = threads;
  r.status = "skipped";
  r.note = std::string(": ") + peer + " not installed (scripts/bench.sh --install-peers)";
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (DeviceBenchArgs da; parse_device_args(argc, argv, da)) return device_compare(da);
  Cli cli = parse(argc, argv);
  auto all = workloads(cli.quick, cli.scale);
  if (cli.list) {
    for (auto& w : all) std::printf("%s\n", w.name.c_str());
    return 0;
  }
  TimingConfig cfg;
  if (cli.quick) {
    cfg.min_time_s = 0.02;
    cfg.min_reps = 3;
    cfg.max_reps = 10;
    cfg.warmup = 1;
  }
  if (cli.min_time >= 0) cfg.min_time_s = cli.min_time;
  if (cli.max_reps > 0) cfg.max_reps = cli.max_reps;

  const kfuse::Options base = kfuse::options();
  const std::string machine = machine_description();
  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::printf("kfuse_compare  %s\nmachine: %s\n", date, machine.c_str());
  std::printf("peers: LibTorch %s, oneDNN %s, Eigen %s, %s\n",
#ifdef KFUSE_BENCH_HAVE_TORCH
              torch_version().c_str(),
#else
              "(not installed)",
#endif
#ifdef KFUSE_BENCH_HAVE_DNNL
              dnnl_version_string().c_str(),
#else
              "(not installed)",
#endif
#ifdef KFUSE_BENCH_HAVE_EIGEN
              eigen_version().c_str(),
#else
              "(not installed)",
#endif
#ifdef KFUSE_BENCH_HAVE_OPENBLAS
              openblas_version().c_str()
#else
              "OpenBLAS (not installed)"
#endif
  );
  if (!kHaveTorch || !kHaveDnnl || !kHaveEigen || !kHaveOpenblas)
    std::printf("missing peers are skipped; install them with scripts/bench.sh --install-peers\n");
  std::printf("timing: median of >=%d samples and >=%.2f s per row after warm-up; spread = p90/p10\n", cfg.min_reps,
              cfg.min_time_s);
  // One definition of a ceiling with the profiler (Explanation::bound_seconds over kfuse::Roof).
  std::printf(
      "ceiling: the roofline bound of kfuse's plan, per kernel max(reads / read GB/s + writes / write GB/s "
      "(%s), FLOPs / FMA peak), summed (the profiler's bound); probes of kfuse::machine(), re-measured per "
      "workload\n",
      kfuse::probe::stream_kind());
  // A working set the L3 holds runs from it between samples (the probes' 192 MiB stream to DRAM on most machines).
  const double l3_bytes = static_cast<double>(kfuse::probe::cache_sizes().l3);
  if (l3_bytes > 0) std::printf("L3: %s\n", fmt_bytes(l3_bytes).c_str());
  std::vector<std::pair<int, double>> ceilings0;
  for (int t : cli.threads) {
    kfuse::CpuRoofs c = kfuse::measure_cpu_roofs(t, cli.quick);
    ceilings0.push_back({t, c.triad_gbps});
    std::printf(
        "  %d thread%s: read %.1f GB/s, write %.1f GB/s (streaming %.1f), triad %.1f GB/s, FMA peak %.1f GFLOP/s\n", t,
        t > 1 ? "s" : "", c.read_gbps, c.write_gbps, c.write_nt_gbps, c.triad_gbps, c.fma_f32_gflops);
  }
  std::printf("FMA peak: %s, independent FMAs in registers\n", kfuse::probe::fma_kind());
  std::printf(
      "columns: GB/s = compulsory bytes (inputs once + output once) / median (GEMM: GFLOP/s of 2MNK); "
      "%%ceil = the bound / median, same thread count; kern = kfuse kernels launched per call\n");

  std::vector<Row> rows;
  bool any_bad = false;
  // --profile: rows where the profiler and the bench disagree (on the accounting; on the fractions
  // only, which --check-profile-accounting does not fail on).
  std::vector<std::string> disagreements, timing_disagreements;
  for (Workload& w : all) {
    if (!selected(w, cli)) continue;
    std::printf("\n== %s\n", w.name.c_str());

    if (w.kind == Kind::Compile) {
      print_header();
      std::vector<Row> g;
      for (auto& b : cli.backends) {
        Row r = kfuse_compile_row(b, cli.quick ? 5 : 50, base);
        r.workload = w.name;
        g.push_back(r);
      }
      apply_targets(w, g, cli.quick);
      print_group(g);
      rows.insert(rows.end(), g.begin(), g.end());
      continue;
    }
    if (w.kind == Kind::CacheHit) {
      print_header();
      for (auto& b : cli.backends) {
        auto g = kfuse_cache_rows(b, cfg, base);
        for (auto& r : g) r.workload = w.name;
        print_group(g);
        rows.insert(rows.end(), g.begin(), g.end());
      }
      continue;
    }

    make_inputs(w, 42);
    double t0 = now_s();
    Reference ref;
    try {
      if (w.gemm()) {
        ref = gemm_reference(w);
      } else if (w.kind == Kind::EmbeddingBag) {
        ref = kfuse_bag_reference(w);
        kfuse_bag_share_table(w);
      } else {
        auto in = kfuse_inputs(w);
        ref.values = kfuse::reference_values(kfuse_build(w, in));
      }
    } catch (const std::exception& e) {
      std::printf("  reference failed: %s\n", e.what());
      any_bad = true;
      continue;
    }
    // The ceiling of every row: the roofline bound of one call (kfuse's plan: each kernel's reads,
    // writes and FLOPs against kfuse::Roof, the profiler's definition), as GB/s of the compulsory
    // bytes or, for GEMM rows, GFLOP/s of 2MNK, so that %ceil = bound / median.
    std::map<int, double> ceil, bound;
    std::map<int, kfuse::CpuRoofs> roofs;
    std::string ceil_txt;
    for (int t : cli.threads) {
      char b[160];
      roofs[t] = kfuse::measure_cpu_roofs(t, cli.quick);
      const kfuse::DType rdt = w.bf16 ? kfuse::DType::BF16 : w.u8s8 ? kfuse::DType::I32 : kfuse::DType::F32;
      kfuse::Roof roof = kfuse::roof_of(roofs[t], rdt);
      // A bag's plan counts a row per id (explain() cannot see repeated ids): its bound counts the
      // distinct rows the ids pick (make_inputs), as kfuse_bag does.
      bound[t] =
          w.kind == Kind::EmbeddingBag ? roof.seconds(w.read_bytes, w.write_bytes, 0) : kfuse_bound_seconds(w, roof);
      if (w.gemm()) {
        ceil[t] = bound[t] > 0 ? w.flops / bound[t] * 1e-9 : 0;
        std::snprintf(b, sizeof b, "%s%dT %.1f GFLOP/s (%s %.1f)", ceil_txt.empty() ? "" : ", ", t, ceil[t],
                      w.bf16 && roofs[t].dot_bf16_gflops > 0 ? "bf16 dot peak"
                      : w.u8s8 && roofs[t].dot_u8s8_gops > 0 ? "u8s8 dot peak"
                                                             : "FMA peak",
                      roof.peak_gflops);
      } else {
        ceil[t] = bound[t] > 0 ? w.compulsory_bytes / bound[t] * 1e-9 : 0;
        std::snprintf(b, sizeof b, "%s%dT %.1f GB/s (read %.1f, write %.1f)", ceil_txt.empty() ? "" : ", ", t, ceil[t],
                      roof.read_gbps, roof.write_gbps);
      }
      ceil_txt += b;
    }
    if (w.gemm())
      std::printf(
          "   %.3g GFLOP per call; fp64 reference (%zu of %lld rows) in %s; compute ceiling %s\n"
          "   (GEMM: the GB/s column is GFLOP/s, %%ceil is %% of that ceiling)\n",
          w.flops * 1e-9, ref.rows.size(), static_cast<long long>(w.rows * w.batch), fmt_time(now_s() - t0).c_str(),
          ceil_txt.c_str());
    else
      std::printf("   compulsory %s; fp64 reference in %s; ceiling %s\n", fmt_bytes(w.compulsory_bytes).c_str(),
                  fmt_time(now_s() - t0).c_str(), ceil_txt.c_str());
    if (w.compulsory_bytes >= 16e6 && w.compulsory_bytes <= l3_bytes && w.kind != Kind::EmbeddingBag)
      std::printf(
          "   (fits the %s L3: rows may run from cache, above the DRAM ceiling; --scale measures out of cache)\n",
          fmt_bytes(l3_bytes).c_str());
    print_header();

    for (int t : cli.threads) {
      std::vector<Row> g;
      std::map<std::string, std::string> seen_backends;  // reported backend set -> first row
      for (auto& b : cli.backends) {
        auto skip = [&](const std::string& why) {
          Row r = skipped_row(w, ("kfuse[" + b + "]").c_str(), t, "");
          r.note = ": " + why;
          g.push_back(r);
        };
        if (w.flops > gemm_flops_limit(b)) {  // not a GEMM backend: minutes per sample at this size
          skip("not timed above " + std::to_string(static_cast<long long>(gemm_flops_limit(b) / 1e6)) + " MFLOP (the " +
               b + " backend has no blocked GEMM)");
          continue;
        }
        // The interpreter takes seconds per call on a full-size bag; on host tensors the opencl
        // backend hands CPU kernels to it too.
        if (w.kind == Kind::EmbeddingBag && (b == "reference" || b == "opencl") && !cli.quick) {
          skip(b == "reference"
                   ? "the interpreter is timed on bags with --quick only (seconds per call)"
                   : "on host tensors " + b + " falls back to the interpreter: timed on bags with --quick only");
          continue;
        }
        Impl im = kfuse_impl(w, b, t, base);
        auto after = [&](Row& r) {
          auto c0 = kfuse::counters();
          im.run();
          auto c1 = kfuse::counters();
          r.kernels = static_cast<double>(c1.kernels_launched - c0.kernels_launched);
          KfusePlan p = kfuse_plan(w);
          r.planned = p.planned;
          r.backend = p.backends;
          std::string n = p.planned < 0
                              ? std::string("planned n/a")
                              : "planned " + std::to_string(p.planned) + " kernel" + (p.planned == 1 ? "" : "s");
          n += p.backends.empty() ? ", backend: (not reported)" : ", backend: " + p.backends;
          if (c1.fallbacks > c0.fallbacks) n += ", fallbacks " + std::to_string(c1.fallbacks - c0.fallbacks);
          if (!p.backends.empty() && p.backends != b) n += " (fell back from " + b + ")";
          if (!p.error.empty()) n += " (" + p.error + ")";
          // (Not for bags: the profiler counts a row per id, the bench the distinct rows.)
          if (cli.profile && r.status == "ok" && w.kind != Kind::EmbeddingBag) {
            ProfileAgreement pa = profile_agreement(im, w, roofs[t], r, bound[t], kProfileTolerance);
            // A shared host's load comes and goes: a row whose fractions disagree is timed again,
            // the bench's way and then the profiler's back to back, up to twice.
            for (int retry = 0; retry < 2 && !pa.problem.empty() && pa.accounting; ++retry) {
              Row again = r;
              again.st = measure(im.run, cfg);
              pa = profile_agreement(im, w, roofs[t], again, bound[t], kProfileTolerance);
              pa.retries = retry + 1;
            }
            n += "; " + pa.text();
            if (!pa.problem.empty()) {
              const std::string d = w.name + " " + r.impl + " " + std::to_string(t) + "T: " + pa.problem;
              (pa.accounting || !cli.check_timing ? timing_disagreements : disagreements).push_back(d);
            }
          }
          r.note = r.note.empty() ? n : r.note + "; " + n;
        };
        Row r = run_impl(im, w, ref, t, ceil[t], cfg, after);
        kfuse::set_options(base);
        if (r.status == "ok" && !r.backend.empty()) {
          auto it = seen_backends.find(r.backend);
          if (it != seen_backends.end()) r.note += " (same backend as " + it->second + ")";
          else seen_backends[r.backend] = r.impl;
        }
        g.push_back(r);
      }
      auto add_peer = [&](const char* peer, bool have, const char* label,
                          std::vector<Impl> (*make)(const Workload&, int)) {
        if (!want_peer(cli, peer)) return;
        if (!have) {
          g.push_back(skipped_row(w, peer, t, label));
          return;
        }
        std::vector<Impl> impls;
        try {
          impls = make(w, t);
        } catch (const std::exception& e) {
          Row r;
          r.workload = w.name;
          r.impl = peer;
          r.threads = t;
          r.status = "ERROR";
          r.note = std::string(" setting up: ") + e.what();
          g.push_back(r);
          return;
        }
        for (auto& im : impls) g.push_back(run_impl(im, w, ref, t, ceil[t], cfg));
      };
#ifdef KFUSE_BENCH_HAVE_TORCH
      add_peer("torch", true, "LibTorch", &torch_impls);
#else
      add_peer("torch", false, "LibTorch", nullptr);
#endif
      const bool other_peers = w.kind != Kind::EmbeddingBag;  // oneDNN and Eigen have no embedding bag
#ifdef KFUSE_BENCH_HAVE_DNNL
      if (other_peers) add_peer("onednn", true, "oneDNN", &dnnl_impls);
#else
      if (other_peers) add_peer("onednn", false, "oneDNN", nullptr);
#endif
#ifdef KFUSE_BENCH_HAVE_EIGEN
      if (other_peers) add_peer("eigen", true, "Eigen", &eigen_impls);
#else
      if (other_peers) add_peer("eigen", false, "Eigen", nullptr);
#endif
      if (w.kind == Kind::Matmul) {  // OpenBLAS has only the GEMM
#ifdef KFUSE_BENCH_HAVE_OPENBLAS
        add_peer("openblas", true, "OpenBLAS", &openblas_impls);
#else
        add_peer("openblas", false, "OpenBLAS", nullptr);
#endif
      }
      apply_targets(w, g, cli.quick);
      for (auto& r : g) {
        if (r.status == "FAIL" || r.status == "ERROR") any_bad = true;
        if (r.status == "ok") medians()[median_key(w.name, r.impl, t)] = r.st.median;
      }
      print_group(g);
      rows.insert(rows.end(), g.begin(), g.end());
    }
    w.inputs.clear();
    w.inputs.shrink_to_fit();
  }

  if (!cli.json.empty()) {
    write_json(cli.json, rows, machine, ceilings0, cli.quick);
    std::printf("\nwrote %zu rows to %s\n", rows.size(), cli.json.c_str());
  }
  if (cli.profile) {
    if (cli.check_timing)
      disagreements.insert(disagreements.end(), timing_disagreements.begin(), timing_disagreements.end());
    std::printf("\nprofiler vs bench: %zu row%s disagree%s\n", disagreements.size(),
                disagreements.size() == 1 ? "" : "s", disagreements.empty() ? "" : ":");
    for (const auto& d : disagreements) std::printf("  %s\n", d.c_str());
    if (!cli.check_timing && !timing_disagreements.empty()) {
      std::printf("fractions apart by more than 10%% (not checked):\n");
      for (const auto& d : timing_disagreements) std::printf("  %s\n", d.c_str());
    }
  }
  if (cli.check_profile && !disagreements.empty()) return 1;
  return cli.strict && any_bad ? 1 : 0;
}
