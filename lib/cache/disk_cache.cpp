#include "cache/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <set>

#include "kfuse/options.hpp"

namespace kfuse::detail::cache {

namespace fs = std::filesystem;

namespace {

std::string errstr(int e) { return std::strerror(e); }

std::string mode_str(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

std::string problem_of(const struct stat& st, bool want_dir) {
  if (want_dir && !S_ISDIR(st.st_mode)) return "is not a directory";
  if (!want_dir && !S_ISREG(st.st_mode)) return "is not a regular file";
  if (st.st_uid != geteuid())
    return "is owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " + std::to_string(geteuid()) +
           ")";
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return std::string("is writable by ") + ((st.st_mode & S_IWOTH) ? "others" : "its group") + " (mode " +
           mode_str(st.st_mode) + "); fix with: chmod go-w <path>";
  return {};
}

// mkdir -p with mode 0700 for every component it creates.
int make_dirs(const std::string& path) {
  if (path.empty()) return EINVAL;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  auto slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    int e = make_dirs(path.substr(0, slash));
    if (e) return e;
  }
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return errno;
  return 0;
}

bool read_fd(int fd, std::vector<uint8_t>* out, size_t hint) {
  out->clear();
  out->reserve(hint);
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) return true;
    out->insert(out->end(), buf, buf + n);
  }
}

bool write_all(int fd, const uint8_t* p, size_t n) {
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

int64_t mtime_of(const std::string& p, uint64_t* size = nullptr) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return 0;
  if (size) *size = static_cast<uint64_t>(st.st_size);
  return static_cast<int64_t>(st.st_mtime);
}

std::string sidecar_of(const std::string& kfc) { return kfc.substr(0, kfc.size() - 4) + ".use"; }

bool is_entry_name(const std::string& name) {
  KernelKey k;
  return name.size() == 36 && name.compare(32, 4, ".kfc") == 0 && parse_key_hex(name.substr(0, 32), &k);
}

// Every <root>/<xx>/<key>.kfc path.
std::vector<std::string> entry_files(const std::string& root, std::vector<std::string>* stray = nullptr) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator d(root, ec), end; !ec && d != end; d.increment(ec)) {
    if (!d->is_directory(ec)) continue;
    for (fs::directory_iterator f(d->path(), ec), fend; !ec && f != fend; f.increment(ec)) {
      std::string name = f->path().filename().string();
      if (is_entry_name(name)) out.push_back(f->path().string());
      else if (stray && name.size() > 4 && name.compare(name.size() - 4, 4, ".use") != 0)
        stray->push_back(f->path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void warn_once(const std::string& what, const std::string& msg) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (!seen.insert(what).second) return;
  }
  std::fprintf(stderr, "[kfuse:cache] warning: %s\n", msg.c_str());
}

std::string trust_problem(const std::string& path, bool want_dir) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return "cannot be examined: " + errstr(errno);
  if (S_ISLNK(st.st_mode) && want_dir) {
    // A symlinked cache directory is fine when its target is trusted.
    if (::stat(path.c_str(), &st) != 0) return "is a dangling symlink";
  }
  return problem_of(st, want_dir);
}

DiskCounters& disk_counters() {
  static DiskCounters c;
  return c;
}

DiskCache::DiskCache(std::string dir, uint64_t max_bytes, bool create) : dir_(std::move(dir)), max_bytes_(max_bytes) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  auto refuse = [&](const std::string& path, const std::string& why) {
    note_ = "refusing cache directory " + path + ": it " + why + "; using the memory cache only";
    warn_once("refuse:" + path, note_);
  };
  // Check each level before creating anything inside it: nothing is written into a directory
  // someone else controls.
  for (const std::string& p : {dir_, root()}) {
    if (create) {
      if (int e = make_dirs(p)) {
        note_ = "cannot create cache directory " + p + ": " + errstr(e) + "; using the memory cache only";
        warn_once("create:" + dir_, note_);
        return;
      }
    } else if (::access(p.c_str(), F_OK) != 0) {
      note_ = "no cache at " + root();
      return;
    }
    std::string why = trust_problem(p, true);
    if (!why.empty()) {
      refuse(p, why);
      return;
    }
  }
  readable_ = true;
  if (::access(root().c_str(), W_OK) != 0) {
    note_ = "cache directory " + root() + " is not writable (" + errstr(errno) + "); reading only";
    if (create) warn_once("ro:" + dir_, note_ + ", new kernels stay in memory");
    return;
  }
  writable_ = true;
}

