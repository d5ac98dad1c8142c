// KernelKey: the identity of one compiled kernel in the memory and disk caches.
//
// key = XXH3-128 over (cache format version, codegen version, backend name, backend target,
//                      buffer dtypes, canonical kernel print)
// Only what changes the generated code is in it. The canonical print (ir::print_kernel) names
// run-time params (outer extents and strides derived from them) but never their values, and
// spells reduce extents as constants: so changing only the batch never changes the key, and a
// different reduce extent does (shape policy, README "Kernel cache").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/kernel.hpp"

namespace kfuse::detail::cache {

/// Layout and encoding of the disk cache (<dir>/v<kFormatVersion>/...). Bump on any change of
/// the entry file format.
inline constexpr int kFormatVersion = 1;
/// Bump whenever the lowering SHARED by the backends (lib/ir passes they run, the kernel IR's
/// semantics) may change generated code for the same printed kernel: old entries then simply
/// stop matching. A change inside one backend bumps that backend's Backend::codegen_version().
/// What changed at each bump is in git log.
inline constexpr int kCodegenVersion = 32;

/// Everything hashed into a key, kept readable for the cache tool (`show`, `why-miss`).
struct KeyFields {
  int format_version = kFormatVersion;
  int codegen_version = kCodegenVersion;
  int backend_version = 0;  ///< Backend::codegen_version() of `backend`
  std::string backend;
  std::string target;
  std::string dtypes;   ///< buffer dtypes, e.g. "f32,f32" (inputs then outputs)
  std::string ir_text;  ///< ir::print_kernel
};

struct KernelKey {
  uint64_t hi = 0, lo = 0;
  std::string stem;         ///< readable name (the kernel's name), for logs and tools; not hashed
  std::string hex() const;  ///< 32 lower-case hex digits
  bool operator==(const KernelKey& o) const { return hi == o.hi && lo == o.lo; }
};

struct KernelKeyHash {
  size_t operator()(const KernelKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9E3779B97F4A7C15ull)); }
};

/// "f32,f32" from the kernel's buffers.
std::string dtype_signature(const ir::Kernel& k);
/// The same signature read back from a printed kernel's "buffers:" line (why-miss on IR files).
std::string dtype_signature_of_text(const std::string& ir_text);
/// The stem (kernel name) from a printed kernel's first line.
std::string stem_of_text(const std::string& ir_text);

KernelKey make_key(const KeyFields& f, std::string stem);
/// Parses 32 hex digits; false on anything else.
bool parse_key_hex(const std::string& s, KernelKey* out);

/// XXH3-128 of bytes as 32 hex digits (entry checksums).
std::string digest_hex(const void* data, size_t n);
/// A kernel's identity without its backend: what ties KFUSE_TUNE's entries (tune.json, one per
/// backend chain and thread count) to the cache entries of the same kernel (kfuse-cache show).
std::string ir_digest(const std::string& ir_text, const std::string& dtypes);

}  // namespace kfuse::detail::cache
