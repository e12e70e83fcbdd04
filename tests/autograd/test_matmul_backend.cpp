// The matmul backend layer (tensor/matmul_backend.h): oneDNN float32 gives the product
// OpenBLAS gives, for every transpose and with padded leading dimensions (read in place), with
// alpha and beta; bf16 multiplies exactly the bf16-rounded operands with float32 accumulation;
// primitives are made once per shape; auto routes each shape one way and stays right; the
// setting is scoped; big products split over seqtape's threads stay right and repeat their
// bits; and the rounding itself is round-to-nearest-even.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "tensor/kernels.h"
#include "tensor/kernels_small_gemm.h"
#include "tensor/matmul_backend.h"
#include "tensor/tensor.h"

namespace seqtape {
namespace {

using kernels::MatmulBackend;
using kernels::Precision;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16, RoundsToNearestEvenAndKeepsSpecialValues) {
  using kernels::round_to_bf16;
  EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_to_bf16(-2.5f), -2.5f);
  // bf16 keeps 8 bits of significand: 1 + 2^-7 is the next value after 1.
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);  // tie: to even (1)
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)),
            1.0f + std::ldexp(1.0f, -6));  // tie: to even (up)
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            1.0f + std::ldexp(1.0f, -7));  // above the tie: up
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()),
            std::numeric_limits<float>::infinity());  // rounds past the largest bf16
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(0x7f800001u))));  // a NaN whose bits round off
  EXPECT_EQ(round_to_bf16(from_bits(0x00000001u)), 0.0f);          // subnormal: zero
  EXPECT_TRUE(std::signbit(round_to_bf16(from_bits(0x80000001u))));
}

TEST(MatmulBackend, NamesParseAndBadNamesSayTheChoices) {
  for (MatmulBackend b : {MatmulBackend::OpenBLAS, MatmulBackend::OneDNN, MatmulBackend::Auto})
    EXPECT_EQ(kernels::parse_matmul_backend(kernels::matmul_backend_name(b)), b);
  EXPECT_EQ(kernels::parse_precision("bf16"), Precision::BF16);
  EXPECT_EQ(kernels::parse_precision("f32"), Precision::F32);
  try {
    kernels::parse_matmul_backend("mkl");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("choose auto, openblas or onednn"), std::string::npos);
  }
  EXPECT_THROW(kernels::parse_precision("fp16"), Error);
}

TEST(MatmulBackend, ProblemsFollowWhatTheBuildAndCpuHave) {
  const kernels::OneDnnInfo& info = kernels::onednn_info();
  EXPECT_EQ(kernels::matmul_problem(MatmulBackend::OpenBLAS, Precision::F32), "");
  EXPECT_EQ(kernels::matmul_problem(MatmulBackend::OneDNN, Precision::F32).empty(), info.built);
  const std::string bf16 = kernels::matmul_problem(MatmulBackend::OpenBLAS, Precision::BF16);
  EXPECT_EQ(bf16.empty(), info.built && info.bf16);
  if (info.built && !info.bf16) {
    EXPECT_NE(bf16.find(info.isa), std::string::npos) << bf16;
  }
  if (!bf16.empty()) {
    EXPECT_THROW(kernels::set_matmul(MatmulBackend::OpenBLAS, Precision::BF16), Error);
  }
}

TEST(MatmulBackend, ScopeRestoresTheSetting) {
  ASSERT_EQ(kernels::matmul_backend(), MatmulBackend::OpenBLAS);
  if (!kernels::onednn_info().built) GTEST_SKIP() << "built without oneDNN";
  {
    const kernels::MatmulScope s(MatmulBackend::OneDNN, Precision::F32);
    EXPECT_EQ(kernels::matmul_backend(), MatmulBackend::OneDNN);
  }
  EXPECT_EQ(kernels::matmul_backend(), MatmulBackend::OpenBLAS);
  EXPECT_EQ(kernels::matmul_precision(), Precision::F32);
}

// One product's operands, stored with padded leading dimensions, and its reference in double
// from the operands as given (round: after rounding each to bf16).
struct Case {
  bool ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  int64_t lda, ldb, ldc;
  std::vector<float> a, b, c0;