std::string DiskCache::root() const { return dir_ + "/v" + std::to_string(kFormatVersion); }

std::string DiskCache::note() const {
  std::lock_guard<std::mutex> lk(mu_);
  return note_;
}

std::string DiskCache::entry_path(const KernelKey& k) const {
  std::string h = k.hex();
  return root() + "/" + h.substr(0, 2) + "/" + h + ".kfc";
}

DiskCache::Lookup DiskCache::load(const KernelKey& key, Entry* out) {
  if (!readable_) return Lookup::Miss;
  std::string path = entry_path(key);
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Lookup::Miss;
    if (errno == ELOOP) {
      warn_once("refuse-entry:" + path, "refusing cache entry " + path + ": it is a symlink");
      disk_counters().refused.fetch_add(1, std::memory_order_relaxed);
      return Lookup::Refused;
    }
    log("cache", "cannot open " + path + ": " + errstr(errno));
    return Lookup::Miss;
  }
  struct stat st;
  std::string why;
  if (::fstat(fd, &st) != 0) why = "cannot be examined";
  else why = problem_of(st, false);
  if (!why.empty()) {
    ::close(fd);
    warn_once("refuse-entry:" + path, "refusing cache entry " + path + ": it " + why + "; recompiling");
    disk_counters().refused.fetch_add(1, std::memory_order_relaxed);
    return Lookup::Refused;
  }
  std::vector<uint8_t> bytes;
  bool ok = read_fd(fd, &bytes, static_cast<size_t>(st.st_size));
  ::close(fd);
  if (!ok) {
    log("cache", "cannot read " + path + ": " + errstr(errno));
    return Lookup::Miss;
  }
  DecodeStatus s = decode_entry(bytes, out, false, &why);
  if (s == DecodeStatus::Ok && !(out->key == key)) {
    s = DecodeStatus::KeyMismatch;
    why = "key mismatch: file holds " + out->key.hex();
  }
  if (s != DecodeStatus::Ok) {
    // Only remove the file we read: another process may have replaced it meanwhile (rename).
    struct stat now;
    if (::stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) {
      ::unlink(path.c_str());
      ::unlink(sidecar_of(path).c_str());
    }
    disk_counters().corrupt.fetch_add(1, std::memory_order_relaxed);
    log("cache", "removed bad entry " + path + " (" + why + "); recompiling");
    return Lookup::Corrupt;
  }
  out->path = path;
  out->file_bytes = bytes.size();
  return Lookup::Hit;
}

void DiskCache::disable_writes(const std::string& why) {
  bool was = writable_.exchange(false);
  {
    std::lock_guard<std::mutex> lk(mu_);
    note_ = why;
  }
  if (was) warn_once("disabled:" + dir_, why + "; new kernels stay in the memory cache only");
}

bool DiskCache::store(const Entry& e) {
  if (!writable()) return false;
  std::string path = entry_path(e.key);
  std::string sub = path.substr(0, path.find_last_of('/'));
  if (::mkdir(sub.c_str(), 0700) != 0 && errno != EEXIST) {
    int err = errno;
    disable_writes("cannot write to the kernel cache " + root() + ": " + errstr(err));
    return false;
  }
  static std::atomic<uint64_t> seq{0};
  thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(::getpid())};
  char tmpname[96];
  std::snprintf(tmpname, sizeof tmpname, "/.tmp-%s-%d-%llu-%08llx", e.key.hex().c_str(), static_cast<int>(::getpid()),
                static_cast<unsigned long long>(seq.fetch_add(1)), static_cast<unsigned long long>(rng() & 0xffffffff));
  std::string tmp = sub + tmpname;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    disable_writes("cannot write to the kernel cache " + root() + ": " + errstr(err));
    return false;
  }
  std::vector<uint8_t> bytes = encode_entry(e);
  bool ok = write_all(fd, bytes.data(), bytes.size());
  int err = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    if (err == ENOSPC || err == EDQUOT || err == EROFS || err == EACCES || err == EPERM)
      disable_writes("cannot write to the kernel cache " + root() + ": " + errstr(err));
    else log("cache", "cannot publish " + path + ": " + errstr(err));
    return false;
  }
  disk_counters().stores.fetch_add(1, std::memory_order_relaxed);
  log("cache", "stored " + e.key.stem + " " + e.key.hex() + " (" + std::to_string(bytes.size()) + " bytes)");
  account(static_cast<int64_t>(bytes.size()));
  return true;
}

