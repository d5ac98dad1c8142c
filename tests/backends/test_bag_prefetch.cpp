// The CPU bag kernels' prefetch of later ids' rows (jit/xbyak/segment.cpp, jit/llvm/lower_tiles.cpp)
// runs ahead across bags, up to the end of the last bag (ir/kernel.hpp): it must never read an id
// past it. (That it runs across bags at all is a matter of speed: docs/performance.md, "Bag
// prefetches run across bags".)
//
// The ids sit at the very end of a page whose next page is inaccessible, so a prefetch that reads
// an id past the last one faults, in every build (not only under ASan). The bags are of 0 to 3
// ids, so the position 16 to 64 ahead lies several bags on, and the last bags are short, so near
// the end it lies past the ids. The tables are sized for a prefetch to be emitted (past twice the
// L2: L1 prefetches 16 ahead; past a quarter of the L3: L2 prefetches 32 to 64 ahead), and every
// result matches the fp64 reference, on xbyak and LLVM, on 1 and 2 threads.
#include <kfuse/index_ops.hpp>
#include <kfuse/options.hpp>
#include <kfuse/profile.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <memory>

#include "backend/backend.hpp"
#include "backend/gather_prefetch.hpp"
#include "test_util.hpp"

namespace kfuse::test {
namespace {

// `n` i64 ids ending exactly where an inaccessible page begins.
class GuardedIds {
 public:
  explicit GuardedIds(size_t n) : page_(static_cast<size_t>(::sysconf(_SC_PAGESIZE))) {
    span_ = (n * sizeof(int64_t) + page_ - 1) / page_ * page_ + page_;
    void* p = ::mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base_ = static_cast<char*>(p);
    if (::mprotect(base_ + span_ - page_, page_, PROT_NONE) != 0) return;
    ids_ = reinterpret_cast<int64_t*>(base_ + span_ - page_) - n;
  }
  ~GuardedIds() {
    if (base_) ::munmap(base_, span_);
  }
  GuardedIds(const GuardedIds&) = delete;
  GuardedIds& operator=(const GuardedIds&) = delete;
  int64_t* ids() const { return ids_; }

 private:
  size_t page_, span_ = 0;
  char* base_ = nullptr;
  int64_t* ids_ = nullptr;
};

TEST(BagPrefetch, ReadsNoIdPastTheLastBagOnEitherBackend) {
  const probe::CacheSizes& cs = probe::cache_sizes();
  constexpr int64_t D = 16, N = 512;  // 64-byte rows; a page of ids
  std::vector<std::string> backends;
  for (const char* b : {"xbyak", "llvm"})
    if (detail::find_backend(b)) backends.push_back(b);
  if (backends.empty()) GTEST_SKIP() << "no CPU JIT backend built in";
  GuardedIds guarded(N);
  ASSERT_NE(guarded.ids(), nullptr) << "mmap/mprotect failed";
  // Bags of 0 to 3 ids (a fixed pattern), the last ones of one id, the last bag ending at N.
  std::vector<int64_t> offsets;
  for (int64_t at = 0, b = 0; at < N; ++b) {
    offsets.push_back(at);
    at += N - at <= 8 ? 1 : (b * 7 + 3) % 4;
  }
  const auto B = static_cast<int64_t>(offsets.size());
  const Options saved = options();
  for (const int64_t rows : {2 * cs.l2 / (D * 4) + 64, cs.l3 / 4 / (D * 4) + 1024}) {
    const detail::GatherPrefetch how = detail::gather_prefetch(rows * D * 4, D * 4, true);
    ASSERT_GT(how.ahead, 0) << rows << " rows";
    // Only the rows the ids select are written (and read by the reference); the rest of the table is
    // never touched.
    std::unique_ptr<float[]> table(new float[static_cast<size_t>(rows * D)]);
    const std::vector<double> ids = random_ints(N, 90 + static_cast<uint64_t>(rows % 7), 0, rows - 1);
    for (int64_t i = 0; i < N; ++i) {
      guarded.ids()[i] = static_cast<int64_t>(ids[static_cast<size_t>(i)]);
      for (int64_t d = 0; d < D; ++d)
        table[static_cast<size_t>(guarded.ids()[i] * D + d)] =
            static_cast<float>((guarded.ids()[i] % 97) - 48 + d) / 16;
    }
    for (const std::string& backend : backends)
      for (int threads : {1, 2}) {
        SCOPED_TRACE(backend + ", " + std::to_string(threads) + " thread(s), " + std::to_string(rows) + " rows, " +
                     std::to_string(how.ahead) + " ahead");
        Options o = saved;
        o.backends = {backend};
        o.num_threads = threads;
        set_options(o);
        Tensor y = embedding_bag(Tensor::borrow(table.get(), {rows, D}), Tensor::borrow(guarded.ids(), {N}),
                                 Tensor::borrow(offsets.data(), {B}), BagMode::Sum);
        reset_counters();
        const std::vector<double> got = values(y);
        EXPECT_EQ(counters().fallbacks, 0u);
        EXPECT_TRUE(all_close(got, reference_values(y), 1e-6, 1e-6));
      }
  }
  set_options(saved);
}

}  // namespace
}  // namespace kfuse::test