  Case(bool ta_, bool tb_, int64_t m_, int64_t n_, int64_t k_, float alpha_, float beta_, int pad)
      : ta(ta_), tb(tb_), m(m_), n(n_), k(k_), alpha(alpha_), beta(beta_) {
    lda = (ta ? m : k) + pad;
    ldb = (tb ? k : n) + pad;
    ldc = n + pad;
    a = values((ta ? k : m) * lda, 0.37);
    b = values((tb ? n : k) * ldb, 0.61);
    c0 = values(m * ldc, 0.23);
  }
  static std::vector<float> values(int64_t count, double scale) {
    std::vector<float> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      v[static_cast<size_t>(i)] = static_cast<float>(std::sin(scale * static_cast<double>(i + 1)));
    return v;
  }
  float at_a(int64_t i, int64_t p) const { return ta ? a[p * lda + i] : a[i * lda + p]; }
  float at_b(int64_t p, int64_t j) const { return tb ? b[j * ldb + p] : b[p * ldb + j]; }

  // The product through kernels::gemm<float> as currently set, on the backend itself even where
  // the shape is small enough for the small-product path (tested below and in
  // test_small_gemm.cpp).
  std::vector<float> run() const {
    const kernels::SmallGemmOff backend_itself;
    std::vector<float> c = c0;
    kernels::gemm<float>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  }
  std::vector<float> run_with(MatmulBackend b, Precision p) const {
    const kernels::MatmulScope s(b, p);
    return run();
  }
  // Every element against the double reference, within the float32 summation bound
  // (k + 2)·2^-24·(Σ|a·b| + |beta·c0|); the padding between rows must be left as it was.
  void expect_near(const std::vector<float>& c, bool round) const {
    const double tol = static_cast<double>(k + 2) * std::ldexp(1.0, -24);
    auto r = [&](float x) { return static_cast<double>(round ? kernels::round_to_bf16(x) : x); };
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          sum += r(at_a(i, p)) * r(at_b(p, j));
          mag += std::abs(r(at_a(i, p)) * r(at_b(p, j)));
        }
        const double c_old = c0[static_cast<size_t>(i * ldc + j)];
        const double want = alpha * sum + beta * c_old;
        ASSERT_NEAR(c[static_cast<size_t>(i * ldc + j)], want,
                    tol * (std::abs(alpha) * mag + std::abs(beta * c_old)) + 1e-30)
            << "C[" << i << "," << j << "] ta " << ta << " tb " << tb << " " << m << "x" << n << "x"
            << k;
      }
      for (int64_t j = n; j < ldc; ++j)
        ASSERT_EQ(c[static_cast<size_t>(i * ldc + j)], c0[static_cast<size_t>(i * ldc + j)]);
    }
  }
};

std::vector<Case> cases() {
  std::vector<Case> all;
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 48, 33}, {130, 70, 257}, {1, 96, 64}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      for (int pad : {0, 3}) {
        const float beta = pad == 0 ? 0.f : (t % 2 ? 1.f : 0.25f);
        const float alpha = t == 3 ? 0.5f : 1.f;
        all.emplace_back(t & 1, t & 2, s[0], s[1], s[2], alpha, beta, pad);
      }
  return all;
}

TEST(MatmulBackend, OneDnnFloat32GivesOpenBlasProductForEveryLayout) {
  if (!kernels::onednn_info().built) GTEST_SKIP() << "built without oneDNN";
  for (const Case& c : cases()) {
    const std::vector<float> blas = c.run();
    c.expect_near(blas, false);
    const kernels::MatmulCounts before = kernels::matmul_counts();
    const std::vector<float> dnn = c.run_with(MatmulBackend::OneDNN, Precision::F32);
    EXPECT_EQ(kernels::matmul_counts().onednn_f32, before.onednn_f32 + 1);
    c.expect_near(dnn, false);
  }
}

TEST(MatmulBackend, Bf16MultipliesTheRoundedOperandsInFloat32) {
  const kernels::OneDnnInfo& info = kernels::onednn_info();
  if (!info.built || !info.bf16) GTEST_SKIP() << "no bf16 units (oneDNN ISA " << info.isa << ")";
  double far_from_f32 = 0;
  for (const Case& c : cases()) {
    const kernels::MatmulCounts before = kernels::matmul_counts();
    const std::vector<float> got = c.run_with(MatmulBackend::OpenBLAS, Precision::BF16);
    EXPECT_EQ(kernels::matmul_counts().onednn_bf16, before.onednn_bf16 + 1);
    // Rounded operands, float32 sums: as close to the rounded product as float32 is to exact.
    c.expect_near(got, true);
    const std::vector<float> f32 = c.run();
    for (size_t i = 0; i < got.size(); ++i)
      far_from_f32 = std::max(far_from_f32, std::abs(static_cast<double>(got[i]) - f32[i]));
  }
  EXPECT_GT(far_from_f32, 1e-3);  // the operands really were rounded (8-bit significands)
}

