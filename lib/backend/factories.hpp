// Factory functions of the backends under jit/. Each is compiled in only when its CMake option
// is on (KFUSE_HAVE_<NAME> is then defined for the library); registry.cpp calls them in order.
// A factory returns null when its backend cannot run on this machine (no AVX2, no OpenCL
// platform, no CUDA driver), after logging why on the `backend` channel. `opts`: the options of
// the first evaluation that needs the backend (the xbyak ISA).
#pragma once
#include <memory>

#include "backend/backend.hpp"

namespace kfuse::detail {

std::shared_ptr<Backend> make_reference_backend(const Options& opts = default_options());
#ifdef KFUSE_HAVE_XBYAK
std::shared_ptr<Backend> make_xbyak_backend(const Options& opts);
#endif
#ifdef KFUSE_HAVE_LLVM
std::shared_ptr<Backend> make_llvm_backend(const Options& opts);
#endif
#ifdef KFUSE_HAVE_OPENCL
std::shared_ptr<Backend> make_opencl_backend(const Options& opts);
#endif
#ifdef KFUSE_HAVE_CUDA
std::shared_ptr<Backend> make_cuda_backend(const Options& opts);
#endif

}  // namespace kfuse::detail
