// kfuse_compare --device opencl|cuda: the standard workloads evaluated on a GPU device (any
// OpenCL 1.2 device: PoCL on a CPU-only machine), with kernels run per evaluation (fused groups;
// a two-stage kernel is one kernel, two launches), wall time
// per evaluation (host enqueue to device completion, averaged over a loop that waits once at the
// end), GB/s of the bytes each evaluation must move, and a device copy ceiling measured in the
// same run: the GB/s of an element-wise read + write kernel over 256 MiB (64 MiB with --quick).
// --torch-json FILE adds PyTorch eager / torch.compile times written by bench/torch_gpu.py on the
// same workloads, side by side.
#include <kfuse/kfuse.hpp>
#include <kfuse/stats.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device_bench.hpp"

namespace {

using namespace kfuse;

struct DeviceWorkload {
  std::string name;
  std::vector<Shape> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> f;
  int64_t out_elems;
  double flops = 0;  ///< arithmetic per evaluation where it, not memory, bounds the time (GEMM)
};

// The workloads of the table; --quick (and PoCL, a CPU) scales the largest down.
std::vector<DeviceWorkload> device_workloads(bool small) {
  const int64_t R = small ? 2048 : 32768, S = small ? 1024 : 4096, E = small ? (int64_t{1} << 22) : (int64_t{1} << 26);
  const int64_t C = small ? 1024 : 4096, G = small ? 1024 : 4096, NB = small ? 4 : 16, BG = small ? 256 : 1024;
  const std::string g = std::to_string(G), bg = std::to_string(BG);
  return {
      {"log_softmax [" + std::to_string(R) + ",512]",
       {{R, 512}},
       [](auto& x) { return log_softmax(x[0], -1); },
       R * 512},
      {"layer_norm [" + std::to_string(R) + ",512] w,b",
       {{R, 512}, {512}, {512}},
       [](auto& x) { return layer_norm(x[0], {512}, x[1], x[2]); },
       R * 512},
      {"softmax [" + std::to_string(S) + ",1024]", {{S, 1024}}, [](auto& x) { return softmax(x[0], -1); }, S * 1024},
      {"relu(a*b+c) " + std::to_string(E >> 20) + "M",
       {{E}, {E}, {E}},
       [](auto& x) { return relu(x[0] * x[1] + x[2]); },
       E},
      {"sum axis 0 [" + std::to_string(C) + "," + std::to_string(C) + "]",
       {{C, C}},
       [](auto& x) { return sum(x[0], {0}); },
       C},
      {"x - mean(x,0) [" + std::to_string(C) + "," + std::to_string(C) + "]",
       {{C, C}},
       [](auto& x) { return x[0] - mean(x[0], {0}, true); },
       C * C},
      {"10-op chain [8]",
       {{8}},
       [](auto& x) {
         Tensor y = x[0];
         for (int i = 0; i < 5; ++i) y = exp(y * 0.5) - 1.0;
         return y;
       },
       8},
      {"matmul [" + g + "," + g + "]x[" + g + "," + g + "]",
       {{G, G}, {G, G}},
       [](auto& x) { return matmul(x[0], x[1]); },
       G * G,
       2.0 * G * G * G},
      {"gelu(x@W+b) [" + g + "," + g + "]",
       {{G, G}, {G, G}, {G}},
       [](auto& x) { return gelu(matmul(x[0], x[1]) + x[2]); },
       G * G,
       2.0 * G * G * G},
      // The other operand forms of the tiled GEMM: a transposed operand read in place, and a batch.
      {"matmul x^T [" + g + "," + g + "]",
       {{G, G}, {G, G}},
       [](auto& x) { return matmul(transpose(x[0]), x[1]); },
       G * G,
       2.0 * G * G * G},
      {"matmul batched [" + std::to_string(NB) + "," + bg + "," + bg + "]",
       {{NB, BG, BG}, {NB, BG, BG}},
       [](auto& x) { return matmul(x[0], x[1]); },
       NB * BG * BG,
       2.0 * NB * BG * BG * BG},
  };
}

// Whether `name` contains one of the '|'-separated parts of `filter` (an empty filter takes all).
bool selected(const std::string& filter, const std::string& name) {
  if (filter.empty()) return true;
  for (size_t b = 0;;) {
    const size_t e = filter.find('|', b);
    const std::string part = filter.substr(b, e == std::string::npos ? std::string::npos : e - b);
    if (!part.empty() && name.find(part) != std::string::npos) return true;
    if (e == std::string::npos) return false;
    b = e + 1;
  }
}

double seconds_per_eval(Device dev, const std::function<void()>& run, double min_s) {
  run();  // warm: plan, compile, allocate
  synchronize(dev);
  int n = 1;
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) run();
    synchronize(dev);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= min_s || n >= (1 << 20)) return s / n;
    n *= s > 0 ? std::max(2, static_cast<int>(min_s / s * 1.2)) : 8;
  }
}

}  // namespace

