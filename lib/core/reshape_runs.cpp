#include "reshape_runs.hpp"

namespace kfuse::detail {

std::vector<std::pair<size_t, size_t>> reshape_runs(const Shape& out, const Shape& in) {
  for (int64_t e : out)
    if (e == 0) return {};
  std::vector<std::pair<size_t, size_t>> runs;
  size_t i = 0, j = 0;
  while (i < out.size() && j < in.size()) {
    int64_t po = out[i++], pi = in[j++];
    while (po != pi) {
      if (po < pi && i < out.size()) po *= out[i++];
      else if (j < in.size()) pi *= in[j++];
      else return {};
    }
    runs.push_back({i, j});
  }
  if (runs.empty()) return {};
  // The products met; what is left on either side is size-1 dims.
  runs.back() = {out.size(), in.size()};
  return runs;
}

bool reshape_only_splits(const Shape& out, const Shape& in) {
  const auto runs = reshape_runs(out, in);
  if (runs.empty()) return false;
  size_t j0 = 0;
  for (const auto& [i1, j1] : runs) {
    int big = 0;
    for (size_t j = j0; j < j1; ++j) big += in[j] != 1;
    if (big > 1) return false;
    j0 = j1;
  }
  return true;
}

}  // namespace kfuse::detail
