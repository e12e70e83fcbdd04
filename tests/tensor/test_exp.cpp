// exp_shifted (kernels_exp.h): accuracy against double std::exp over a sweep of float inputs,
// special values, the same bits on every path this CPU has, element independence (tails, in
// place, the shift), and softmax_rows / log_softmax_rows<float> against a double reference. The
// GELU and SiLU rows built on it: the same, forward and backward.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/kernels_exp.h"
#include "tensor/rng.h"

namespace k = seqtape::kernels;

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

const char* const kPaths[] = {"avx512", "avx2", "portable"};

// Every `step`th float bit pattern from +0 up to `hi` and from -0 down to `lo`.
std::vector<float> sweep(float lo, float hi, uint32_t step) {
  std::vector<float> v;
  for (uint32_t b = 0; b <= to_bits(hi); b += step) v.push_back(from_bits(b));
  for (uint32_t b = 0x80000000u; b <= to_bits(lo); b += step) v.push_back(from_bits(b));
  return v;
}

// Distance in units of the float spacing at |ref| (2^-149 for denormal refs).
double ulps(float y, double ref) {
  const double a = std::fabs(ref);
  const int e = a < FLT_MIN ? -126 : std::ilogb(a);
  return std::fabs(double(y) - ref) / std::ldexp(1.0, e - 23);
}

// activation_on on every path this CPU has (g = 1): the bits of the portable path's y0 and d0.
void expect_every_path_agrees(const char* act, const std::vector<float>& x,
                              const std::vector<float>& y0, const std::vector<float>& d0) {
  const std::vector<float> ones(x.size(), 1.0f);
  const int64_t n = static_cast<int64_t>(x.size());
  int paths = 0;
  for (const char* p : kPaths) {
    std::vector<float> y(x.size()), d(x.size());
    if (!k::activation_on(p, act, x.data(), ones.data(), y.data(), d.data(), n)) continue;
    ++paths;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(to_bits(y[i]), to_bits(y0[i])) << act << " " << p << " x = " << x[i];
      ASSERT_EQ(to_bits(d[i]), to_bits(d0[i])) << act << " " << p << " x = " << x[i];
    }
  }
  EXPECT_GE(paths, 1);
}

}  // namespace

TEST(VecExp, SweepAgainstDoubleExpOnEveryPath) {
  const std::vector<float> x = sweep(-104.0f, 89.0f, 97);
  ASSERT_GT(x.size(), 20000000u);
  std::vector<float> portable(x.size()), y(x.size());
  ASSERT_TRUE(k::exp_shifted_on("portable", x.data(), 0.0f, portable.data(),
                                static_cast<int64_t>(x.size())));
  double max_ulp = 0, max_rel = 0, max_ulp_denormal = 0;
  float worst = 0;
  int64_t overflow = 0, zero = 0, denormal = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(double(x[i]));
    const float got = portable[i];
    if (ref > double(FLT_MAX)) {
      ASSERT_EQ(got, std::numeric_limits<float>::infinity()) << "x = " << x[i];
      ++overflow;
      continue;
    }
    ASSERT_TRUE(std::isfinite(got)) << "x = " << x[i] << " ref " << ref;
    ASSERT_GE(got, 0.0f) << "x = " << x[i];
    const double u = ulps(got, ref);
    if (ref >= double(FLT_MIN)) {
      const double rel = std::fabs(double(got) - ref) / ref;
      if (u > max_ulp) max_ulp = u, worst = x[i];
      max_rel = std::max(max_rel, rel);
      ASSERT_LE(rel, 3e-7) << "x = " << x[i] << " got " << got << " ref " << ref;
    } else {
      // a denormal (or 0): within one step of the smallest denormal
      max_ulp_denormal = std::max(max_ulp_denormal, u);
      ASSERT_LE(u, 1.0) << "x = " << x[i] << " got " << got << " ref " << ref;
      if (got == 0.0f)
        ++zero;
      else
        ++denormal;
    }
  }
  EXPECT_LE(max_ulp, 2.0);
  EXPECT_GT(overflow, 0);
  EXPECT_GT(zero, 0);
  EXPECT_GT(denormal, 0);
  std::printf(
      "exp sweep: %zu inputs, max %.3f ulp (x = %.9g), max relative %.3g, denormals max "
      "%.3f ulp; %lld overflow, %lld denormal, %lld zero\n",
      x.size(), max_ulp, double(worst), max_rel, max_ulp_denormal, (long long)overflow,
      (long long)denormal, (long long)zero);

  // The same bits on every vector path this CPU has.
  int paths = 0;
  for (const char* p : kPaths) {
    if (!k::exp_shifted_on(p, x.data(), 0.0f, y.data(), static_cast<int64_t>(x.size()))) continue;
    ++paths;
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(to_bits(y[i]), to_bits(portable[i])) << p << " x = " << x[i];
  }
  EXPECT_GE(paths, 1);
  std::printf("exp: %d paths bit-identical (this process uses %s)\n", paths, k::exp_path());
}

