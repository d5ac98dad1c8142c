// The disk cache: one file per kernel under a versioned, private directory.
//
//   <dir>/v1/<first 2 hex digits of the key>/<32 hex key>.kfc   the entry (entry.hpp)
//   <dir>/v1/<..>/<key>.use                                      one byte per process that loaded it
//
// Publication is atomic: an entry is written to an O_EXCL temporary file in the same directory
// and renamed over its final name, so readers never need a lock and never see half an entry;
// many processes may share one directory. The hit count and last-use time live in the .use
// sidecar (an O_APPEND of one byte per disk load), so the entry itself is never rewritten.
//
// Trust model (DESIGN.md section 9): entries hold executable code. The directory is created
// 0700; a directory or entry that is group/world-writable or owned by another user is refused
// (one warning, then memory-only for a refused directory; a refused entry is a miss).
// A read-only, full or otherwise unwritable directory degrades to memory-only with one warning.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cache/entry.hpp"

namespace kfuse::detail::cache {

/// Prints "[kfuse:cache] warning: <msg>" to stderr once per `what` per process (always, not only
/// with KFUSE_LOG=cache: a refused or disabled cache deserves to be seen).
void warn_once(const std::string& what, const std::string& msg);
/// Why `path` (a directory or entry file) must not be trusted, or "" when it may be.
std::string trust_problem(const std::string& path, bool want_dir);

struct DiskCounters {
  std::atomic<uint64_t> stores{0}, corrupt{0}, refused{0}, evicted{0};
};
DiskCounters& disk_counters();

class DiskCache {
 public:
  /// Opens (and with `create`, makes, mode 0700) the cache under `dir`. Never throws: an unusable
  /// directory leaves the cache disabled with note() saying why.
  DiskCache(std::string dir, uint64_t max_bytes, bool create = true);

  const std::string& dir() const { return dir_; }
  std::string root() const;  ///< <dir>/v<format>
  uint64_t max_bytes() const { return max_bytes_; }
  bool readable() const { return readable_; }
  bool writable() const { return writable_.load(std::memory_order_relaxed); }
  std::string note() const;  ///< why reading or writing is disabled ("" when fully usable)
  std::string entry_path(const KernelKey& k) const;

  enum class Lookup { Miss, Hit, Corrupt, Refused };
  /// Reads, verifies and returns the entry for `key`. A corrupt, truncated or foreign entry is
  /// removed, logged (channel cache) and reported as Corrupt; an untrusted file as Refused.
  Lookup load(const KernelKey& key, Entry* out);
  /// Publishes `e` atomically; false (and memory-only from then on) when the disk refuses.
  bool store(const Entry& e);
  /// Counts one more use of `key` (a process loaded it from disk).
  void record_use(const KernelKey& key);

  /// Every entry's metadata (no payloads), with path, size, hits, last use. Unreadable or corrupt
  /// files are skipped and described in `problems` when given.
  std::vector<Entry> list(std::vector<std::string>* problems = nullptr) const;
  /// Reads one entry file completely and verifies it.
  DecodeStatus read_file(const std::string& path, Entry* out, std::string* why) const;

  struct Problem {
    std::string path, what;
    bool removed = false;
  };
  struct VerifyReport {
    uint64_t checked = 0, ok = 0;
    std::vector<Problem> problems;
  };
  VerifyReport verify(bool remove);

  struct PruneReport {
    uint64_t removed = 0, removed_bytes = 0, kept = 0, kept_bytes = 0;
  };
  /// Removes least-recently-used entries until the total is at most `max_bytes`, and entries
  /// unused for more than `older_than_s` seconds (< 0: no age limit). Also stale temp files.
  PruneReport prune(uint64_t max_bytes, int64_t older_than_s);
  /// Removes every entry; returns how many.
  uint64_t clear();
  /// Total bytes of entries and sidecars on disk.
  uint64_t total_bytes() const;

 private:
  void disable_writes(const std::string& why);
  void account(int64_t delta);

  std::string dir_;
  uint64_t max_bytes_;
  bool readable_ = false;
  std::atomic<bool> writable_{false};
  mutable std::mutex mu_;
  std::string note_;
  int64_t bytes_ = -1;  ///< running estimate of total_bytes() (-1: not scanned yet)
};

}  // namespace kfuse::detail::cache
