// The profiler: its counts (launches, bytes, FLOPs) equal the plan's, its outputs parse back,
// and it records nothing when off. Roofs come from an injected machine model (no measuring).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <kfuse/cache.hpp>
#include <kfuse/explain.hpp>
#include <kfuse/kfuse.hpp>
#include <kfuse/profile.hpp>

#include "cache/cache_tool.hpp"
#include "profile_test_util.hpp"
#include "test_util.hpp"

namespace kfuse {

MachineModel fake_machine() {
  MachineModel m;
  m.cpu = "test CPU";
  m.isa = "avx2 (ymm)";
  m.measured = "2026-01-01T00:00:00Z";
  for (int t : {1, 2, 4}) {
    CpuRoofs c;
    c.threads = t;
    c.read_gbps = 10.0 * t;
    c.write_gbps = 4.0 * t;
    c.write_nt_gbps = 5.0 * t;
    c.copy_gbps = c.triad_gbps = 8.0 * t;
    c.fma_f32_gflops = 50.0 * t;
    c.fma_f64_gflops = 25.0 * t;
    m.cpu_roofs.push_back(c);
  }
  return m;
}

namespace {

struct Workload {
  std::string name;
  std::function<Tensor(uint64_t seed)> make;  // fresh inputs per seed: a new graph to evaluate
  double flops;                               // counted by hand, independently of the IR
};

std::vector<Workload> standard_workloads(Device dev) {
  auto in = [dev](Shape s, uint64_t seed) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return test::make_tensor(test::random_values(static_cast<size_t>(n), seed), s, DType::F32).to(dev);
  };
  return {
      {"mul-add chain",
       [=](uint64_t s) {
         return in({64, 64}, s) * 2.0f + 1.0f;
       },
       2.0 * 4096},
      {"sum axis 1",
       [=](uint64_t s) {
         return sum(in({64, 64}, s), {1});
       },
       4096},
      {"matmul",
       [=](uint64_t s) {
         return matmul(in({8, 16}, s), in({16, 4}, s + 100));
       },
       2.0 * 8 * 16 * 4},
      {"matmul u8 x i8 (i32 sums: its integer products count)",
       [=](uint64_t s) {
         return matmul(in({8, 16}, s).cast(DType::U8), in({16, 4}, s + 100).cast(DType::I8));
       },
       2.0 * 8 * 16 * 4},
      {"log_softmax",
       [=](uint64_t s) {
         return log_softmax(in({64, 10}, s));
       },
       -1},  // FLOPs not counted by hand
  };
}

}  // namespace

// Launch counts, bytes, FLOPs and the roofline bound equal explain()'s plan; FLOPs equal the hand count.
void check_counts_equal_plan(Device dev) {
  set_machine(fake_machine());
  for (const Workload& w : standard_workloads(dev)) {
    SCOPED_TRACE(w.name + " on " + dev.str());
    w.make(1).eval();  // compiled outside the profile (its compile time is checked separately)
    Tensor y = w.make(2);
    Explanation ex = explain(y);
    Profile p = profile([&] { y.eval(); });
    int64_t plan_bytes = 0, plan_reads = 0;
    for (const KernelReport& k : ex.kernels) plan_bytes += k.min_bytes, plan_reads += k.read_bytes;
    ASSERT_EQ(p.launches.size(), ex.kernel_count());
    EXPECT_EQ(p.evaluations, 1);
    double bytes = 0, reads = 0, flops = 0;
    for (const KernelLaunch& l : p.launches) {
      bytes += l.read_bytes + l.write_bytes;
      reads += l.read_bytes;
      flops += l.flops;
      EXPECT_GT(l.seconds, 0);
      // The injected model has no roofs for GPU devices: no bound rather than a CPU one.
      if (dev == Device::cpu()) EXPECT_GT(l.bound_seconds, 0);
      else EXPECT_EQ(l.bound_seconds, 0);
      EXPECT_EQ(l.device, dev.str());
    }
    EXPECT_EQ(bytes, static_cast<double>(plan_bytes));
    EXPECT_EQ(reads, static_cast<double>(plan_reads));
    // explain() counts the same FLOPs, and its bound is the profiler's (kfuse_compare's ceiling).
    double plan_flops = 0, bound = 0;
    for (const KernelReport& k : ex.kernels) plan_flops += k.flops;
    for (const KernelLaunch& l : p.launches) bound += l.bound_seconds;
    EXPECT_EQ(flops, plan_flops);
    if (dev == Device::cpu()) {
      EXPECT_DOUBLE_EQ(bound, ex.bound_seconds(roof_for(fake_machine(), dev, DType::F32, p.threads)));
    }
    if (w.flops >= 0) { EXPECT_EQ(flops, w.flops); }
    EXPECT_GT(flops, 0);
    EXPECT_TRUE(p.compiles.empty());
  }
}

