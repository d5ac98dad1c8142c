// kfuse_bag: embedding_bag (mode sum) over a table larger than the L3, stored as f32, f16,
// 8-bit and 4-bit row-wise quantised (two tensors, and PyTorch's fused rows;
// include/kfuse/quantize.hpp), with bags of 20-100 ids drawn
// uniformly or Zipf-like, and LibTorch's bags in the same run when LibTorch is found
// (bench/peers/torch_bag.cpp): at::embedding_bag over the f32 table, PyTorch's quantised 8-bit bag
// over the 8-bit table.
//
//   kfuse_bag [--rows 2000000] [--cols 64] [--bags 4096] [--threads 1,2] [--min-time 1]
//             [--filter text] [--quick]
// Per row: median ms (spread p90/p10), GB/s of the bytes the bag must read (the distinct rows it
// touches in the table's storage format, + the ids and offsets) and write (the [bags, cols] f32
// result), and that as a fraction of kfuse::Roof's ceiling for the same read/write mix and thread
// count, measured in the same run (lib/prof: a streaming read, so gathers of scattered rows
// cannot quite reach it). Every result is checked against an fp64 bag of the table's values.
#include <kfuse/explain.hpp>
#include <kfuse/index_ops.hpp>
#include <kfuse/kfuse.hpp>
#include <kfuse/profile.hpp>
#include <kfuse/quantize.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "bag_problem.hpp"
#include "harness.hpp"

namespace kbench {
namespace {

struct Cli {
  int64_t rows = 2'000'000, cols = 64, bags = 4096;
  std::vector<int> threads = {1, 2};
  double min_time = 1.0;
  std::string filter;
  bool quick = false;
};

Cli parse(int argc, char** argv) {
  Cli c;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kfuse_bag: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rows") c.rows = std::stoll(next());
    else if (a == "--cols") c.cols = std::stoll(next());
    else if (a == "--bags") c.bags = std::stoll(next());
    else if (a == "--min-time") c.min_time = std::stod(next());
    else if (a == "--filter") c.filter = next();
    else if (a == "--quick") c.quick = true;
    else if (a == "--threads") {
      c.threads.clear();
      std::string s = next();
      for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        c.threads.push_back(std::stoi(s.substr(p, q - p)));
        p = q == std::string::npos ? s.size() : q + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: kfuse_bag [--rows N] [--cols D] [--bags B] [--threads 1,2] [--min-time s] [--filter text] "
                   "[--quick]\n");
      std::exit(a == "--help" ? 0 : 2);
    }
  }
  if (c.quick) {
    c.rows = std::min<int64_t>(c.rows, 20000);
    c.bags = std::min<int64_t>(c.bags, 256);
    c.min_time = std::min(c.min_time, 0.05);
  }
  return c;
}

// One storage format of the table and how kfuse reads it.
struct Variant {
  std::string name;                      // bag_row_bytes' format name
  std::function<kfuse::Tensor()> table;  // the lazy f32 table expression the bag reads
};

std::vector<float> as_floats(const kfuse::Tensor& t) { return t.to_vector<float>(); }

std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100 * f);
  return b;
}

}  // namespace
}  // namespace kbench