void DiskCache::account(int64_t delta) {
  int64_t cur;
  {
    std::lock_guard<std::mutex> lk(mu_);
    cur = bytes_;
    if (cur >= 0) cur = bytes_ += delta;
  }
  if (cur < 0) {
    // First store of this process: scan once (it already counts the new file). Misses compile
    // anyway, so this stays off the hot path.
    int64_t t = static_cast<int64_t>(total_bytes());
    std::lock_guard<std::mutex> lk(mu_);
    if (bytes_ < 0) bytes_ = t;
    cur = bytes_;
  }
  bool over = static_cast<uint64_t>(cur) > max_bytes_;
  if (over) {
    // Evict down to 90% so a full cache does not scan on every store.
    PruneReport r = prune(max_bytes_ / 10 * 9, -1);
    std::lock_guard<std::mutex> lk(mu_);
    bytes_ = static_cast<int64_t>(r.kept_bytes);
    if (r.removed)
      log("cache", "evicted " + std::to_string(r.removed) + " entries (" + std::to_string(r.removed_bytes) +
                       " bytes) to stay under KFUSE_CACHE_MAX_BYTES=" + std::to_string(max_bytes_));
  }
}

void DiskCache::record_use(const KernelKey& key) {
  if (!writable()) return;
  std::string p = sidecar_of(entry_path(key));
  int fd = ::open(p.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const uint8_t one = 1;
  (void)!::write(fd, &one, 1);
  ::close(fd);
}

DecodeStatus DiskCache::read_file(const std::string& path, Entry* out, std::string* why) const {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (why) *why = "cannot open: " + errstr(errno);
    return DecodeStatus::Truncated;
  }
  std::vector<uint8_t> bytes;
  bool ok = read_fd(fd, &bytes, 1 << 16);
  ::close(fd);
  if (!ok) {
    if (why) *why = "cannot read";
    return DecodeStatus::Truncated;
  }
  DecodeStatus s = decode_entry(bytes, out, false, why);
  out->path = path;
  out->file_bytes = bytes.size();
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (s == DecodeStatus::Ok && name.substr(0, 32) != out->key.hex()) {
    if (why) *why = "key mismatch: file name does not match its key " + out->key.hex();
    return DecodeStatus::KeyMismatch;
  }
  uint64_t side = 0;
  int64_t t1 = mtime_of(path), t2 = mtime_of(sidecar_of(path), &side);
  out->hits = side;
  out->last_used = std::max(t1, t2);
  return s;
}

std::vector<Entry> DiskCache::list(std::vector<std::string>* problems) const {
  std::vector<Entry> out;
  if (!readable_) return out;
  for (const std::string& p : entry_files(root())) {
    int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;  // removed meanwhile
    // The header and metadata are at the front: read a bounded prefix.
    std::vector<uint8_t> bytes(1 << 16);
    ssize_t n = ::pread(fd, bytes.data(), bytes.size(), 0);
    struct stat st;
    bool have = ::fstat(fd, &st) == 0;
    ::close(fd);
    if (n < 0 || !have) continue;
    bytes.resize(static_cast<size_t>(n));
    Entry e;
    std::string why;
    // meta_only: no checksum (`verify` checks those); a short prefix must still hold the metadata.
    std::vector<uint8_t> whole;
    const std::vector<uint8_t>* src = &bytes;
    if (static_cast<uint64_t>(st.st_size) > bytes.size()) {
      // decode_entry checks the declared body length against the size: fake the tail.
      whole = bytes;
      whole.resize(static_cast<size_t>(st.st_size));
      src = &whole;
    }
    if (decode_entry(*src, &e, true, &why) != DecodeStatus::Ok) {
      if (problems) problems->push_back(p + ": " + why);
      continue;
    }
    e.path = p;
    uint64_t side = 0;
    e.file_bytes = static_cast<uint64_t>(st.st_size);
    int64_t t2 = mtime_of(sidecar_of(p), &side);
    e.hits = side;
    e.last_used = std::max<int64_t>(st.st_mtime, t2);
    out.push_back(std::move(e));
  }
  return out;
}

