// Peer implementations of the workloads. Each peer lives in its own translation unit, compiled
// only when the library was found (KFUSE_BENCH_HAVE_TORCH / _DNNL / _EIGEN / _OPENBLAS). A function returns
// no Impl when the peer has no implementation of that workload.
#pragma once
#include <string>
#include <vector>

#include "../workload.hpp"

namespace kbench {

std::vector<Impl> torch_impls(const Workload& w, int threads);  // "torch natural", "torch out="
std::string torch_version();

std::vector<Impl> dnnl_impls(const Workload& w, int threads);  // "onednn"
std::string dnnl_version_string();

std::vector<Impl> openblas_impls(const Workload& w, int threads);  // "openblas sgemm" (GEMM only)
std::string openblas_version();

std::vector<Impl> eigen_impls(const Workload& w, int threads);  // "eigen"
std::string eigen_version();

}  // namespace kbench
