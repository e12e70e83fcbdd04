#include "tensor/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "tensor/kernels_exp.h"
#include "tensor/kernels_small_gemm.h"
#include "tensor/matmul_backend.h"

namespace seqtape::kernels {

namespace {
CBLAS_TRANSPOSE tr(bool t) {
  return t ? CblasTrans : CblasNoTrans;
}

// Below this many FLOPs (2·M·N·K) a gemm runs on one OpenBLAS thread: a second thread gave
// nothing at the small and short models' shapes and slowed training steps when other processes
// held the second core (docs/performance.md); the medium model's larger gemms (from
// 1024x256x256 up) keep the configured thread count. Thread count does not change
// sgemm's results (each C element is summed by one thread in the same order).
constexpr double kSmallGemmFlops = 134217728.0;  // 2^27
// Below this OpenBLAS runs one thread by itself (m·n·k < 65536·4 in its interface): no need to
// switch the thread count around the call.
constexpr double kTinyGemmFlops = 524288.0;  // 2 · 2^18

// Runs one gemm on a single thread when it is small and more are configured.
class SmallGemmThreads {
 public:
  SmallGemmThreads(int64_t m, int64_t n, int64_t k) {
    const double flops =
        2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    if (flops >= kSmallGemmFlops || flops < kTinyGemmFlops) return;
    prev_ = openblas_get_num_threads();
    if (prev_ > 1)
      openblas_set_num_threads(1);
    else
      prev_ = 0;
  }
  ~SmallGemmThreads() {
    if (prev_ > 1) openblas_set_num_threads(prev_);
  }
  SmallGemmThreads(const SmallGemmThreads&) = delete;
  SmallGemmThreads& operator=(const SmallGemmThreads&) = delete;

 private:
  int prev_ = 0;
};
}  // namespace

namespace {
// Runs float32 products on gemm_small_batched (kernels_small_gemm.h) rather than the matmul
// backend when they are small enough, and says whether it did: a single product as each of a
// batch's, by M·N·K alone (under bf16 the lower bound, the operands rounded first), so its bits
// never depend on the call. One BLAS or oneDNN call costs more than the product at these sizes
// (the seed model's products, attention's heads).
bool ran_small(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
               const GemmBatch& bt) {
  const bool bf16 = matmul_precision() == Precision::BF16;
  if (!(bf16 ? gemm_small_takes_bf16(m, n, k) : gemm_small_takes(m, n, k))) return false;
  gemm_small_batched(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bt, bf16);
  return true;
}

// C = beta·C for an empty product (k = 0): BLAS would leave C untouched for beta = 1 and
// ignore beta = 0; here beta = 0 means zeros too.
template <typename T>
void scale_only(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}
}  // namespace

void detail::gemm_openblas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                           float* c, int64_t ldc) {
  detail::count_openblas_gemm();
  SmallGemmThreads threads(m, n, k);
  cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

template <>
void gemm<float>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c, ldc);
  if (ran_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, GemmBatch{}) ||
      detail::gemm_f32_routed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, GemmBatch{}))
    return;
  detail::gemm_openblas(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                  int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c, ldc);
  SmallGemmThreads threads(m, n, k);
  cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// c[i, :n] += bias for each of m rows of stride ldc (nothing without a bias); relu: then
// max(c, 0), in the same pass.
template <typename T>
void add_bias_rows(T* c, int64_t ldc, const T* bias, int64_t m, int64_t n, bool relu) {
  if (!relu) {
    if (!bias) return;
    if (ldc == n) return add_row_bias<T>(c, bias, m, n);
    for (int64_t i = 0; i < m; ++i) add_row_bias<T>(c + i * ldc, bias, 1, n);
    return;
  }
  parallel_range(m, double(n) * kCostSimple, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* cr = c + r * ldc;
      if (bias)
        for (int64_t j = 0; j < n; ++j) cr[j] += bias[j];
      for (int64_t j = 0; j < n; ++j) cr[j] = cr[j] > T(0) ? cr[j] : T(0);
    }
  });
}