namespace {

TEST(Profile, CountsEqualThePlanOnCpu) { check_counts_equal_plan(Device::cpu()); }

TEST(Profile, RooflineBoundUsesReadsAndWritesApart) {
  Roof r = roof_of(fake_machine().cpu_roofs[0], DType::F32);  // read 10, write 5 (streaming), 50 GFLOP/s
  EXPECT_DOUBLE_EQ(r.seconds(10e9, 0, 0), 1.0);
  EXPECT_DOUBLE_EQ(r.seconds(10e9, 5e9, 0), 2.0);   // the bus is shared: times add
  EXPECT_DOUBLE_EQ(r.seconds(1e9, 0, 100e9), 2.0);  // compute bound
  EXPECT_DOUBLE_EQ(r.gbps(10e9, 5e9), 7.5);
  EXPECT_DOUBLE_EQ(roof_of(fake_machine().cpu_roofs[0], DType::F64).peak_gflops, 25.0);
  EXPECT_EQ(fake_machine().cpu_at(3).threads, 2);  // the largest measured count <= 3
}

TEST(Profile, CompilesAndHostOverheadAreRecorded) {
  set_machine(fake_machine());
  Options o = options();
  o.cache_mode = "memory";
  set_options(o);
  clear_memory_cache();
  Tensor x = test::make_tensor(test::random_values(256, 4), {256}, DType::F32);
  Profile p = profile([&] {
    for (int i = 0; i < 3; ++i) (exp(x) * 3.0f - 1.5f).eval();
  });
  EXPECT_EQ(p.evaluations, 3);
  EXPECT_EQ(p.launches.size(), 3u);
  ASSERT_EQ(p.compiles.size(), 1u);  // the first evaluation compiles, the others hit
  EXPECT_FALSE(p.compiles[0].disk_load);
  EXPECT_GT(p.eval_seconds, p.compiles[0].seconds);
  EXPECT_GE(p.host_overhead_seconds(), 0);
  ASSERT_EQ(p.summary().size(), 1u);
  EXPECT_EQ(p.summary()[0].launches, 3);
  set_options(Options::from_env());
}

// set_options can change the thread count inside a profiled region (KFUSE_PROFILE=run starts
// before main): each launch is bounded by the roofs of the count it ran with, not the start's.
TEST(Profile, EachLaunchKeepsTheRoofsOfItsThreadCount) {
  set_machine(fake_machine());
  Options o = options();
  o.num_threads = 2;
  set_options(o);
  Tensor x = test::make_tensor(test::random_values(4096, 8), {64, 64}, DType::F32);
  Profiler prof;
  o.num_threads = 1;
  set_options(o);
  Tensor a = softmax(x * 2.0f);
  const double bound1 = explain(a).bound_seconds(roof_for(fake_machine(), Device::cpu(), DType::F32, 1));
  a.eval();
  o.num_threads = 2;
  set_options(o);
  Tensor b = softmax(x * 3.0f);
  const double bound2 = explain(b).bound_seconds(roof_for(fake_machine(), Device::cpu(), DType::F32, 2));
  b.eval();
  Profile p = prof.stop();
  set_options(Options::from_env());
  ASSERT_EQ(p.launches.size(), 2u);
  EXPECT_EQ(p.threads, 2);  // when the region started
  EXPECT_EQ(p.launches[0].threads, 1);
  EXPECT_EQ(p.launches[1].threads, 2);
  EXPECT_DOUBLE_EQ(p.launches[0].bound_seconds, bound1);
  EXPECT_DOUBLE_EQ(p.launches[1].bound_seconds, bound2);
  EXPECT_EQ(p.cpu_thread_counts(), (std::vector<int>{1, 2}));
  ASSERT_EQ(p.summary().size(), 2u);  // one row per thread count
  const std::string table = p.table();
  EXPECT_NE(table.find("thr "), std::string::npos) << table;
  EXPECT_NE(table.find("roofs (1 thread)"), std::string::npos) << table;
  EXPECT_NE(table.find("roofs (2 threads)"), std::string::npos) << table;
  auto j = nlohmann::json::parse(p.json());
  EXPECT_EQ(j["launches"][0]["threads"], 1);
  EXPECT_EQ(j["cpu_thread_counts"], nlohmann::json::array({1, 2}));
  EXPECT_NE(p.roofline_svg().find("cpu 1T"), std::string::npos);
  EXPECT_NE(p.roofline_svg().find("cpu 2T"), std::string::npos);
}

TEST(Profile, OffRecordsNothingAndProfilesDoNotNest) {
  set_machine(fake_machine());
  Tensor x = test::make_tensor(test::random_values(64, 5), {64}, DType::F32);
  Profile p;
  {
    Profiler outer;
    EXPECT_THROW(Profiler inner, UserError);
    p = outer.stop();
    EXPECT_THROW(outer.stop(), UserError);
  }
  (x + 1.0f).eval();  // after stop: not recorded anywhere
  Profile q = profile([] {});
  EXPECT_TRUE(p.launches.empty());
  EXPECT_TRUE(q.launches.empty());
  EXPECT_EQ(q.evaluations, 0);
}

TEST(Profile, TableJsonTraceAndSvgParseBack) {
  set_machine(fake_machine());
  Tensor x = test::make_tensor(test::random_values(4096, 6), {64, 64}, DType::F32);
  Tensor w = test::make_tensor(test::random_values(4096, 7), {64, 64}, DType::F32);
  Profile p = profile([&] {
    for (int i = 0; i < 2; ++i) log_softmax(matmul(x, w) + 1.0f).eval();
  });
  ASSERT_FALSE(p.launches.empty());
  const std::string table = p.table();
  EXPECT_NE(table.find("k_"), std::string::npos) << table;
  EXPECT_NE(table.find("roof%"), std::string::npos);
  EXPECT_NE(table.find("host overhead"), std::string::npos);

  auto j = nlohmann::json::parse(p.json());
  EXPECT_EQ(j["evaluations"], 2);
  EXPECT_EQ(j["launches"].size(), p.launches.size());
  EXPECT_EQ(j["machine"]["cpu"], "test CPU");
  double prev = 1e30;
  for (const auto& k : j["kernels"]) {  // sorted by time, longest first
    EXPECT_LE(k["seconds"].get<double>(), prev);
    prev = k["seconds"].get<double>();
    EXPECT_GT(k["roof_fraction"].get<double>(), 0);
  }

  auto t = nlohmann::json::parse(p.chrome_trace());
  size_t complete = 0;
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph"));
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_GE(e["dur"].get<double>(), 0);
      EXPECT_GE(e["ts"].get<double>(), 0);
    }
  }
  EXPECT_EQ(complete, p.launches.size() + p.compiles.size());

  const std::string svg = p.roofline_svg();
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);  // the CPU roof
  EXPECT_NE(svg.find("<circle"), std::string::npos);    // the kernels
  EXPECT_NE(svg.find("</svg>"), std::string::npos);

  // write(): four files; the SVG is well-formed XML when xmllint is there to say so.
  auto dir = std::filesystem::temp_directory_path() / ("kfuse-prof-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string prefix = (dir / "run").string();
  p.write(prefix);
  for (const char* ext : {".txt", ".json", ".trace.json", ".svg"}) EXPECT_TRUE(std::filesystem::exists(prefix + ext));
  if (std::system("command -v xmllint >/dev/null 2>&1") == 0) {
    EXPECT_EQ(std::system(("xmllint --noout " + prefix + ".svg").c_str()), 0);
  }
  // It renders (librsvg, as a browser's SVG engine would): the chart's PNG holds far more than
  // the PNG of an empty canvas of the same size (a blank image compresses to almost nothing).
  if (std::system("command -v rsvg-convert >/dev/null 2>&1") == 0) {
    const size_t open_end = svg.find('>');
    {
      std::ofstream blank(prefix + "-blank.svg");
      blank << svg.substr(0, open_end + 1) << "</svg>\n";
    }
    for (const char* f : {"", "-blank"})
      ASSERT_EQ(std::system(("rsvg-convert -o " + prefix + f + ".png " + prefix + f + ".svg").c_str()), 0) << f;
    const auto drawn = std::filesystem::file_size(prefix + ".png");
    const auto blank = std::filesystem::file_size(prefix + "-blank.png");
    EXPECT_GT(drawn, 4 * blank) << "the roofline chart rendered (almost) empty: " << drawn << " vs " << blank
                                << " bytes";
  }
  EXPECT_THROW(p.write((dir / "missing" / "run").string()), UserError);
  std::filesystem::remove_all(dir);
}