TEST(MatmulBackend, PrimitivesAreMadeOncePerShape) {
  if (!kernels::onednn_info().built) GTEST_SKIP() << "built without oneDNN";
  const kernels::MatmulScope s(MatmulBackend::OneDNN, Precision::F32);
  const Case c(false, true, 37, 29, 19, 1.f, 0.f, 0);
  c.run();
  const int64_t made = kernels::matmul_counts().primitives;
  for (int i = 0; i < 5; ++i) c.run();
  EXPECT_EQ(kernels::matmul_counts().primitives, made);
  const Case other(false, true, 38, 29, 19, 1.f, 0.f, 0);
  other.run();
  EXPECT_EQ(kernels::matmul_counts().primitives, made + 1);
}

TEST(MatmulBackend, AutoRoutesEachShapeOneWayAndStaysRight) {
  if (!kernels::onednn_info().built) GTEST_SKIP() << "built without oneDNN";
  const kernels::MatmulScope s(MatmulBackend::Auto, Precision::F32);
  for (const Case& c : cases()) {
    c.run();  // timed and decided here
    const kernels::MatmulCounts before = kernels::matmul_counts();
    const std::vector<float> got = c.run();
    const kernels::MatmulCounts after = kernels::matmul_counts();
    EXPECT_EQ((after.openblas - before.openblas) + (after.onednn_f32 - before.onednn_f32), 1);
    const std::vector<float> again = c.run();
    const kernels::MatmulCounts third = kernels::matmul_counts();
    EXPECT_EQ(third.openblas - after.openblas, after.openblas - before.openblas);  // same route
    EXPECT_EQ(got, again);
    c.expect_near(got, false);
  }
}

// A backend with a precision.
struct Mode {
  MatmulBackend backend;
  Precision precision;
};

// Batched products laid out as attention reads its heads: Q [B, Tq, C] and K [B, Tk, C] with
// head h in columns h·Dh..; scores [B, H, Tq, Tk] dense. Q·Kᵀ per head (tb), or Q·W with one W
// for every product (stride 0: broadcast).
struct Heads {
  int64_t B, H, Tq, Tk, Dh, C;
  std::vector<float> q, k, w;
  Heads(int64_t b, int64_t h, int64_t tq, int64_t tk, int64_t dh)
      : B(b), H(h), Tq(tq), Tk(tk), Dh(dh), C(h * dh) {
    q = Case::values(B * Tq * C, 0.41);
    k = Case::values(B * Tk * C, 0.29);
    w = Case::values(Dh * Tk, 0.17);
  }
  const float* b_of(bool tb) const { return tb ? k.data() : w.data(); }
  int64_t ldb(bool tb) const { return tb ? C : Tk; }
  kernels::GemmBatch batch(bool tb) const {
    return {B, H, Tq * C, Dh, tb ? Tk * C : 0, tb ? Dh : 0, H * Tq * Tk, Tq * Tk};
  }
  // alpha·Q·op(B) for every (batch row, head) under the given backend and precision.
  std::vector<float> run(bool tb, float alpha, MatmulBackend backend, Precision p) const {
    std::vector<float> scores(static_cast<size_t>(B * H * Tq * Tk), 9.f);
    const kernels::MatmulScope s(backend, p);
    kernels::gemm_batched<float>(false, tb, Tq, Tk, Dh, alpha, q.data(), C, b_of(tb), ldb(tb), 0.f,
                                 scores.data(), Tk, batch(tb));
    return scores;
  }
  // Every score against its double reference (round: of the bf16-rounded operands).
  void expect_near(const std::vector<float>& scores, bool tb, double alpha, bool round,
                   const std::string& what) const {
    auto r = [&](float x) { return static_cast<double>(round ? kernels::round_to_bf16(x) : x); };
    const kernels::GemmBatch bt = batch(tb);
    const float* b = b_of(tb);
    for (int64_t bi = 0; bi < B; ++bi)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i)
          for (int64_t j = 0; j < Tk; ++j) {
            double want = 0, mag = 0;
            for (int64_t e = 0; e < Dh; ++e) {
              const float qv = q[static_cast<size_t>(bi * Tq * C + i * C + h * Dh + e)];
              const float bv = b[bi * bt.sb0 + h * bt.sb1 + (tb ? j * C + e : e * Tk + j)];
              want += alpha * r(qv) * r(bv);
              mag += std::abs(alpha * r(qv) * r(bv));
            }
            ASSERT_NEAR(scores[static_cast<size_t>(((bi * H + h) * Tq + i) * Tk + j)], want,
                        static_cast<double>(Dh + 2) * std::ldexp(1.0, -24) * mag)
                << what << " tb " << tb << " b " << bi << " h " << h << " i " << i << " j " << j;
          }
  }
};