int device_compare(const DeviceBenchArgs& a) {
  const Device dev = a.device == "cuda" ? Device::cuda() : Device::opencl();
  std::printf("kfuse_compare --device %s%s\n", a.device.c_str(), a.quick ? " --quick" : "");
  const double min_s = a.quick ? 0.05 : 0.5;
  nlohmann::json torch;
  if (!a.torch_json.empty()) {
    std::ifstream in(a.torch_json);
    if (!in) {
      std::fprintf(stderr, "kfuse_compare: cannot read %s\n", a.torch_json.c_str());
      return 2;
    }
    torch = nlohmann::json::parse(in);
  }
  try {
    // The copy ceiling: an element-wise read + write of a large buffer through a kfuse kernel.
    const int64_t cn = a.quick ? (int64_t{1} << 24) : (int64_t{1} << 26);
    Tensor big = full({cn}, 1.5).to(dev);
    const double cs = seconds_per_eval(
        dev, [&] { (-big).eval(); }, min_s);
    const double ceiling = 2.0 * 4 * static_cast<double>(cn) / cs * 1e-9;
    std::printf("device copy ceiling (read + write of %lld MiB, kernel -x): %.1f GB/s\n\n",
                static_cast<long long>(cn * 4 >> 20), ceiling);
    std::printf("%-32s %8s %12s %9s %8s %9s %12s %12s\n", "workload", "kernels", "us/eval", "GB/s", "of copy",
                "TFLOP/s", "torch eager", "torch.compile");
    nlohmann::json rows = nlohmann::json::array();
    for (const DeviceWorkload& w : device_workloads(a.quick)) {
      if (!selected(a.filter, w.name)) continue;
      std::vector<Tensor> in;
      int64_t bytes = 4 * w.out_elems;
      for (size_t i = 0; i < w.inputs.size(); ++i) {
        in.push_back(randn(w.inputs[i], 11 + i).to(dev));
        int64_t n = 1;
        for (int64_t d : w.inputs[i]) n *= d;
        bytes += 4 * n;
      }
      w.f(in).eval();
      synchronize(dev);
      const uint64_t l0 = counters().kernels_launched;
      w.f(in).eval();
      const uint64_t launches = counters().kernels_launched - l0;
      const double s = seconds_per_eval(
          dev, [&] { w.f(in).eval(); }, min_s);
      const double gbs = static_cast<double>(bytes) / s * 1e-9;
      std::string te = "-", tc = "-";
      if (torch.contains(w.name)) {
        char buf[32];
        if (torch[w.name].contains("eager_us")) {
          std::snprintf(buf, sizeof buf, "%.1f", torch[w.name]["eager_us"].get<double>());
          te = buf;
        }
        if (torch[w.name].contains("compile_us")) {
          std::snprintf(buf, sizeof buf, "%.1f", torch[w.name]["compile_us"].get<double>());
          tc = buf;
        }
      }
      char tf[16] = "-";
      if (w.flops > 0) std::snprintf(tf, sizeof tf, "%.2f", w.flops / s * 1e-12);
      std::printf("%-32s %8llu %12.1f %9.1f %7.0f%% %9s %12s %12s\n", w.name.c_str(),
                  static_cast<unsigned long long>(launches), s * 1e6, gbs, 100 * gbs / ceiling, tf, te.c_str(),
                  tc.c_str());
      rows.push_back({{"workload", w.name},
                      {"kernels", launches},
                      {"us_per_eval", s * 1e6},
                      {"gbps", gbs},
                      {"copy_ceiling_gbps", ceiling}});
      if (w.flops > 0) rows.back()["tflops"] = w.flops / s * 1e-12;
    }
    if (!a.json.empty()) std::ofstream(a.json) << rows.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kfuse_compare --device %s: %s\n", a.device.c_str(), e.what());
    return 1;
  }
  return 0;
}

bool parse_device_args(int argc, char** argv, DeviceBenchArgs& a) {
  bool device = false;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto val = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (s == "--device") a.device = val(), device = true;
    else if (s == "--quick") a.quick = true;
    else if (s == "--json") a.json = val();
    else if (s == "--torch-json") a.torch_json = val();
    else if (s == "--filter") a.filter = val();
  }
  return device;
}
