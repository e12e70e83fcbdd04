// gemm_small_batched (kernels_small_gemm.h): many small float products (attention's heads).
//
// The order (every path): c[i, j] = s·alpha when beta = 0 (C is not read), fma(alpha, s,
// beta·c[i, j]) otherwise, where s is the chain s = fma(op(A)[i, p], op(B)[p, j], s) over p = 0,
// 1, ..., K - 1 from s = 0 (on the portable path s = s + a·b, a multiply then an add). It depends
// on nothing but the operands: not on M, N, the batch, the blocking or the thread, so the
// AVX-512 and AVX2 paths give the same bits, and a run gives the same bits on any thread count.
// The vector paths hold a block of C's rows × columns in registers (columns across lanes),
// reading op(B) by rows: in place, or (transposed, or rows not whole vectors) from a zero-padded
// copy made once per product.
//
// Dimension key: M rows of C, N columns, K the shared inner dimension.
#include "tensor/kernels_small_gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tensor/cpu_path.h"
#include "tensor/matmul_backend.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SEQTAPE_SMALL_X86 1
#endif

namespace seqtape::kernels {

namespace {

// Products up to this many multiply-adds (M·N·K) take the small path: see gemm_small_takes.
// Up to 64^3 the small path beat one cblas_sgemm per product in every transpose case; above,
// OpenBLAS won some (docs/performance.md).
constexpr double kGemmSmallMaxMnk = 262144.0;  // 64^3
// Under Precision::BF16, with the operands rounded first (gemm_small_batched's round_bf16): the
// small path beat oneDNN's bf16 product at the small and short models' attention shapes, and
// lost at the medium model's, where oneDNN's bf16 product gains (docs/performance.md).
constexpr double kGemmSmallMaxMnkBf16 = 16384.0;  // 32·32·16

#ifdef SEQTAPE_SMALL_X86

namespace avx512 {
#define SEQTAPE_SG_TARGET "avx512f,avx2,fma"
#define SEQTAPE_SG_VEC __m512
#define SEQTAPE_SG_LANES 16
#define SEQTAPE_SG_MASKT __mmask16
#define SEQTAPE_SG_MASK(cnt) static_cast<__mmask16>((1u << (cnt)) - 1)
#define SEQTAPE_SG_ZERO() _mm512_setzero_ps()
#define SEQTAPE_SG_LOADU(p) _mm512_loadu_ps(p)
#define SEQTAPE_SG_SET1(f) _mm512_set1_ps(f)
#define SEQTAPE_SG_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SEQTAPE_SG_MUL(a, b) _mm512_mul_ps(a, b)
#define SEQTAPE_SG_LOADM(p, mask) _mm512_maskz_loadu_ps(mask, p)
#define SEQTAPE_SG_STOREM(p, v, mask) _mm512_mask_storeu_ps(p, mask, v)
#define SEQTAPE_SG_ROWS1 12
#define SEQTAPE_SG_ROWS2 6
#define SEQTAPE_SG_ROWS4 4
#include "tensor/kernels_small_gemm.inc"
}  // namespace avx512

namespace avx2 {
// The first cnt lanes set (cnt = 1..8): a mask for maskload / maskstore.
__attribute__((target("avx2,fma"))) inline __m256i lanes_mask(int cnt) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
// out[u·ldo + r] = in[r·ldi + u] for r, u < 8.
__attribute__((target("avx2,fma"))) void transpose8x8(const float* in, int64_t ldi, float* out,
                                                      int64_t ldo) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(in + i * ldi);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * ldo, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * ldo, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

#define SEQTAPE_SG_TARGET "avx2,fma"
#define SEQTAPE_SG_VEC __m256
#define SEQTAPE_SG_LANES 8
#define SEQTAPE_SG_MASKT __m256i
#define SEQTAPE_SG_MASK(cnt) lanes_mask(cnt)
#define SEQTAPE_SG_ZERO() _mm256_setzero_ps()
#define SEQTAPE_SG_LOADU(p) _mm256_loadu_ps(p)
#define SEQTAPE_SG_SET1(f) _mm256_set1_ps(f)
#define SEQTAPE_SG_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SEQTAPE_SG_MUL(a, b) _mm256_mul_ps(a, b)
#define SEQTAPE_SG_LOADM(p, mask) _mm256_maskload_ps(p, mask)
#define SEQTAPE_SG_STOREM(p, v, mask) _mm256_maskstore_ps(p, mask, v)
#define SEQTAPE_SG_ROWS1 8
#define SEQTAPE_SG_ROWS2 4
#define SEQTAPE_SG_ROWS4 2
#include "tensor/kernels_small_gemm.inc"
}  // namespace avx2

#endif  // SEQTAPE_SMALL_X86

// Portable: the same chains without fusing, one row of C at a time (the j loop vectorizes).
void product_portable(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t ras,
                      int64_t cas, const float* bp, int64_t ldbp, float beta, float* c,
                      int64_t ldc) {
  thread_local std::vector<float> row;
  if (row.size() < static_cast<size_t>(n)) row.resize(static_cast<size_t>(n));
  float* s = row.data();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) s[j] = 0.f;
    for (int64_t p = 0; p < k; ++p) {
      const float x = a[i * ras + p * cas];
      const float* b = bp + p * ldbp;
      for (int64_t j = 0; j < n; ++j) s[j] += x * b[j];
    }
    float* ci = c + i * ldc;
    if (beta == 0.f)
      for (int64_t j = 0; j < n; ++j) ci[j] = alpha * s[j];
    else
      for (int64_t j = 0; j < n; ++j) ci[j] = alpha * s[j] + beta * ci[j];
  }
}