template <>
void gemm_bias<float>(bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                      const float* b, int64_t ldb, const float* bias, float* c, int64_t ldc,
                      bool relu) {
  if (ran_small(false, tb, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc, GemmBatch{}))
    return add_bias_rows(c, ldc, bias, m, n, relu);
  if (m > 0 && n > 0 && k > 0 &&
      detail::gemm_f32_routed(false, tb, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc, GemmBatch{},
                              bias, relu))
    return;
  gemm<float>(false, tb, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc);
  add_bias_rows(c, ldc, bias, m, n, relu);
}

template <>
void gemm_bias<double>(bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                       const double* b, int64_t ldb, const double* bias, double* c, int64_t ldc,
                       bool relu) {
  gemm<double>(false, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  add_bias_rows(c, ldc, bias, m, n, relu);
}

template <typename T>
void gemm_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                  int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
                  const GemmBatch& bt) {
  if (bt.n0 <= 0 || bt.n1 <= 0 || m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    // Small products (attention's heads): one BLAS call each would cost more than the product.
    // First for every float32 backend: it was faster than oneDNN's one primitive per batch at
    // the small and short models' attention shapes (docs/performance.md). Under
    // bf16 the smaller of them too, their operands rounded to bf16 first (gemm_small_takes_bf16).
    if (ran_small(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bt) ||
        (k > 0 &&
         detail::gemm_f32_routed(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bt)))
      return;
  }
  for (int64_t i = 0; i < bt.n0; ++i)
    for (int64_t j = 0; j < bt.n1; ++j)
      gemm<T>(ta, tb, m, n, k, alpha, a + i * bt.sa0 + j * bt.sa1, lda, b + i * bt.sb0 + j * bt.sb1,
              ldb, beta, c + i * bt.sc0 + j * bt.sc1, ldc);
}
template void gemm_batched<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                  int64_t, const float*, int64_t, float, float*, int64_t,
                                  const GemmBatch&);
template void gemm_batched<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                                   int64_t, const double*, int64_t, double, double*, int64_t,
                                   const GemmBatch&);

template <>
void vec_mat<float>(int64_t k, int64_t n, float alpha, const float* x, const float* w, float beta,
                    float* y) {
  // x·W = Wᵀ·x with W row-major [K,N].
  cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(k), static_cast<blasint>(n), alpha, w,
              static_cast<blasint>(n), x, 1, beta, y, 1);
}
template <>
void vec_mat<double>(int64_t k, int64_t n, double alpha, const double* x, const double* w,
                     double beta, double* y) {
  cblas_dgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(k), static_cast<blasint>(n), alpha, w,
              static_cast<blasint>(n), x, 1, beta, y, 1);
}

template <>
void mat_vec<float>(int64_t m, int64_t k, float alpha, const float* a, int64_t lda, const float* x,
                    float beta, float* y) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(k), alpha,
              a, static_cast<blasint>(lda), x, 1, beta, y, 1);
}
template <>
void mat_vec<double>(int64_t m, int64_t k, double alpha, const double* a, int64_t lda,
                     const double* x, double beta, double* y) {
  cblas_dgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(k), alpha,
              a, static_cast<blasint>(lda), x, 1, beta, y, 1);
}

// The row and element loops below go through parallel_range: rows (or elements) are split over
// the pool when there are enough of them, and each is computed as on one thread.

namespace {
// The largest element (NaNs skipped, as std::max(mx, x) skips them; -inf when there are none).
// A maximum is exact, so any order gives the same result: floats in two vectors of running
// maxima (one chain of dependent compares is 3 cycles per element, 190 for a decoder row of 64
// keys; GCC keeps std::max's scalar form).
template <typename T>
T row_max(const T* x, int64_t n) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t c = 0; c < n; ++c) mx = std::max(mx, x[c]);
  return mx;
}
#if defined(__SSE2__)
template <>
float row_max<float>(const float* x, int64_t n) {
  // _mm_max_ps(v, m) is v > m ? v : m per lane: a NaN v keeps m, as std::max(m, v) does
  __m128 m0 = _mm_set1_ps(-std::numeric_limits<float>::infinity()), m1 = m0;
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    m0 = _mm_max_ps(_mm_loadu_ps(x + c), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(x + c + 4), m1);
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(m1, m0));
  float mx = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  for (; c < n; ++c) mx = std::max(mx, x[c]);
  return mx;
}
#endif
}  // namespace