// Every backend and precision that runs here against a double reference per product.
TEST(MatmulBackend, BatchedProductsReadHeadsInPlaceOnEveryBackend) {
  // Products above gemm_small_takes' bound (65·67·64 multiply-adds): smaller ones run on
  // gemm_small_batched whatever the backend (test_small_gemm.cpp).
  const Heads x(3, 2, 65, 67, 64);
  ASSERT_FALSE(kernels::gemm_small_takes(x.Tq, x.Tk, x.Dh));
  for (const Mode mode :
       {Mode{MatmulBackend::OpenBLAS, Precision::F32}, Mode{MatmulBackend::OneDNN, Precision::F32},
        Mode{MatmulBackend::Auto, Precision::F32}, Mode{MatmulBackend::OneDNN, Precision::BF16}}) {
    if (!kernels::matmul_problem(mode.backend, mode.precision).empty()) continue;
    const bool round = mode.precision == Precision::BF16;
    for (const bool tb : {true, false}) {
      const kernels::MatmulCounts before = kernels::matmul_counts();
      const std::vector<float> scores = x.run(tb, 0.5f, mode.backend, mode.precision);
      const kernels::MatmulCounts after = kernels::matmul_counts();
      if (mode.backend == MatmulBackend::OpenBLAS && !round) {
        EXPECT_EQ(after.openblas - before.openblas, x.B * x.H);  // one gemm per product
      }
      if (mode.backend == MatmulBackend::OneDNN) {  // one primitive for the batch
        EXPECT_EQ(after.onednn_f32 + after.onednn_bf16 - before.onednn_f32 - before.onednn_bf16, 1);
      }
      x.expect_near(scores, tb, 0.5, round,
                    std::string(kernels::matmul_backend_name(mode.backend)) + " " +
                        kernels::precision_name(mode.precision));
    }
  }
}

// round_rows_to_bf16 (the small path's rounding) gives round_to_bf16 of every value: ties,
// specials, subnormals, in rows with a stride and a tail shorter than a vector.
TEST(Bf16, RoundRowsIsRoundToBf16OfEveryValue) {
  const kernels::OneDnnInfo& info = kernels::onednn_info();
  if (!info.built || !info.bf16) GTEST_SKIP() << "no bf16 units (oneDNN ISA " << info.isa << ")";
  const int64_t rows = 5, cols = 37, ld = 40;
  std::vector<float> x(static_cast<size_t>(rows * ld));
  for (size_t i = 0; i < x.size(); ++i) {
    // bit patterns across the range, with the low 16 bits at and around the tie 0x8000
    const uint32_t bits = static_cast<uint32_t>(i) * 0x9E3779B1u ^ (i % 3 == 0 ? 0x8000u : 0x7fffu);
    std::memcpy(&x[i], &bits, 4);
  }
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(),
                            1.0f + std::ldexp(1.0f, -8),
                            1.0f + 3 * std::ldexp(1.0f, -8),
                            0.f,
                            -0.f};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 7] = specials[i];
  std::vector<float> y(static_cast<size_t>(rows * cols), 7.f);
  kernels::detail::round_rows_to_bf16(x.data(), rows, cols, ld, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const float want = kernels::round_to_bf16(x[static_cast<size_t>(r * ld + j)]);
      const float got = y[static_cast<size_t>(r * cols + j)];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << r << "," << j;
      } else {
        uint32_t a, b;
        std::memcpy(&a, &want, 4);
        std::memcpy(&b, &got, 4);
        EXPECT_EQ(a, b) << r << "," << j;
      }
    }
}

