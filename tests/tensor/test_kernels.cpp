// The gemv kernels against a plain double-precision loop: vec_mat (x·W, W [K, N]) and mat_vec
// (A·x, A [M, K] with a row stride). Both must give the same product over a matrix and its
// transpose. And gemm_nt_rowwise, the decoder's kernel on the Decode layout: right, each row
// independent of the batch it is computed in, summed in exactly the documented order of the path
// in use, and the same bits on any number of threads.

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tensor/kernels.h"

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
// around the blockings (1, 3, 8 outputs at a time) and M around the 3- and 4-row groups and the
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

// The documented order of the path in use (kernels_rowwise.cpp), written out one output at a
// time: W lanes (16 with AVX-512, else 8), lane u summing x·w over columns p + u in increasing p
// (fused multiply-add except on the portable path), lanes u + 8 folded in, then
// ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)), then the K mod W tail in increasing p.
float rowwise_reference(int64_t k, const float* x, const float* w) {
  const std::string path = kernels::gemm_nt_rowwise_path();
  const bool fused = path != "portable";
  const int lanes = path == "avx512" ? 16 : 8;
  float a[16] = {};
  const auto madd = [fused](float p, float q, float acc) {
    if (fused) return std::fma(p, q, acc);
    volatile float prod = p * q;  // rounded on its own, as the portable path does
    return acc + prod;
  };
  int64_t p = 0;
  for (; p + lanes <= k; p += lanes)
    for (int u = 0; u < lanes; ++u) a[u] = madd(x[p + u], w[p + u], a[u]);
  if (lanes == 16)
    for (int u = 0; u < 8; ++u) a[u] = a[u] + a[u + 8];
  float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (; p < k; ++p) s = madd(x[p], w[p], s);
  return s;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

// Every output, bit for bit, against the order written out above: M around the row groups (4
// rows, then pairs or single rows), N around the 8-output blocks, K below, at and above the lane
// widths; on one thread and on several (the larger shapes are big enough to be split).
TEST(Kernels, RowwiseGemmSumsInTheDocumentedOrder) {
  for (int threads : {1, 2, 3}) {
    kernels::gemm_nt_rowwise_set_threads(threads);
    for (int64_t K : {5, 16, 37, 256})
      for (int64_t N : {3, 8, 19, 264})
        for (int64_t M : {1, 2, 3, 4, 7, 32, 67}) {
          const int64_t ldx = K + 1, ldw = K + 3, ldy = N + 1;
          const std::vector<float> x = filled<float>(M * ldx, 0.29),
                                   w = filled<float>(N * ldw, 0.07);
          std::vector<float> y(static_cast<size_t>(M * ldy), -3.f);
          kernels::gemm_nt_rowwise(M, N, K, x.data(), ldx, w.data(), ldw, y.data(), ldy);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              const float want = rowwise_reference(K, x.data() + i * ldx, w.data() + j * ldw);
              ASSERT_TRUE(same_bits(y[size_t(i * ldy + j)], want))
                  << kernels::gemm_nt_rowwise_path() << " threads " << threads << " K " << K
                  << " N " << N << " M " << M << " row " << i << " out " << j << ": "
                  << y[size_t(i * ldy + j)] << " vs " << want;
            }
        }
  }
  kernels::gemm_nt_rowwise_set_threads(0);
}