TEST(VecExp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {-inf,    inf,    nan,     0.0f,  -0.0f, -87.3f, -103.9f,
                                -104.0f, -1e30f, -200.0f, 88.7f, 89.0f, 1e30f,  FLT_MIN};
  for (const char* p : kPaths) {
    std::vector<float> y(x.size(), 123.0f);
    if (!k::exp_shifted_on(p, x.data(), 0.0f, y.data(), static_cast<int64_t>(x.size()))) continue;
    SCOPED_TRACE(p);
    EXPECT_EQ(to_bits(y[0]), 0u);  // -inf: exactly +0
    EXPECT_EQ(y[1], inf);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 1.0f);
    EXPECT_EQ(y[4], 1.0f);
    EXPECT_NEAR(y[5] / std::exp(double(x[5])), 1.0, 3e-7);  // near FLT_MIN, still normal
    EXPECT_GT(y[6], 0.0f);                                  // a few denormal steps
    EXPECT_LT(y[6], 1e-44f);
    EXPECT_EQ(to_bits(y[7]), 0u);
    EXPECT_EQ(to_bits(y[8]), 0u);
    EXPECT_EQ(to_bits(y[9]), 0u);
    EXPECT_NEAR(y[10] / std::exp(double(x[10])), 1.0, 3e-7);
    EXPECT_EQ(y[11], inf);
    EXPECT_EQ(y[12], inf);
    EXPECT_EQ(y[13], 1.0f);
  }
}

// Every length's tail, in place or not, with a shift: each element as if computed alone, and
// the shift as the rounded difference.
TEST(VecExp, ElementsIndependentOfLengthPlaceAndNeighbours) {
  seqtape::Rng rng(14);
  for (const char* p : kPaths) {
    for (int64_t n = 0; n <= 70; ++n) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = static_cast<float>(-30.0 + 35.0 * rng.uniform());
      if (n > 3) x[2] = -std::numeric_limits<float>::infinity();
      const float shift = 1.75f;
      std::vector<float> y(x.size()), inplace = x;
      if (!k::exp_shifted_on(p, x.data(), shift, y.data(), n)) break;
      ASSERT_TRUE(k::exp_shifted_on(p, inplace.data(), shift, inplace.data(), n));
      for (int64_t i = 0; i < n; ++i) {
        const float d = x[size_t(i)] - shift;
        float alone;
        ASSERT_TRUE(k::exp_shifted_on(p, &d, 0.0f, &alone, 1));
        ASSERT_EQ(to_bits(y[size_t(i)]), to_bits(alone)) << p << " n " << n << " i " << i;
        ASSERT_EQ(to_bits(inplace[size_t(i)]), to_bits(alone)) << p << " n " << n << " i " << i;
      }
    }
  }
}

