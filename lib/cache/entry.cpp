#include "cache/entry.hpp"

#include <xxhash.h>

#include <cstring>
#include <nlohmann/json.hpp>

namespace kfuse::detail::cache {

namespace {

constexpr char kMagic[8] = {'K', 'F', 'U', 'S', 'E', 'K', 'C', '\n'};
constexpr size_t kHeader = 8 + 4 + 4 + 8 + 16;

template <typename T>
void put(std::vector<uint8_t>& b, T v) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  b.insert(b.end(), raw, raw + sizeof(T));
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
void put_section(std::vector<uint8_t>& b, const void* data, size_t n) {
  put<uint64_t>(b, n);
  const auto* p = static_cast<const uint8_t*>(data);
  b.insert(b.end(), p, p + n);
}

nlohmann::json meta_json(const Entry& e) {
  return {{"key", e.key.hex()},
          {"stem", e.key.stem},
          {"format_version", e.fields.format_version},
          {"codegen_version", e.fields.codegen_version},
          {"backend_version", e.fields.backend_version},
          {"backend", e.fields.backend},
          {"target", e.fields.target},
          {"dtypes", e.fields.dtypes},
          {"kind", e.kind},
          {"pattern", e.pattern},
          {"ops", e.ops},
          {"specialised", e.specialised},
          {"params", e.params},
          {"shape", e.shape},
          {"source_kind", e.source_kind},
          {"binary_kind", e.binary_kind},
          {"compile_ms", e.compile_ms},
          {"created", e.created}};
}

}  // namespace

const char* decode_status_name(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::Ok: return "ok";
    case DecodeStatus::Truncated: return "truncated";
    case DecodeStatus::BadMagic: return "not a kfuse cache entry";
    case DecodeStatus::ForeignVersion: return "foreign format version";
    case DecodeStatus::Checksum: return "checksum mismatch";
    case DecodeStatus::Malformed: return "malformed";
    case DecodeStatus::KeyMismatch: return "key mismatch";
  }
  return "?";
}

