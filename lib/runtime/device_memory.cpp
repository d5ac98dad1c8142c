// The public device-memory calls (kfuse/device.hpp): each goes to the backend that owns memory
// on the device.
#include "backend/backend.hpp"
#include "kfuse/device.hpp"

namespace kfuse {

DeviceMemoryStats device_memory_stats(Device device) { return detail::memory_backend(device)->memory_stats(); }

void empty_cache(Device device) { detail::memory_backend(device)->empty_cache(); }

void synchronize(Device device) { detail::memory_backend(device)->synchronize(); }

}  // namespace kfuse
