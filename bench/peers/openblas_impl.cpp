// OpenBLAS (Debian's libopenblas-dev, the pthread build): cblas_sgemm for the GEMM workloads, the
// BLAS a C++ user would otherwise call. Declared here: Debian puts cblas.h under a per-variant
// include directory.
#include <memory>

#include "peers.hpp"

extern "C" {
void cblas_sgemm(int order, int ta, int tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc);
void openblas_set_num_threads(int);
char* openblas_get_config();
}

namespace kbench {

std::string openblas_version() {
  std::string c = openblas_get_config();
  return c.substr(0, c.find(' ', c.find(' ') + 1));  // "OpenBLAS 0.3.21"
}

std::vector<Impl> openblas_impls(const Workload& w, int threads) {
  if (w.kind != Kind::Matmul || w.stored_narrow()) return {};  // (Debian's build has no sbgemm; BLAS has no int8)
  auto y = std::make_shared<std::vector<float>>(static_cast<size_t>(w.out_numel));
  const int M = static_cast<int>(w.rows), N = static_cast<int>(w.cols), K = static_cast<int>(w.inner);
  const float* a = w.inputs[0].data();
  const float* b = w.inputs[1].data();
  const int tb = w.b_t ? 112 : 111, ldb = w.b_t ? K : N;  // CblasTrans / CblasNoTrans
  Impl im{"openblas sgemm", "cblas_sgemm", [threads] { openblas_set_num_threads(threads); },
          [=] { cblas_sgemm(101 /*row major*/, 111, tb, M, N, K, 1.0f, a, K, b, ldb, 0.0f, y->data(), N); },
          [y] { return static_cast<const float*>(y->data()); }};
  return {im};
}

}  // namespace kbench
