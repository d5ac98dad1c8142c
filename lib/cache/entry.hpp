// One cache entry and its file encoding (<key>.kfc).
//
// File layout (little-endian):
//   magic "KFUSEKC\n" | u32 format version | u32 reserved (0) | u64 body length |
//   16-byte XXH3-128 of the body | body
//   body = 4 sections, each u64 length + bytes: metadata JSON, kernel IR text, source, binary.
// Anything else (short file, bad magic, other version, checksum or key mismatch) is corrupt or
// foreign: the reader reports which, the disk cache deletes it and the kernel is recompiled.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cache/key.hpp"
#include "kfuse/cache.hpp"

namespace kfuse::detail::cache {

struct Entry {
  KernelKey key;
  KeyFields fields;  ///< fields.ir_text is the kernel IR
  // provenance
  std::string kind;                      ///< pointwise | row | column | global
  std::string pattern;                   ///< what formed the fusion group
  std::vector<std::string> ops;          ///< fused ops, in topological order
  std::vector<std::string> specialised;  ///< compile-time (specialised) dims and why
  std::vector<std::string> params;       ///< run-time params (names)
  std::string shape;                     ///< "[$0] x [10]": outer extents (run-time $params) x reduce extents
  // code
  std::string source, source_kind;
  std::vector<uint8_t> binary;
  std::string binary_kind;
  double compile_ms = 0;
  int64_t created = 0;  ///< unix seconds
  // filled by the disk cache when read back (not stored in the file)
  std::string path;
  uint64_t file_bytes = 0;
  uint64_t hits = 0;      ///< processes that loaded it (size of the .use sidecar)
  int64_t last_used = 0;  ///< unix seconds (newest of the entry and its sidecar)
};

enum class DecodeStatus { Ok, Truncated, BadMagic, ForeignVersion, Checksum, Malformed, KeyMismatch };
const char* decode_status_name(DecodeStatus s);

std::vector<uint8_t> encode_entry(const Entry& e);
/// Decodes and verifies (checksum, key recomputed from the fields). `meta_only` stops after the
/// metadata section when the checksum is not wanted (listing); `why` gets a readable reason.
DecodeStatus decode_entry(const std::vector<uint8_t>& bytes, Entry* out, bool meta_only, std::string* why);

/// The public view of an entry (kfuse::cache_entries(), `kfuse-cache list --json`).
CacheEntry to_public(const Entry& e);

}  // namespace kfuse::detail::cache
