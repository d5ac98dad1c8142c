// kfuse-cache: the commands. Each command is one function reading a DiskCache; output is plain
// aligned text or, with --json, one JSON document (stable field names, see docs/kernel-cache.md).
#include "cache/cache_tool.hpp"

#include <elf.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <map>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "backend/backend.hpp"
#include "cache/disk_cache.hpp"
#include "kfuse/options.hpp"
#include "kfuse/profile.hpp"

namespace kfuse::detail::cache {

using nlohmann::json;

std::string human_bytes(uint64_t n) {
  char b[32];
  if (n < 1024) std::snprintf(b, sizeof b, "%llu B", static_cast<unsigned long long>(n));
  else if (n < (1u << 20)) std::snprintf(b, sizeof b, "%.1f KiB", n / 1024.0);
  else if (n < (1u << 30)) std::snprintf(b, sizeof b, "%.1f MiB", n / 1048576.0);
  else std::snprintf(b, sizeof b, "%.1f GiB", n / 1073741824.0);
  return b;
}

std::string human_age(int64_t s) {
  if (s < 0) s = 0;
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  if (s < 172800) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

namespace {

bool parse_scaled(const std::string& s, const std::string& units, const std::vector<uint64_t>& mult, uint64_t* out) {
  if (s.empty()) return false;
  size_t i = 0;
  uint64_t v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + static_cast<uint64_t>(s[i++] - '0');
  }
  if (i == 0) return false;
  std::string rest = s.substr(i);
  if (!rest.empty() && (rest.back() == 'B' || rest.back() == 'b') && units.find('K') != std::string::npos)
    rest.pop_back();
  if (!rest.empty() && rest.back() == 'i') rest.pop_back();
  if (rest.empty()) {
    *out = v * mult[0];
    return true;
  }
  if (rest.size() != 1) return false;
  auto p = units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(rest[0]))));
  if (p == std::string::npos) return false;
  *out = v * mult[p];
  return true;
}

}  // namespace

bool parse_bytes(const std::string& s, uint64_t* out) {
  return parse_scaled(s, " KMGT", {1, 1ull << 10, 1ull << 20, 1ull << 30, 1ull << 40}, out);
}

bool parse_duration(const std::string& s, int64_t* seconds) {
  uint64_t v;
  if (!parse_scaled(s, "SMHDW", {1, 60, 3600, 86400, 604800}, &v)) return false;
  *seconds = static_cast<int64_t>(v);
  return true;
}

