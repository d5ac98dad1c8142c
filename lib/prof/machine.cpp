// kfuse::machine(): the bandwidth and FMA roofs of this machine, measured by lib/prof/probes.cpp
// (and, for GPU devices, by kfuse kernels run on them), cached in <cache dir>/machine.json with
// the CPU it was measured on and when.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "kfuse/error.hpp"
#include "kfuse/options.hpp"
#include "kfuse/profile.hpp"
#include "kfuse/tensor.hpp"
#include "prof/recorder.hpp"

namespace kfuse {

namespace {

using nlohmann::json;

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        auto s = line.substr(p + 1);
        s.erase(0, s.find_first_not_of(" \t"));
        return s;
      }
    }
  return "unknown CPU";
}

int hw_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// 1, 2, 4, ... and the hardware thread count: the thread counts a run is likely to use,
// without measuring each of 64.
std::vector<int> thread_counts() {
  std::vector<int> v;
  const int n = hw_threads();
  for (int t = 1; t < n; t *= 2) v.push_back(t);
  v.push_back(n);
  return v;
}

// A GPU device measured with kfuse kernels: a copy (y = x + 1) for the bandwidth and a chain of
// multiply-adds on a small tensor for the FMA peak. Timed by the recorder (device events).
DeviceRoofs measure_device(Device d, bool quick) {
  DeviceRoofs r;
  r.device = d.str();
  r.name = d.str();
  const int64_t n_bw = quick ? (int64_t{1} << 20) : (int64_t{1} << 24);
  const int64_t n_fl = quick ? (int64_t{1} << 16) : (int64_t{1} << 20);
  Tensor x = rand({n_bw}, 1).to(d);
  Tensor xs = rand({n_fl}, 2).to(d);
  x.eval();
  xs.eval();
  auto chain = [&] {
    Tensor y = xs;
    for (int i = 0; i < 32; ++i) y = y * 1.0001f + 0.5f;  // 64 flops per element, one kernel
    return y;
  };
  (x + 1.0f).eval();  // compile outside the timed runs
  chain().eval();
  detail::prof::start_recording(MachineModel{});
  try {
    for (int rep = 0; rep < 3; ++rep) {
      (x + 1.0f).eval();
      chain().eval();
    }
  } catch (...) {
    detail::prof::finish_recording();
    throw;
  }
  Profile p = detail::prof::finish_recording();
  double bw = 0, fl = 0;
  for (const KernelLaunch& l : p.launches) {
    if (l.seconds <= 0) continue;
    if (l.flops > 4 * (l.read_bytes + l.write_bytes)) fl = std::max(fl, l.flops / l.seconds / 1e9);
    else bw = std::max(bw, (l.read_bytes + l.write_bytes) / l.seconds / 1e9);
  }
  r.read_gbps = r.write_gbps = bw;
  r.fma_f32_gflops = fl;
  return r;
}

json cpu_json(const CpuRoofs& c) {
  return {{"threads", c.threads},
          {"read_gbps", c.read_gbps},
          {"write_gbps", c.write_gbps},
          {"write_nt_gbps", c.write_nt_gbps},
          {"copy_gbps", c.copy_gbps},
          {"triad_gbps", c.triad_gbps},
          {"fma_f32_gflops", c.fma_f32_gflops},
          {"fma_f64_gflops", c.fma_f64_gflops},
          {"dot_bf16_gflops", c.dot_bf16_gflops},
          {"dot_u8s8_gops", c.dot_u8s8_gops}};
}

struct State {
  std::mutex mu;
  std::unique_ptr<MachineModel> model;
};
State& state() {
  static auto* s = new State();  // never destroyed: the KFUSE_PROFILE exit handler reads it
  return *s;
}

}  // namespace

CpuRoofs measure_cpu_roofs(int threads, bool quick) {
  using probe::Stream;
  const int64_t n = quick ? (int64_t{1} << 20) : (int64_t{1} << 24);
  const int passes = quick ? 2 : 3;
  const int64_t iters = quick ? 100'000 : 1'000'000;
  CpuRoofs c;
  c.threads = threads;
  c.read_gbps = probe::stream_gbps(Stream::Read, threads, n, passes);
  c.write_gbps = probe::stream_gbps(Stream::Write, threads, n, passes);
  c.write_nt_gbps = probe::stream_gbps(Stream::WriteNT, threads, n, passes);
  c.copy_gbps = probe::stream_gbps(Stream::Copy, threads, n, passes);
  c.triad_gbps = probe::stream_gbps(Stream::Triad, threads, n, passes);
  c.fma_f32_gflops = probe::fma_peak_gflops(DType::F32, threads, 3, iters);
  c.fma_f64_gflops = probe::fma_peak_gflops(DType::F64, threads, 3, iters);
  c.dot_bf16_gflops = probe::fma_peak_gflops(DType::BF16, threads, 3, iters);
  c.dot_u8s8_gops = probe::fma_peak_gflops(DType::I8, threads, 3, iters);
  return c;
}