// A call big enough to be split over threads (2·M·N·K >= 2^20) gives the same bits on 1, 2 and
// 4 threads, and while another thread makes calls of its own at the same time (one of the two
// then runs alone).
TEST(Kernels, RowwiseGemmThreadsDoNotChangeBits) {
  const int64_t M = 32, N = 1000, K = 264;
  const std::vector<float> x = filled<float>(M * K, 0.41), w = filled<float>(N * K, 0.05);
  const auto run = [&] {
    std::vector<float> y(static_cast<size_t>(M * N));
    kernels::gemm_nt_rowwise(M, N, K, x.data(), K, w.data(), K, y.data(), N);
    return y;
  };
  kernels::gemm_nt_rowwise_set_threads(1);
  EXPECT_EQ(kernels::gemm_nt_rowwise_threads(), 1);
  const std::vector<float> one = run();
  for (int threads : {2, 4}) {
    kernels::gemm_nt_rowwise_set_threads(threads);
    EXPECT_EQ(std::memcmp(run().data(), one.data(), one.size() * sizeof(float)), 0)
        << threads << " threads";
  }
  kernels::gemm_nt_rowwise_set_threads(2);
  bool other_same = true;
  std::thread other([&] {
    for (int i = 0; i < 20; ++i)
      other_same = other_same && std::memcmp(run().data(), one.data(), one.size() * 4) == 0;
  });
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(std::memcmp(run().data(), one.data(), one.size() * sizeof(float)), 0) << "call " << i;
  other.join();
  EXPECT_TRUE(other_same);
  kernels::gemm_nt_rowwise_set_threads(0);
  EXPECT_GE(kernels::gemm_nt_rowwise_threads(), 1);
}

// weighted_rows (the attention context): each output bit for bit the sum over j in increasing j
// (fused on the vector paths), whatever M, and so each row the same alone as in a batch; D
// around the vector widths, strides wider than the rows.
TEST(Kernels, WeightedRowsSumInIncreasingJ) {
  const bool fused = std::string(kernels::gemm_nt_rowwise_path()) != "portable";
  for (int64_t J : {1, 7, 33})
    for (int64_t D : {3, 16, 64, 100}) {
      const int64_t M = 5, lds = J + 2, ldv = D + 3, ldy = D + 1;
      const std::vector<float> s = filled<float>(M * lds, 0.23), v = filled<float>(J * ldv, 0.19);
      std::vector<float> y(static_cast<size_t>(M * ldy), -5.f);
      kernels::weighted_rows(M, J, D, s.data(), lds, v.data(), ldv, y.data(), ldy);
      for (int64_t i = 0; i < M; ++i) {
        std::vector<float> one(static_cast<size_t>(D));
        kernels::weighted_rows(1, J, D, s.data() + i * lds, lds, v.data(), ldv, one.data(), D);
        for (int64_t c = 0; c < D; ++c) {
          float want = 0.f;
          for (int64_t t = 0; t < J; ++t) {
            const float a = s[size_t(i * lds + t)], b = v[size_t(t * ldv + c)];
            if (fused) {
              want = std::fma(a, b, want);
            } else {
              volatile float prod = a * b;
              want = want + prod;
            }
          }
          const float got = y[size_t(i * ldy + c)];
          ASSERT_TRUE(same_bits(got, want)) << "J " << J << " D " << D << " row " << i << " col "
                                            << c << ": " << got << " vs " << want;
          ASSERT_TRUE(same_bits(got, one[size_t(c)])) << "J " << J << " D " << D << " row " << i;
        }
        if (D < ldy) {
          ASSERT_EQ(y[size_t(i * ldy + D)], -5.f) << "wrote past the row";
        }
      }
    }
}

