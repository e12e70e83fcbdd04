// exp_shifted: e^x for float rows, the same bits on every path. See kernels_exp.h for the method.
#include "tensor/kernels_exp.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "tensor/cpu_path.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SEQTAPE_EXP_X86 1
#define SEQTAPE_X86_TARGET(isa) __attribute__((target(isa)))
#define SEQTAPE_INLINE inline __attribute__((always_inline))
#endif

namespace seqtape::kernels {

namespace {

// Below kLo, e^x < 2^-150 (half the smallest denormal) rounds to 0; above kHi it overflows. The
// clamp keeps n in [-150, 129], where both halves of the scaling are normal powers of two.
constexpr float kLo = -104.0f;
constexpr float kHi = 89.0f;
constexpr float kLog2e = 0x1.715476p+0f;
constexpr float kShifter = 0x1.8p23f;  // adding it rounds |v| < 2^22 to an integer
// ln2 = kLn2Hi + kLn2Lo: kLn2Hi is ln2 rounded to float, kLn2Lo the float nearest the rest.
constexpr float kLn2Hi = 0x1.62e43p-1f;
constexpr float kLn2Lo = -0x1.05c61p-29f;
// 1/k! rounded to float, k = 2..7 (1/0! and 1/1! are 1).
constexpr float kC2 = 0x1p-1f;
constexpr float kC3 = 0x1.555556p-3f;
constexpr float kC4 = 0x1.555556p-5f;
constexpr float kC5 = 0x1.111112p-7f;
constexpr float kC6 = 0x1.6c16c2p-10f;
constexpr float kC7 = 0x1.a01a02p-13f;

// The portable path: the reference order every vector path keeps, lane by lane.
float exp_one(float x) {
  if (std::isnan(x)) return x;
  if (x <= kLo) return 0.0f;  // (the vector paths' zero scale: the same +0 as the steps below)
  const float c = std::min(std::max(x, kLo), kHi);
  const float j = std::fma(c, kLog2e, kShifter);
  const float nf = j - kShifter;
  // exact: c and nf·kLn2Hi are multiples of 2^-25 when n != 0, their difference below 0.35
  float r = std::fma(nf, -kLn2Hi, c);
  r = std::fma(nf, -kLn2Lo, r);
  float p = kC7;
  p = std::fma(p, r, kC6);
  p = std::fma(p, r, kC5);
  p = std::fma(p, r, kC4);
  p = std::fma(p, r, kC3);
  p = std::fma(p, r, kC2);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int32_t n = static_cast<int32_t>(nf);
  const int32_t n1 = n >> 1, n2 = n - n1;  // (arithmetic shift: ⌊n/2⌋)
  const uint32_t b1 = static_cast<uint32_t>(n1 + 127) << 23, b2 = static_cast<uint32_t>(n2 + 127)
                                                                  << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  return (p * s1) * s2;
}

void exp_portable(const float* x, float shift, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_one(x[i] - shift);
}

#ifdef SEQTAPE_EXP_X86

SEQTAPE_X86_TARGET("avx2,fma") SEQTAPE_INLINE __m256 exp8(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kLo)), _mm256_set1_ps(kHi));
  const __m256 j = _mm256_fmadd_ps(c, _mm256_set1_ps(kLog2e), _mm256_set1_ps(kShifter));
  const __m256 nf = _mm256_sub_ps(j, _mm256_set1_ps(kShifter));
  __m256 r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-kLn2Hi), c);
  r = _mm256_fmadd_ps(nf, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kC7);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i n = _mm256_cvtps_epi32(nf);  // (an integer already: exact)
  const __m256i n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 above = _mm256_cmp_ps(x, _mm256_set1_ps(kLo), _CMP_NLE_UQ);  // (zero scale below)
  const __m256 s2 =
      _mm256_and_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23)), above);
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  return _mm256_blendv_ps(e, x, nan);
}

SEQTAPE_X86_TARGET("avx2,fma")
void exp_avx2(const float* x, float shift, float* y, int64_t n) {
  const __m256 sh = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh)));
  if (i < n) {  // the last n mod 8 through a padded copy
    alignas(32) float buf[8] = {};
    std::copy(x + i, x + n, buf);
    _mm256_store_ps(buf, exp8(_mm256_sub_ps(_mm256_load_ps(buf), sh)));
    std::copy(buf, buf + (n - i), y + i);
  }
}

// All 16 lanes: the zero-masked forms (GCC 12's unmasked ones start from an undefined register,
// which -Wmaybe-uninitialized reports).
constexpr __mmask16 kAll16 = 0xFFFF;