// Under bf16, small batched products (attention's heads at the small and short models' sizes)
// run on gemm_small_batched with their operands rounded first, not on oneDNN: the bits of the
// float32 small path on operands rounded beforehand, so bf16 operands and float32 sums as on
// oneDNN's bf16 path.
TEST(MatmulBackend, Bf16SmallProductsRoundTheirOperandsOnTheSmallPath) {
  const kernels::OneDnnInfo& info = kernels::onednn_info();
  if (!info.built || !info.bf16) GTEST_SKIP() << "no bf16 units (oneDNN ISA " << info.isa << ")";
  const Heads x(3, 2, 10, 9, 33);  // Dh 33: rows of A and B end inside a vector
  ASSERT_TRUE(kernels::gemm_small_takes_bf16(x.Tq, x.Tk, x.Dh));
  Heads rounded = x;
  for (std::vector<float>* v : {&rounded.q, &rounded.k, &rounded.w})
    for (float& f : *v) f = kernels::round_to_bf16(f);
  for (const bool tb : {true, false}) {
    const kernels::MatmulCounts before = kernels::matmul_counts();
    const std::vector<float> got = x.run(tb, 0.5f, MatmulBackend::OneDNN, Precision::BF16);
    const kernels::MatmulCounts after = kernels::matmul_counts();
    EXPECT_EQ(after.onednn_bf16 + after.onednn_f32, before.onednn_bf16 + before.onednn_f32);
    x.expect_near(got, tb, 0.5, true, "small bf16");
    EXPECT_EQ(got, rounded.run(tb, 0.5f, MatmulBackend::OpenBLAS, Precision::F32)) << tb;
    EXPECT_NE(got, x.run(tb, 0.5f, MatmulBackend::OpenBLAS, Precision::F32)) << tb;
  }
}

// Sets seqtape's thread budget (gemm_nt_rowwise_threads) for its lifetime.
struct Threads {
  explicit Threads(int n) { kernels::gemm_nt_rowwise_set_threads(n); }
  ~Threads() { kernels::gemm_nt_rowwise_set_threads(0); }
};

// Products of 2^23 FLOPs or more run on oneDNN in parts, one per thread (run_onednn): split
// along M (300 > 97) or N, for every transpose, padded, with alpha and beta, in float32 and bf16;
// each within the float32 bound of its double reference, and the same bits when run again.
TEST(MatmulBackend, BigProductsSplitOverThreadsStayRightAndRepeat) {
  if (!kernels::onednn_info().built) GTEST_SKIP() << "built without oneDNN";
  const Threads two(2);
  const bool splits = kernels::gemm_nt_rowwise_threads() >= 2;  // (one core: no helper)
  for (const Precision p : {Precision::F32, Precision::BF16}) {
    if (!kernels::matmul_problem(MatmulBackend::OneDNN, p).empty()) continue;
    const bool round = p == Precision::BF16;
    for (const int64_t m : {300, 97})
      for (int t = 0; t < 4; ++t) {
        const int pad = t == 1 ? 0 : 5;
        const Case c(t & 1, t & 2, m, 397 - m, 161, t == 3 ? 0.5f : 1.f, pad ? 0.75f : 0.f, pad);
        ASSERT_GE(2.0 * double(c.m * c.n * c.k), 8388608.0);
        const kernels::MatmulCounts before = kernels::matmul_counts();
        const std::vector<float> got = c.run_with(MatmulBackend::OneDNN, p);
        const kernels::MatmulCounts after = kernels::matmul_counts();
        EXPECT_EQ(after.onednn_f32 + after.onednn_bf16 - before.onednn_f32 - before.onednn_bf16, 1);
        if (splits) {
          EXPECT_EQ(after.split, before.split + 1) << "m " << m << " t " << t;
        }
        c.expect_near(got, round);
        EXPECT_EQ(got, c.run_with(MatmulBackend::OneDNN, p));
      }
  }
}