DiskCache::VerifyReport DiskCache::verify(bool remove) {
  VerifyReport r;
  if (!readable_) return r;
  std::vector<std::string> stray;
  for (const std::string& p : entry_files(root(), &stray)) {
    ++r.checked;
    std::string why = trust_problem(p, false);
    Entry e;
    if (why.empty() && read_file(p, &e, &why) == DecodeStatus::Ok) {
      ++r.ok;
      continue;
    }
    Problem pr{p, why, false};
    if (remove) {
      pr.removed = ::unlink(p.c_str()) == 0;
      ::unlink(sidecar_of(p).c_str());
    }
    r.problems.push_back(pr);
  }
  for (const std::string& p : stray) {
    std::string name = p.substr(p.find_last_of('/') + 1);
    if (name.rfind(".tmp-", 0) == 0 && mtime_of(p) > std::time(nullptr) - 3600) continue;  // being written
    Problem pr{p, name.rfind(".tmp-", 0) == 0 ? "stale temporary file" : "unexpected file", false};
    if (remove) pr.removed = ::unlink(p.c_str()) == 0;
    r.problems.push_back(pr);
  }
  return r;
}

DiskCache::PruneReport DiskCache::prune(uint64_t max_bytes, int64_t older_than_s) {
  PruneReport r;
  if (!readable_) return r;
  struct Item {
    std::string path;
    uint64_t bytes;
    int64_t last;
  };
  std::vector<Item> items;
  std::vector<std::string> stray;
  int64_t now = std::time(nullptr);
  for (const std::string& p : entry_files(root(), &stray)) {
    uint64_t a = 0, b = 0;
    int64_t t1 = mtime_of(p, &a), t2 = mtime_of(sidecar_of(p), &b);
    items.push_back({p, a + b, std::max(t1, t2)});
  }
  for (const std::string& p : stray) {
    std::string name = p.substr(p.find_last_of('/') + 1);
    if (name.rfind(".tmp-", 0) == 0 && mtime_of(p) < now - 3600) ::unlink(p.c_str());
  }
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.last != b.last ? a.last < b.last : a.path < b.path; });
  uint64_t total = 0;
  for (const Item& i : items) total += i.bytes;
  for (const Item& i : items) {
    bool old = older_than_s >= 0 && i.last < now - older_than_s;
    if (old || total > max_bytes) {
      ::unlink(i.path.c_str());
      ::unlink(sidecar_of(i.path).c_str());
      total -= i.bytes;
      ++r.removed;
      r.removed_bytes += i.bytes;
    } else {
      ++r.kept;
      r.kept_bytes += i.bytes;
    }
  }
  disk_counters().evicted.fetch_add(r.removed, std::memory_order_relaxed);
  return r;
}

uint64_t DiskCache::clear() {
  if (!readable_) return 0;
  uint64_t n = 0;
  std::vector<std::string> stray;
  for (const std::string& p : entry_files(root(), &stray)) {
    n += ::unlink(p.c_str()) == 0;
    ::unlink(sidecar_of(p).c_str());
  }
  for (const std::string& p : stray) ::unlink(p.c_str());
  std::lock_guard<std::mutex> lk(mu_);
  bytes_ = 0;
  return n;
}

uint64_t DiskCache::total_bytes() const {
  uint64_t t = 0;
  for (const std::string& p : entry_files(root())) {
    uint64_t a = 0, b = 0;
    mtime_of(p, &a);
    mtime_of(sidecar_of(p), &b);
    t += a + b;
  }
  return t;
}

}  // namespace kfuse::detail::cache