SEQTAPE_X86_TARGET("avx512f") SEQTAPE_INLINE __m512 exp16(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 c = _mm512_maskz_min_ps(kAll16, _mm512_maskz_max_ps(kAll16, x, _mm512_set1_ps(kLo)),
                                       _mm512_set1_ps(kHi));
  const __m512 j = _mm512_fmadd_ps(c, _mm512_set1_ps(kLog2e), _mm512_set1_ps(kShifter));
  const __m512 nf = _mm512_sub_ps(j, _mm512_set1_ps(kShifter));
  __m512 r = _mm512_fmadd_ps(nf, _mm512_set1_ps(-kLn2Hi), c);
  r = _mm512_fmadd_ps(nf, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kC7);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i n = _mm512_maskz_cvtps_epi32(kAll16, nf);
  const __m512i n1 = _mm512_maskz_srai_epi32(kAll16, n, 1), n2 = _mm512_sub_epi32(n, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 =
      _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll16, _mm512_add_epi32(n1, bias), 23));
  const __mmask16 above = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kLo), _CMP_NLE_UQ);  // (zero scale)
  const __m512 s2 =
      _mm512_castsi512_ps(_mm512_maskz_slli_epi32(above, _mm512_add_epi32(n2, bias), 23));
  const __m512 e = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  return _mm512_mask_blend_ps(nan, e, x);
}

SEQTAPE_X86_TARGET("avx512f")
void exp_avx512(const float* x, float shift, float* y, int64_t n) {
  const __m512 sh = _mm512_set1_ps(shift);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh)));
  if (i < n) {  // the last n mod 16 under a mask
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_sub_ps(v, sh)));
  }
}

#endif  // SEQTAPE_EXP_X86

// Activations on the e^x above (kernels_exp.h): each one's steps once per lane width, in the same
// order on every path. fwd(x) is the activation, bwd(g, x) its derivative times g.

// GELU's constants: 1/√2, 1/√(2π), and erfc's p and c1..c11, fitted by scripts/fit_erfc.py
// (relative error of t·P(t) at most 4.0e-8 over z in [0, 10.5]).
constexpr float kRsqrt2 = 0.70710678118654752f;
constexpr float kRsqrt2Pi = 0.39894228040143268f;
constexpr float kErfcP = 0.5f;
constexpr float kErfc[11] = {0.282089174f,  0.282236814f,  0.245336026f,    0.184699893f,
                             0.0580925494f, 0.0277929958f, -0.00988843106f, -0.302282035f,
                             0.389905065f,  -0.194300339f, 0.0363183133f};

struct Gelu {
  // Φ(x), and e = e^(−x²/2) for φ.
  static float phi(float x, float* e_out) {
    const float z = std::fabs(x) * kRsqrt2;
    const float t = 1.0f / std::fma(kErfcP, z, 1.0f);
    float q = kErfc[10];
    for (int j = 9; j >= 0; --j) q = std::fma(q, t, kErfc[j]);
    q = q * t;
    const float e = exp_one((x * x) * -0.5f);
    const float c = (q * 0.5f) * e;  // ½·erfc(|x|/√2) = Φ(−|x|)
    *e_out = e;
    return x < 0.0f ? c : 1.0f - c;  // (NaN: 1 − NaN)
  }
  static float fwd(float x) {
    float e;
    return x * phi(x, &e);
  }
  static float bwd(float g, float x) {
    float e;
    const float p = phi(x, &e);
    return g * std::fma(x, e * kRsqrt2Pi, p);
  }
#ifdef SEQTAPE_EXP_X86
  SEQTAPE_X86_TARGET("avx2,fma") static SEQTAPE_INLINE __m256 phi(__m256 x, __m256* e_out) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 z =
        _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(kRsqrt2));
    const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(kErfcP), z, one));
    __m256 q = _mm256_set1_ps(kErfc[10]);
    for (int j = 9; j >= 0; --j) q = _mm256_fmadd_ps(q, t, _mm256_set1_ps(kErfc[j]));
    q = _mm256_mul_ps(q, t);
    const __m256 e = exp8(_mm256_mul_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(-0.5f)));
    const __m256 c = _mm256_mul_ps(_mm256_mul_ps(q, _mm256_set1_ps(0.5f)), e);
    *e_out = e;
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_sub_ps(one, c), c, neg);
  }
  SEQTAPE_X86_TARGET("avx2,fma") static SEQTAPE_INLINE __m256 fwd(__m256 x) {
    __m256 e;
    return _mm256_mul_ps(x, phi(x, &e));
  }
  SEQTAPE_X86_TARGET("avx2,fma") static SEQTAPE_INLINE __m256 bwd(__m256 g, __m256 x) {
    __m256 e;
    const __m256 p = phi(x, &e);
    return _mm256_mul_ps(g, _mm256_fmadd_ps(x, _mm256_mul_ps(e, _mm256_set1_ps(kRsqrt2Pi)), p));
  }
  SEQTAPE_X86_TARGET("avx512f") static SEQTAPE_INLINE __m512 phi(__m512 x, __m512* e_out) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(kRsqrt2));
    const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(_mm512_set1_ps(kErfcP), z, one));
    __m512 q = _mm512_set1_ps(kErfc[10]);
    for (int j = 9; j >= 0; --j) q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kErfc[j]));
    q = _mm512_mul_ps(q, t);
    const __m512 e = exp16(_mm512_mul_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(-0.5f)));
    const __m512 c = _mm512_mul_ps(_mm512_mul_ps(q, _mm512_set1_ps(0.5f)), e);
    *e_out = e;
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(neg, _mm512_sub_ps(one, c), c);
  }
  SEQTAPE_X86_TARGET("avx512f") static SEQTAPE_INLINE __m512 fwd(__m512 x) {
    __m512 e;
    return _mm512_mul_ps(x, phi(x, &e));
  }
  SEQTAPE_X86_TARGET("avx512f") static SEQTAPE_INLINE __m512 bwd(__m512 g, __m512 x) {
    __m512 e;
    const __m512 p = phi(x, &e);
    return _mm512_mul_ps(g, _mm512_fmadd_ps(x, _mm512_mul_ps(e, _mm512_set1_ps(kRsqrt2Pi)), p));
  }
