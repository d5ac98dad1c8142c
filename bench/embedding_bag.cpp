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

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "bag_tables.hpp"
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

  // The f32 table (bench/bag_problem.hpp); its copies in the other formats are made on first use
  // (bench/bag_tables.hpp), shared by the uniform and Zipf problems: `storage` keeps the one table
  // alive between them.
  const std::shared_ptr<const float> storage = bag_table(cli.rows, cli.cols);
  const double d = static_cast<double>(cli.cols);

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
    for (const std::string& format : bag_formats()) {
      if (!cli.filter.empty() && format.find(cli.filter) == std::string::npos &&
          cli.filter != (zipf ? "zipf" : "uniform"))
        continue;
      const BagTable& table = bag_table_of(p, format);
      const double read_bytes = static_cast<double>(p.distinct) * bag_row_bytes(format, cli.cols) + index_bytes;
      const Reference ref = bag_format_reference(p, format);
      std::vector<std::pair<Impl, int>> impls;  // with its thread count
      auto y = std::make_shared<kfuse::Tensor>();
      const size_t planned = kfuse::explain(kfuse::embedding_bag(table.expr(), ids(), offsets())).kernel_count();
      for (int t : cli.threads) {
        Impl k;
        k.name = "kfuse";
        k.note = std::to_string(planned) + " kernel" + (planned == 1 ? "" : "s");
        k.setup = [t] {
          kfuse::Options o = kfuse::options();
          o.num_threads = t;
          kfuse::set_options(o);
        };
        k.run = [y, &table, ids, offsets] { *y = kfuse::embedding_bag(table.expr(), ids(), offsets()).eval(); };
        k.result = [y] { return y->data_ptr<float>(); };
        impls.push_back({k, t});
#ifdef KFUSE_BENCH_HAVE_TORCH
        if (format == "f32") impls.push_back({torch_bag_impl(p, t), t});
        if (table.fused.defined())
          impls.push_back({torch_bag_fused_impl(p, table.fused.data_ptr<uint8_t>(), table.q.bits, t), t});
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
        std::printf("%-11s %-12s %2d %10s %6.2fx %8.2f %8.2f %6s %5s  %s\n", format.c_str(), im.name.c_str(), t,
                    fmt_time(st.median).c_str(), st.spread(), gbps, ceil, pct(gbps / ceil).c_str(),
                    im.name == "kfuse" ? std::to_string(planned).c_str() : "-",
                    vd.ok ? "ok" : ("FAIL " + vd.message).c_str());
      }
    }
  }
  return any_bad ? 1 : 0;
}
