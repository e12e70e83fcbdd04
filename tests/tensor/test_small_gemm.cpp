// gemm_small_batched, gemm_batched<float>'s path for small products (attention's heads): right
// against a double loop for every transpose case, odd sizes and padded strides, alpha and beta
// (beta 0 never reads C); summed in exactly the documented order of the path in use; the same
// bits on any number of threads; and what gemm_batched<float>, gemm<float> and gemm_bias<float>
// send there.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels_small_gemm.h"
#include "tensor/matmul_backend.h"

namespace seqtape {
namespace {

std::vector<float> filled(int64_t n, double scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(std::sin(scale * (i + 1)));
  return v;
}

// A batch of 2 × 3 products with padded row strides and batch strides, C starting as `c0`
// everywhere (padding included).
struct Problem {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  int64_t lda, ldb, ldc;
  kernels::GemmBatch bt;
  std::vector<float> a, b, c;

  Problem(bool ta_, bool tb_, int64_t m_, int64_t n_, int64_t k_, float alpha_, float beta_,
          float c0)
      : ta(ta_), tb(tb_), m(m_), n(n_), k(k_), alpha(alpha_), beta(beta_) {
    lda = (ta ? m : k) + 3;
    ldb = (tb ? k : n) + 2;
    ldc = n + 5;
    const int64_t a_block = (ta ? k : m) * lda, b_block = (tb ? n : k) * ldb, c_block = m * ldc;
    // product (i, j) at i·3·block + j·block (C: with a block of padding between products)
    bt = {2, 3, 3 * a_block, a_block, 3 * b_block, b_block, 3 * (c_block + 7), c_block + 7};
    a = filled(6 * a_block, 0.37);
    b = filled(6 * b_block, 0.11);
    c.assign(static_cast<size_t>(6 * (c_block + 7)), c0);
  }
  float A(int64_t i, int64_t j, int64_t r, int64_t p) const {  // op(A)[r, p] of product (i, j)
    return a[static_cast<size_t>(i * bt.sa0 + j * bt.sa1 + (ta ? p * lda + r : r * lda + p))];
  }
  float B(int64_t i, int64_t j, int64_t p, int64_t q) const {  // op(B)[p, q]
    return b[static_cast<size_t>(i * bt.sb0 + j * bt.sb1 + (tb ? q * ldb + p : p * ldb + q))];
  }
  size_t at(int64_t i, int64_t j, int64_t r, int64_t q) const {
    return static_cast<size_t>(i * bt.sc0 + j * bt.sc1 + r * ldc + q);
  }
  std::vector<float> run() const {
    std::vector<float> out = c;
    kernels::gemm_small_batched(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                                out.data(), ldc, bt);
    return out;
  }
  std::string name() const {
    return "ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " " + std::to_string(m) +
           "x" + std::to_string(n) + "x" + std::to_string(k) + " beta " + std::to_string(beta);
  }
};

// Every output within float rounding of the double product, and nothing outside the C blocks
// written (the padding keeps c0).
void check_against_double(const Problem& pb, float c0) {
  const std::vector<float> out = pb.run();
  std::vector<bool> inside(out.size(), false);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t r = 0; r < pb.m; ++r)
        for (int64_t q = 0; q < pb.n; ++q) {
          double want = 0, mag = 0;
          for (int64_t p = 0; p < pb.k; ++p) {
            const double t = double(pb.A(i, j, r, p)) * double(pb.B(i, j, p, q));
            want += t;
            mag += std::fabs(t);
          }
          want *= pb.alpha;
          mag *= std::fabs(pb.alpha);
          if (pb.beta != 0.f) {
            want += double(pb.beta) * double(c0);
            mag += std::fabs(double(pb.beta) * double(c0));
          }
          const size_t o = pb.at(i, j, r, q);
          inside[o] = true;
          ASSERT_NEAR(out[o], want, 1e-6 * (mag + 1) * (double(pb.k) + 2))
              << pb.name() << " product " << i << "," << j << " C[" << r << ", " << q << "]";
        }
  for (size_t o = 0; o < out.size(); ++o)
    if (!inside[o]) {
      ASSERT_TRUE(std::memcmp(&out[o], &c0, sizeof(float)) == 0)
          << pb.name() << ": wrote outside C at " << o;
    }
}

TEST(SmallGemm, MatchesDoubleProductInEveryTransposeCase) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t sizes[] = {1, 3, 7, 17, 33};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : sizes)
        for (int64_t n : sizes)
          for (int64_t k : sizes) {
            // beta 0 over NaN (C must not be read), beta 1 (accumulate), and alpha, beta ≠ 1
            check_against_double(Problem(ta, tb, m, n, k, 1.f, 0.f, nan), nan);
            check_against_double(Problem(ta, tb, m, n, k, 1.f, 1.f, 0.25f), 0.25f);
            check_against_double(Problem(ta, tb, m, n, k, -0.75f, 0.5f, 1.5f), 1.5f);
            if (HasFatalFailure()) return;
          }
}