namespace {

int64_t now_s() { return static_cast<int64_t>(std::time(nullptr)); }

json entry_json(const Entry& e) {
  CacheEntry c = to_public(e);
  return {{"key", c.key},
          {"stem", c.stem},
          {"backend", c.backend},
          {"target", c.target},
          {"dtypes", c.dtypes},
          {"kind", c.kind},
          {"pattern", c.pattern},
          {"ops", c.ops},
          {"shape", c.shape},
          {"specialised", c.specialised},
          {"params", c.params},
          {"source_kind", c.source_kind},
          {"binary_kind", c.binary_kind},
          {"format_version", c.format_version},
          {"codegen_version", c.codegen_version},
          {"backend_version", c.backend_version},
          {"size_bytes", c.size_bytes},
          {"hits", c.hits},
          {"compile_ms", c.compile_ms},
          {"created", c.created},
          {"last_used", c.last_used},
          {"age_s", now_s() - c.created},
          {"path", c.path}};
}

std::string pad(std::string s, size_t w) {
  if (s.size() > w) s = s.substr(0, w - 1) + "~";
  return s + std::string(w - s.size() + 1, ' ');
}

std::string ms_str(double ms) {
  char b[32];
  std::snprintf(b, sizeof b, ms < 10 ? "%.2fms" : "%.0fms", ms);
  return b;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// Finds one entry by full key, key prefix (>= 4 hex digits) or exact stem.
bool find_entry(const DiskCache& dc, const std::string& what, Entry* out, std::ostream& err) {
  std::vector<Entry> hits;
  for (auto& e : dc.list()) {
    std::string k = e.key.hex();
    if ((what.size() >= 4 && k.compare(0, what.size(), what) == 0) || e.key.stem == what) hits.push_back(std::move(e));
  }
  if (hits.empty()) {
    err << "kfuse-cache: no entry matches '" << what << "' in " << dc.root() << "\n";
    return false;
  }
  if (hits.size() > 1) {
    err << "kfuse-cache: '" << what << "' is ambiguous (" << hits.size() << " entries):\n";
    for (const auto& e : hits) err << "  " << e.key.hex() << "  " << e.key.stem << "  " << e.fields.backend << "\n";
    return false;
  }
  std::string why;
  if (dc.read_file(hits[0].path, out, &why) != DecodeStatus::Ok) {
    err << "kfuse-cache: entry " << hits[0].path << " is bad: " << why << " (run `kfuse-cache verify --remove`)\n";
    return false;
  }
  return true;
}

// ---- show: code listing ----

// The .text section of an ELF64 relocatable or shared object; false if it is not one.
bool elf_text(const std::vector<uint8_t>& b, size_t* off, size_t* size) {
  if (b.size() < sizeof(Elf64_Ehdr) || std::memcmp(b.data(), ELFMAG, SELFMAG) != 0 || b[EI_CLASS] != ELFCLASS64)
    return false;
  Elf64_Ehdr eh;
  std::memcpy(&eh, b.data(), sizeof eh);
  if (eh.e_shoff == 0 || eh.e_shstrndx >= eh.e_shnum ||
      eh.e_shoff + uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr) > b.size())
    return false;
  auto sh = [&](size_t i) {
    Elf64_Shdr s;
    std::memcpy(&s, b.data() + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof s);
    return s;
  };
  Elf64_Shdr strs = sh(eh.e_shstrndx);
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr s = sh(i);
    if (strs.sh_offset + s.sh_name + 6 > b.size()) continue;
    if (std::strncmp(reinterpret_cast<const char*>(b.data() + strs.sh_offset + s.sh_name), ".text", 5) != 0) continue;
    if (s.sh_type != SHT_PROGBITS || s.sh_offset + s.sh_size > b.size()) continue;
    *off = s.sh_offset;
    *size = s.sh_size;
    return true;
  }
  return false;
}

std::string hex_dump(const uint8_t* p, size_t n) {
  std::ostringstream os;
  for (size_t i = 0; i < n; i += 16) {
    os << "  " << std::hex << std::setw(6) << std::setfill('0') << i << " ";
    for (size_t j = i; j < std::min(n, i + 16); ++j) os << " " << std::setw(2) << static_cast<int>(p[j]);
    os << "\n";
  }
  return os.str();
}

std::string code_listing(const Entry& e, const ToolHooks& hooks) {
  const auto& b = e.binary;
  if (b.empty()) return "  (no binary: the " + e.fields.backend + " backend re-creates this kernel from its IR)\n";
  if (e.binary_kind == "ptx" || e.binary_kind == "spirv-text" || e.binary_kind == "opencl")
    return std::string(b.begin(), b.end()) + (b.back() == '\n' ? "" : "\n");
  size_t off = 0, size = b.size();
  bool x86 = e.binary_kind == "x86-raw";
  std::string what = "raw x86-64 code";
  // Only the backend that wrote the entry knows its framing (xbyak: a header, the code, then its
  // RIP-relative constants): ask it for the code part. A backend not built in or not usable here
  // leaves the whole binary to be shown.
  if (x86) {
    size_t o = 0, n = 0;
    std::string w;
    auto be = find_backend(e.fields.backend, options());
    if (be && be->code_range(b, &o, &n, &w)) {
      off = o;
      size = n;
      what = w;
    }
  }
  if (!x86 && elf_text(b, &off, &size)) {
    x86 = true;
    what = ".text of the " + e.binary_kind + " (" + std::to_string(size) + " bytes)";
  }
  if (!x86)
    return "  " + e.binary_kind + ", " + std::to_string(b.size()) + " bytes (not x86 code):\n" +
           hex_dump(b.data(), b.size());
  std::string text;
  if (hooks.disassemble_x86 && hooks.disassemble_x86(b.data() + off, size, 0, &text)) return "  " + what + ":\n" + text;
  return "  " + what + ", hex dump (" +
         (hooks.disassemble_x86 ? "the disassembler failed" : hooks.no_disassembler_reason) + "):\n" +
         hex_dump(b.data() + off, size);
}

// ---- why-miss ----

struct FieldDiff {
  std::string field, entry, now;
};

