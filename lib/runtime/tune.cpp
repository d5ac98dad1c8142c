#include "runtime/tune.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include <unistd.h>

#include "backend/thread_pool.hpp"
#include "cache/key.hpp"
#include "kfuse/options.hpp"

namespace kfuse::detail {

namespace {

using nlohmann::json;

struct Table {
  std::mutex mu;
  std::string dir;  // the cache dir the table was read from
  bool loaded = false;
  json entries = json::object();
};
Table& table() {
  static auto* t = new Table();
  return *t;
}

std::string path_of(const std::string& dir) { return dir + "/tune.json"; }

// Loads tune.json of cache dir `dir` (once per dir). Caller holds the lock.
void load(Table& t, const std::string& dir) {
  if (t.loaded && t.dir == dir) return;
  t.loaded = true;
  t.dir = dir;
  t.entries = json::object();
  std::ifstream f(path_of(dir));
  if (!f) return;
  try {
    json j = json::parse(f);
    if (j.is_object()) t.entries = std::move(j);
  } catch (const json::exception& e) {
    log("cache", path_of(dir) + " is not a tuning table (" + e.what() + "); starting a new one");
  }
}

// A compiled kernel run in a tuned form: another variant of its code, or on one thread.
class TunedKernel final : public CompiledKernel {
 public:
  TunedKernel(std::shared_ptr<CompiledKernel> inner, int variant, bool serial)
      : inner_(std::move(inner)), variant_(variant), serial_(serial) {
    backend = inner_->backend;
    target = inner_->target;
    source = inner_->source;
    source_kind = inner_->source_kind;
    binary = inner_->binary;
    binary_kind = inner_->binary_kind;
    compile_ms = inner_->compile_ms;
    in_order_writes = inner_->in_order_writes;
  }
  void run(const ir::LaunchArgs& args) const override { run_variant(args, variant_); }
  std::vector<std::string> variants() const override { return inner_->variants(); }
  void run_variant(const ir::LaunchArgs& args, int v) const override {
    if (!serial_) return inner_->run_variant(args, v);
    SerialScope one_thread;
    inner_->run_variant(args, v);
  }