// The epilogue (bias, then activation) gives exactly what add_row_bias then activate give after
// the plain product, on 1 and 2 threads, for a call small enough to stay whole and one that is
// split; a row stride wider than N leaves the gap untouched.
TEST(Kernels, RowwiseEpilogueIsBiasThenActivation) {
  const int64_t M = 5, K = 256;
  for (int64_t N : {24, 520})  // 2·M·N·K: ~2^16 (whole), ~2^20.3 (split on 2 threads)
    for (int threads : {1, 2})
      for (kernels::Act act : {kernels::Act::Relu, kernels::Act::Gelu, kernels::Act::Tanh})
        for (bool with_bias : {false, true}) {
          kernels::gemm_nt_rowwise_set_threads(threads);
          const int64_t ldy = N + 3;
          const std::vector<float> x = filled<float>(M * K, 0.3), w = filled<float>(N * K, 0.02),
                                   b = filled<float>(N, 0.7);
          std::vector<float> want(size_t(M * ldy), -5.f), got(want);
          kernels::gemm_nt_rowwise(M, N, K, x.data(), K, w.data(), K, want.data(), ldy);
          for (int64_t i = 0; i < M; ++i) {
            float* row = want.data() + i * ldy;
            if (with_bias) kernels::add_row_bias<float>(row, b.data(), 1, N);
            kernels::activate<float>(row, row, N, act);
          }
          const kernels::RowwiseEpilogue e{with_bias ? b.data() : nullptr, true, act};
          kernels::gemm_nt_rowwise(M, N, K, x.data(), K, w.data(), K, got.data(), ldy, e);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
              << "N " << N << ", " << threads << " threads, act " << int(act) << ", bias "
              << with_bias;
        }
  kernels::gemm_nt_rowwise_set_threads(0);
}

// pack_strips: the same strips from W [out, in] and from its transpose [in, out]; output
// s·32 + c, input p at (s·K + p)·32 + c; the last strip's missing outputs zero.
TEST(Kernels, RowwisePackedStripsHoldEveryWeightOnce) {
  const int64_t N = 37, K = 5;
  const std::vector<float> w = filled<float>(N * K, 0.31);  // [N, K]
  std::vector<float> wt(size_t(N * K));                     // [K, N]
  for (int64_t j = 0; j < N; ++j)
    for (int64_t p = 0; p < K; ++p) wt[size_t(p * N + j)] = w[size_t(j * K + p)];
  ASSERT_EQ(kernels::packed_size(N, K), 2 * 32 * K);
  std::vector<float> a(size_t(kernels::packed_size(N, K)), -1.f), b(a.size(), -2.f);
  kernels::pack_strips(N, K, w.data(), K, 1, a.data());
  kernels::pack_strips(N, K, wt.data(), 1, N, b.data());
  EXPECT_EQ(a, b);
  for (int64_t j = 0; j < 64; ++j)
    for (int64_t p = 0; p < K; ++p)
      ASSERT_EQ(a[size_t(((j / 32) * K + p) * 32 + j % 32)], j < N ? w[size_t(j * K + p)] : 0.f)
          << "output " << j << " input " << p;
}