TEST(VecExp, SoftmaxAndLogSoftmaxFloatAgainstDouble) {
  seqtape::Rng rng(7);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t cols : {1, 7, 16, 33, 300, 1000}) {
    const int64_t rows = 5;
    std::vector<float> x(size_t(rows * cols));
    for (float& v : x) v = static_cast<float>(4.0 * rng.normal());
    for (int64_t c = 0; c < cols; ++c) x[size_t(cols + c)] = ninf;         // row 1: fully masked
    for (int64_t c = 1; c < cols; c += 3) x[size_t(2 * cols + c)] = ninf;  // row 2: partly
    x[size_t(3 * cols)] = 80.0f;  // row 3: one dominant logit
    std::vector<float> y(x.size()), ly(x.size());
    k::softmax_rows<float>(x.data(), y.data(), rows, cols);
    k::log_softmax_rows<float>(x.data(), ly.data(), rows, cols);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * cols;
      if (r == 1) {
        for (int64_t c = 0; c < cols; ++c) {
          EXPECT_EQ(y[size_t(r * cols + c)], 0.0f);
          EXPECT_EQ(ly[size_t(r * cols + c)], ninf);
        }
        continue;
      }
      double mx = -INFINITY, s = 0;
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(xr[c]));
      for (int64_t c = 0; c < cols; ++c) s += std::exp(double(xr[c]) - mx);
      for (int64_t c = 0; c < cols; ++c) {
        const double ref = std::exp(double(xr[c]) - mx) / s;
        const double lref = double(xr[c]) - mx - std::log(s);
        const float got = y[size_t(r * cols + c)], lgot = ly[size_t(r * cols + c)];
        // the float row sum's rounding (cols terms) on top of the exps' ulp
        const double sum_err = 6e-8 * double(cols);
        EXPECT_NEAR(got, ref, (1e-6 + sum_err) * ref + 1e-30)
            << "cols " << cols << " r " << r << " c " << c;
        if (std::isinf(lref))
          EXPECT_EQ(lgot, ninf);
        else
          EXPECT_NEAR(lgot, lref, 2e-6 * (1 + std::fabs(lref) + std::fabs(mx)) + sum_err)
              << "cols " << cols << " r " << r << " c " << c;
      }
    }
  }
}

// softmax_rows and log_softmax_rows<float> give the bits of the plain scalar steps (the row's
// maximum by std::max in order, exp_shifted, the sum in order) on rows of every length up to
// 80 with -inf and NaN among the scores: the vectorized maximum is exact and skips NaNs as
// std::max(mx, x) does.
TEST(VecExp, SoftmaxRowsKeepTheScalarStepsBits) {
  seqtape::Rng rng(11);
  const float ninf = -std::numeric_limits<float>::infinity();
  int64_t rows = 0, with_nan = 0;
  for (int64_t cols = 1; cols <= 80; ++cols) {
    for (int t = 0; t < 40; ++t, ++rows) {
      std::vector<float> x(static_cast<size_t>(cols)), y(x.size()), ly(x.size()), e(x.size());
      bool nan = false;
      for (float& v : x) {
        const double u = rng.uniform();
        v = u < (t % 4 == 0 ? 0.8 : 0.1) ? ninf
            : u < 0.9 || t % 3 != 0      ? static_cast<float>(10.0 * rng.normal())
                                         : std::numeric_limits<float>::quiet_NaN();
        nan = nan || std::isnan(v);
      }
      with_nan += nan;
      k::softmax_rows<float>(x.data(), y.data(), 1, cols);
      k::log_softmax_rows<float>(x.data(), ly.data(), 1, cols);
      float mx = ninf;
      for (float v : x) mx = std::max(mx, v);
      std::vector<float> ref(x.size(), 0.0f), lref(x.size(), ninf);
      if (mx != ninf) {
        k::exp_shifted(x.data(), mx, e.data(), cols);
        float s = 0;
        for (float v : e) s += v;
        const float inv = 1.0f / s, lse = mx + std::log(s);
        for (size_t c = 0; c < x.size(); ++c) {
          ref[c] = e[c] * inv;
          lref[c] = x[c] - lse;
        }
      }
      for (size_t c = 0; c < x.size(); ++c) {
        ASSERT_EQ(to_bits(y[c]), to_bits(ref[c])) << "cols " << cols << " t " << t << " c " << c;
        ASSERT_EQ(to_bits(ly[c]), to_bits(lref[c])) << "cols " << cols << " t " << t << " c " << c;
      }
    }
  }
  EXPECT_GT(with_nan, rows / 10);
}