 private:
  std::shared_ptr<CompiledKernel> inner_;
  int variant_;
  bool serial_;
};

// A timed form of a kernel. Best of runs until ~20 ms or 10 runs (the first also touches the
// pages); a form slower than that runs once, so tuning costs at most one slow run per form.
double best_seconds(const CompiledKernel& ck, const ir::LaunchArgs& args, int variant, bool serial) {
  std::optional<SerialScope> one_thread;
  if (serial) one_thread.emplace();
  double s = 1e30, spent = 0;
  for (int rep = 0; rep < 10 && (rep == 0 || spent < 0.02); ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    ck.run_variant(args, variant);
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s = std::min(s, t);
    spent += t;
  }
  return s;
}

// Below this a kernel is "short": a wake-up of the pool's threads (tens of microseconds on a
// busy VM) may cost more than they save, so its one-thread form is timed too.
constexpr double kShortKernelSeconds = 1e-3;
// How much faster than the static form another must be to be chosen.
constexpr double kMinGain = 1.05;

void write_table(Table& t) {  // whole, atomically: concurrent writers lose an entry at worst
  std::error_code ec;
  std::filesystem::create_directories(t.dir, ec);
  const std::string tmp = path_of(t.dir) + ".tmp-" + std::to_string(::getpid());
  std::ofstream f(tmp);
  if (f << t.entries.dump(2) << "\n") {
    f.close();
    std::filesystem::rename(tmp, path_of(t.dir), ec);
  }
}

}  // namespace

std::string TuneChoice::label() const {
  std::string s = backend;
  if (!variant_name.empty()) s += "/" + variant_name;
  if (threads == 1) s += " 1 thread";
  return s;
}

bool tuning_enabled() {
  const char* v = std::getenv("KFUSE_TUNE");
  return v && std::strcmp(v, "1") == 0;
}

std::string tune_key(const std::string& ir_text, const std::string& dtypes, Device device,
                     const std::vector<std::shared_ptr<Backend>>& chain) {
  cache::KeyFields f;
  for (const auto& be : chain)
    f.backend += be->name() + "/" + std::to_string(be->codegen_version()) + "/" + be->target() + ";";
  f.target = device.str() + " threads=" + std::to_string(num_threads());
  f.dtypes = dtypes;
  f.ir_text = ir_text;
  return cache::make_key(f, "tune").hex();
}

TuneChoice tuned_choice(const std::string& key, const Options& opts) {
  TuneChoice c;
  if (opts.cache_mode == "off") return c;
  Table& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  load(t, opts.cache_dir);
  auto it = t.entries.find(key);
  if (it == t.entries.end() || !it->is_object()) return c;
  const json& e = *it;
  try {  // entries of the first format name only the winning backend ("winner")
    c.backend = e.value("backend", e.value("winner", ""));
    c.variant = e.value("variant_index", 0);
    c.variant_name = e.value("variant", "");
    c.threads = e.value("threads", 0);
  } catch (const json::exception&) { c = TuneChoice{}; }
  return c;
}

TuneResult tune_and_remember(const std::string& key, const std::string& ir_digest, const ir::Kernel& k,
                             const std::vector<int64_t>& buffer_numel,
                             const std::vector<std::pair<std::string, std::shared_ptr<CompiledKernel>>>& compiled,
                             const Options& opts) {
  TuneResult r;
  // Every form of every backend.
  struct Form {
    TuneChoice c;
    const CompiledKernel* ck;
  };
  std::vector<Form> forms;
  for (const auto& [name, ck] : compiled) {
    const std::vector<std::string> vs = ck->variants();
    for (size_t v = 0; v < std::max<size_t>(1, vs.size()); ++v)
      forms.push_back({{name, static_cast<int>(v), vs.empty() ? "" : vs[v], 0}, ck.get()});
  }
  const bool pool = num_threads() > 1;
  if (forms.empty() || (forms.size() == 1 && !pool)) return r;  // nothing to choose
  // Zero-filled buffers of the kernel's real sizes: every form reads and writes the same.
  std::vector<std::shared_ptr<Storage>> bufs;
  ir::LaunchArgs args;
  for (size_t i = 0; i < k.buffers.size() && i < buffer_numel.size(); ++i) {
    bufs.push_back(Storage::allocate(k.buffers[i].dtype, buffer_numel[i]));
    if (bufs.back()->bytes()) std::memset(bufs.back()->data, 0, bufs.back()->bytes());
    args.buffers.push_back(bufs.back()->data);
  }
  if (args.buffers.size() != k.buffers.size()) return r;
  args.params = k.param_values();
  double best = 1e30;
  const Form* best_form = nullptr;
  auto time = [&](const Form& f) {
    try {
      double s = best_seconds(*f.ck, args, f.c.variant, f.c.threads == 1);
      r.seconds.push_back({f.c.label(), s});
      if (s < best) best = s, r.winner = f.c, best_form = &f;
    } catch (const std::exception& e) {
      log("backend", "tuning: " + f.c.label() + " failed on " + k.name + ": " + e.what());
    }
  };
  for (const Form& f : forms) time(f);
  if (!best_form) return r;
  // Timings on a shared host move by a few percent: a form displaces the pool's form of the same
  // code, or the static one (timed first), only when clearly faster, so that a tie does not flip
  // the choice between processes.
  if (pool && best < kShortKernelSeconds) {
    const TuneChoice on_pool = r.winner;
    const double pool_best = best;
    Form one = *best_form;
    one.c.threads = 1;
    time(one);
    if (r.winner.threads == 1 && best * kMinGain > pool_best) r.winner = on_pool, best = pool_best;
  }
  const std::string static_label = forms.front().c.label();
  if (r.winner.label() != static_label && !r.seconds.empty() && r.seconds.front().first == static_label &&
      best * kMinGain > r.seconds.front().second)
    r.winner = forms.front().c;
  std::string others;
  for (const auto& [label, s] : r.seconds) {
    char b[48];
    std::snprintf(b, sizeof b, " %.1f us;", s * 1e6);
    others += " " + label + b;
  }
  log("backend", "tuned " + k.name + ": " + r.winner.label() + " wins (" + others + " )");
  Table& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  load(t, opts.cache_dir);
  json e{{"kernel", k.name},
         {"ir", ir_digest},
         {"winner", r.winner.label()},
         {"backend", r.winner.backend},
         {"variant", r.winner.variant_name},
         {"variant_index", r.winner.variant},
         {"threads", r.winner.threads},
         {"seconds", json::object()}};
  for (const auto& [label, s] : r.seconds) e["seconds"][label] = s;
  t.entries[key] = e;
  if (opts.cache_mode == "disk") write_table(t);
  return r;
}

std::shared_ptr<CompiledKernel> apply_choice(const std::shared_ptr<CompiledKernel>& ck, const TuneChoice& c) {
  const std::vector<std::string> vs = ck->variants();
  int v = c.variant;
  if (v < 0 || (v > 0 && (static_cast<size_t>(v) >= vs.size() || vs[static_cast<size_t>(v)] != c.variant_name))) v = 0;
  if (v == 0 && c.threads != 1) return ck;
  return std::make_shared<TunedKernel>(ck, v, c.threads == 1);
}

void reset_tune_state() {
  Table& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  t.loaded = false;
  t.entries = json::object();
}

}  // namespace kfuse::detail