// gemm_packed: every output bit for bit one chain over p in increasing p (fused multiply-adds on
// the vector paths), then + bias, then the activation (the scalar activate), whatever M, so each
// row gives the same bits alone as in any batch; on 1, 2 and 3 threads (the larger shapes are
// split); M around the 8-, 4-, 2- and 1-row blocks and the 64-row panels; N around the 32-output
// strips and the groups of 4; K from 1; strides wider than the rows, whose gap stays untouched.
TEST(Kernels, RowwisePackedSumsInOneChainThenBiasThenActivation) {
  const bool fused = std::string(kernels::gemm_nt_rowwise_path()) != "portable";
  const auto chain = [fused](int64_t k, const float* x, const float* w) {
    float a = 0.f;
    for (int64_t p = 0; p < k; ++p) {
      if (fused) {
        a = std::fma(x[p], w[p], a);
      } else {
        volatile float prod = x[p] * w[p];  // rounded on its own, as the portable path does
        a = a + prod;
      }
    }
    return a;
  };
  struct Epi {
    bool bias, act;
    kernels::Act which;
  };
  const Epi epis[] = {{false, false, kernels::Act::Relu}, {true, false, kernels::Act::Relu},
                      {true, true, kernels::Act::Relu},   {false, true, kernels::Act::Relu},
                      {true, true, kernels::Act::Gelu},   {true, true, kernels::Act::Tanh}};
  for (int threads : {1, 2, 3}) {
    kernels::gemm_nt_rowwise_set_threads(threads);
    for (int64_t K : {1, 5, 16, 37, 256})
      for (int64_t N : {1, 3, 32, 33, 100, 264})
        for (int64_t M : {1, 2, 3, 7, 8, 13, 16, 67}) {
          const int64_t ldx = K + 1, ldy = N + 1;
          const std::vector<float> x = filled<float>(M * ldx, 0.29), w = filled<float>(N * K, 0.07),
                                   b = filled<float>(N, 0.5);
          std::vector<float> wp(size_t(kernels::packed_size(N, K)));
          kernels::pack_strips(N, K, w.data(), K, 1, wp.data());
          for (const Epi& e : epis) {
            if (threads > 1 && M * N * K < (1 << 19)) continue;  // (unsplit: as one thread)
            const kernels::RowwiseEpilogue epi{e.bias ? b.data() : nullptr, e.act, e.which};
            std::vector<float> y(size_t(M * ldy), -3.f);
            kernels::gemm_packed(M, N, K, x.data(), ldx, wp.data(), y.data(), ldy, epi);
            for (int64_t i = 0; i < M; ++i) {
              for (int64_t j = 0; j < N; ++j) {
                float want = chain(K, x.data() + i * ldx, w.data() + j * K);
                if (e.bias) want += b[size_t(j)];
                if (e.act) kernels::activate<float>(&want, &want, 1, e.which);
                ASSERT_TRUE(same_bits(y[size_t(i * ldy + j)], want))
                    << kernels::gemm_nt_rowwise_path() << " threads " << threads << " K " << K
                    << " N " << N << " M " << M << " row " << i << " out " << j << " bias "
                    << e.bias << " act " << e.act << ": " << y[size_t(i * ldy + j)] << " vs "
                    << want;
              }
              ASSERT_EQ(y[size_t(i * ldy + N)], -3.f) << "wrote past row " << i;
            }
          }
        }
  }
  kernels::gemm_nt_rowwise_set_threads(0);
}

// parallel_for runs every chunk exactly once, on 1 or 2 threads, also when a chunk itself makes
// a gemm_nt_rowwise call big enough to be split (that call then runs on its chunk's thread).
TEST(Kernels, ParallelForRunsEveryChunkOnce) {
  const int64_t M = 8, N = 512, K = 256;  // 2·M·N·K = 2^21: a splittable call (>= 2^20)
  const std::vector<float> x = filled<float>(M * K, 0.3), w = filled<float>(N * K, 0.02);
  std::vector<float> want(static_cast<size_t>(M * N));
  kernels::gemm_nt_rowwise(M, N, K, x.data(), K, w.data(), K, want.data(), N);
  for (int threads : {1, 2}) {
    kernels::gemm_nt_rowwise_set_threads(threads);
    for (int64_t chunks : {1, 2, 7, 100}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(chunks));
      std::vector<std::vector<float>> ys(static_cast<size_t>(chunks));
      auto task = [&](int64_t c) {
        runs[size_t(c)].fetch_add(1);
        if (c % 3 != 0) return;
        ys[size_t(c)].resize(size_t(M * N));
        kernels::gemm_nt_rowwise(M, N, K, x.data(), K, w.data(), K, ys[size_t(c)].data(), N);
      };
      kernels::parallel_for(chunks, task);
      for (int64_t c = 0; c < chunks; ++c) {
        EXPECT_EQ(runs[size_t(c)].load(), 1)
            << threads << " threads, chunk " << c << " of " << chunks;
        if (c % 3 == 0) {
          EXPECT_EQ(std::memcmp(ys[size_t(c)].data(), want.data(), want.size() * sizeof(float)), 0)
              << threads << " threads, chunk " << c;
        }
      }
    }
  }
  kernels::gemm_nt_rowwise_set_threads(0);
}

