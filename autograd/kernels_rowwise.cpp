// gemm_nt_rowwise: Y = X·Wᵀ with every output summed in one order that depends on K alone.
//
// The order (the contract every path below keeps): y[i, j] = reduce(acc) + tail, where acc has 8
// lanes, lane u holding Σ x[i, p + u]·w[j, p + u] over p = 0, 8, 16, ... (p + 8 <= K) in
// increasing p, one fused multiply-add each (plain multiply and add without FMA hardware);
// reduce(acc) = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)); the tail adds
// x[i, p]·w[j, p] for the last K mod 8 columns in increasing p. Blocking several rows and
// outputs only changes which (i, j) are computed together, never how one is summed.
//
// Dimension key: M rows of X, N outputs (rows of W), K the shared inner dimension.
#include <algorithm>
#include <cmath>

#include "autograd/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SEQTAPE_ROWWISE_AVX2 1
#endif

namespace seqtape::kernels {

namespace {

// Rows of X taken together: X rows of a panel stay in L2 while W streams past them once.
constexpr int64_t kPanelRows = 64;

// Portable path: the same lane order, without FMA.
float dot_portable(int64_t k, const float* x, const float* w) {
  float a[8] = {};
  int64_t p = 0;
  for (; p + 8 <= k; p += 8)
    for (int u = 0; u < 8; ++u) a[u] += x[p + u] * w[p + u];
  float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (; p < k; ++p) s += x[p] * w[p];
  return s;
}

void rowwise_portable(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                      int64_t ldw, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = dot_portable(k, x + i * ldx, w + j * ldw);
}

#ifdef SEQTAPE_ROWWISE_AVX2

#define SEQTAPE_AVX2 __attribute__((target("avx2,fma")))

SEQTAPE_AVX2 inline float reduce8(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));  // (a0+a4)+(a2+a6), (a1+a5)+(a3+a7)
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
}

// R rows of X × Cn rows of W: R·Cn accumulators over the whole of K.
template <int R, int Cn>
SEQTAPE_AVX2 void block_avx2(int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                             float* y, int64_t ldy) {
  __m256 acc[R][Cn];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < Cn; ++c) acc[r][c] = _mm256_setzero_ps();
  const int64_t k8 = k & ~int64_t(7);
  for (int64_t p = 0; p < k8; p += 8) {
    __m256 wv[Cn];
    for (int c = 0; c < Cn; ++c) wv[c] = _mm256_loadu_ps(w + c * ldw + p);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x + r * ldx + p);
      for (int c = 0; c < Cn; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < Cn; ++c) {
      float s = reduce8(acc[r][c]);
      for (int64_t p = k8; p < k; ++p) s = std::fma(x[r * ldx + p], w[c * ldw + p], s);
      y[r * ldy + c] = s;
    }
}

// R rows of X against every row of W, Cn outputs at a time.
template <int R, int Cn>
SEQTAPE_AVX2 void rows_avx2(int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                            int64_t ldw, float* y, int64_t ldy) {
  int64_t j = 0;
  for (; j + Cn <= n; j += Cn) block_avx2<R, Cn>(k, x, ldx, w + j * ldw, ldw, y + j, ldy);
  for (; j < n; ++j) block_avx2<R, 1>(k, x, ldx, w + j * ldw, ldw, y + j, ldy);
}

SEQTAPE_AVX2 void rowwise_avx2(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
                               const float* w, int64_t ldw, float* y, int64_t ldy) {
  constexpr int R = 4, Cn = 3;
  for (int64_t i0 = 0; i0 < m; i0 += kPanelRows) {
    const int64_t rows = std::min(kPanelRows, m - i0), full = rows - rows % R;
    const float* xp = x + i0 * ldx;
    float* yp = y + i0 * ldy;
    // W's block of Cn rows stays in L1 while every group of R rows of the panel passes it.
    int64_t j = 0;
    for (; j + Cn <= n; j += Cn)
      for (int64_t i = 0; i < full; i += R)
        block_avx2<R, Cn>(k, xp + i * ldx, ldx, w + j * ldw, ldw, yp + i * ldy + j, ldy);
    for (; j < n; ++j)
      for (int64_t i = 0; i < full; i += R)
        block_avx2<R, 1>(k, xp + i * ldx, ldx, w + j * ldw, ldw, yp + i * ldy + j, ldy);
    for (int64_t i = full; i < rows; ++i)  // one row: eight outputs at a time
      rows_avx2<1, 8>(n, k, xp + i * ldx, ldx, w, ldw, yp + i * ldy, ldy);
  }
}

#endif  // SEQTAPE_ROWWISE_AVX2

}  // namespace

void gemm_nt_rowwise(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                     int64_t ldw, float* y, int64_t ldy) {
#ifdef SEQTAPE_ROWWISE_AVX2
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2) return rowwise_avx2(m, n, k, x, ldx, w, ldw, y, ldy);
#endif
  rowwise_portable(m, n, k, x, ldx, w, ldw, y, ldy);
}

bool gemm_nt_rowwise_uses_avx2() {
#ifdef SEQTAPE_ROWWISE_AVX2
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace seqtape::kernels
