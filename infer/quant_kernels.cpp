// The int8 and bf16 dot products of quantized decoding, one path per CPU (quant_kernels.h).
//
// Every path takes R rows × O outputs at once, so that each load of a weight row serves R rows
// and each load of an input row O outputs; an output's sum runs over p in one fixed order.
//
// Dimension key: N rows, Ld the padded row length.
#include "infer/quant_kernels.h"

#include <cstring>

#include "tensor/cpu_path.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace seqtape::quant_kernels {

namespace {

// Rows and outputs of one block: R·O accumulators stay in registers.
constexpr int kOut = 4;

float dequant(int32_t d, float sx, float sw) {
  return static_cast<float>(d) / (sx * sw);
}

void int8_portable(int64_t n, const int8_t* xq, const float* sx, const QuantMatrix& w, int64_t j0,
                   int64_t j1, float* y, int64_t ldy) {
  const int64_t ld = w.ld;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = j0; j < j1; ++j) {
      int32_t d = 0;
      for (int64_t p = 0; p < ld; ++p) d += int32_t(xq[r * ld + p]) * int32_t(w.q[j * ld + p]);
      y[r * ldy + j] = dequant(d, sx[r], w.scale[j]);
    }
}

void bf16_portable(int64_t n, const uint16_t* xb, const QuantMatrix& w, int64_t j0, int64_t j1,
                   float* y, int64_t ldy) {
  const int64_t ld = w.ld;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = j0; j < j1; ++j) {
      float s = 0;
      for (int64_t p = 0; p < ld; ++p)
        s += from_bf16(xb[r * ld + p]) * from_bf16(w.bf16[j * ld + p]);
      y[r * ldy + j] = s;
    }
}

#if defined(__x86_64__)

#define SEQTAPE_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define SEQTAPE_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define SEQTAPE_AVX2 __attribute__((target("avx2,fma")))

// Horizontal sums in a fixed order, through memory: GCC 12's reduce and extract intrinsics read
// an undefined register (-Wuninitialized in every Release build).
SEQTAPE_VNNI int32_t hsum_vnni(__m512i v) {
  alignas(64) int32_t a[16];
  _mm512_store_si512(a, v);
  int32_t s = 0;
  for (int32_t x : a) s += x;
  return s;
}

SEQTAPE_BF16 float hsum_bf16(__m512 v) {
  alignas(64) float a[16];
  _mm512_store_ps(a, v);
  float s = 0;
  for (float x : a) s += x;
  return s;
}

// R rows × O outputs from j: vpdpbusd of (q_x + 128) and q_j, then − 128·Σ q_j.
template <int R, int O>
SEQTAPE_VNNI void vnni_block(const int8_t* xq, const float* sx, const QuantMatrix& w, int64_t j,
                             float* y, int64_t ldy) {
  const int64_t ld = w.ld;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = _mm512_setzero_si512();
  for (int64_t p = 0; p < ld; p += 64) {
    __m512i wv[O];
    for (int o = 0; o < O; ++o) wv[o] = _mm512_loadu_si512(w.q.data() + (j + o) * ld + p);
    for (int r = 0; r < R; ++r) {
      const __m512i xu = _mm512_xor_si512(_mm512_loadu_si512(xq + r * ld + p), flip);
      for (int o = 0; o < O; ++o) acc[r][o] = _mm512_dpbusd_epi32(acc[r][o], xu, wv[o]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) {
      const int32_t d = hsum_vnni(acc[r][o]) - 128 * w.sum[size_t(j + o)];
      y[r * ldy + j + o] = dequant(d, sx[r], w.scale[size_t(j + o)]);
    }
}

template <int R>
SEQTAPE_VNNI void vnni_rows(const int8_t* xq, const float* sx, const QuantMatrix& w, int64_t j0,
                            int64_t j1, float* y, int64_t ldy) {
  int64_t j = j0;
  for (; j + kOut <= j1; j += kOut) vnni_block<R, kOut>(xq, sx, w, j, y, ldy);
  for (; j < j1; ++j) vnni_block<R, 1>(xq, sx, w, j, y, ldy);
}

SEQTAPE_VNNI void int8_vnni(int64_t n, const int8_t* xq, const float* sx, const QuantMatrix& w,
                            int64_t j0, int64_t j1, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) vnni_rows<4>(xq + r * w.ld, sx + r, w, j0, j1, y + r * ldy, ldy);
  for (; r < n; ++r) vnni_rows<1>(xq + r * w.ld, sx + r, w, j0, j1, y + r * ldy, ldy);
}

SEQTAPE_AVX2 int32_t hsum_avx2(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// R rows × O outputs from j: vpmaddubsw(|q_x|, sign(q_j, q_x)), then vpmaddwd with ones.
template <int R, int O>
SEQTAPE_AVX2 void avx2_block(const int8_t* xq, const float* sx, const QuantMatrix& w, int64_t j,
                             float* y, int64_t ldy) {
  const int64_t ld = w.ld;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = _mm256_setzero_si256();
  for (int64_t p = 0; p < ld; p += 32) {
    __m256i wv[O];
    for (int o = 0; o < O; ++o)
      wv[o] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.q.data() + (j + o) * ld + p));
    for (int r = 0; r < R; ++r) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + r * ld + p));
      const __m256i ax = _mm256_sign_epi8(x, x);
      for (int o = 0; o < O; ++o) {
        const __m256i pairs = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[o], x));
        acc[r][o] = _mm256_add_epi32(acc[r][o], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o)
      y[r * ldy + j + o] = dequant(hsum_avx2(acc[r][o]), sx[r], w.scale[size_t(j + o)]);
}

