#include "bag_problem.hpp"

#include <kfuse/options.hpp>

#include <sys/mman.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <numeric>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>

namespace kbench {

std::shared_ptr<const float> bag_table(int64_t rows, int64_t cols) {
  // One table per shape for the process (kfuse_compare's f32 / f16 / 8-bit / 4-bit workloads
  // over uniform and Zipf ids all read the same 512 MiB at [2M, 64]).
  static std::mutex mu;
  static std::map<std::pair<int64_t, int64_t>, std::weak_ptr<const float>> made;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = made[{rows, cols}];
  if (auto t = slot.lock()) return t;
  const auto n = static_cast<size_t>(rows * cols);
  const size_t huge = size_t{2} << 20, bytes = (n * sizeof(float) + huge - 1) / huge * huge;
  auto* p = static_cast<float*>(std::aligned_alloc(huge, bytes));
  if (!p) throw std::bad_alloc();
  if (kfuse::options().huge_pages) madvise(p, bytes, MADV_HUGEPAGE);
  SplitMix g{12345};
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(2 * g.unit() - 1);
  std::shared_ptr<const float> t(p, [](const float* q) { std::free(const_cast<float*>(q)); });
  slot = t;
  return t;
}

BagProblem make_bag_problem(int64_t rows, int64_t cols, int64_t bags, bool zipf, uint64_t seed) {
  BagProblem p;
  auto table = bag_table(rows, cols);
  p.table = table.get();
  p.owner = std::const_pointer_cast<float>(table);
  p.rows = rows;
  p.cols = cols;
  SplitMix g{seed};
  uint64_t mult = 2654435761ULL;  // odd, made coprime to R: a bijection of the ranks
  while (std::gcd(mult, static_cast<uint64_t>(rows)) != 1) mult += 2;
  for (int64_t b = 0; b < bags; ++b) {
    p.offsets.push_back(static_cast<int64_t>(p.ids.size()));
    const int64_t len = 20 + static_cast<int64_t>(g.next() % 81);
    for (int64_t i = 0; i < len; ++i) {
      uint64_t r;
      if (zipf) {  // k = floor(R^u) - 1 for uniform u: Zipf with exponent 1
        const auto k = static_cast<uint64_t>(std::floor(std::pow(static_cast<double>(rows), g.unit()))) - 1;
        r = static_cast<uint64_t>((static_cast<unsigned __int128>(k) * mult) % static_cast<uint64_t>(rows));
      } else {
        r = g.next() % static_cast<uint64_t>(rows);
      }
      p.ids.push_back(static_cast<int64_t>(r));
    }
  }
  p.distinct = static_cast<int64_t>(std::unordered_set<int64_t>(p.ids.begin(), p.ids.end()).size());
  return p;
}

std::shared_ptr<const BagProblem> shared_bag_problem(int64_t rows, int64_t cols, int64_t bags, bool zipf) {
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, int64_t, bool>, std::shared_ptr<const BagProblem>> made;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = made[{rows, cols, bags, zipf}];
  if (!slot) slot = std::make_shared<const BagProblem>(make_bag_problem(rows, cols, bags, zipf, zipf ? 2 : 1));
  return slot;
}

Reference bag_reference(const BagProblem& p, const float* values) {
  Reference r;
  const auto bags = static_cast<int64_t>(p.offsets.size());
  r.values.assign(static_cast<size_t>(bags * p.cols), 0.0);
  r.bound.assign(r.values.size(), 0.0);
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t end = b + 1 < bags ? p.offsets[b + 1] : static_cast<int64_t>(p.ids.size());
    for (int64_t i = p.offsets[b]; i < end; ++i)
      for (int64_t c = 0; c < p.cols; ++c) {
        const double v = values[static_cast<size_t>(p.ids[i] * p.cols + c)];
        r.values[static_cast<size_t>(b * p.cols + c)] += v;
        r.bound[static_cast<size_t>(b * p.cols + c)] += 4 * 1.1920929e-7 * std::fabs(v);
      }
  }
  r.atol = 1e-6;
  r.rtol = 0;
  return r;
}

double bag_row_bytes(const std::string& format, int64_t cols) {
  const auto d = static_cast<double>(cols);
  if (format == "f32") return 4 * d;
  if (format == "f16") return 2 * d;
  if (format == "8-bit" || format == "8-bit fused") return d + 8;
  if (format == "4-bit") return std::ceil(d / 2) + 8;
  if (format == "4-bit fused") return std::ceil(d / 2) + 4;
  throw std::invalid_argument("bag_row_bytes: unknown table format " + format);
}

}  // namespace kbench