// Line-level difference of two IR texts: count and the first differing pair.
size_t ir_diff(const std::string& a, const std::string& b, std::string* first) {
  std::istringstream ia(a), ib(b);
  std::string la, lb;
  size_t n = 0;
  for (;;) {
    bool ga = static_cast<bool>(std::getline(ia, la)), gb = static_cast<bool>(std::getline(ib, lb));
    if (!ga && !gb) break;
    if (!ga) la = "<end>";
    if (!gb) lb = "<end>";
    if (la != lb) {
      if (n++ == 0 && first) *first = "entry: " + la + "\n      now:   " + lb;
    }
  }
  return n;
}

std::vector<FieldDiff> diff_fields(const KeyFields& entry, const KeyFields& now, std::string* ir_first,
                                   size_t* ir_lines) {
  std::vector<FieldDiff> d;
  auto cmp = [&](const char* f, const std::string& a, const std::string& b) {
    if (a != b) d.push_back({f, a, b});
  };
  cmp("format_version", std::to_string(entry.format_version), std::to_string(now.format_version));
  cmp("codegen_version", std::to_string(entry.codegen_version), std::to_string(now.codegen_version));
  cmp("backend_version", std::to_string(entry.backend_version), std::to_string(now.backend_version));
  cmp("backend", entry.backend, now.backend);
  cmp("target", entry.target, now.target);
  cmp("dtypes", entry.dtypes, now.dtypes);
  *ir_lines = ir_diff(entry.ir_text, now.ir_text, ir_first);
  if (*ir_lines) d.push_back({"kernel_ir", std::to_string(*ir_lines) + " line(s) differ", ""});
  return d;
}

std::string current_target(const std::string& backend) {
  try {
    if (auto b = find_backend(backend, options())) return b->target();
  } catch (...) {}
  return {};
}
int current_backend_version(const std::string& backend) {
  try {
    if (auto b = find_backend(backend, options())) return b->codegen_version();
  } catch (...) {}
  return 0;
}

}  // namespace