template <int R>
SEQTAPE_AVX2 void avx2_rows(const int8_t* xq, const float* sx, const QuantMatrix& w, int64_t j0,
                            int64_t j1, float* y, int64_t ldy) {
  int64_t j = j0;
  for (; j + kOut <= j1; j += kOut) avx2_block<R, kOut>(xq, sx, w, j, y, ldy);
  for (; j < j1; ++j) avx2_block<R, 1>(xq, sx, w, j, y, ldy);
}

SEQTAPE_AVX2 void int8_avx2(int64_t n, const int8_t* xq, const float* sx, const QuantMatrix& w,
                            int64_t j0, int64_t j1, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 2 <= n; r += 2) avx2_rows<2>(xq + r * w.ld, sx + r, w, j0, j1, y + r * ldy, ldy);
  for (; r < n; ++r) avx2_rows<1>(xq + r * w.ld, sx + r, w, j0, j1, y + r * ldy, ldy);
}

// R rows × O outputs from j: vdpbf16ps over pairs of bfloat16.
template <int R, int O>
SEQTAPE_BF16 void bf16_block(const uint16_t* xb, const QuantMatrix& w, int64_t j, float* y,
                             int64_t ldy) {
  const int64_t ld = w.ld;
  __m512 acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = _mm512_setzero_ps();
  for (int64_t p = 0; p < ld; p += 32) {
    __m512bh wv[O];
    for (int o = 0; o < O; ++o)
      wv[o] = (__m512bh)_mm512_loadu_si512(w.bf16.data() + (j + o) * ld + p);
    for (int r = 0; r < R; ++r) {
      const auto x = (__m512bh)_mm512_loadu_si512(xb + r * ld + p);
      for (int o = 0; o < O; ++o) acc[r][o] = _mm512_dpbf16_ps(acc[r][o], x, wv[o]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) y[r * ldy + j + o] = hsum_bf16(acc[r][o]);
}

template <int R>
SEQTAPE_BF16 void bf16_rows_of(const uint16_t* xb, const QuantMatrix& w, int64_t j0, int64_t j1,
                               float* y, int64_t ldy) {
  int64_t j = j0;
  for (; j + kOut <= j1; j += kOut) bf16_block<R, kOut>(xb, w, j, y, ldy);
  for (; j < j1; ++j) bf16_block<R, 1>(xb, w, j, y, ldy);
}

SEQTAPE_BF16 void bf16_avx512(int64_t n, const uint16_t* xb, const QuantMatrix& w, int64_t j0,
                              int64_t j1, float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= n; r += 4) bf16_rows_of<4>(xb + r * w.ld, w, j0, j1, y + r * ldy, ldy);
  for (; r < n; ++r) bf16_rows_of<1>(xb + r * w.ld, w, j0, j1, y + r * ldy, ldy);
}

#endif  // __x86_64__

}  // namespace

bool cpu_has_vnni() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

bool cpu_has_bf16() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

Int8Path int8_path() {
  static const Int8Path path = [] {
    const kernels::CpuPath cpu = kernels::cpu_path();
    if (cpu == kernels::CpuPath::Avx512 && cpu_has_vnni()) return Int8Path::Vnni;
    if (cpu != kernels::CpuPath::Portable) return Int8Path::Avx2;
    return Int8Path::Portable;
  }();
  return path;
}

bool bf16_native() {
  static const bool native = kernels::cpu_path() == kernels::CpuPath::Avx512 && cpu_has_bf16();
  return native;
}

void int8_rows(int64_t n, const int8_t* xq, const float* sx, const QuantMatrix& w, int64_t j0,
               int64_t j1, float* y, int64_t ldy) {
#if defined(__x86_64__)
  if (int8_path() == Int8Path::Vnni) return int8_vnni(n, xq, sx, w, j0, j1, y, ldy);
  if (int8_path() == Int8Path::Avx2) return int8_avx2(n, xq, sx, w, j0, j1, y, ldy);
#endif
  int8_portable(n, xq, sx, w, j0, j1, y, ldy);
}

void bf16_rows(int64_t n, const uint16_t* xb, const QuantMatrix& w, int64_t j0, int64_t j1,
               float* y, int64_t ldy) {
#if defined(__x86_64__)
  if (bf16_native()) return bf16_avx512(n, xb, w, j0, j1, y, ldy);
#endif
  bf16_portable(n, xb, w, j0, j1, y, ldy);
}

}  // namespace seqtape::quant_kernels