// The path (cpu_path.h): the same as gemm_nt_rowwise's.
using Path = CpuPath;
int64_t lanes() {
  return cpu_path() == Path::Avx512 ? 16 : 8;
}

// op(B) [K, N] into bp, row stride np >= N, columns N..np zero.
void pack_b(bool tb, int64_t n, int64_t k, const float* b, int64_t ldb, float* bp, int64_t np) {
  for (int64_t p = 0; p < k; ++p) std::fill(bp + p * np + n, bp + (p + 1) * np, 0.f);
  if (!tb) {
    for (int64_t p = 0; p < k; ++p)
      std::memcpy(bp + p * np, b + p * ldb, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  // op(B)[p, j] = B[j, p]: 8 × 8 blocks transposed in registers where the CPU has AVX2, the
  // rest in blocks of 8 columns of B, each row of the block written whole
  int64_t j0 = 0;
#ifdef SEQTAPE_SMALL_X86
  if (cpu_path() != Path::Portable)
    for (; j0 + 8 <= n; j0 += 8)
      for (int64_t p0 = 0; p0 + 8 <= k; p0 += 8)
        avx2::transpose8x8(b + j0 * ldb + p0, ldb, bp + p0 * np + j0, np);
#endif
  const int64_t k8 = j0 > 0 ? k - k % 8 : 0;  // columns of rows < j0 done above
  for (int64_t p = k8; p < k; ++p)
    for (int64_t j = 0; j < j0; ++j) bp[p * np + j] = b[j * ldb + p];
  int64_t p0 = 0;
  for (; p0 + 8 <= k; p0 += 8)
    for (int64_t j = j0; j < n; ++j) {
      const float* bj = b + j * ldb + p0;
      for (int u = 0; u < 8; ++u) bp[(p0 + u) * np + j] = bj[u];
    }
  for (int64_t p = p0; p < k; ++p)
    for (int64_t j = j0; j < n; ++j) bp[p * np + j] = b[j * ldb + p];
}

// One product; bp has room for op(B) packed (K·np floats). op(B) is read in place when its rows
// are whole vectors and not transposed, from a zero-padded copy otherwise.
void small_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                   float* bp, int64_t np) {
  int64_t ldbp = ldb;
  if (tb || np != n) {
    pack_b(tb, n, k, b, ldb, bp, np);
    b = bp;
    ldbp = np;
  }
  const int64_t ras = ta ? 1 : lda, cas = ta ? lda : 1;  // op(A)[i, p] = a[i·ras + p·cas]
  SEQTAPE_ON_PATH(product, product_portable, m, n, k, alpha, a, ras, cas, b, ldbp, beta, c, ldc);
}

}  // namespace

