// The gemv kernels against a plain double-precision loop: vec_mat (x·W, W [K, N]) and mat_vec
// (A·x, A [M, K] with a row stride). Both must give the same product over a matrix and its
// transpose. And gemm_nt_rowwise, the decoder's kernel on the Decode layout: right, and each
// row independent of the batch it is computed in.

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

// gemm_nt_rowwise against a double loop, and row independence: every row of a batch of M rows is
// bit for bit the row computed alone (M = 1), for K below, at and above the 8-lane width, N
// around the blockings (1, 3, 8 outputs at a time) and M around the 4-row groups and the
// 64-row panels. Strides wider than the rows.
TEST(Kernels, RowwiseGemmRowsAreIndependentOfTheBatch) {
  for (int64_t K : {4, 8, 13, 64, 259})
    for (int64_t N : {1, 5, 8, 9, 26}) {
      const int64_t M = 131, ldx = K + 3, ldw = K + 1, ldy = N + 2;
      const std::vector<float> x = filled<float>(M * ldx, 0.37), w = filled<float>(N * ldw, 0.11);
      std::vector<float> all(static_cast<size_t>(M * ldy), -7.f);
      kernels::gemm_nt_rowwise(M, N, K, x.data(), ldx, w.data(), ldw, all.data(), ldy);
      for (int64_t i = 0; i < M; ++i) {
        std::vector<float> one(static_cast<size_t>(N));
        kernels::gemm_nt_rowwise(1, N, K, x.data() + i * ldx, ldx, w.data(), ldw, one.data(), N);
        for (int64_t j = 0; j < N; ++j) {
          double ref = 0;
          for (int64_t p = 0; p < K; ++p)
            ref += double(x[size_t(i * ldx + p)]) * double(w[size_t(j * ldw + p)]);
          const float got = all[size_t(i * ldy + j)];
          ASSERT_EQ(got, one[size_t(j)]) << "K " << K << " N " << N << " row " << i << " out " << j;
          ASSERT_NEAR(got, ref, 1e-5 * (1 + std::fabs(ref))) << "K " << K << " N " << N;
        }
        if (N < ldy) {
          ASSERT_EQ(all[size_t(i * ldy + N)], -7.f) << "wrote past the row";
        }
      }
      // Batches of other sizes (and offsets) give the same rows again.
      for (int64_t m : {2, 3, 4, 5, 7, 64, 65}) {
        std::vector<float> part(static_cast<size_t>(m * ldy));
        kernels::gemm_nt_rowwise(m, N, K, x.data() + 3 * ldx, ldx, w.data(), ldw, part.data(), ldy);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < N; ++j)
            ASSERT_EQ(part[size_t(i * ldy + j)], all[size_t((i + 3) * ldy + j)])
                << "K " << K << " N " << N << " m " << m << " row " << i;
      }
    }
}

}  // namespace
}  // namespace seqtape