TEST(Machine, ModelRoundTripsThroughJsonAndRejectsOtherFiles) {
  MachineModel m = fake_machine();
  m.devices.push_back({"opencl:0", "pocl", 3.0, 3.0, 12.0});
  MachineModel back = MachineModel::from_json(m.to_json());
  EXPECT_EQ(back.cpu, m.cpu);
  EXPECT_EQ(back.measured, m.measured);
  ASSERT_EQ(back.cpu_roofs.size(), 3u);
  EXPECT_EQ(back.cpu_roofs[2].read_gbps, 40.0);
  ASSERT_NE(back.device_roofs(Device::opencl()), nullptr);
  EXPECT_EQ(back.device_roofs(Device::opencl())->fma_f32_gflops, 12.0);
  EXPECT_THROW(MachineModel::from_json("{\"entries\": []}"), UserError);
  EXPECT_THROW(MachineModel::from_json("not json"), UserError);
  EXPECT_NE(m.text().find("test CPU"), std::string::npos);
}

TEST(Machine, CacheToolPrintsTheModel) {
  set_machine(fake_machine());  // the process's model: nothing is measured
  std::ostringstream out, err;
  ASSERT_EQ(detail::cache::run_cache_tool({"machine", "--json"}, out, err), 0) << err.str();
  EXPECT_EQ(MachineModel::from_json(out.str()).cpu, "test CPU");
  std::ostringstream out2, err2;
  EXPECT_EQ(detail::cache::run_cache_tool({"machine", "--device", "tpu:0"}, out2, err2), 2);
  EXPECT_NE(err2.str().find("opencl[:N] or cuda[:N]"), std::string::npos);
}