const CpuRoofs& MachineModel::cpu_at(int threads) const {
  static const CpuRoofs none{};
  const CpuRoofs* best = nullptr;
  for (const CpuRoofs& c : cpu_roofs)
    if (!best || c.threads <= threads) best = &c;
  return best ? *best : none;
}

const DeviceRoofs* MachineModel::device_roofs(Device d) const {
  for (const DeviceRoofs& r : devices)
    if (r.device == d.str()) return &r;
  return nullptr;
}

std::string MachineModel::to_json() const {
  json j;
  j["cpu"] = cpu;
  j["isa"] = isa;
  j["measured"] = measured;
  j["measured_unix"] = measured_unix;
  j["quick"] = quick;
  j["cpu_roofs"] = json::array();
  for (const CpuRoofs& c : cpu_roofs) j["cpu_roofs"].push_back(cpu_json(c));
  j["devices"] = json::array();
  for (const DeviceRoofs& d : devices)
    j["devices"].push_back({{"device", d.device},
                            {"name", d.name},
                            {"read_gbps", d.read_gbps},
                            {"write_gbps", d.write_gbps},
                            {"fma_f32_gflops", d.fma_f32_gflops}});
  return j.dump(2);
}

MachineModel MachineModel::from_json(const std::string& text) {
  MachineModel m;
  try {
    json j = json::parse(text);
    m.cpu = j.at("cpu").get<std::string>();
    m.isa = j.value("isa", "");
    m.measured = j.value("measured", "");
    m.measured_unix = j.value("measured_unix", int64_t{0});
    m.quick = j.value("quick", false);
    for (const json& c : j.at("cpu_roofs")) {
      CpuRoofs r;
      r.threads = c.at("threads").get<int>();
      r.read_gbps = c.at("read_gbps").get<double>();
      r.write_gbps = c.at("write_gbps").get<double>();
      r.write_nt_gbps = c.at("write_nt_gbps").get<double>();
      r.copy_gbps = c.value("copy_gbps", 0.0);
      r.triad_gbps = c.value("triad_gbps", 0.0);
      r.fma_f32_gflops = c.at("fma_f32_gflops").get<double>();
      r.fma_f64_gflops = c.value("fma_f64_gflops", 0.0);
      r.dot_bf16_gflops = c.value("dot_bf16_gflops", 0.0);
      r.dot_u8s8_gops = c.value("dot_u8s8_gops", 0.0);
      m.cpu_roofs.push_back(r);
    }
    for (const json& d : j.value("devices", json::array()))
      m.devices.push_back({d.at("device").get<std::string>(), d.value("name", ""), d.at("read_gbps").get<double>(),
                           d.at("write_gbps").get<double>(), d.at("fma_f32_gflops").get<double>()});
  } catch (const json::exception& e) {
    throw UserError(std::string("machine model: not a kfuse machine model (") + e.what() +
                    "); delete the file or re-measure with `kfuse-cache machine --remeasure`");
  }
  std::sort(m.cpu_roofs.begin(), m.cpu_roofs.end(), [](auto& a, auto& b) { return a.threads < b.threads; });
  return m;
}

std::string MachineModel::text() const {
  std::ostringstream os;
  char b[256];
  os << "machine: " << cpu << ", FMA " << isa << ", measured " << measured << (quick ? " (quick)" : "") << "\n";
  os << "threads    read   write  write-nt    copy   triad  (GB/s)   FMA f32   FMA f64  dot bf16  dot u8s8 (G/s)\n";
  for (const CpuRoofs& c : cpu_roofs) {
    std::snprintf(b, sizeof b, "%7d %7.1f %7.1f %9.1f %7.1f %7.1f %18.1f %9.1f %9.1f %9.1f\n", c.threads, c.read_gbps,
                  c.write_gbps, c.write_nt_gbps, c.copy_gbps, c.triad_gbps, c.fma_f32_gflops, c.fma_f64_gflops,
                  c.dot_bf16_gflops, c.dot_u8s8_gops);
    os << b;
  }
  for (const DeviceRoofs& d : devices) {
    std::snprintf(b, sizeof b, "%s (%s): copy %.1f GB/s, FMA f32 %.1f GFLOP/s\n", d.device.c_str(), d.name.c_str(),
                  d.read_gbps, d.fma_f32_gflops);
    os << b;
  }
  return os.str();
}