// A batch of products big enough to split is split along its first batch axis (n0 > 1) or its
// second: Q·Kᵀ per (batch row, head), and Q·W with one W for all (stride 0).
TEST(MatmulBackend, BigBatchesSplitAlongTheirBatchAxes) {
  if (!kernels::onednn_info().built) GTEST_SKIP() << "built without oneDNN";
  const Threads two(2);
  const bool splits = kernels::gemm_nt_rowwise_threads() >= 2;
  for (const Precision p : {Precision::F32, Precision::BF16}) {
    if (!kernels::matmul_problem(MatmulBackend::OneDNN, p).empty()) continue;
    for (const int64_t B : {4, 1}) {  // split along batch rows, then along heads
      const Heads x(B, 8 / B, 130, 67, 64);
      for (const bool tb : {true, false}) {
        const kernels::MatmulCounts before = kernels::matmul_counts();
        const std::vector<float> scores = x.run(tb, 1.f, MatmulBackend::OneDNN, p);
        if (splits) {
          EXPECT_EQ(kernels::matmul_counts().split, before.split + 1);
        }
        x.expect_near(scores, tb, 1.0, p == Precision::BF16,
                      std::string(kernels::precision_name(p)) + " B " + std::to_string(B));
      }
    }
  }
}

// gemm_bias (a linear layer's forward): on oneDNN the bias rides in the product's epilogue,
// elsewhere it is added after the product; every backend and precision gives op(A)·op(B) +
// bias within the float32 bound, split or not (a split of columns offsets the bias too).
TEST(MatmulBackend, GemmBiasAddsTheBiasOnEveryRoute) {
  const Threads two(2);
  for (const Mode mode :
       {Mode{MatmulBackend::OpenBLAS, Precision::F32}, Mode{MatmulBackend::OneDNN, Precision::F32},
        Mode{MatmulBackend::OneDNN, Precision::BF16}}) {
    if (!kernels::matmul_problem(mode.backend, mode.precision).empty()) continue;
    const bool round = mode.precision == Precision::BF16;
    for (const int64_t m : {300, 97, 7})
      for (const bool tb : {false, true}) {
        const int64_t n = m == 7 ? 5 : 397 - m;
        Case c(false, tb, m, n, 161, 1.f, 0.f, 3);
        const std::vector<float> bias = Case::values(n, 0.53);
        // The reference of Case adds beta·c0: c0 holding the bias in every row and beta 1 is the
        // same sum.
        Case want = c;
        want.beta = 1.f;
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) want.c0[size_t(i * c.ldc + j)] = bias[size_t(j)];
        std::vector<float> got = c.c0;
        {
          const kernels::MatmulScope s(mode.backend, mode.precision);
          kernels::gemm_bias<float>(tb, m, n, c.k, c.a.data(), c.lda, c.b.data(), c.ldb,
                                    bias.data(), got.data(), c.ldc);
        }
        // The padding between rows is left as it was in c0 (want.c0 differs from c.c0 only
        // inside the rows).
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = n; j < c.ldc; ++j)
            want.c0[size_t(i * c.ldc + j)] = c.c0[size_t(i * c.ldc + j)];
        want.expect_near(got, round);
      }
  }
}

// A float32 tensor of shape s holding Case::values.
Tensor param(Shape s, double scale) {
  Tensor t = Tensor::empty(std::move(s), DType::F32);
  const std::vector<float> v = Case::values(t.numel(), scale);
  std::memcpy(t.data<float>(), v.data(), sizeof(float) * v.size());
  return t;
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data<float>(), b.data<float>(), sizeof(float) * size_t(a.numel())) == 0;
}

