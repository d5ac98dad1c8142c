// kfuse_compare --device opencl|cuda (bench/device_bench.cpp): the standard workloads on a GPU
// device with launches, wall time, GB/s against a copy ceiling, and PyTorch's times beside them.
#pragma once
#include <string>

struct DeviceBenchArgs {
  std::string device;      ///< "opencl" | "cuda"
  bool quick = false;      ///< small sizes (PoCL: under a minute)
  std::string json;        ///< write the rows here
  std::string torch_json;  ///< bench/torch_gpu.py output to show beside
  std::string filter;      ///< run workloads whose name contains any of these '|'-separated parts
};

/// True when argv holds --device (then `a` holds the device mode's options).
bool parse_device_args(int argc, char** argv, DeviceBenchArgs& a);
/// Runs the device mode; the process exit code.
int device_compare(const DeviceBenchArgs& a);