// gelu_forward / gelu_backward (kernels_exp.h) against double: x·Φ(x) with Φ(x) = ½·erfc(−x/√2),
// and Φ(x) + x·φ(x), over a sweep of float inputs, on every path this CPU has, with the same bits
// on every path.
TEST(VecGelu, SweepAgainstDoubleOnEveryPath) {
  const std::vector<float> x = sweep(-30.0f, 30.0f, 211);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> ones(x.size(), 1.0f);
  std::vector<float> y0(x.size()), d0(x.size());
  ASSERT_TRUE(k::activation_on("portable", "gelu", x.data(), ones.data(), y0.data(), d0.data(), n));
  double max_phi = 0, max_grad = 0, max_tail_rel = 0, worst_phi = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double phi = 0.5 * std::erfc(-v * M_SQRT1_2);
    const double pdf = std::exp(-0.5 * v * v) * 0.3989422804014327;
    // Φ's error: y = x·Φ rounded, so |y − x·Φ| / |x| (where |x| is not tiny).
    if (std::fabs(v) > 1e-3 && std::fabs(y0[i] - v * phi) / std::fabs(v) > max_phi) {
      max_phi = std::fabs(y0[i] - v * phi) / std::fabs(v);
      worst_phi = v;
    }
    max_grad = std::max(max_grad, std::fabs(d0[i] - (phi + v * pdf)));
    // Below -4 float's 1 + erf has no digits left; here Φ keeps most of its own.
    if (v < -4.0 && v > -13.0)
      max_tail_rel = std::max(max_tail_rel, std::fabs(y0[i] - v * phi) / std::fabs(v * phi));
  }
  std::printf(
      "gelu: max |Φ error| %.3g (x = %.9g), max |gelu' error| %.3g, max relative error "
      "below -4 %.3g\n",
      max_phi, worst_phi, max_grad, max_tail_rel);
  EXPECT_LT(max_phi, 2.5e-7);  // (2.03e-7 measured, near x = 0.013: t's rounding, times R'(t))
  EXPECT_LT(max_grad, 3e-7);
  EXPECT_LT(max_tail_rel, 1e-5);
  expect_every_path_agrees("gelu", x, y0, d0);
}

// SiLU (silu_forward / silu_backward) against double: x/(1 + e^−x) and σ·(1 + x·(1 − σ)).
TEST(VecSilu, SweepAgainstDoubleOnEveryPath) {
  const std::vector<float> x = sweep(-87.0f, 87.0f, 211);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> ones(x.size(), 1.0f);
  std::vector<float> y0(x.size()), d0(x.size());
  ASSERT_TRUE(k::activation_on("portable", "silu", x.data(), ones.data(), y0.data(), d0.data(), n));
  double max_ulp = 0, max_grad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double s = 1.0 / (1.0 + std::exp(-v));
    const double ref = v * s;
    if (std::fabs(ref) >= FLT_MIN) max_ulp = std::max(max_ulp, ulps(y0[i], ref));
    max_grad = std::max(max_grad, std::fabs(d0[i] - s * (1.0 + v * (1.0 - s))));
  }
  std::printf("silu: max error %.2f ulp, max |silu' error| %.3g\n", max_ulp, max_grad);
  EXPECT_LT(max_ulp, 4.0);
  EXPECT_LT(max_grad, 3e-7);
  expect_every_path_agrees("silu", x, y0, d0);
}

TEST(VecGelu, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {inf, nan, 0.0f, -0.0f, 40.0f, -40.0f, 1e30f};
  const std::vector<float> g(x.size(), 2.0f);
  for (const char* p : kPaths) {
    std::vector<float> y(x.size()), d(x.size());
    if (!k::activation_on(p, "gelu", x.data(), g.data(), y.data(), d.data(), int64_t(x.size())))
      continue;
    SCOPED_TRACE(p);
    EXPECT_EQ(y[0], inf);
    EXPECT_TRUE(std::isnan(d[0]));  // ∞·φ(∞) = ∞·0, as the double op's formula
    EXPECT_TRUE(std::isnan(y[1]));
    EXPECT_TRUE(std::isnan(d[1]));
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_EQ(d[2], 1.0f);  // g·Φ(0)
    EXPECT_EQ(to_bits(y[3]), to_bits(-0.0f));
    EXPECT_EQ(d[3], 1.0f);
    EXPECT_EQ(y[4], 40.0f);
    EXPECT_EQ(d[4], 2.0f);
    EXPECT_EQ(to_bits(y[5]), to_bits(-0.0f));  // −40·(+0)
    EXPECT_EQ(d[5], 0.0f);
    EXPECT_EQ(y[6], 1e30f);
  }
}