MachineModel measure_machine(const MachineOptions& o) {
  MachineModel m;
  m.cpu = cpu_name() + " (" + std::to_string(hw_threads()) + " threads)";
  m.isa = probe::fma_kind();
  m.quick = o.quick;
  m.measured_unix = static_cast<int64_t>(std::time(nullptr));
  char date[32];
  std::time_t t = static_cast<std::time_t>(m.measured_unix);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  m.measured = date;
  for (int th : thread_counts()) m.cpu_roofs.push_back(measure_cpu_roofs(th, o.quick));
  for (Device d : o.devices)
    if (d != Device::cpu()) m.devices.push_back(measure_device(d, o.quick));
  return m;
}

std::string machine_path() { return options().cache_dir + "/machine.json"; }

const MachineModel& machine(const MachineOptions& o) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  auto missing_device = [&](const MachineModel& m) {
    for (Device d : o.devices)
      if (d != Device::cpu() && !m.device_roofs(d)) return true;
    return false;
  };
  if (s.model && !o.remeasure && !missing_device(*s.model)) return *s.model;
  const std::string path = machine_path();
  const std::string here = cpu_name() + " (" + std::to_string(hw_threads()) + " threads)";
  std::unique_ptr<MachineModel> m;
  if (!o.remeasure && !s.model && !o.quick) {
    std::ifstream f(path);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      try {
        auto cached = std::make_unique<MachineModel>(MachineModel::from_json(ss.str()));
        if (cached->cpu == here && !cached->cpu_roofs.empty()) m = std::move(cached);
        else log("cache", "machine model in " + path + " was measured on " + cached->cpu + "; re-measuring");
      } catch (const UserError& e) { log("cache", std::string(e.what()) + "; re-measuring"); }
    }
  }
  if (!m && s.model && !o.remeasure) m = std::make_unique<MachineModel>(*s.model);
  if (!m) {
    MachineOptions cpu_only = o;
    cpu_only.devices.clear();
    m = std::make_unique<MachineModel>(measure_machine(cpu_only));
  }
  for (Device d : o.devices)
    if (d != Device::cpu() && !m->device_roofs(d)) m->devices.push_back(measure_device(d, o.quick));
  // Quick models are for tests: never written where a later process would take them as real.
  if (!m->quick && options().cache_mode == "disk") {
    std::error_code ec;
    std::filesystem::create_directories(options().cache_dir, ec);
    const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
    std::ofstream f(tmp);
    if (f << m->to_json() << "\n") {
      f.close();
      std::filesystem::rename(tmp, path, ec);
    }
    if (!f || ec) log("cache", "could not write the machine model to " + path);
  }
  s.model = std::move(m);
  return *s.model;
}

void set_machine(const MachineModel& m) {
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  s.model = std::make_unique<MachineModel>(m);
}

double Roof::memory_seconds(double read_bytes, double write_bytes) const {
  double mem = 0;
  if (read_bytes > 0 && read_gbps > 0) mem += read_bytes / (read_gbps * 1e9);
  if (write_bytes > 0 && write_gbps > 0) mem += write_bytes / (write_gbps * 1e9);
  return mem;
}

double Roof::compute_seconds(double flops) const {
  return flops > 0 && peak_gflops > 0 ? flops / (peak_gflops * 1e9) : 0;
}

double Roof::seconds(double read_bytes, double write_bytes, double flops) const {
  return std::max(memory_seconds(read_bytes, write_bytes), compute_seconds(flops));
}

double Roof::gbps(double read_bytes, double write_bytes) const {
  double t = seconds(read_bytes, write_bytes, 0);
  return t > 0 ? (read_bytes + write_bytes) / t / 1e9 : 0;
}

Roof roof_of(const CpuRoofs& c, DType dtype) {
  const double flops = dtype == DType::F64                             ? c.fma_f64_gflops
                       : dtype == DType::BF16 && c.dot_bf16_gflops > 0 ? c.dot_bf16_gflops
                       : dtype == DType::I32 && c.dot_u8s8_gops > 0    ? c.dot_u8s8_gops
                                                                       : c.fma_f32_gflops;
  return {c.read_gbps, std::max(c.write_gbps, c.write_nt_gbps), flops};
}

Roof roof_for(const MachineModel& m, Device device, DType dtype, int threads) {
  if (device != Device::cpu()) {
    const DeviceRoofs* d = m.device_roofs(device);
    return d ? Roof{d->read_gbps, d->write_gbps, d->fma_f32_gflops} : Roof{};
  }
  if (threads <= 0) threads = options().num_threads > 0 ? options().num_threads : hw_threads();
  return roof_of(m.cpu_at(threads), dtype);
}

}  // namespace kfuse
