#include "cache/key.hpp"

#include <xxhash.h>

#include <cstdio>
#include <sstream>

namespace kfuse::detail::cache {

namespace {
std::string hex128(uint64_t hi, uint64_t lo) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}
void put_field(std::string& s, const std::string& v) {
  // Length-prefixed so no field boundary can be forged by another field's contents.
  s += std::to_string(v.size());
  s += ':';
  s += v;
}
}  // namespace

std::string KernelKey::hex() const { return hex128(hi, lo); }

std::string dtype_signature(const ir::Kernel& k) {
  std::string s;
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    if (i) s += ',';
    s += dtype_name(k.buffers[i].dtype);
  }
  return s;
}

std::string dtype_signature_of_text(const std::string& ir_text) {
  std::istringstream is(ir_text);
  std::string line;
  while (std::getline(is, line)) {
    auto p = line.find("buffers:");
    if (p == std::string::npos) continue;
    std::istringstream ws(line.substr(p + 8));
    std::string tok, out;
    while (ws >> tok) {
      auto c = tok.find(':');
      if (c == std::string::npos) continue;
      if (!out.empty()) out += ',';
      out += tok.substr(c + 1);
    }
    return out;
  }
  return {};
}

std::string stem_of_text(const std::string& ir_text) {
  std::istringstream is(ir_text);
  std::string w, name;
  if (is >> w >> name && w == "kernel") return name;
  return {};
}

KernelKey make_key(const KeyFields& f, std::string stem) {
  std::string s = "kfuse-kernel-key\n";
  put_field(s, std::to_string(f.format_version));
  put_field(s, std::to_string(f.codegen_version));
  put_field(s, std::to_string(f.backend_version));
  put_field(s, f.backend);
  put_field(s, f.target);
  put_field(s, f.dtypes);
  put_field(s, f.ir_text);
  XXH128_hash_t h = XXH3_128bits(s.data(), s.size());
  KernelKey k;
  k.hi = h.high64;
  k.lo = h.low64;
  k.stem = std::move(stem);
  return k;
}

bool parse_key_hex(const std::string& s, KernelKey* out) {
  if (s.size() != 32) return false;
  uint64_t v[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return false;
    v[i / 16] = (v[i / 16] << 4) | static_cast<uint64_t>(d);
  }
  out->hi = v[0];
  out->lo = v[1];
  return true;
}

std::string digest_hex(const void* data, size_t n) {
  XXH128_hash_t h = XXH3_128bits(data, n);
  return hex128(h.high64, h.low64);
}

std::string ir_digest(const std::string& ir_text, const std::string& dtypes) {
  const std::string s = ir_text + "\n" + dtypes;
  return digest_hex(s.data(), s.size());
}

}  // namespace kfuse::detail::cache