std::vector<uint8_t> encode_entry(const Entry& e) {
  std::vector<uint8_t> body;
  std::string meta = meta_json(e).dump();
  body.reserve(meta.size() + e.fields.ir_text.size() + e.source.size() + e.binary.size() + 64);
  put_section(body, meta.data(), meta.size());
  put_section(body, e.fields.ir_text.data(), e.fields.ir_text.size());
  put_section(body, e.source.data(), e.source.size());
  put_section(body, e.binary.data(), e.binary.size());
  // The magic is the vector's first contents: GCC 12 flags an insert of it after reserve() as
  // a stringop-overflow (a false positive of its inlined vector code).
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  out.reserve(kHeader + body.size());
  put<uint32_t>(out, static_cast<uint32_t>(kFormatVersion));
  put<uint32_t>(out, 0);
  put<uint64_t>(out, body.size());
  XXH128_hash_t h = XXH3_128bits(body.data(), body.size());
  put<uint64_t>(out, h.high64);
  put<uint64_t>(out, h.low64);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

DecodeStatus decode_entry(const std::vector<uint8_t>& b, Entry* e, bool meta_only, std::string* why) {
  auto fail = [&](DecodeStatus s, std::string msg) {
    if (why) *why = std::string(decode_status_name(s)) + (msg.empty() ? "" : ": " + msg);
    return s;
  };
  if (b.size() < 8 || std::memcmp(b.data(), kMagic, 8) != 0)
    return b.size() < 8 ? fail(DecodeStatus::Truncated, std::to_string(b.size()) + " bytes")
                        : fail(DecodeStatus::BadMagic, "");
  if (b.size() < kHeader) return fail(DecodeStatus::Truncated, "header cut at " + std::to_string(b.size()) + " bytes");
  uint32_t ver = get<uint32_t>(b.data() + 8);
  if (ver != static_cast<uint32_t>(kFormatVersion))
    return fail(DecodeStatus::ForeignVersion,
                "v" + std::to_string(ver) + ", this build reads v" + std::to_string(kFormatVersion));
  uint64_t body_len = get<uint64_t>(b.data() + 16);
  if (b.size() - kHeader < body_len)
    return fail(DecodeStatus::Truncated,
                std::to_string(b.size() - kHeader) + " of " + std::to_string(body_len) + " body bytes");
  if (b.size() - kHeader > body_len) return fail(DecodeStatus::Malformed, "trailing bytes");
  const uint8_t* body = b.data() + kHeader;
  if (!meta_only) {
    XXH128_hash_t h = XXH3_128bits(body, body_len);
    if (h.high64 != get<uint64_t>(b.data() + 24) || h.low64 != get<uint64_t>(b.data() + 32))
      return fail(DecodeStatus::Checksum, "");
  }
  // sections
  std::string sec[4];
  size_t pos = 0;
  int nsec = meta_only ? 1 : 4;
  for (int i = 0; i < nsec; ++i) {
    if (body_len - pos < 8) return fail(DecodeStatus::Malformed, "section " + std::to_string(i));
    uint64_t n = get<uint64_t>(body + pos);
    pos += 8;
    if (body_len - pos < n) return fail(DecodeStatus::Malformed, "section " + std::to_string(i) + " length");
    sec[i].assign(reinterpret_cast<const char*>(body + pos), n);
    pos += n;
  }
  if (!meta_only && pos != body_len) return fail(DecodeStatus::Malformed, "trailing section bytes");
  try {
    auto j = nlohmann::json::parse(sec[0]);
    e->fields.format_version = j.at("format_version").get<int>();
    e->fields.codegen_version = j.at("codegen_version").get<int>();
    e->fields.backend_version = j.value("backend_version", 0);  // (absent before backends had their own)
    e->fields.backend = j.at("backend").get<std::string>();
    e->fields.target = j.at("target").get<std::string>();
    e->fields.dtypes = j.at("dtypes").get<std::string>();
    e->key.stem = j.at("stem").get<std::string>();
    e->kind = j.value("kind", "");
    e->pattern = j.value("pattern", "");
    e->ops = j.value("ops", std::vector<std::string>{});
    e->specialised = j.value("specialised", std::vector<std::string>{});
    e->params = j.value("params", std::vector<std::string>{});
    e->shape = j.value("shape", "");
    e->source_kind = j.value("source_kind", "");
    e->binary_kind = j.value("binary_kind", "");
    e->compile_ms = j.value("compile_ms", 0.0);
    e->created = j.value("created", int64_t{0});
    std::string key = j.at("key").get<std::string>();
    if (!parse_key_hex(key, &e->key)) return fail(DecodeStatus::Malformed, "key field");
  } catch (const std::exception& ex) { return fail(DecodeStatus::Malformed, std::string("metadata: ") + ex.what()); }
  if (!meta_only) {
    e->fields.ir_text = std::move(sec[1]);
    e->source = std::move(sec[2]);
    e->binary.assign(sec[3].begin(), sec[3].end());
    KernelKey k = make_key(e->fields, e->key.stem);
    if (!(k == e->key)) return fail(DecodeStatus::KeyMismatch, "fields hash to " + k.hex());
  }
  return DecodeStatus::Ok;
}

CacheEntry to_public(const Entry& e) {
  CacheEntry c;
  c.key = e.key.hex();
  c.stem = e.key.stem;
  c.backend = e.fields.backend;
  c.target = e.fields.target;
  c.dtypes = e.fields.dtypes;
  c.kind = e.kind;
  c.pattern = e.pattern;
  c.ops = e.ops;
  c.specialised = e.specialised;
  c.params = e.params;
  c.shape = e.shape;
  c.source_kind = e.source_kind;
  c.binary_kind = e.binary_kind;
  c.format_version = e.fields.format_version;
  c.codegen_version = e.fields.codegen_version;
  c.backend_version = e.fields.backend_version;
  c.size_bytes = e.file_bytes;
  c.binary_bytes = e.binary.size();
  c.hits = e.hits;
  c.compile_ms = e.compile_ms;
  c.created = e.created;
  c.last_used = e.last_used;
  c.path = e.path;
  return c;
}

}  // namespace kfuse::detail::cache