template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  parallel_range(rows, double(cols) * kCostTranscendental, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const T mx = row_max(xr, cols);
      if (mx == -std::numeric_limits<T>::infinity()) {  // fully masked row: no probability mass
        std::fill_n(yr, cols, T(0));
        continue;
      }
      T s = 0;
      if constexpr (std::is_same_v<T, float>) {
        exp_shifted(xr, mx, yr, cols);  // (float: vectorized, kernels_exp.h)
        for (int64_t c = 0; c < cols; ++c) s += yr[c];
      } else {
        for (int64_t c = 0; c < cols; ++c) {
          yr[c] = std::exp(xr[c] - mx);
          s += yr[c];
        }
      }
      T inv = T(1) / s;
      for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  });
}

template <typename T>
void log_softmax_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  parallel_range(rows, double(cols) * kCostTranscendental, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const T mx = row_max(xr, cols);
      if (mx == -std::numeric_limits<T>::infinity()) {
        std::fill_n(yr, cols, -std::numeric_limits<T>::infinity());
        continue;
      }
      T s = 0;
      if constexpr (std::is_same_v<T, float>) {
        // the exps in blocks on the stack (y may be x), summed in the same order
        float e[256];
        for (int64_t c0 = 0; c0 < cols; c0 += 256) {
          const int64_t nc = std::min<int64_t>(256, cols - c0);
          exp_shifted(xr + c0, mx, e, nc);
          for (int64_t c = 0; c < nc; ++c) s += e[c];
        }
      } else {
        for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - mx);
      }
      T lse = mx + std::log(s);
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - lse;
    }
  });
}

namespace {
// Row r of layer_norm_rows, from x's row xr (just written, when a sum, so still in L1).
template <typename T>
void layer_norm_row(const T* xr, const T* gamma, const T* beta, T* yr, T* mean, T* rstd, int64_t r,
                    int64_t cols, double eps) {
  const T m = row_sum<T>(cols, [xr](int64_t c) { return xr[c]; }) / static_cast<T>(cols);
  const T v = row_sum<T>(cols, [xr, m](int64_t c) { return (xr[c] - m) * (xr[c] - m); }) /
              static_cast<T>(cols);
  T rs = T(1) / std::sqrt(v + static_cast<T>(eps));
  for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
  if (mean) mean[r] = m;
  if (rstd) rstd[r] = rs;
}
}  // namespace

template <typename T>
void layer_norm_rows(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                     int64_t rows, int64_t cols, double eps) {
  parallel_range(rows, double(cols) * 4 * kCostSimple, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      layer_norm_row(x + r * cols, gamma, beta, y + r * cols, mean, rstd, r, cols, eps);
  });
}

template <typename T>
void add_layer_norm_rows(const T* a, const T* b, T* sum, const T* gamma, const T* beta, T* y,
                         T* mean, T* rstd, int64_t rows, int64_t cols, double eps) {
  parallel_range(rows, double(cols) * 5 * kCostSimple, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* sr = sum + r * cols;
      for (int64_t c = 0; c < cols; ++c) sr[c] = a[r * cols + c] + b[r * cols + c];
      layer_norm_row(sr, gamma, beta, y + r * cols, mean, rstd, r, cols, eps);
    }
  });
}

template <typename T>
void add_row_bias(T* y, const T* b, int64_t rows, int64_t cols) {
  parallel_range(rows, double(cols) * kCostSimple, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      T* yr = y + r * cols;
      for (int64_t c = 0; c < cols; ++c) yr[c] += b[c];
    }
  });
}