// add_column_sums gives exactly the bits of d[j] += f(i, j) in increasing i, on 1 and 2 threads,
// for widths that are and are not a multiple of its 64-column blocks.
TEST(Kernels, ColumnSumsAreTheRowsInOrder) {
  const int64_t rows = 300;
  for (int64_t cols : {150, 1000}) {
    const std::vector<float> a = filled<float>(rows * cols, 0.37);
    auto f = [&](int64_t i, int64_t j) { return a[size_t(i * cols + j)] * 1.5f; };
    std::vector<float> want = filled<float>(cols, 0.9);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) want[size_t(j)] += f(i, j);
    for (int threads : {1, 2}) {
      kernels::gemm_nt_rowwise_set_threads(threads);
      std::vector<float> got = filled<float>(cols, 0.9);
      kernels::add_column_sums(got.data(), rows, cols, 2.0, f);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << "cols " << cols << ", " << threads << " threads";
    }
  }
  kernels::gemm_nt_rowwise_set_threads(0);
}

// rows_with_column_sums runs each row once and sums each block of kSumRows rows from zero in
// increasing i, then adds the blocks to d in order: exactly those bits on 1 and 2 threads, with
// a last block that is not full; a null d[k] is left out.
TEST(Kernels, RowsWithColumnSumsAddBlocksInOrder) {
  const int64_t rows = 300, cols = 150, blocks = (rows + kernels::kSumRows - 1) / kernels::kSumRows;
  const std::vector<float> a = filled<float>(rows * cols, 0.37),
                           b = filled<float>(rows * cols, 0.011);
  auto term = [&](int k, int64_t i, int64_t j) {
    const size_t e = size_t(i * cols + j);
    return k == 0 ? a[e] * b[e] : a[e] + 0.5f;
  };
  std::vector<float> want0 = filled<float>(cols, 0.9), want1 = filled<float>(cols, 0.4);
  for (int64_t bl = 0; bl < blocks; ++bl)
    for (int k = 0; k < 2; ++k) {
      std::vector<float> part(size_t(cols), 0.f);
      for (int64_t i = bl * kernels::kSumRows; i < std::min(rows, (bl + 1) * kernels::kSumRows);
           ++i)
        for (int64_t j = 0; j < cols; ++j) part[size_t(j)] += term(k, i, j);
      std::vector<float>& w = k == 0 ? want0 : want1;
      for (int64_t j = 0; j < cols; ++j) w[size_t(j)] += part[size_t(j)];
    }
  for (int threads : {1, 2}) {
    kernels::gemm_nt_rowwise_set_threads(threads);
    std::vector<float> got0 = filled<float>(cols, 0.9), got1 = filled<float>(cols, 0.4);
    std::vector<std::atomic<int>> runs(static_cast<size_t>(rows));
    float* const d[2] = {got0.data(), got1.data()};
    kernels::rows_with_column_sums(rows, cols, 1000.0, d, [&](int64_t i, float* part) {
      runs[size_t(i)].fetch_add(1);
      for (int k = 0; k < 2; ++k)
        for (int64_t j = 0; j < cols; ++j) part[k * cols + j] += term(k, i, j);
    });
    for (int64_t i = 0; i < rows; ++i) ASSERT_EQ(runs[size_t(i)].load(), 1) << "row " << i;
    EXPECT_EQ(std::memcmp(got0.data(), want0.data(), want0.size() * sizeof(float)), 0)
        << threads << " threads";
    EXPECT_EQ(std::memcmp(got1.data(), want1.data(), want1.size() * sizeof(float)), 0)
        << threads << " threads";
    std::vector<float> only0 = filled<float>(cols, 0.9);
    float* const d0[2] = {only0.data(), nullptr};
    kernels::rows_with_column_sums(rows, cols, 1000.0, d0, [&](int64_t i, float* part) {
      for (int k = 0; k < 2; ++k)
        for (int64_t j = 0; j < cols; ++j) part[k * cols + j] += term(k, i, j);
    });
    EXPECT_EQ(only0, got0) << threads << " threads";
  }
  kernels::gemm_nt_rowwise_set_threads(0);
}

}  // namespace
}  // namespace seqtape
