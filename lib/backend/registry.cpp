// Explicit, ordered backend registration (DESIGN rule 9: no static self-registration; the
// reference backend is always last for its device).
#include <functional>
#include <mutex>
#include <unordered_map>

#include "backend/factories.hpp"
#include <cstring>

#include "kfuse/error.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail {

namespace {

struct Entry {
  const char* name;
  Device::Kind device;
  std::function<std::shared_ptr<Backend>(const Options&)> make;
};

// Default preference order: fastest compile and code first.
const std::vector<Entry>& entries() {
  static const std::vector<Entry> e = {
#ifdef KFUSE_HAVE_XBYAK
      {"xbyak", Device::Kind::CPU, make_xbyak_backend},
#endif
#ifdef KFUSE_HAVE_LLVM
      {"llvm", Device::Kind::CPU, make_llvm_backend},
#endif
#ifdef KFUSE_HAVE_OPENCL
      {"opencl", Device::Kind::OpenCL, make_opencl_backend},
#endif
#ifdef KFUSE_HAVE_CUDA
      {"cuda", Device::Kind::CUDA, make_cuda_backend},
#endif
      {"reference", Device::Kind::CPU, make_reference_backend},
  };
  return e;
}

// Backends are created once, on first use (creation may probe hardware or load drivers).
std::shared_ptr<Backend> instance(const Entry& e, const Options& opts) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<Backend>> made;
  static std::unordered_map<std::string, bool> tried;
  std::lock_guard<std::mutex> lk(mu);
  if (!tried[e.name]) {
    tried[e.name] = true;
    try {
      made[e.name] = e.make(opts);
    } catch (const std::exception& ex) { log("backend", std::string(e.name) + ": unavailable: " + ex.what()); }
  }
  return made[e.name];
}

}  // namespace

std::shared_ptr<Storage> Backend::allocate(DType dtype, int64_t numel) { return Storage::allocate(dtype, numel); }
DeviceMemoryStats Backend::memory_stats() {
  DeviceMemoryStats s;
  s.allocator = "host";
  return s;
}
void Backend::copy_to_device(const Storage& dst, const void* host) {
  if (dst.bytes()) std::memcpy(dst.data, host, dst.bytes());
}
void Backend::copy_to_host(const Storage& src, void* host) {
  if (src.bytes()) std::memcpy(host, src.data, src.bytes());
}

const Options& default_options() {
  static const Options o;
  return o;
}

std::shared_ptr<Backend> memory_backend(Device device) {
  // Memory has one owner per device kind, whatever the options: the CPU backends all use host
  // memory (the reference backend's), each GPU kind has one backend (built without options).
  std::shared_ptr<Backend> owner;
  for (const auto& e : entries())
    if (!owner && e.device == device.kind() &&
        (device.kind() != Device::Kind::CPU || e.name == std::string("reference")))
      owner = instance(e, default_options());
  if (!owner) {
    std::string have;
    for (const auto& n : builtin_backend_names()) have += (have.empty() ? "" : ", ") + n;
    throw BackendUnavailable("device " + device.str() +
                             " is not available: no backend for it could start (built-in "
                             "backends: " +
                             have + "; KFUSE_LOG=backend tells why a backend did not start)");
  }
  return owner;
}

std::vector<std::string> builtin_backend_names() {
  std::vector<std::string> n;
  for (const auto& e : entries()) n.push_back(e.name);
  return n;
}

std::shared_ptr<Backend> find_backend(const std::string& name, const Options& opts) {
  for (const auto& e : entries())
    if (name == e.name) return instance(e, opts);
  return nullptr;
}

std::vector<std::shared_ptr<Backend>> backends_for(Device device, const Options& opts) {
  std::vector<std::shared_ptr<Backend>> out;
  const auto& wanted = opts.backends;
  auto add = [&](const Entry& e) {
    if (e.device != device.kind()) return;
    if (auto b = instance(e, opts)) out.push_back(b);
  };
  if (!wanted.empty()) {
    for (const auto& w : wanted)
      for (const auto& e : entries())
        if (w == e.name) add(e);
  } else {
    for (const auto& e : entries()) add(e);
  }
  // The reference interpreter always closes the CPU chain, so every kernel can run.
  if (device.kind() == Device::Kind::CPU) {
    bool has_ref = false;
    for (const auto& b : out) has_ref |= b->name() == "reference";
    if (!has_ref) out.push_back(find_backend("reference", opts));
  }
  return out;
}

}  // namespace kfuse::detail