TEST(Machine, QuickMeasurementIsPositiveAndShort) {
  auto t0 = std::chrono::steady_clock::now();
  MachineModel m = measure_machine({false, true, {}});
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);  // ~0.1 s in Release; generous for sanitizer builds
  ASSERT_FALSE(m.cpu_roofs.empty());
  EXPECT_EQ(m.cpu_roofs[0].threads, 1);
  for (const CpuRoofs& c : m.cpu_roofs) {
    EXPECT_GT(c.read_gbps, 0);
    EXPECT_GT(c.write_nt_gbps, 0);
    EXPECT_GT(c.triad_gbps, 0);
  }
  EXPECT_TRUE(m.quick);
  EXPECT_FALSE(m.measured.empty());
  EXPECT_THROW(probe::fma_peak_gflops(DType::I32, 1, 1, 10), UserError);
}

// The cache sizes GEMM blocking uses: nested and plausible (sysfs, else sysconf, else defaults),
// and the L3 the same as sysfs reports where it does (glibc's sysconf gave 10x that on a VM).
TEST(Machine, CacheSizesAreNestedAndMatchSysfs) {
  const probe::CacheSizes& c = probe::cache_sizes();
  EXPECT_GE(c.l1d, int64_t{4} << 10);
  EXPECT_GT(c.l2, c.l1d);
  EXPECT_GE(c.l3, c.l2);
  EXPECT_EQ(&c, &probe::cache_sizes());  // read once
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int lv = 0;
    std::string sz;
    if (!(level >> lv)) break;
    if (lv != 3 || !(size >> sz) || sz.empty() || sz.back() != 'K') continue;
    EXPECT_EQ(c.l3, std::stoll(sz) * 1024) << dir << "size = " << sz;
  }
}

}  // namespace
}  // namespace kfuse
