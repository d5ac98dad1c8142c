// Profile::json() (every launch, the per-kernel summary and the machine) and chrome_trace()
// (Chrome/Perfetto trace events: one lane per device, one for compiles, one for evaluations).
#include <nlohmann/json.hpp>

#include <fstream>

#include "kfuse/error.hpp"
#include "kfuse/profile.hpp"

namespace kfuse {

using nlohmann::json;

std::string Profile::json() const {
  nlohmann::json j;
  j["evaluations"] = evaluations;
  j["eval_seconds"] = eval_seconds;
  j["region_seconds"] = region_seconds;
  j["host_overhead_seconds"] = host_overhead_seconds();
  j["threads"] = threads;
  j["cpu_thread_counts"] = cpu_thread_counts();
  j["machine"] = nlohmann::json::parse(machine.to_json());
  j["kernels"] = nlohmann::json::array();
  for (const KernelSummary& s : summary())
    j["kernels"].push_back({{"kernel", s.kernel},
                            {"kind", s.kind},
                            {"backend", s.backend},
                            {"device", s.device},
                            {"shape", s.shape},
                            {"threads", s.threads},
                            {"launches", s.launches},
                            {"seconds", s.seconds},
                            {"read_bytes", s.read_bytes},
                            {"write_bytes", s.write_bytes},
                            {"flops", s.flops},
                            {"gbps", s.gbps()},
                            {"gflops", s.gflops()},
                            {"intensity", s.intensity()},
                            {"bound_seconds", s.bound_seconds},
                            {"roof_fraction", s.roof_fraction()},
                            {"bound_by", s.bound_by}});
  j["launches"] = nlohmann::json::array();
  for (const KernelLaunch& l : launches)
    j["launches"].push_back({{"kernel", l.kernel},
                             {"backend", l.backend},
                             {"device", l.device},
                             {"shape", l.shape},
                             {"threads", l.threads},
                             {"eval", l.eval},
                             {"start_us", l.start_us},
                             {"seconds", l.seconds},
                             {"read_bytes", l.read_bytes},
                             {"write_bytes", l.write_bytes},
                             {"flops", l.flops},
                             {"bound_seconds", l.bound_seconds}});
  j["compiles"] = nlohmann::json::array();
  for (const CompileEvent& c : compiles)
    j["compiles"].push_back({{"kernel", c.kernel},
                             {"backend", c.backend},
                             {"disk_load", c.disk_load},
                             {"start_us", c.start_us},
                             {"seconds", c.seconds}});
  return j.dump(2);
}

std::string Profile::chrome_trace() const {
  nlohmann::json ev = nlohmann::json::array();
  // Lanes (tid): 1 compiles, 2 CPU kernels, 3+ one per GPU device.
  std::vector<std::string> devices;
  auto lane = [&](const std::string& dev) {
    if (dev == "cpu") return 2;
    for (size_t i = 0; i < devices.size(); ++i)
      if (devices[i] == dev) return static_cast<int>(3 + i);
    devices.push_back(dev);
    return static_cast<int>(2 + devices.size());
  };
  auto meta = [&](int tid, const std::string& name) {
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}});
  };
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "kfuse"}}}});
  meta(1, "compile / disk-cache load");
  meta(2, "kernels: cpu");
  for (const KernelLaunch& l : launches) {
    int tid = lane(l.device);
    ev.push_back({{"name", l.kernel},
                  {"cat", l.backend},
                  {"ph", "X"},
                  {"pid", 1},
                  {"tid", tid},
                  {"ts", l.start_us},
                  {"dur", l.seconds * 1e6},
                  {"args",
                   {{"shape", l.shape},
                    {"threads", l.threads},
                    {"read_bytes", l.read_bytes},
                    {"write_bytes", l.write_bytes},
                    {"flops", l.flops},
                    {"roof_fraction", l.seconds > 0 ? l.bound_seconds / l.seconds : 0.0},
                    {"eval", l.eval}}}});
  }
  for (size_t i = 0; i < devices.size(); ++i) meta(static_cast<int>(3 + i), "kernels: " + devices[i]);
  for (const CompileEvent& c : compiles)
    ev.push_back({{"name", (c.disk_load ? "load " : "compile ") + c.kernel},
                  {"cat", c.backend},
                  {"ph", "X"},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", c.start_us},
                  {"dur", c.seconds * 1e6}});
  return nlohmann::json{{"traceEvents", ev}, {"displayTimeUnit", "ns"}}.dump();
}

void Profile::write(const std::string& prefix) const {
  auto put = [&](const std::string& path, const std::string& text) {
    std::ofstream f(path);
    if (!(f << text))
      throw UserError("Profile::write: cannot write " + path + "; check that its directory exists and is writable");
  };
  put(prefix + ".txt", table());
  put(prefix + ".json", json());
  put(prefix + ".trace.json", chrome_trace());
  put(prefix + ".svg", roofline_svg());
}

}  // namespace kfuse