#endif
};

// SiLU, x·σ(x) = x/(1 + e^−x); its derivative σ·(1 + x·(1 − σ)), with 1 − σ as e^−x·σ for x >= 0
// (1 minus a σ near 1 would keep only σ's rounding, times x) and as 1 − σ below (at least ½
// there, and e^−x may be inf).
struct Silu {
  static float fwd(float x) { return x / (1.0f + exp_one(-x)); }
  static float bwd(float g, float x) {
    const float e = exp_one(-x);
    const float s = 1.0f / (1.0f + e);
    const float rest = x < 0.0f ? 1.0f - s : e * s;
    return (g * s) * std::fma(x, rest, 1.0f);
  }
#ifdef SEQTAPE_EXP_X86
  SEQTAPE_X86_TARGET("avx2,fma") static SEQTAPE_INLINE __m256 fwd(__m256 x) {
    const __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f)));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  }
  SEQTAPE_X86_TARGET("avx2,fma") static SEQTAPE_INLINE __m256 bwd(__m256 g, __m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f)));
    const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 rest = _mm256_blendv_ps(_mm256_mul_ps(e, s), _mm256_sub_ps(one, s), neg);
    return _mm256_mul_ps(_mm256_mul_ps(g, s), _mm256_fmadd_ps(x, rest, one));
  }
  SEQTAPE_X86_TARGET("avx512f") static SEQTAPE_INLINE __m512 exp_neg(__m512 x) {
    return exp16(_mm512_castsi512_ps(
        _mm512_xor_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
  }
  SEQTAPE_X86_TARGET("avx512f") static SEQTAPE_INLINE __m512 fwd(__m512 x) {
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_neg(x)));
  }
  SEQTAPE_X86_TARGET("avx512f") static SEQTAPE_INLINE __m512 bwd(__m512 g, __m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 e = exp_neg(x);
    const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
    const __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 rest = _mm512_mask_blend_ps(neg, _mm512_mul_ps(e, s), _mm512_sub_ps(one, s));
    return _mm512_mul_ps(_mm512_mul_ps(g, s), _mm512_fmadd_ps(x, rest, one));
  }
#endif
};

// The loops, once for every activation: y = fwd(x); dx = bwd(g, x), or dx += that.
template <class Op>
void forward_portable(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op::fwd(x[i]);
}

template <class Op>
void backward_portable(const float* g, const float* x, float* dx, int64_t n, bool acc) {
  for (int64_t i = 0; i < n; ++i) {
    const float d = Op::bwd(g[i], x[i]);
    dx[i] = acc ? dx[i] + d : d;
  }
}

#ifdef SEQTAPE_EXP_X86

template <class Op>
SEQTAPE_X86_TARGET("avx2,fma")
void forward_avx2(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, Op::fwd(_mm256_loadu_ps(x + i)));
  if (i < n) {  // the last n mod 8 through a padded copy
    alignas(32) float buf[8] = {};
    std::copy(x + i, x + n, buf);
    _mm256_store_ps(buf, Op::fwd(_mm256_load_ps(buf)));
    std::copy(buf, buf + (n - i), y + i);
  }
}

