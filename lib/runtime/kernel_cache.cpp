#include "kernel_cache.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <mutex>

#include "cache/disk_cache.hpp"
#include "cache/memory_cache.hpp"
#include "fusion/lower_group.hpp"
#include "kfuse/cache.hpp"
#include "kfuse/error.hpp"
#include "kfuse/stats.hpp"
#include "kfuse/options.hpp"
#include "prof/recorder.hpp"
#include "runtime/kernel_dump.hpp"
#include "runtime/tune.hpp"
#include "stats_impl.hpp"

namespace kfuse::detail {

namespace {

using cache::DiskCache;
using cache::Entry;
using cache::KernelKey;
using cache::KeyFields;

cache::MemoryCache& memory() {
  static auto* m = new cache::MemoryCache();  // never destroyed: kernels may outlive static teardown
  return *m;
}

enum class Mode { Off, Memory, Disk };
Mode mode_of(const Options& o) {
  if (o.cache_mode == "off") return Mode::Off;
  if (o.cache_mode == "memory") return Mode::Memory;
  if (o.cache_mode != "disk")
    cache::warn_once("mode:" + o.cache_mode,
                     "KFUSE_CACHE=" + o.cache_mode + " is not off, memory or disk; using memory");
  return o.cache_mode == "disk" ? Mode::Disk : Mode::Memory;
}

// The disk cache of `o`, opened (and its directory checked) once per directory, bound and
// options generation: tests and tools that call set_options() re-open it.
std::shared_ptr<DiskCache> disk_for(const Options& o) {
  static std::mutex mu;
  static std::shared_ptr<DiskCache> current;
  static uint64_t opened_gen = 0;
  std::lock_guard<std::mutex> lk(mu);
  const uint64_t gen = options_generation();
  if (!current || opened_gen != gen || current->dir() != o.cache_dir || current->max_bytes() != o.cache_max_bytes) {
    current = std::make_shared<DiskCache>(o.cache_dir, o.cache_max_bytes, true);
    opened_gen = gen;
  }
  return current;
}

// Backends whose load() re-creates the kernel from its IR alone (no binary to store).
bool loads_from_ir(const Backend& be) { return be.name() == "reference"; }

// "[$0, 4] x [10]": outer extents (run-time params as $n) x reduce extents (specialised).
std::string shape_of(const ir::Kernel& k) {
  std::string s = "[";
  for (size_t i = 0; i < k.outer.size(); ++i) {
    const ir::Expr& e = *k.outer[i];
    s += i ? ", " : "";
    if (e.kind == ir::ExprKind::Param) s.append("$").append(std::to_string(e.index));
    else if (e.kind == ir::ExprKind::Const) s += std::to_string(static_cast<int64_t>(e.value));
    else s += "expr";
  }
  s += "]";
  if (!k.reduce.empty()) {
    s += " x [";
    for (size_t i = 0; i < k.reduce.size(); ++i) s.append(i ? ", " : "").append(std::to_string(k.reduce[i]));
    s += "]";
  }
  return s;
}

std::vector<std::string> param_names(const ir::Kernel& k) {
  std::vector<std::string> p;
  for (const auto& x : k.params) p.push_back(x.name);
  return p;
}

// Disk lookup: the entry's kernel, or null (miss, bad entry, or the backend cannot load it).
std::shared_ptr<CompiledKernel> load_from_disk(DiskCache& disk, Backend& be, const ir::Kernel& k, const KernelKey& key,
                                               const Options& opts) {
  Entry e;
  if (disk.load(key, &e) != DiskCache::Lookup::Hit) return nullptr;
  if (e.binary.empty() && !loads_from_ir(be)) return nullptr;
  std::shared_ptr<CompiledKernel> ck;
  try {
    ck = be.load(k, e.binary, opts);
  } catch (const std::exception& ex) {
    log("cache", be.name() + " could not load " + key.stem + " " + key.hex() + ": " + ex.what() + "; recompiling");
    return nullptr;
  }
  if (!ck) {
    log("cache", be.name() + " load() declined " + key.stem + " " + key.hex() + "; recompiling");
    return nullptr;
  }
  if (ck->backend.empty()) ck->backend = be.name();
  if (ck->target.empty()) ck->target = e.fields.target;
  if (ck->source.empty()) {
    ck->source = std::move(e.source);
    ck->source_kind = e.source_kind;
  }
  if (ck->binary.empty()) {
    ck->binary = std::move(e.binary);
    ck->binary_kind = e.binary_kind;
  }
  ck->compile_ms = e.compile_ms;
  bump(global_counters().disk_loads);
  disk.record_use(key);
  log("cache", "disk hit " + key.stem + " " + key.hex() + " (" + be.name() + ")");
  return ck;
}

void store_to_disk(DiskCache& disk, Backend& be, const ir::Kernel& k, const KeyFields& f, const KernelKey& key,
                   const CompiledKernel& ck, const KernelProvenance* prov) {
  if (ck.binary.empty() && !loads_from_ir(be)) return;  // nothing a later process could load
  Entry e;
  e.key = key;
  e.fields = f;
  e.kind = ir::kernel_kind_name(k.kind);
  if (prov) {
    e.ops = prov->ops;
    e.pattern = prov->pattern;
    e.specialised = prov->specialised;
  }
  e.params = param_names(k);
  e.shape = shape_of(k);
  e.source = ck.source;
  e.source_kind = ck.source_kind;
  e.binary = ck.binary;
  e.binary_kind = ck.binary_kind;
  e.compile_ms = ck.compile_ms;
  e.created = static_cast<int64_t>(std::time(nullptr));
  disk.store(e);
}

// One backend's answer for `k`: memory -> disk -> compile. Null kernel: declined (`declined`).
std::shared_ptr<CompiledKernel> compile_cached(Backend& be, const ir::Kernel& k, const std::string& text,
                                               const std::string& dtypes, const KernelProvenance* prov,
                                               const Options& opts, std::string* declined) {
  Mode mode = mode_of(opts);
  KeyFields f;
  f.backend = be.name();
  f.backend_version = be.codegen_version();
  f.target = be.target();
  // The backend's knobs change its kernels: a kernel made under other values must not match.
  if (std::string knobs = be.options_key(opts); !knobs.empty()) f.target += " [" + knobs + "]";
  f.dtypes = dtypes;
  f.ir_text = text;
  KernelKey key = cache::make_key(f, k.name);

  auto produce = [&]() -> CompileResult {
    bump(global_counters().cache_misses);
    std::shared_ptr<DiskCache> disk = mode == Mode::Disk ? disk_for(opts) : nullptr;
    if (disk) {
      const double t0 = prof::on() ? prof::now_s() : 0;
      if (auto ck = load_from_disk(*disk, be, k, key, opts)) {
        if (t0 != 0) prof::record_compile(k.name, be.name(), true, t0, prof::now_s() - t0);
        if (!opts.dump_dir.empty()) dump_kernel(opts.dump_dir, key, text, *ck);
        return {ck, {}};
      }
    }
    log("cache", "miss " + key.stem + " " + key.hex() + " (" + be.name() + ", " + f.target + "): compiling");
    auto t0 = std::chrono::steady_clock::now();
    CompileResult r = be.compile(k, opts);
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    if (r.kernel) {
      bump(global_counters().kernels_compiled);
      bump(global_counters().compile_ns, static_cast<uint64_t>(ns));
      if (r.kernel->compile_ms <= 0) r.kernel->compile_ms = static_cast<double>(ns) / 1e6;
      if (prof::on())
        prof::record_compile(k.name, be.name(), false, std::chrono::duration<double>(t0.time_since_epoch()).count(),
                             static_cast<double>(ns) / 1e9);
      if (disk) store_to_disk(*disk, be, k, f, key, *r.kernel, prov);
      if (!opts.dump_dir.empty()) dump_kernel(opts.dump_dir, key, text, *r.kernel);
    }
    return r;
  };

  if (mode == Mode::Off) {
    CompileResult r = produce();
    *declined = r.declined;
    return r.kernel;
  }
  cache::MemoryCache::Result r = memory().get(key, produce);
  if (r.hit && r.kernel) bump(global_counters().cache_hits);
  *declined = r.declined;
  return r.kernel;
}

}  // namespace

KernelProvenance provenance_of(const FusionGroup& g, const LoweredKernel& lk) {
  KernelProvenance p;
  for (const Node* n : g.nodes) p.ops.push_back(op_name(n->op));
  p.pattern = g.pattern;
  p.specialised = lk.specialised;
  for (const Node* n : lk.buffer_nodes) p.buffer_numel.push_back(n->numel());
  return p;
}

CompiledRef compile_kernel(const ir::Kernel& k, Device device, const Options& opts, const KernelProvenance* prov) {
  std::string text = ir::print_kernel(k);
  std::string dtypes = cache::dtype_signature(k);
  auto chain = backends_for(device, opts);
  // Measured selection: a remembered choice goes first, in its form; KFUSE_TUNE=1 measures one
  // (CPU only: the candidates run on host buffers).
  TuneChoice choice;
  if (device == Device::cpu()) {
    const std::string tkey = tune_key(text, dtypes, device, chain);
    choice = tuned_choice(tkey, opts);
    if (choice.backend.empty() && tuning_enabled() && prov && !prov->buffer_numel.empty()) {
      std::vector<std::pair<std::string, std::shared_ptr<CompiledKernel>>> cands;
      for (const auto& be : chain) {
        // The reference interpreter only as the static choice: it is never faster than machine
        // code, and one run of a large kernel takes minutes there.
        if (be != chain.front() && be->name() == "reference") continue;
        std::string declined;
        try {
          if (auto ck = compile_cached(*be, k, text, dtypes, prov, opts, &declined)) cands.push_back({be->name(), ck});
        } catch (const BackendError&) {}
      }
      choice = tune_and_remember(tkey, cache::ir_digest(text, dtypes), k, prov->buffer_numel, cands, opts).winner;
    }
    for (size_t i = 1; i < chain.size(); ++i)
      if (chain[i]->name() == choice.backend)
        std::rotate(chain.begin(), chain.begin() + static_cast<long>(i), chain.begin() + static_cast<long>(i) + 1);
  }
  std::string why_all;
  for (size_t i = 0; i < chain.size(); ++i) {
    Backend& be = *chain[i];
    std::string declined;
    try {
      if (auto ck = compile_cached(be, k, text, dtypes, prov, opts, &declined)) {
        if (i > 0) bump(global_counters().fallbacks);
        return {be.name() == choice.backend ? apply_choice(ck, choice) : ck, be.name()};
      }
      log("backend", be.name() + " declined " + k.name + ": " + declined);
      why_all += be.name() + ": " + declined + "; ";
    } catch (const BackendError& e) {
      log("backend", be.name() + " failed on " + k.name + ": " + e.what() + "\n" + e.log());
      why_all += be.name() + ": " + e.what() + "; ";
    }
  }
  throw BackendError("no backend for " + device.str() + " could compile kernel " + k.name + ": " + why_all);
}

}  // namespace kfuse::detail

