// Factory functions of the backends under jit/. Each is compiled in only when its CMake option
// is on (KFUSE_HAVE_<NAME> is then defined for the library); registry.cpp calls them in order.
// A factory returns null when its backend cannot run on this machine (no AVX2, no OpenCL
// platform, no CUDA driver), after logging why on the `backend` channel.
#pragma once
#include <memory>

#include "backend/backend.hpp"

namespace kfuse::detail {

std::shared_ptr<Backend> make_reference_backend();
#ifdef KFUSE_HAVE_XBYAK
std::shared_ptr<Backend> make_xbyak_backend();
#endif
#ifdef KFUSE_HAVE_LLVM
std::shared_ptr<Backend> make_llvm_backend();
#endif
#ifdef KFUSE_HAVE_OPENCL
std::shared_ptr<Backend> make_opencl_backend();
#endif
#ifdef KFUSE_HAVE_CUDA
std::shared_ptr<Backend> make_cuda_backend();
#endif

}  // namespace kfuse::detail