// The documented order, bit for bit: s = fma(a, b, s) over p from 0 (a multiply and an add on
// the portable path), then alpha·s, or fma(alpha, s, beta·c).
TEST(SmallGemm, SumsInTheDocumentedOrder) {
  const bool fused = std::string(kernels::gemm_small_path()) != "portable";
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t n : {1, 9, 16, 17, 33, 64})
        for (float beta : {0.f, 1.f, 0.5f}) {
          const Problem pb(ta, tb, 10, n, 19, 0.3f, beta, -0.7f);
          const std::vector<float> out = pb.run();
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 3; ++j)
              for (int64_t r = 0; r < pb.m; ++r)
                for (int64_t q = 0; q < pb.n; ++q) {
                  float s = 0.f;
                  for (int64_t p = 0; p < pb.k; ++p) {
                    const float x = pb.A(i, j, r, p), y = pb.B(i, j, p, q);
                    if (fused) {
                      s = std::fma(x, y, s);
                    } else {
                      const float t = x * y;
                      s = s + t;
                    }
                  }
                  float want;
                  if (beta == 0.f) {
                    want = pb.alpha * s;
                  } else if (fused) {
                    want = std::fma(pb.alpha, s, beta * -0.7f);
                  } else {
                    const float t = pb.alpha * s, u = beta * -0.7f;
                    want = t + u;
                  }
                  const float got = out[pb.at(i, j, r, q)];
                  ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
                      << pb.name() << " C[" << r << ", " << q << "] = " << got << ", want " << want
                      << " (" << kernels::gemm_small_path() << ")";
                }
        }
}

// A batch big enough to be split over the pool (attention's 64 rows × 4 heads of 16×16×16) gives
// the same bits on 1, 2 and 4 threads.
TEST(SmallGemm, ThreadsDoNotChangeBits) {
  const int64_t B = 64, H = 4, T = 16, Dh = 16, C = H * Dh;
  const std::vector<float> q = filled(B * T * C, 0.29), k = filled(B * T * C, 0.17);
  const kernels::GemmBatch heads{B, H, T * C, Dh, T * C, Dh, H * T * T, T * T};
  const auto run = [&](bool ta, bool tb) {
    std::vector<float> s(static_cast<size_t>(B * H * T * T));
    kernels::gemm_small_batched(ta, tb, T, T, Dh, 0.25f, q.data(), C, k.data(), C, 0.f, s.data(), T,
                                heads);
    return s;
  };
  for (bool tb : {false, true}) {
    kernels::gemm_nt_rowwise_set_threads(1);
    const std::vector<float> one = run(false, tb);
    for (int threads : {2, 4}) {
      kernels::gemm_nt_rowwise_set_threads(threads);
      EXPECT_EQ(std::memcmp(run(false, tb).data(), one.data(), one.size() * sizeof(float)), 0)
          << threads << " threads, tb " << tb;
    }
  }
  kernels::gemm_nt_rowwise_set_threads(0);
}

// gemm_batched<float> runs small products here (no OpenBLAS call, the same bits), bigger ones on
// OpenBLAS; float64 never comes here.
TEST(SmallGemm, GemmBatchedSendsSmallFloatProductsHere) {
  EXPECT_TRUE(kernels::gemm_small_takes(16, 16, 16));
  EXPECT_TRUE(kernels::gemm_small_takes(64, 64, 64));
  EXPECT_FALSE(kernels::gemm_small_takes(65, 64, 64));
  EXPECT_FALSE(kernels::gemm_small_takes(16, 16, 0));
  // under bf16, the small and short models' heads, not the medium model's
  EXPECT_TRUE(kernels::gemm_small_takes_bf16(16, 16, 16));
  EXPECT_TRUE(kernels::gemm_small_takes_bf16(10, 9, 32));
  EXPECT_FALSE(kernels::gemm_small_takes_bf16(32, 32, 64));
  EXPECT_FALSE(kernels::gemm_small_takes_bf16(16, 16, 0));
  const kernels::MatmulScope blas(kernels::MatmulBackend::OpenBLAS, kernels::Precision::F32);
  const Problem pb(false, true, 16, 16, 16, 0.25f, 0.f, 0.f);
  const std::vector<float> want = pb.run();
  std::vector<float> got = pb.c;
  const int64_t before = kernels::matmul_counts().openblas;
  kernels::gemm_batched<float>(pb.ta, pb.tb, pb.m, pb.n, pb.k, pb.alpha, pb.a.data(), pb.lda,
                               pb.b.data(), pb.ldb, pb.beta, got.data(), pb.ldc, pb.bt);
  EXPECT_EQ(kernels::matmul_counts().openblas, before);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
  const Problem big(false, false, 80, 80, 80, 1.f, 0.f, 0.f);
  std::vector<float> c = big.c;
  kernels::gemm_batched<float>(false, false, 80, 80, 80, 1.f, big.a.data(), big.lda, big.b.data(),
                               big.ldb, 0.f, c.data(), big.ldc, big.bt);
  EXPECT_EQ(kernels::matmul_counts().openblas, before + 6);
}