// affine_relu (a feed-forward layer's first half, the ReLU in the product's epilogue on oneDNN
// and in the bias pass on OpenBLAS) gives the bits of relu(affine(…)) on every route, forward
// and backward, on shapes split over threads (oneDNN: 2^23 FLOPs and up) and not; a row with a
// NaN gives zeros after the ReLU on both (relu's x > 0 ? x : 0), and negative sums give +0.
TEST(MatmulBackend, AffineReluIsReluOfAffineToTheBit) {
  const Threads two(2);
  for (const Mode mode :
       {Mode{MatmulBackend::OpenBLAS, Precision::F32}, Mode{MatmulBackend::OneDNN, Precision::F32},
        Mode{MatmulBackend::OneDNN, Precision::BF16}}) {
    if (!kernels::matmul_problem(mode.backend, mode.precision).empty()) continue;
    const kernels::MatmulScope scope(mode.backend, mode.precision);
    for (const int64_t rows : {int64_t(7), int64_t(640)})
      for (const bool bias : {true, false}) {
        SCOPED_TRACE(std::to_string(rows) + " rows" + (bias ? ", bias" : ", no bias") +
                     (mode.backend == MatmulBackend::OneDNN ? ", onednn" : ", openblas") +
                     (mode.precision == Precision::BF16 ? " bf16" : ""));
        const int64_t K = 128, N = 512;
        Tensor xt = param({rows, K}, 0.71), wt = param({K, N}, 0.37), bt = param({N}, 0.53),
               up = param({rows, N}, 0.29);
        xt.data<float>()[3 * K + 5] = std::numeric_limits<float>::quiet_NaN();  // row 3
        std::vector<Tensor> fused, plain;
        for (const bool fuse : {true, false}) {
          Tape& tape = Tape::current();
          tape.clear();
          Var x(xt.clone(), true), w(wt.clone(), true), b = bias ? Var(bt.clone(), true) : Var();
          Var y = fuse ? affine_relu(x, w, b) : relu(affine(x, w, b));
          tape.backward(y, up);
          std::vector<Tensor>& out = fuse ? fused : plain;
          out = {y.value().clone(), x.grad().clone(), w.grad().clone()};
          if (bias) out.push_back(b.grad().clone());
          tape.clear();
        }
        const char* names[] = {"y", "dx", "dw", "db"};
        for (size_t i = 0; i < fused.size(); ++i)
          EXPECT_TRUE(bits_equal(fused[i], plain[i])) << names[i];
        const float* y = fused[0].data<float>();
        int64_t zeros = 0, negative = 0, nan_row = 0;
        for (int64_t i = 0; i < fused[0].numel(); ++i) {
          negative += std::signbit(y[i]);
          zeros += y[i] == 0.f;
        }
        for (int64_t j = 0; j < N; ++j)
          nan_row += y[3 * N + j] == 0.f && !std::signbit(y[3 * N + j]);
        EXPECT_EQ(negative, 0);                  // no -0 (nor anything below it)
        EXPECT_EQ(nan_row, N);                   // the NaN row: +0 throughout
        EXPECT_GT(zeros, fused[0].numel() / 4);  // the ReLU masked a share of the sums
      }
  }
}