template <typename T>
void activate(const T* x, T* y, int64_t n, Act act) {
  const double cost = act == Act::Relu ? kCostSimple : kCostTranscendental;
  parallel_range(n, cost, [&](int64_t i0, int64_t i1) {
    switch (act) {
      case Act::Relu:
        for (int64_t i = i0; i < i1; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
        break;
      case Act::Tanh:
        for (int64_t i = i0; i < i1; ++i) y[i] = std::tanh(x[i]);
        break;
      case Act::Gelu:
        if constexpr (std::is_same_v<T, float>) {
          gelu_forward(x + i0, y + i0, i1 - i0);  // (vectorized, kernels_exp.h: autograd's gelu)
        } else {
          for (int64_t i = i0; i < i1; ++i)
            y[i] = x[i] * (T(0.5) * std::erfc(-x[i] * static_cast<T>(M_SQRT1_2)));  // (autograd's)
        }
        break;
      case Act::Silu:
        if constexpr (std::is_same_v<T, float>) {
          silu_forward(x + i0, y + i0, i1 - i0);  // (vectorized, kernels_exp.h: autograd's silu)
        } else {
          for (int64_t i = i0; i < i1; ++i) y[i] = x[i] / (T(1) + std::exp(-x[i]));
        }
        break;
    }
  });
}

template <typename T>
double sum_squares(const T* x, int64_t n) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  // Each block's sum, on whichever thread, then the blocks in order: the same bits as one loop.
  thread_local std::vector<double> part;  // (grows to the largest call once, then no allocation)
  if (static_cast<int64_t>(part.size()) < blocks) part.resize(static_cast<size_t>(blocks));
  double* pp = part.data();
  parallel_range(blocks, kBlock * kCostSimple, [x, n, pp](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i = b * kBlock, e = std::min<int64_t>(n, i + kBlock);
      // 16 running sums, element j into sum j mod 16, then added in order: each sum is its own
      // chain, so the loop vectorizes without reassociating anything.
      T lane[16] = {};
      int64_t j = i;
      for (; j + 16 <= e; j += 16)
        for (int l = 0; l < 16; ++l) lane[l] += x[j + l] * x[j + l];
      for (int l = 0; j < e; ++j, ++l) lane[l] += x[j] * x[j];
      T block = 0;
      for (int l = 0; l < 16; ++l) block += lane[l];
      if (!std::isfinite(block)) {  // overflowed T (or a NaN/Inf element): redo it in double
        double d = 0;
        for (int64_t j = i; j < e; ++j) d += static_cast<double>(x[j]) * static_cast<double>(x[j]);
        pp[b] = d;
        continue;
      }
      pp[b] = static_cast<double>(block);
    }
  });
  double total = 0;
  for (int64_t b = 0; b < blocks; ++b) total += pp[b];
  return total;
}

#define SEQTAPE_INSTANTIATE(T)                                                                 \
  template void softmax_rows<T>(const T*, T*, int64_t, int64_t);                               \
  template void log_softmax_rows<T>(const T*, T*, int64_t, int64_t);                           \
  template void layer_norm_rows<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t, \
                                   double);                                                    \
  template void add_layer_norm_rows<T>(const T*, const T*, T*, const T*, const T*, T*, T*, T*, \
                                       int64_t, int64_t, double);                              \
  template void add_row_bias<T>(T*, const T*, int64_t, int64_t);                               \
  template void activate<T>(const T*, T*, int64_t, Act);                                       \
  template double sum_squares<T>(const T*, int64_t);
SEQTAPE_INSTANTIATE(float)
SEQTAPE_INSTANTIATE(double)
#undef SEQTAPE_INSTANTIATE

std::string blas_core_name() {
  const char* n = openblas_get_corename();
  return n ? std::string(n) : std::string("unknown");
}
int blas_num_threads() {
  return openblas_get_num_threads();
}
void blas_set_num_threads(int n) {
  openblas_set_num_threads(n);
}

bool blas_core_is_generic_on_modern_cpu() {
  std::string core = blas_core_name();
  std::transform(core.begin(), core.end(), core.begin(), ::tolower);
  bool modern = __builtin_cpu_supports("avx2") || __builtin_cpu_supports("avx512f");
  bool generic = core == "prescott" || core == "core2" || core == "nehalem" || core == "atom" ||
                 core == "katmai" || core == "generic" || core == "unknown";
  return modern && generic;
}

}  // namespace seqtape::kernels
