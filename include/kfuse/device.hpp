/** \file device.hpp
 * Where a tensor's data lives and where its kernels run.
 */
#pragma once
#include <cstdint>
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

/// Device memory of one device as its backend manages it. GPU backends keep freed blocks and
/// reuse them (see README "Device memory"), so a steady-state evaluation loop makes no driver
/// allocation, free or host wait; these counters show it.
struct DeviceMemoryStats {
  std::string allocator;       ///< e.g. "cuMemAllocAsync pool", "block cache", "host"
  uint64_t driver_allocs = 0;  ///< allocations the driver made (clCreateBuffer, cuMemAlloc)
  uint64_t driver_frees = 0;   ///< blocks given back to the driver
  uint64_t reuses = 0;         ///< requests served from freed blocks (cache or stream-ordered pool)
  uint64_t host_syncs = 0;     ///< times the host waited for the device (reads, synchronize())
  uint64_t bytes_in_use = 0;   ///< held by live tensors and kernel scratch
  /// Freed, kept for reuse. With the driver's stream-ordered pool this is what the pool holds
  /// beyond live allocations; the pool reserves in chunks (32 MiB on an H100), so the free rest
  /// of a chunk that still holds a live tensor counts here and stays through empty_cache().
  uint64_t bytes_cached = 0;
};

/// The counters of `device` since the process started ("host" and zeros for the CPU).
DeviceMemoryStats device_memory_stats(Device device);
/// Gives the memory cached for reuse on `device` back to the driver (after its pending work):
/// every cached block, or with the driver's pool every chunk with no live allocation in it.
void empty_cache(Device device);
/// Waits until every kernel and copy enqueued on `device` so far has finished. Reads of values
/// (to_vector, item, printing, to(Device::cpu())) wait by themselves; this is for timing and
/// for handing device memory to other libraries.
void synchronize(Device device);

}  // namespace kfuse