namespace {

struct Ctx {
  std::string dir;
  bool json = false;
  std::ostream& out;
  std::ostream& err;
  const ToolHooks& hooks;
  DiskCache open() const { return DiskCache(dir, options().cache_max_bytes, false); }
};

// The machine model kept beside the kernel cache (kfuse::machine()): printed, measured when
// missing or measured on another CPU, re-measured on request.
int cmd_machine(Ctx& c, bool remeasure, const std::vector<std::string>& devices) {
  MachineOptions mo;
  mo.remeasure = remeasure;
  for (const std::string& d : devices) {
    auto colon = d.find(':');
    const std::string kind = d.substr(0, colon);
    const int index = colon == std::string::npos ? 0 : std::atoi(d.c_str() + colon + 1);
    if (kind == "opencl") mo.devices.push_back(Device::opencl(index));
    else if (kind == "cuda") mo.devices.push_back(Device::cuda(index));
    else {
      c.err << "kfuse-cache machine: --device " << d << " is not opencl[:N] or cuda[:N]\n";
      return 2;
    }
  }
  if (options().cache_dir != c.dir) {  // --dir: the model lives beside that cache
    Options o = options();
    o.cache_dir = c.dir;
    set_options(o);
  }
  const MachineModel& m = machine(mo);
  if (c.json) c.out << m.to_json() << "\n";
  else c.out << m.text() << "file: " << machine_path() << "\n";
  return 0;
}

// One tune.json entry as "winner 12.3 us; other 15.0 us (1.22x); ...".
std::string tuned_text(const json& e) {
  const std::string winner = e.value("winner", "?");
  const double w = e.contains("seconds") ? e["seconds"].value(winner, 0.0) : 0.0;
  char b[160];
  std::snprintf(b, sizeof b, "%s %.1f us", winner.c_str(), w * 1e6);
  std::string s = b;
  if (e.contains("seconds"))
    for (const auto& [form, t] : e["seconds"].items())
      if (form != winner) {
        std::snprintf(b, sizeof b, "; %s %.1f us (%.2fx)", form.c_str(), t.get<double>() * 1e6,
                      w > 0 ? t.get<double>() / w : 0.0);
        s += b;
      }
  return s;
}

// <dir>/tune.json as an object; false (with the complaint) when it is not a tuning table.
bool read_tune_table(Ctx& c, json* j) {
  std::ifstream f(c.dir + "/tune.json");
  *j = json::object();
  if (f) *j = json::parse(f, nullptr, false);
  if (j->is_discarded() || !j->is_object()) {
    c.err << "kfuse-cache: " << c.dir << "/tune.json is not a tuning table\n";
    return false;
  }
  return true;
}

// KFUSE_TUNE's choices (<dir>/tune.json, lib/runtime/tune.cpp): which form (backend, variant,
// threads) won each kernel and by how much.
int cmd_tuned(Ctx& c) {
  json j;
  if (!read_tune_table(c, &j)) return 1;
  if (c.json) {
    c.out << j.dump(2) << "\n";
    return 0;
  }
  for (const auto& [key, e] : j.items())
    c.out << key.substr(0, 12) << " " << e.value("kernel", "?") << ": " << tuned_text(e) << "\n";
  c.out << j.size() << " tuned kernel" << (j.size() == 1 ? "" : "s") << " in " << c.dir << "/tune.json\n";
  return 0;
}

int cmd_path(Ctx& c) {
  DiskCache dc = c.open();
  if (c.json) {
    c.out << json{{"dir", dc.dir()}, {"root", dc.root()}, {"exists", dc.readable()}, {"note", dc.note()}}.dump(2)
          << "\n";
  } else {
    c.out << dc.dir() << "\n";
  }
  return 0;
}

int cmd_list(Ctx& c, const std::string& sort, const std::string& filter, bool reverse) {
  DiskCache dc = c.open();
  std::vector<std::string> problems;
  std::vector<Entry> es = dc.list(&problems);
  if (!filter.empty()) {
    std::vector<Entry> keep;
    for (auto& e : es) {
      std::string hay = e.key.hex() + " " + e.key.stem + " " + e.fields.backend + " " + e.fields.target + " " +
                        e.pattern + " " + join(e.ops, " ");
      if (hay.find(filter) != std::string::npos) keep.push_back(std::move(e));
    }
    es.swap(keep);
  }
  auto key = [&](const Entry& a, const Entry& b) {
    if (sort == "size") return a.file_bytes > b.file_bytes;
    if (sort == "hits") return a.hits > b.hits;
    if (sort == "compile") return a.compile_ms > b.compile_ms;
    if (sort == "age") return a.created > b.created;       // newest first
    if (sort == "used") return a.last_used > b.last_used;  // most recently used first
    if (sort == "backend") return std::tie(a.fields.backend, a.key.stem) < std::tie(b.fields.backend, b.key.stem);
    if (sort == "key") return a.key.hex() < b.key.hex();
    return std::tie(a.key.stem, a.fields.backend) < std::tie(b.key.stem, b.fields.backend);  // stem
  };
  std::stable_sort(es.begin(), es.end(), key);
  if (reverse) std::reverse(es.begin(), es.end());
  if (c.json) {
    json j = json::array();
    for (const auto& e : es) j.push_back(entry_json(e));
    c.out << json{{"dir", dc.dir()}, {"entries", j}, {"problems", problems}}.dump(2) << "\n";
    return 0;
  }
  uint64_t total = 0;
  c.out << pad("KEY", 12) << pad("STEM", 28) << pad("BACKEND", 9) << pad("TARGET", 22) << pad("SHAPE", 16)
        << pad("SIZE", 9) << pad("HITS", 5) << pad("COMPILE", 8) << "AGE\n";
  int64_t now = now_s();
  for (const auto& e : es) {
    total += e.file_bytes;
    c.out << pad(e.key.hex().substr(0, 12), 12) << pad(e.key.stem, 28) << pad(e.fields.backend, 9)
          << pad(e.fields.target, 22) << pad(e.shape, 16) << pad(human_bytes(e.file_bytes), 9)
          << pad(std::to_string(e.hits), 5) << pad(ms_str(e.compile_ms), 8) << human_age(now - e.created) << "\n";
  }
  c.out << es.size() << (es.size() == 1 ? " entry, " : " entries, ") << human_bytes(total) << " in " << dc.root()
        << "\n";
  for (const auto& p : problems) c.out << "bad entry: " << p << " (run `kfuse-cache verify --remove`)\n";
  return 0;
}

int cmd_show(Ctx& c, const std::string& what, bool no_code) {
  DiskCache dc = c.open();
  Entry e;
  if (!find_entry(dc, what, &e, c.err)) return 1;
  if (c.json) {
    json j = entry_json(e);
    j["kernel_ir"] = e.fields.ir_text;
    j["source"] = e.source;
    j["binary_bytes"] = e.binary.size();
    if (!no_code) j["code"] = code_listing(e, c.hooks);
    c.out << j.dump(2) << "\n";
    return 0;
  }
  auto& o = c.out;
  int64_t now = now_s();
  o << "key:          " << e.key.hex() << "\n"
    << "stem:         " << e.key.stem << "\n"
    << "backend:      " << e.fields.backend << "\n"
    << "target:       " << e.fields.target << "\n"
    << "dtypes:       " << e.fields.dtypes << "\n"
    << "versions:     format " << e.fields.format_version << ", codegen " << e.fields.codegen_version << ", "
    << e.fields.backend << " " << e.fields.backend_version << "\n"
    << "kind:         " << e.kind << "\n"
    << "shape:        " << e.shape << "  (outer extents $n are run-time params; reduce extents are specialised)\n"
    << "params:       " << join(e.params, ", ") << "\n"
    << "specialised:  " << (e.specialised.empty() ? "(none)" : join(e.specialised, "; ")) << "\n"
    << "pattern:      " << e.pattern << "\n"
    << "ops:          " << join(e.ops, " ") << "\n"
    << "compile:      " << ms_str(e.compile_ms) << "\n"
    << "created:      " << human_age(now - e.created) << " ago, last used " << human_age(now - e.last_used)
    << " ago, hits " << e.hits << "\n"
    << "file:         " << e.path << " (" << human_bytes(e.file_bytes) << ")\n";
  // KFUSE_TUNE's measurements of the same kernel (one per backend chain and thread count).
  json tj;
  const std::string ir = ir_digest(e.fields.ir_text, e.fields.dtypes);
  if (std::filesystem::exists(c.dir + "/tune.json") && read_tune_table(c, &tj))
    for (const auto& [key, te] : tj.items())
      if (te.is_object() && te.value("ir", "") == ir) o << "tuned:        " << tuned_text(te) << "\n";
  o << "\n--- kernel IR ---\n" << e.fields.ir_text;
  if (!no_code) {
    o << "\n--- source (" << (e.source_kind.empty() ? "none" : e.source_kind) << ") ---\n" << e.source;
    if (!e.source.empty() && e.source.back() != '\n') o << "\n";
    o << "\n--- code (" << (e.binary_kind.empty() ? "none" : e.binary_kind) << ", " << e.binary.size()
      << " bytes) ---\n"
      << code_listing(e, c.hooks);
  }
  return 0;
}

int cmd_stats(Ctx& c) {
  DiskCache dc = c.open();
  std::vector<std::string> problems;
  auto es = dc.list(&problems);
  uint64_t bytes = 0, hits = 0;
  double compile = 0, saved = 0;
  int64_t oldest = 0, newest = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_backend;
  for (const auto& e : es) {
    bytes += e.file_bytes;
    hits += e.hits;
    compile += e.compile_ms;
    saved += e.compile_ms * static_cast<double>(e.hits);
    oldest = oldest ? std::min(oldest, e.created) : e.created;
    newest = std::max(newest, e.created);
    auto& b = by_backend[e.fields.backend];
    ++b.first;
    b.second += e.file_bytes;
  }
  std::string trust = dc.readable() ? "ok (private to uid " + std::to_string(::geteuid()) + ")" : dc.note();
  if (c.json) {
    json jb = json::object();
    for (const auto& [k, v] : by_backend) jb[k] = {{"entries", v.first}, {"bytes", v.second}};
    c.out << json{{"dir", dc.dir()},
                  {"root", dc.root()},
                  {"format_version", kFormatVersion},
                  {"codegen_version", kCodegenVersion},
                  {"entries", es.size()},
                  {"bytes", bytes},
                  {"max_bytes", options().cache_max_bytes},
                  {"hits", hits},
                  {"compile_ms_total", compile},
                  {"compile_ms_saved", saved},
                  {"bad_entries", problems.size()},
                  {"by_backend", jb},
                  {"trust", trust}}
                 .dump(2)
          << "\n";
    return 0;
  }
  int64_t now = now_s();
  c.out << "directory:    " << dc.root() << "\n"
        << "trust:        " << trust << "\n"
        << "versions:     format " << kFormatVersion << ", codegen " << kCodegenVersion << "\n"
        << "entries:      " << es.size() << " (" << human_bytes(bytes) << " of "
        << human_bytes(options().cache_max_bytes) << " max)\n";
  for (const auto& [k, v] : by_backend)
    c.out << "  " << pad(k, 12) << v.first << " entries, " << human_bytes(v.second) << "\n";
  c.out << "disk hits:    " << hits << " (compile time saved " << ms_str(saved) << ", total compile " << ms_str(compile)
        << ")\n";
  if (!es.empty())
    c.out << "ages:         oldest " << human_age(now - oldest) << ", newest " << human_age(now - newest) << "\n";
  if (!problems.empty()) c.out << "bad entries:  " << problems.size() << " (run `kfuse-cache verify`)\n";
  return 0;
}

int cmd_why_miss(Ctx& c, const std::string& key_arg, const std::string& ir_file, const std::string& backend_arg,
                 const std::string& target_arg) {
  DiskCache dc = c.open();
  std::vector<KeyFields> wanted;  // what this build would hash, one per backend
  std::string stem;
  if (!ir_file.empty()) {
    std::ifstream f(ir_file);
    if (!f) {
      c.err << "kfuse-cache: cannot read " << ir_file << "\n";
      return 1;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    std::string text = ss.str();
    stem = stem_of_text(text);
    if (stem.empty()) {
      c.err << "kfuse-cache: " << ir_file << " does not start with 'kernel <name>': not a printed kernel\n";
      return 1;
    }
    std::vector<std::string> backends =
        backend_arg.empty() ? builtin_backend_names() : std::vector<std::string>{backend_arg};
    for (const auto& b : backends) {
      KeyFields k;
      k.backend = b;
      k.target = target_arg.empty() ? current_target(b) : target_arg;
      if (k.target.empty()) continue;  // not available on this machine
      k.backend_version = current_backend_version(b);
      k.dtypes = dtype_signature_of_text(text);
      k.ir_text = text;
      wanted.push_back(k);
    }
    if (wanted.empty()) {
      c.err << "kfuse-cache: no backend available to compute keys (use --backend and --target)\n";
      return 1;
    }
  } else {
    Entry e;
    if (!find_entry(dc, key_arg, &e, c.err)) {
      c.err << "  (a key alone identifies nothing else: pass the kernel's IR with --ir FILE, e.g. from KFUSE_DUMP)\n";
      return 1;
    }
    stem = e.key.stem;
    KeyFields k = e.fields;
    k.format_version = kFormatVersion;
    k.codegen_version = kCodegenVersion;
    if (!backend_arg.empty()) k.backend = backend_arg;
    k.target = target_arg.empty() ? current_target(k.backend) : target_arg;
    k.backend_version = current_backend_version(k.backend);
    if (k.target.empty()) k.target = "(backend " + k.backend + " unavailable in this build)";
    wanted.push_back(k);
  }
  // Candidates: every entry, read fully (IR text is needed), same stem first.
  std::vector<Entry> all;
  for (const auto& m : dc.list()) {
    Entry e;
    if (dc.read_file(m.path, &e, nullptr) == DecodeStatus::Ok) all.push_back(std::move(e));
  }
  json jr = json::array();
  bool any_hit = false;
  for (const KeyFields& w : wanted) {
    KernelKey k = make_key(w, stem);
    json jw = {
        {"backend", w.backend}, {"target", w.target}, {"key", k.hex()}, {"hit", false}, {"closest", json::array()}};
    if (!c.json) c.out << stem << " on " << w.backend << " (" << w.target << "): key " << k.hex() << "\n";
    bool hit = std::any_of(all.begin(), all.end(), [&](const Entry& e) { return e.key == k; });
    if (hit) {
      any_hit = true;
      jw["hit"] = true;
      if (!c.json) c.out << "  HIT: this entry is in the cache; it would be loaded, not compiled\n";
      jr.push_back(jw);
      continue;
    }
    struct Scored {
      int score;
      size_t ir_lines;
      std::string first;
      std::vector<FieldDiff> d;
      const Entry* e;
    };
    std::vector<Scored> sc;
    for (const auto& e : all) {
      Scored s{0, 0, {}, {}, &e};
      s.d = diff_fields(e.fields, w, &s.first, &s.ir_lines);
      s.score = static_cast<int>(s.d.size()) * 1000 + static_cast<int>(std::min<size_t>(s.ir_lines, 999)) +
                (e.key.stem == stem ? 0 : 500);
      sc.push_back(std::move(s));
    }
    std::sort(sc.begin(), sc.end(), [](const Scored& a, const Scored& b) { return a.score < b.score; });
    if (sc.size() > 3) sc.resize(3);
    if (!c.json)
      c.out << "  MISS: no entry has this key." << (sc.empty() ? " The cache is empty.\n" : " Closest entries:\n");
    for (const auto& s : sc) {
      json jd = json::array();
      if (!c.json) c.out << "  " << s.e->key.hex() << "  " << s.e->key.stem << "  " << s.e->fields.backend << "\n";
      for (const auto& d : s.d) {
        jd.push_back({{"field", d.field}, {"entry", d.entry}, {"now", d.now}});
        if (c.json) continue;
        if (d.field == "kernel_ir")
          c.out << "    differs: kernel IR, " << d.entry << "; first:\n      " << s.first << "\n";
        else c.out << "    differs: " << d.field << ": entry '" << d.entry << "', now '" << d.now << "'\n";
      }
      jw["closest"].push_back({{"key", s.e->key.hex()}, {"stem", s.e->key.stem}, {"differs", jd}});
    }
    jr.push_back(jw);
  }
  if (c.json) c.out << json{{"dir", dc.dir()}, {"stem", stem}, {"any_hit", any_hit}, {"results", jr}}.dump(2) << "\n";
  return 0;
}

int cmd_verify(Ctx& c, bool remove) {
  DiskCache dc = c.open();
  auto r = dc.verify(remove);
  bool left = std::any_of(r.problems.begin(), r.problems.end(), [](const DiskCache::Problem& p) { return !p.removed; });
  if (c.json) {
    json jp = json::array();
    for (const auto& p : r.problems) jp.push_back({{"path", p.path}, {"problem", p.what}, {"removed", p.removed}});
    c.out << json{{"dir", dc.dir()}, {"checked", r.checked}, {"ok", r.ok}, {"problems", jp}}.dump(2) << "\n";
  } else {
    for (const auto& p : r.problems) c.out << (p.removed ? "removed " : "BAD ") << p.path << ": " << p.what << "\n";
    c.out << "checked " << r.checked << " entries: " << r.ok << " ok, " << r.problems.size() << " problem(s)"
          << (r.problems.empty() ? ""
              : remove           ? ""
                                 : " (run with --remove to delete them)")
          << "\n";
  }
  return left ? 1 : 0;
}

int cmd_prune(Ctx& c, const std::string& max_bytes, const std::string& older) {
  uint64_t mb = UINT64_MAX;
  int64_t age = -1;
  if (max_bytes.empty() && older.empty()) {
    c.err << "kfuse-cache prune: give --max-bytes N and/or --older-than D\n";
    return 2;
  }
  if (!max_bytes.empty() && !parse_bytes(max_bytes, &mb)) {
    c.err << "kfuse-cache prune: bad --max-bytes '" << max_bytes << "' (e.g. 1048576, 512K, 64M, 1G)\n";
    return 2;
  }
  if (!older.empty() && !parse_duration(older, &age)) {
    c.err << "kfuse-cache prune: bad --older-than '" << older << "' (e.g. 3600, 30m, 12h, 7d)\n";
    return 2;
  }
  DiskCache dc = c.open();
  auto r = dc.prune(mb, age);
  if (c.json)
    c.out << json{{"removed", r.removed},
                  {"removed_bytes", r.removed_bytes},
                  {"kept", r.kept},
                  {"kept_bytes", r.kept_bytes}}
                 .dump(2)
          << "\n";
  else
    c.out << "removed " << r.removed << " entries (" << human_bytes(r.removed_bytes) << "), kept " << r.kept << " ("
          << human_bytes(r.kept_bytes) << ")\n";
  return 0;
}

int cmd_clear(Ctx& c) {
  DiskCache dc = c.open();
  uint64_t n = dc.clear();
  if (c.json) c.out << json{{"removed", n}}.dump(2) << "\n";
  else c.out << "removed " << n << " entries from " << dc.root() << "\n";
  return 0;
}

}  // namespace

int run_cache_tool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, const ToolHooks& hooks) {
  CLI::App app{"kfuse-cache: inspect and maintain the kfuse kernel cache (docs/kernel-cache.md)", "kfuse-cache"};
  app.require_subcommand(1);
  std::string dir = options().cache_dir;
  app.add_option("--dir", dir, "cache directory (default: KFUSE_CACHE_DIR, $XDG_CACHE_HOME/kfuse or ~/.cache/kfuse)");
  bool json_out = false;
  auto add_json = [&](CLI::App* s) { s->add_flag("--json", json_out, "print JSON"); };

  auto* path = app.add_subcommand("path", "print the cache directory");
  add_json(path);
  std::string sort = "stem", filter;
  bool reverse = false;
  auto* list = app.add_subcommand("list", "list entries: stem, backend, target, shape, size, hits, compile time, age");
  list->add_option("--sort", sort, "stem|key|backend|size|hits|compile|age|used")
      ->check(CLI::IsMember({"stem", "key", "backend", "size", "hits", "compile", "age", "used"}));
  list->add_option("--filter", filter,
                   "keep entries whose key, stem, backend, target, pattern or ops contain this text");
  list->add_flag("--reverse", reverse, "reverse the order");
  add_json(list);
  std::string key;
  bool no_code = false;
  auto* show = app.add_subcommand("show", "show one entry: key fields, provenance, kernel IR, source, disassembly");
  show->add_option("KEY", key, "full key, a prefix of at least 4 hex digits, or a stem")->required();
  show->add_flag("--no-code", no_code, "omit source and code");
  add_json(show);
  auto* stats = app.add_subcommand("stats", "totals: entries, bytes, hits, compile time saved, trust");
  add_json(stats);
  std::string ir_file, backend, target;
  auto* why =
      app.add_subcommand("why-miss", "why a kernel misses: its key now, and the closest entries' differing fields");
  auto* why_key = why->add_option("KEY", key, "an entry (key, prefix or stem): would it still hit with this build?");
  auto* why_ir = why->add_option("--ir", ir_file, "a printed kernel IR file (KFUSE_DUMP) to look up");
  why_key->excludes(why_ir);
  why->add_option("--backend", backend, "backend to compute the key for (default: every available one)");
  why->add_option("--target", target, "target string to assume (default: this machine's)");
  add_json(why);
  bool remove = false;
  auto* verify = app.add_subcommand("verify", "check every entry's checksum, version, key and ownership");
  verify->add_flag("--remove", remove, "delete bad entries and stale temporary files");
  add_json(verify);
  std::string max_bytes, older;
  auto* prune = app.add_subcommand("prune", "remove least recently used entries");
  prune->add_option("--max-bytes", max_bytes, "keep at most this many bytes (e.g. 64M, 1G)");
  prune->add_option("--older-than", older, "remove entries unused for longer (e.g. 12h, 7d)");
  add_json(prune);
  auto* clear = app.add_subcommand("clear", "remove every entry");
  add_json(clear);
  bool remeasure = false;
  std::vector<std::string> devices;
  auto* mach = app.add_subcommand("machine", "the machine model: bandwidth and FMA roofs (measured once, kept here)");
  mach->add_flag("--remeasure", remeasure, "measure again (about 1 s)");
  mach->add_option("--device", devices, "also measure a GPU device: opencl[:N] or cuda[:N]");
  add_json(mach);
  auto* tuned = app.add_subcommand("tuned", "KFUSE_TUNE's choices: the backend that won each kernel and by how much");
  add_json(tuned);

  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e, out, err);
    return rc == 0 ? 0 : 2;
  }
  if (why->parsed() && key.empty() && ir_file.empty()) {
    err << "kfuse-cache why-miss: give a KEY or --ir FILE\n";
    return 2;
  }
  Ctx c{dir, json_out, out, err, hooks};
  try {
    if (path->parsed()) return cmd_path(c);
    if (list->parsed()) return cmd_list(c, sort, filter, reverse);
    if (show->parsed()) return cmd_show(c, key, no_code);
    if (stats->parsed()) return cmd_stats(c);
    if (why->parsed()) return cmd_why_miss(c, key, ir_file, backend, target);
    if (verify->parsed()) return cmd_verify(c, remove);
    if (prune->parsed()) return cmd_prune(c, max_bytes, older);
    if (clear->parsed()) return cmd_clear(c);
    if (mach->parsed()) return cmd_machine(c, remeasure, devices);
    if (tuned->parsed()) return cmd_tuned(c);
  } catch (const std::exception& e) {
    err << "kfuse-cache: " << e.what() << "\n";
    return 1;
  }
  return 2;
}

}  // namespace kfuse::detail::cache