// ---- the public inspection API (include/kfuse/cache.hpp; cache_api.cpp) ----
namespace kfuse::detail {

CacheStats cache_stats_of(const Options& o) {
  CacheStats s;
  Mode m = mode_of(o);
  s.mode = m == Mode::Off ? "off" : m == Mode::Memory ? "memory" : "disk";
  s.dir = o.cache_dir;
  auto& mem = memory();
  s.memory_entries = mem.size();
  s.memory_bytes = mem.bytes();
  s.memory_evictions = mem.evictions();
  if (m == Mode::Disk) {
    auto d = disk_for(o);
    s.disk_readable = d->readable();
    s.disk_writable = d->writable();
    s.disk_note = d->note();
    for (const auto& e : d->list()) {
      ++s.disk_entries;
      s.disk_bytes += e.file_bytes;
    }
  } else {
    s.disk_note = "KFUSE_CACHE=" + s.mode;
  }
  Counters c = counters();
  s.hits = c.cache_hits;
  s.misses = c.cache_misses;
  s.compiles = c.kernels_compiled;
  s.disk_loads = c.disk_loads;
  s.compile_ms = c.compile_ms;
  auto& dc = cache::disk_counters();
  s.disk_stores = dc.stores.load();
  s.disk_corrupt = dc.corrupt.load();
  s.disk_refused = dc.refused.load();
  s.disk_evictions = dc.evicted.load();
  return s;
}

std::vector<CacheEntry> cache_entries_of(const Options& o) {
  std::vector<CacheEntry> out;
  if (mode_of(o) != Mode::Disk) return out;
  for (const auto& e : disk_for(o)->list()) out.push_back(cache::to_public(e));
  return out;
}

void clear_cache_of(const Options& o) {
  memory().clear();
  if (mode_of(o) == Mode::Disk) disk_for(o)->clear();
}

}  // namespace kfuse::detail

namespace kfuse {

void clear_memory_cache() { detail::memory().clear(); }

void set_memory_cache_limits(uint64_t max_entries, uint64_t max_bytes) {
  detail::memory().set_limits(static_cast<size_t>(max_entries), max_bytes);
}

}  // namespace kfuse
