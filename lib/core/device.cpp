#include "kfuse/device.hpp"

namespace kfuse {

std::string Device::str() const {
  switch (kind_) {
    case Kind::CPU: return "cpu";
    case Kind::CUDA: return "cuda:" + std::to_string(index_);
    case Kind::OpenCL: return "opencl:" + std::to_string(index_);
  }
  return "?";
}

}  // namespace kfuse
