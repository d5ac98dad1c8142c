/** \file device.hpp
 * Where a tensor's data lives and where its kernels run.
 */
#pragma once
#include <string>

namespace kfuse {

class Device {
 public:
  enum class Kind : uint8_t { CPU, CUDA, OpenCL };
  constexpr Device() = default;
  static constexpr Device cpu() { return Device(Kind::CPU, 0); }
  static constexpr Device cuda(int index = 0) { return Device(Kind::CUDA, index); }
  static constexpr Device opencl(int index = 0) { return Device(Kind::OpenCL, index); }
  Kind kind() const { return kind_; }
  int index() const { return index_; }
  bool operator==(const Device& o) const { return kind_ == o.kind_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;

 private:
  constexpr Device(Kind k, int i) : kind_(k), index_(i) {}
  Kind kind_ = Kind::CPU;
  int index_ = 0;
};

}  // namespace kfuse