int main(int argc, char** argv) {
  using namespace kbench;
  Cli cli = parse(argc, argv);
  TimingConfig cfg;
  cfg.min_time_s = cli.min_time;
  cfg.min_reps = cli.quick ? 3 : 15;
  cfg.max_reps = 400;
  std::printf("kfuse_bag: embedding_bag sum, table [%lld, %lld], %lld bags of 20-100 ids\nmachine: %s\n",
              static_cast<long long>(cli.rows), static_cast<long long>(cli.cols), static_cast<long long>(cli.bags),
              machine_description().c_str());
  const double l3 = static_cast<double>(kfuse::probe::cache_sizes().l3);
  if (l3 > 0) std::printf("L3: %s\n", fmt_bytes(l3).c_str());
  std::printf("timing: median of >= %d samples and >= %.2f s per row; spread = p90/p10\n", cfg.min_reps,
              cfg.min_time_s);
  std::printf(
      "GB/s: (distinct rows touched x bytes per stored row + ids + offsets + f32 result) / median;\n"
      "%%ceil: of kfuse::Roof for that read/write mix and thread count, measured before each group\n");

  // The f32 table (bench/bag_problem.hpp) and its f16 / 8-bit / 4-bit copies, made once (kfuse
  // computes the copies).
  const std::shared_ptr<const float> storage = bag_table(cli.rows, cli.cols);
  const float* table = storage.get();
  kfuse::Tensor t32 = kfuse::Tensor::borrow(const_cast<float*>(table), {cli.rows, cli.cols});
  kfuse::Tensor t16 = t32.cast(kfuse::DType::F16);
  kfuse::QuantizedTable q8 = kfuse::quantize_rowwise(t32, 8), q4 = kfuse::quantize_rowwise(t32, 4);
  kfuse::eval({t16, q8.values, q8.scale_bias, q4.values, q4.scale_bias});
  const kfuse::Tensor fused8 = kfuse::pack_fused_rowwise(q8), fused4 = kfuse::pack_fused_rowwise(q4);
  const kfuse::QuantizedTable f8 = kfuse::fused_rowwise_table(fused8),
                              f4 = kfuse::fused_rowwise_table(fused4, 4, cli.cols);
  const double d = static_cast<double>(cli.cols);
  std::vector<Variant> variants;
  variants.push_back({"f32", [t32] { return t32; }});
  variants.push_back({"f16", [t16] { return t16.cast(kfuse::DType::F32); }});
  variants.push_back({"8-bit", [q8] { return kfuse::dequantize_rowwise(q8); }});
  variants.push_back({"8-bit fused", [f8] { return kfuse::dequantize_rowwise(f8); }});
  variants.push_back({"4-bit", [q4] { return kfuse::dequantize_rowwise(q4); }});
  variants.push_back({"4-bit fused", [f4] { return kfuse::dequantize_rowwise(f4); }});

  bool any_bad = false;
  for (bool zipf : {false, true}) {
    const BagProblem p = make_bag_problem(cli.rows, cli.cols, cli.bags, zipf, zipf ? 2 : 1);
    const double index_bytes = 8.0 * static_cast<double>(p.ids.size() + p.offsets.size());
    const double write_bytes = 4.0 * static_cast<double>(cli.bags) * d;
    std::printf("\n== %s ids: %zu ids, %lld distinct rows\n", zipf ? "Zipf-like" : "uniform", p.ids.size(),
                static_cast<long long>(p.distinct));
    // Borrowed anew for every call, as a caller with a new batch would: the same borrowed tensors
    // would make every call after the first the same (interned) node, already evaluated, and time
    // nothing but recording.
    auto ids = [&p] {
      return kfuse::Tensor::borrow(const_cast<int64_t*>(p.ids.data()), {static_cast<int64_t>(p.ids.size())});
    };
    auto offsets = [&p] {
      return kfuse::Tensor::borrow(const_cast<int64_t*>(p.offsets.data()), {static_cast<int64_t>(p.offsets.size())});
    };
    std::printf("%-11s %-12s %2s %10s %7s %8s %8s %6s %5s  %s\n", "table", "impl", "T", "median", "spread", "GB/s",
                "ceil", "%ceil", "kern", "check");
    for (Variant& v : variants) {
      if (!cli.filter.empty() && v.name.find(cli.filter) == std::string::npos &&
          cli.filter != (zipf ? "zipf" : "uniform"))
        continue;
      const double read_bytes = static_cast<double>(p.distinct) * bag_row_bytes(v.name, cli.cols) + index_bytes;
      const std::vector<float> copy = v.name == "f32" ? std::vector<float>{} : as_floats(v.table());
      const Reference ref = bag_reference(p, v.name == "f32" ? table : copy.data());
      std::vector<std::pair<Impl, int>> impls;  // with its thread count
      auto y = std::make_shared<kfuse::Tensor>();
      const size_t planned = kfuse::explain(kfuse::embedding_bag(v.table(), ids(), offsets())).kernel_count();
      for (int t : cli.threads) {
        Impl k;
        k.name = "kfuse";
        k.note = std::to_string(planned) + " kernel" + (planned == 1 ? "" : "s");
        k.setup = [t] {
          kfuse::Options o = kfuse::options();
          o.num_threads = t;
          kfuse::set_options(o);
        };
        k.run = [y, &v, ids, offsets] { *y = kfuse::embedding_bag(v.table(), ids(), offsets()).eval(); };
        k.result = [y] { return y->data_ptr<float>(); };
        impls.push_back({k, t});
#ifdef KFUSE_BENCH_HAVE_TORCH
        if (v.name == "f32") impls.push_back({torch_bag_impl(p, t), t});
        if (v.name == "8-bit fused") impls.push_back({torch_bag_fused_impl(p, fused8.data_ptr<uint8_t>(), 8, t), t});
        if (v.name == "4-bit fused") impls.push_back({torch_bag_fused_impl(p, fused4.data_ptr<uint8_t>(), 4, t), t});
#endif
      }
      for (auto& [im, t] : impls) {
        const kfuse::Roof roof = kfuse::roof_of(kfuse::measure_cpu_roofs(t, cli.quick), kfuse::DType::F32);
        const double ceil = roof.gbps(read_bytes, write_bytes);
        im.setup();
        const Stats st = measure(im.run, cfg);
        const Verdict vd = verify(im.result(), ref);
        any_bad = any_bad || !vd.ok;
        const double gbps = (read_bytes + write_bytes) / st.median / 1e9;
        std::printf("%-11s %-12s %2d %10s %6.2fx %8.2f %8.2f %6s %5s  %s\n", v.name.c_str(), im.name.c_str(), t,
                    fmt_time(st.median).c_str(), st.spread(), gbps, ceil, pct(gbps / ceil).c_str(),
                    im.name == "kfuse" ? std::to_string(planned).c_str() : "-",
                    vd.ok ? "ok" : ("FAIL " + vd.message).c_str());
      }
    }
  }
  return any_bad ? 1 : 0;
}
