#include "runtime/tune.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <unistd.h>

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

// Loads tune.json of the current cache dir (once per dir). Caller holds the lock.
void load(Table& t) {
  const std::string dir = options().cache_dir;
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

}  // namespace

bool tuning_enabled() {
  const char* v = std::getenv("KFUSE_TUNE");
  return v && std::strcmp(v, "1") == 0;
}

std::string tune_key(const std::string& ir_text, const std::string& dtypes, Device device,
                     const std::vector<std::shared_ptr<Backend>>& chain) {
  cache::KeyFields f;
  for (const auto& be : chain)
    f.backend += be->name() + "/" + std::to_string(be->codegen_version()) + "/" + be->target() + ";";
  f.target = device.str();
  f.dtypes = dtypes;
  f.ir_text = ir_text;
  return cache::make_key(f, "tune").hex();
}

std::string tuned_choice(const std::string& key) {
  if (options().cache_mode == "off") return "";
  Table& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  load(t);
  auto it = t.entries.find(key);
  return it != t.entries.end() && it->is_object() ? it->value("winner", "") : "";
}

TuneResult tune_and_remember(const std::string& key, const ir::Kernel& k, const std::vector<int64_t>& buffer_numel,
                             const std::vector<std::pair<std::string, std::shared_ptr<CompiledKernel>>>& candidates) {
  TuneResult r;
  // Zero-filled buffers of the kernel's real sizes: every candidate reads and writes the same.
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
  for (const auto& [name, ck] : candidates) {
    double s = 1e30, spent = 0;
    try {
      // Runs until ~20 ms or 10 runs (the best counts: the first also touches the pages); a
      // candidate slower than that runs once, so tuning costs at most one slow run per kernel.
      for (int rep = 0; rep < 10 && (rep == 0 || spent < 0.02); ++rep) {
        double t = ck->run_timed(args);
        s = std::min(s, t);
        spent += t;
      }
    } catch (const std::exception& e) {
      log("backend", "tuning: " + name + " failed on " + k.name + ": " + e.what());
      continue;
    }
    r.seconds.push_back({name, s});
    if (s < best) best = s, r.winner = name;
  }
  if (r.winner.empty()) return r;
  std::string others;
  for (const auto& [name, s] : r.seconds) others += " " + name + " " + std::to_string(s * 1e6) + " us;";
  log("backend", "tuned " + k.name + ": " + r.winner + " wins (" + others + " )");
  Table& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  load(t);
  json e{{"kernel", k.name}, {"winner", r.winner}, {"seconds", json::object()}};
  for (const auto& [name, s] : r.seconds) e["seconds"][name] = s;
  t.entries[key] = e;
  if (options().cache_mode == "disk") {  // written whole, atomically: concurrent writers lose an entry at worst
    std::error_code ec;
    std::filesystem::create_directories(t.dir, ec);
    const std::string tmp = path_of(t.dir) + ".tmp-" + std::to_string(::getpid());
    std::ofstream f(tmp);
    if (f << t.entries.dump(2) << "\n") {
      f.close();
      std::filesystem::rename(tmp, path_of(t.dir), ec);
    }
  }
  return r;
}

void reset_tune_state() {
  Table& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  t.loaded = false;
  t.entries = json::object();
}

}  // namespace kfuse::detail