// The products any backend ran.
int64_t library_products() {
  const kernels::MatmulCounts c = kernels::matmul_counts();
  return c.openblas + c.onednn_f32 + c.onednn_bf16;
}

// gemm<float> and gemm_bias<float> send a single small product here too, on every backend and
// precision (a library call costs more than the product: the seed model's layers), with the bits
// of a batch of one (under bf16: its operands rounded first, as for gemm_batched); a bigger
// product still goes to the backend.
TEST(SmallGemm, GemmAndGemmBiasSendSingleSmallProductsHere) {
  using kernels::MatmulBackend;
  using kernels::Precision;
  struct Mode {
    MatmulBackend backend;
    Precision precision;
  };
  for (const Mode mode :
       {Mode{MatmulBackend::OpenBLAS, Precision::F32}, Mode{MatmulBackend::OneDNN, Precision::F32},
        Mode{MatmulBackend::Auto, Precision::F32}, Mode{MatmulBackend::OneDNN, Precision::BF16}}) {
    if (!kernels::matmul_problem(mode.backend, mode.precision).empty()) continue;
    const bool bf16 = mode.precision == Precision::BF16;
    const kernels::MatmulScope scope(mode.backend, mode.precision);
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        SCOPED_TRACE(std::string(kernels::matmul_backend_name(mode.backend)) +
                     (bf16 ? " bf16" : "") + " ta " + std::to_string(ta) + " tb " +
                     std::to_string(tb));
        const Problem pb(ta, tb, 7, 5, 33, 0.5f, 0.25f, 0.75f);  // product (0, 0) of its batch
        std::vector<float> want = pb.c, got = pb.c;
        kernels::gemm_small_batched(ta, tb, 7, 5, 33, 0.5f, pb.a.data(), pb.lda, pb.b.data(),
                                    pb.ldb, 0.25f, want.data(), pb.ldc, kernels::GemmBatch{}, bf16);
        const int64_t before = library_products();
        kernels::gemm<float>(ta, tb, 7, 5, 33, 0.5f, pb.a.data(), pb.lda, pb.b.data(), pb.ldb,
                             0.25f, got.data(), pb.ldc);
        EXPECT_EQ(library_products(), before);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
        if (ta) continue;  // gemm_bias has no transposed A
        const std::vector<float> bias = filled(5, 0.53);
        want = got = pb.c;
        kernels::gemm_small_batched(false, tb, 7, 5, 33, 1.f, pb.a.data(), pb.lda, pb.b.data(),
                                    pb.ldb, 0.f, want.data(), pb.ldc, kernels::GemmBatch{}, bf16);
        for (int64_t i = 0; i < 7; ++i)
          for (int64_t j = 0; j < 5; ++j)
            want[static_cast<size_t>(i * pb.ldc + j)] += bias[static_cast<size_t>(j)];
        kernels::gemm_bias<float>(tb, 7, 5, 33, pb.a.data(), pb.lda, pb.b.data(), pb.ldb,
                                  bias.data(), got.data(), pb.ldc);
        EXPECT_EQ(library_products(), before);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0);
      }
    const Problem big(false, false, 80, 80, 80, 1.f, 0.f, 0.f);
    std::vector<float> c = big.c;
    const int64_t before = library_products();
    kernels::gemm<float>(false, false, 80, 80, 80, 1.f, big.a.data(), big.lda, big.b.data(),
                         big.ldb, 0.f, c.data(), big.ldc);
    EXPECT_GT(library_products(), before);
  }
}

}  // namespace
}  // namespace seqtape