TEST(VecSilu, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, 100.0f,
                                -100.0f};
  const std::vector<float> g(x.size(), 2.0f);
  for (const char* p : kPaths) {
    std::vector<float> y(x.size()), d(x.size());
    if (!k::activation_on(p, "silu", x.data(), g.data(), y.data(), d.data(), int64_t(x.size())))
      continue;
    SCOPED_TRACE(p);
    EXPECT_EQ(y[0], inf);
    EXPECT_TRUE(std::isnan(d[0]));  // ∞·(1 − σ(∞)) = ∞·0, as the double op's formula
    EXPECT_TRUE(std::isnan(y[1]));
    EXPECT_TRUE(std::isnan(d[1]));
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_EQ(d[2], 1.0f);  // g·σ(0)
    EXPECT_EQ(y[3], 100.0f);
    EXPECT_EQ(d[3], 2.0f);
    EXPECT_EQ(y[4], 0.0f);  // −100·e^−100 is below float's denormals: −0
    EXPECT_EQ(d[4], 0.0f);
  }
}

// Every length's tail on every path: each element as if computed alone; then in place, and
// accumulating onto what is there.
TEST(VecActivations, ElementsIndependentOfLengthPlaceAndNeighbours) {
  using Fwd = void (*)(const float*, float*, int64_t);
  using Bwd = void (*)(const float*, const float*, float*, int64_t, bool);
  const struct {
    const char* name;
    Fwd fwd;
    Bwd bwd;
  } acts[] = {{"gelu", k::gelu_forward, k::gelu_backward},
              {"silu", k::silu_forward, k::silu_backward}};
  seqtape::Rng rng(15);
  for (const auto& act : acts) {
    SCOPED_TRACE(act.name);
    for (const char* p : kPaths) {
      for (int64_t n = 0; n <= 40; ++n) {
        std::vector<float> x(static_cast<size_t>(n)), g(x.size());
        for (float& v : x) v = static_cast<float>(-8.0 + 14.0 * rng.uniform());
        for (float& v : g) v = static_cast<float>(-1.0 + 2.0 * rng.uniform());
        std::vector<float> y(x.size()), d(x.size());
        if (!k::activation_on(p, act.name, x.data(), g.data(), y.data(), d.data(), n)) break;
        for (int64_t i = 0; i < n; ++i) {
          const size_t u = size_t(i);
          float ya, da;
          ASSERT_TRUE(k::activation_on(p, act.name, &x[u], &g[u], &ya, &da, 1));
          ASSERT_EQ(to_bits(y[u]), to_bits(ya)) << p << " n " << n << " i " << i;
          ASSERT_EQ(to_bits(d[u]), to_bits(da)) << p << " n " << n << " i " << i;
        }
      }
    }
    // The process's own path: in place, and accumulating onto what is there.
    for (int64_t n = 0; n <= 40; ++n) {
      std::vector<float> x(static_cast<size_t>(n)), g(x.size()), acc(x.size());
      for (float& v : x) v = static_cast<float>(-8.0 + 14.0 * rng.uniform());
      for (float& v : g) v = static_cast<float>(-1.0 + 2.0 * rng.uniform());
      for (float& v : acc) v = static_cast<float>(-1.0 + 2.0 * rng.uniform());
      std::vector<float> y(x.size()), d(x.size()), inplace = x, summed = acc;
      act.fwd(x.data(), y.data(), n);
      act.fwd(inplace.data(), inplace.data(), n);
      act.bwd(g.data(), x.data(), d.data(), n, false);
      act.bwd(g.data(), x.data(), summed.data(), n, true);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(to_bits(inplace[i]), to_bits(y[i])) << n;
        ASSERT_EQ(to_bits(summed[i]), to_bits(acc[i] + d[i])) << n;
      }
    }
  }
}
