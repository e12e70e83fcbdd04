// The gemv kernels against a plain double-precision loop: vec_mat (x·W, W [K, N]) and mat_vec
// (A·x, A [M, K] with a row stride), which the decoder uses for one-row steps in the training
// and decode weight layouts. Both must give the same product over a matrix and its transpose.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/kernels.h"

namespace seqtape {
namespace {

template <typename T>
std::vector<T> filled(int64_t n, double scale) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<T>(std::sin(scale * (i + 1)));
  return v;
}

template <typename T>
void check_gemv(double tol) {
  const int64_t K = 37, N = 23, lda = K + 5;  // odd sizes, a padded row stride
  const std::vector<T> x = filled<T>(K, 0.7), w = filled<T>(K * N, 0.13);
  std::vector<T> a(static_cast<size_t>(N * lda), T(99));  // Wᵀ [N, K] with padding
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      a[static_cast<size_t>(n * lda + k)] = w[static_cast<size_t>(k * N + n)];
  std::vector<T> y1(static_cast<size_t>(N), T(1)), y2(static_cast<size_t>(N), T(1));
  kernels::vec_mat<T>(K, N, T(2), x.data(), w.data(), T(0.5), y1.data());
  kernels::mat_vec<T>(N, K, T(2), a.data(), lda, x.data(), T(0.5), y2.data());
  for (int64_t n = 0; n < N; ++n) {
    double want = 0;
    for (int64_t k = 0; k < K; ++k)
      want += static_cast<double>(x[static_cast<size_t>(k)]) *
              static_cast<double>(w[static_cast<size_t>(k * N + n)]);
    want = 2 * want + 0.5;
    EXPECT_NEAR(y1[static_cast<size_t>(n)], want, tol) << "vec_mat column " << n;
    EXPECT_NEAR(y2[static_cast<size_t>(n)], want, tol) << "mat_vec row " << n;
  }
}

TEST(Kernels, GemvMatchesLoopInBothLayoutsFloat) {
  check_gemv<float>(1e-5);
}
TEST(Kernels, GemvMatchesLoopInBothLayoutsDouble) {
  check_gemv<double>(1e-12);
}

}  // namespace
}  // namespace seqtape
