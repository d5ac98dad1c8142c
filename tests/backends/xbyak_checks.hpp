// Shared by the xbyak feature tests (narrow streams, index masks): a kernel family must compile
// on xbyak (no fallback) and give the LLVM backend's bits and the fp64 reference's values.
#pragma once
#include <kfuse/options.hpp>
#include <kfuse/stats.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "test_util.hpp"

namespace kfuse::test {

// Evaluates make() with only `backend`, returns its outputs' values and the fallbacks it took.
inline std::pair<std::vector<std::vector<double>>, uint64_t> run_on(const std::string& backend,
                                                                    const std::function<std::vector<Tensor>()>& make) {
  Options saved = options(), o = saved;
  o.backends = {backend};
  set_options(o);
  reset_counters();
  std::vector<Tensor> outs = make();
  eval(outs);
  std::vector<std::vector<double>> v;
  for (const auto& t : outs) v.push_back(values(t));
  const uint64_t fallbacks = counters().fallbacks;
  set_options(saved);
  return {v, fallbacks};
}

// Every output of make() on xbyak: no fallback, the LLVM backend's bits where it is built in and
// `bitwise` (not across the backends' different exp), else within `tol` of the fp64 reference.
inline void check_on_xbyak(const std::function<std::vector<Tensor>()>& make, bool bitwise, double tol) {
  auto [got, fallbacks] = run_on("xbyak", make);
  EXPECT_EQ(fallbacks, 0u) << "xbyak declined a kernel (KFUSE_LOG=backend)";
  if (bitwise && detail::find_backend("llvm")) {
    auto [want, llvm_fallbacks] = run_on("llvm", make);
    for (size_t i = 0; i < got.size(); ++i) { EXPECT_TRUE(same_bits(got[i], want[i])) << "output " << i; }
  }
  std::vector<Tensor> outs = make();
  auto ref = reference_values(outs);
  for (size_t i = 0; i < got.size(); ++i) { EXPECT_TRUE(all_close(got[i], ref[i], tol, tol)) << "output " << i; }
}

}  // namespace kfuse::test