template <class Op>
SEQTAPE_X86_TARGET("avx2,fma")
void backward_avx2(const float* g, const float* x, float* dx, int64_t n, bool acc) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 d = Op::bwd(_mm256_loadu_ps(g + i), _mm256_loadu_ps(x + i));
    if (acc) d = _mm256_add_ps(_mm256_loadu_ps(dx + i), d);
    _mm256_storeu_ps(dx + i, d);
  }
  if (i < n) {
    alignas(32) float bg[8] = {}, bx[8] = {}, bd[8] = {};
    std::copy(g + i, g + n, bg);
    std::copy(x + i, x + n, bx);
    if (acc) std::copy(dx + i, dx + n, bd);
    __m256 d = Op::bwd(_mm256_load_ps(bg), _mm256_load_ps(bx));
    if (acc) d = _mm256_add_ps(_mm256_load_ps(bd), d);
    _mm256_store_ps(bd, d);
    std::copy(bd, bd + (n - i), dx + i);
  }
}

template <class Op>
SEQTAPE_X86_TARGET("avx512f")
void forward_avx512(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, Op::fwd(_mm512_loadu_ps(x + i)));
  if (i < n) {  // the last n mod 16 under a mask
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, Op::fwd(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

template <class Op>
SEQTAPE_X86_TARGET("avx512f")
void backward_avx512(const float* g, const float* x, float* dx, int64_t n, bool acc) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 d = Op::bwd(_mm512_loadu_ps(g + i), _mm512_loadu_ps(x + i));
    if (acc) d = _mm512_add_ps(_mm512_loadu_ps(dx + i), d);
    _mm512_storeu_ps(dx + i, d);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 d = Op::bwd(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, x + i));
    if (acc) d = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dx + i), d);
    _mm512_mask_storeu_ps(dx + i, m, d);
  }
}

#endif  // SEQTAPE_EXP_X86

// The path (cpu_path.h): the same as gemm_nt_rowwise's.
using Path = CpuPath;

void run(Path p, const float* x, float shift, float* y, int64_t n) {
#ifdef SEQTAPE_EXP_X86
  if (p == Path::Avx512) return exp_avx512(x, shift, y, n);
  if (p == Path::Avx2) return exp_avx2(x, shift, y, n);
#endif
  exp_portable(x, shift, y, n);
}

template <class Op>
void run_forward(Path p, const float* x, float* y, int64_t n) {
#ifdef SEQTAPE_EXP_X86
  if (p == Path::Avx512) return forward_avx512<Op>(x, y, n);
  if (p == Path::Avx2) return forward_avx2<Op>(x, y, n);
#endif
  forward_portable<Op>(x, y, n);
}

template <class Op>
void run_backward(Path p, const float* g, const float* x, float* dx, int64_t n, bool acc) {
#ifdef SEQTAPE_EXP_X86
  if (p == Path::Avx512) return backward_avx512<Op>(g, x, dx, n, acc);
  if (p == Path::Avx2) return backward_avx2<Op>(g, x, dx, n, acc);
#endif
  backward_portable<Op>(g, x, dx, n, acc);
}

// The path a test names, if this CPU (and build) has it.
bool named_path(const char* name, Path* p) {
  if (std::strcmp(name, "avx512") == 0)
    *p = Path::Avx512;
  else if (std::strcmp(name, "avx2") == 0)
    *p = Path::Avx2;
  else if (std::strcmp(name, "portable") == 0)
    *p = Path::Portable;
  else
    return false;
  return cpu_has(*p);
}

}  // namespace

void exp_shifted(const float* x, float shift, float* y, int64_t n) {
  run(cpu_path(), x, shift, y, n);
}

const char* exp_path() {
  return cpu_path_name(cpu_path());
}

bool exp_shifted_on(const char* name, const float* x, float shift, float* y, int64_t n) {
  Path p;
  if (!named_path(name, &p)) return false;
  run(p, x, shift, y, n);
  return true;
}

void gelu_forward(const float* x, float* y, int64_t n) {
  run_forward<Gelu>(cpu_path(), x, y, n);
}

void gelu_backward(const float* g, const float* x, float* dx, int64_t n, bool accumulate) {
  run_backward<Gelu>(cpu_path(), g, x, dx, n, accumulate);
}

void silu_forward(const float* x, float* y, int64_t n) {
  run_forward<Silu>(cpu_path(), x, y, n);
}

void silu_backward(const float* g, const float* x, float* dx, int64_t n, bool accumulate) {
  run_backward<Silu>(cpu_path(), g, x, dx, n, accumulate);
}

bool activation_on(const char* name, const char* activation, const float* x, const float* g,
                   float* y, float* dx, int64_t n) {
  Path p;
  if (!named_path(name, &p)) return false;
  if (std::strcmp(activation, "gelu") == 0) {
    run_forward<Gelu>(p, x, y, n);
    run_backward<Gelu>(p, g, x, dx, n, false);
  } else if (std::strcmp(activation, "silu") == 0) {
    run_forward<Silu>(p, x, y, n);
    run_backward<Silu>(p, g, x, dx, n, false);
  } else {
    return false;
  }
  return true;
}

}  // namespace seqtape::kernels