void gemm_small_batched(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                        float* c, int64_t ldc, const GemmBatch& bt, bool round_bf16) {
  if (bt.n0 <= 0 || bt.n1 <= 0 || m <= 0 || n <= 0) return;
  const int64_t count = bt.n0 * bt.n1, kk = std::max<int64_t>(k, 0), l = lanes();
  const int64_t np = (n + l - 1) / l * l;
  // Stored A is [ar, ac], stored B [br, bc]; rounded, they are copied dense.
  const int64_t ar = ta ? kk : m, ac = ta ? m : kk, br = tb ? n : kk, bc = tb ? kk : n;
  auto run = [&](int64_t t0, int64_t t1) {
    // (grow to the largest packed B and rounded operands once per thread, then no allocation)
    thread_local std::vector<float> buf, a16, b16;
    const size_t need = tb || np != n ? static_cast<size_t>(kk * np) : 0;
    if (buf.size() < need) buf.resize(need);
    if (round_bf16 && a16.size() < static_cast<size_t>(ar * ac))
      a16.resize(static_cast<size_t>(ar * ac));
    if (round_bf16 && b16.size() < static_cast<size_t>(br * bc))
      b16.resize(static_cast<size_t>(br * bc));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / bt.n1, j = t % bt.n1;
      const float* at = a + i * bt.sa0 + j * bt.sa1;
      const float* bt_ = b + i * bt.sb0 + j * bt.sb1;
      int64_t la = lda, lb = ldb;
      if (round_bf16) {
        detail::round_rows_to_bf16(at, ar, ac, lda, a16.data());
        detail::round_rows_to_bf16(bt_, br, bc, ldb, b16.data());
        at = a16.data();
        bt_ = b16.data();
        la = ac;
        lb = bc;
      }
      small_product(ta, tb, m, n, kk, alpha, at, la, bt_, lb, beta, c + i * bt.sc0 + j * bt.sc1,
                    ldc, buf.data(), np);
    }
  };
  // C blocks that overlap (a zero C stride) are written in order on this thread.
  const bool overlap = (bt.n0 > 1 && bt.sc0 == 0) || (bt.n1 > 1 && bt.sc1 == 0);
  if (overlap) return run(0, count);
  // About a vectorized operation per 16 multiply-adds, and the packing.
  const double cost =
      (double(m) * double(n) * double(kk) / 16.0 + double(kk) * double(n)) * kCostSimple;
  parallel_range(count, cost, run);
}

namespace {
// SmallGemmOff's setting (relaxed: it is not changed while a product runs)
std::atomic<bool> g_small_off{false};
}  // namespace

SmallGemmOff::SmallGemmOff() : prev_(g_small_off.exchange(true, std::memory_order_relaxed)) {}
SmallGemmOff::~SmallGemmOff() {
  g_small_off.store(prev_, std::memory_order_relaxed);
}

bool gemm_small_takes(int64_t m, int64_t n, int64_t k) {
  // SEQTAPE_SMALL_GEMM=0: never (BLAS or oneDNN for every product, as before this path; for
  // measuring it against them)
  static const bool off = [] {
    const char* v = std::getenv("SEQTAPE_SMALL_GEMM");
    return v && std::strcmp(v, "0") == 0;
  }();
  return !off && !g_small_off.load(std::memory_order_relaxed) && m > 0 && n > 0 && k > 0 &&
         double(m) * double(n) * double(k) <= kGemmSmallMaxMnk;
}

bool gemm_small_takes_bf16(int64_t m, int64_t n, int64_t k) {
  return gemm_small_takes(m, n, k) && double(m) * double(n) * double(k) <= kGemmSmallMaxMnkBf16;
}

const char* gemm_small_path() {
  return cpu_path_name(cpu_path());
}

}  // namespace seqtape::kernels