// Under bf16, an affine's and a 2-D matmul's forward and backward round each operand once
// (kernels::Bf16Memo: X and W in the forward, kept for the backward, dY once for its two
// products), and give the bits of their products run one by one, each rounding its own
// operands: on shapes split over two threads (oneDNN: 2^23 FLOPs and up, some parts then taking
// strided blocks of a rounded whole) and not.
TEST(Bf16Memo, AnOpsProductsRoundEachOperandOnceToTheSameBits) {
  if (!kernels::matmul_problem(MatmulBackend::OneDNN, Precision::BF16).empty())
    GTEST_SKIP() << "no bf16 units (oneDNN ISA " << kernels::onednn_info().isa << ")";
  const Threads two(2);
  const kernels::MatmulScope scope(MatmulBackend::OneDNN, Precision::BF16);
  auto rounded = [] { return kernels::matmul_counts().bf16_values; };
  // affine: y = x·op(W) + b, x [R, K], W [N, K] (tw) or [K, N]
  for (const int64_t R : {int64_t(48), int64_t(640)})
    for (const bool tw : {true, false}) {
      SCOPED_TRACE("affine, " + std::to_string(R) + " rows" + (tw ? ", Wᵀ" : ""));
      const int64_t K = 128, N = 512;
      Tensor xt = param({R, K}, 0.71), wt = param(tw ? Shape{N, K} : Shape{K, N}, 0.37),
             bt = param({N}, 0.53), up = param({R, N}, 0.29);
      Tape& tape = Tape::current();
      tape.clear();
      Var x(xt.clone(), true), w(wt.clone(), true), b(bt.clone(), true);
      const int64_t before = rounded();
      Var y = affine(x, w, b, tw);
      tape.backward(y, up);
      EXPECT_EQ(rounded() - before, R * K + K * N + R * N);  // x, W and dY, once each
      // The products one by one.
      Tensor y1 = Tensor::empty({R, N}, DType::F32), dx = Tensor::empty({R, K}, DType::F32),
             dw = Tensor::empty(wt.shape(), DType::F32);
      const float *xp = xt.data<float>(), *wp = wt.data<float>(), *g = up.data<float>();
      kernels::gemm_bias<float>(tw, R, N, K, xp, K, wp, tw ? K : N, bt.data<float>(),
                                y1.data<float>(), N);
      kernels::gemm<float>(false, !tw, R, K, N, 1.f, g, N, wp, tw ? K : N, 0.f, dx.data<float>(),
                           K);
      if (tw)
        kernels::gemm<float>(true, false, N, K, R, 1.f, g, N, xp, K, 0.f, dw.data<float>(), K);
      else
        kernels::gemm<float>(true, false, K, N, R, 1.f, xp, K, g, N, 0.f, dw.data<float>(), N);
      EXPECT_TRUE(bits_equal(y.value(), y1)) << "y";
      EXPECT_TRUE(bits_equal(x.grad(), dx)) << "dx";
      EXPECT_TRUE(bits_equal(w.grad(), dw)) << "dw";
      tape.clear();
    }
  // matmul: C = op(A)·op(B), both 2-D
  for (const int64_t M : {int64_t(40), int64_t(300)})
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      SCOPED_TRACE("matmul " + std::to_string(M) + ", ta " + std::to_string(ta) + " tb " +
                   std::to_string(tb));
      const int64_t N = 397 - M, K = 161;
      Tensor at = param(ta ? Shape{K, M} : Shape{M, K}, 0.37),
             btt = param(tb ? Shape{N, K} : Shape{K, N}, 0.61), up = param({M, N}, 0.29);
      Tape& tape = Tape::current();
      tape.clear();
      Var a(at.clone(), true), b(btt.clone(), true);
      const int64_t before = rounded();
      Var c = matmul(a, b, ta, tb);
      tape.backward(c, up);
      EXPECT_EQ(rounded() - before, M * K + K * N + M * N);
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      const float *ap = at.data<float>(), *bp = btt.data<float>(), *g = up.data<float>();
      Tensor c1 = Tensor::empty({M, N}, DType::F32), da = Tensor::empty(at.shape(), DType::F32),
             db = Tensor::empty(btt.shape(), DType::F32);
      kernels::gemm<float>(ta, tb, M, N, K, 1.f, ap, lda, bp, ldb, 0.f, c1.data<float>(), N);
      if (!ta)
        kernels::gemm<float>(false, !tb, M, K, N, 1.f, g, N, bp, ldb, 0.f, da.data<float>(), K);
      else
        kernels::gemm<float>(tb, true, K, M, N, 1.f, bp, ldb, g, N, 0.f, da.data<float>(), M);
      if (!tb)
        kernels::gemm<float>(!ta, false, K, N, M, 1.f, ap, lda, g, N, 0.f, db.data<float>(), N);
      else
        kernels::gemm<float>(true, ta, N, K, M, 1.f, g, N, ap, lda, 0.f, db.data<float>(), K);
      EXPECT_TRUE(bits_equal(c.value(), c1)) << "c";
      EXPECT_TRUE(bits_equal(a.grad(), da)) << "da";
      EXPECT_TRUE(bits_equal(b.grad(), db)) << "db";
      tape.clear();
    }
}

TEST(MatmulBackend, Float64StaysOnOpenBlas) {
  const kernels::OneDnnInfo& info = kernels::onednn_info();
  if (!info.built || !info.bf16) GTEST_SKIP() << "no bf16 units";
  const kernels::MatmulScope s(MatmulBackend::OneDNN, Precision::BF16);
  const double a[4] = {1 + 1e-9, 2, 3, 4}, b[4] = {1, 0, 0, 1};
  double c[4] = {};
  const kernels::MatmulCounts before = kernels::matmul_counts();
  kernels::gemm<double>(false, false, 2, 2, 2, 1.0, a, 2, b, 2, 0.0, c, 2);
  EXPECT_EQ(c[0], 1 + 1e-9);  // not rounded to bf16 or float
  EXPECT_EQ(kernels::matmul_counts().onednn_bf16, before.onednn_bf16);
}

}  // namespace
}  // namespace seqtape
