// The int8 and bf16 dot products of quantized decoding, one path per CPU (quant_kernels.h).
//
// Every path takes R rows × O outputs at once, so that each load of a weight row serves R rows
// and each load of an input row O outputs; an output's sum runs over p in one fixed order.
//
// Dimension key: N rows, Ld the padded row length.
#include "infer/quant_kernels.h"

#include <cstring>
#include <type_traits>

#include "tensor/cpu_path.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace seqtape::quant_kernels {

namespace {

float dequant(int32_t d, float sx, float sw) {
  return static_cast<float>(d) / (sx * sw);
}

void int8_portable(int64_t n, const int8_t* xq, const float* sx, const QuantMatrix& w, int64_t j0,
                   int64_t j1, float* y, int64_t ldy) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = j0; j < j1; ++j) {
      int32_t d = 0;
      for (int64_t p = 0; p < w.ld; ++p) d += int32_t(xq[r * w.ld + p]) * int32_t(w.q_at(j, p));
      y[r * ldy + j] = dequant(d, sx[r], w.scale[size_t(j)]);
    }
}

void bf16_portable(int64_t n, const uint16_t* xb, const QuantMatrix& w, int64_t j0, int64_t j1,
                   float* y, int64_t ldy) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = j0; j < j1; ++j) {
      float s = 0;
      for (int64_t p = 0; p < w.ld; ++p)
        s += from_bf16(xb[r * w.ld + p]) * from_bf16(w.bf16_at(j, p));
      y[r * ldy + j] = s;
    }
}

// A row's 4 bytes (int8: inputs 4g .. 4g+3; bf16: inputs 2g, 2g+1) as one 32-bit lane.
int32_t group_of(const void* row, int64_t g) {
  int32_t v = 0;
  std::memcpy(&v, static_cast<const char*>(row) + 4 * g, sizeof v);
  return v;
}

// Outputs of strip s that exist (the last strip may be short), as a 16-bit lane mask.
uint16_t strip_mask(int64_t s, int64_t out) {
  const int64_t left = out - s * kQuantStrip;
  return left >= kQuantStrip ? uint16_t(0xffff) : static_cast<uint16_t>((1u << left) - 1);
}

// Runs block<R, S> over strips [s0, s1) for rows [0, n): blocks of kRows rows with S = 2
// strips, the rows left one at a time with S = 4 (independent accumulators for one row).
template <int kRows, typename Block>
void over_rows_and_strips(int64_t n, int64_t s0, int64_t s1, Block&& block) {
  int64_t r = 0;
  const auto strips = [&](auto rows, auto width) {
    constexpr int R = decltype(rows)::value, S = decltype(width)::value;
    int64_t s = s0;
    for (; s + S <= s1; s += S) block.template run<R, S>(r, s);
    for (; s < s1; ++s) block.template run<R, 1>(r, s);
  };
  for (; r + kRows <= n; r += kRows)
    strips(std::integral_constant<int, kRows>{}, std::integral_constant<int, 2>{});
  for (; r < n; ++r) strips(std::integral_constant<int, 1>{}, std::integral_constant<int, 4>{});
}

#if defined(__x86_64__)

// (The maskz forms below: GCC 12's unmasked ones read an undefined register, a -Wuninitialized
// warning in every Release build.)
#define SEQTAPE_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define SEQTAPE_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define SEQTAPE_AVX2 __attribute__((target("avx2,fma")))

struct Int8Args {
  const int8_t* xq;
  const float* sx;
  const QuantMatrix& w;
  float* y;
  int64_t ldy;
};

// R rows × S strips from (r, s): vpdpbusd of (q_x + 128) broadcast by groups and the strip,
// then − 128·Σ q_j, then float(d) / (s_x·s_j).
struct VnniBlock {
  Int8Args a;
  template <int R, int S>
  SEQTAPE_VNNI void run(int64_t r, int64_t s) const {
    const QuantMatrix& w = a.w;
    const int64_t groups = w.ld / 4;
    __m512i acc[R][S];
    for (int i = 0; i < R; ++i)
      for (int k = 0; k < S; ++k) acc[i][k] = _mm512_setzero_si512();
    const int8_t* ws = w.q.data() + s * groups * 64;
    for (int64_t g = 0; g < groups; ++g) {
      __m512i wv[S];
      for (int k = 0; k < S; ++k) wv[k] = _mm512_loadu_si512(ws + (k * groups + g) * 64);
      for (int i = 0; i < R; ++i) {
        const int32_t xu = group_of(a.xq + (r + i) * w.ld, g) ^ int32_t(0x80808080);
        const __m512i xv = _mm512_set1_epi32(xu);
        for (int k = 0; k < S; ++k) acc[i][k] = _mm512_dpbusd_epi32(acc[i][k], xv, wv[k]);
      }
    }
    for (int k = 0; k < S; ++k) {
      const int64_t j = (s + k) * kQuantStrip;
      const __m512i corr = _mm512_maskz_slli_epi32(0xffff, _mm512_loadu_si512(w.sum.data() + j), 7);
      const __m512 sw = _mm512_loadu_ps(w.scale.data() + j);
      const uint16_t mask = strip_mask(s + k, w.out);
      for (int i = 0; i < R; ++i) {
        const __m512 d = _mm512_maskz_cvtepi32_ps(0xffff, _mm512_sub_epi32(acc[i][k], corr));
        const __m512 v = _mm512_div_ps(d, _mm512_mul_ps(_mm512_set1_ps(a.sx[r + i]), sw));
        _mm512_mask_storeu_ps(a.y + (r + i) * a.ldy + j, mask, v);
      }
    }
  }
};

// R rows × S strips from (r, s): vpmaddubsw(|q_x|, q_j with q_x's sign) by groups, then
// vpmaddwd with ones; 8 outputs per register, two registers per strip.
struct Avx2Block {
  Int8Args a;
  template <int R, int S>
  SEQTAPE_AVX2 void run(int64_t r, int64_t s) const {
    const QuantMatrix& w = a.w;
    const int64_t groups = w.ld / 4;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[R][2 * S];
    for (int i = 0; i < R; ++i)
      for (int k = 0; k < 2 * S; ++k) acc[i][k] = _mm256_setzero_si256();
    const int8_t* ws = w.q.data() + s * groups * 64;
    for (int64_t g = 0; g < groups; ++g) {
      __m256i wv[2 * S];
      for (int k = 0; k < 2 * S; ++k)
        wv[k] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(ws + ((k / 2) * groups + g) * 64 + (k % 2) * 32));
      for (int i = 0; i < R; ++i) {
        const __m256i xv = _mm256_set1_epi32(group_of(a.xq + (r + i) * w.ld, g));
        const __m256i ax = _mm256_sign_epi8(xv, xv);
        for (int k = 0; k < 2 * S; ++k) {
          const __m256i pairs = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv[k], xv));
          acc[i][k] = _mm256_add_epi32(acc[i][k], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
    for (int i = 0; i < R; ++i)
      for (int k = 0; k < 2 * S; ++k) {
        const int64_t j = (s + k / 2) * kQuantStrip + (k % 2) * 8;
        const __m256 sw = _mm256_loadu_ps(w.scale.data() + j);
        alignas(32) float v[8];
        _mm256_store_ps(v, _mm256_div_ps(_mm256_cvtepi32_ps(acc[i][k]),
                                         _mm256_mul_ps(_mm256_set1_ps(a.sx[r + i]), sw)));
        for (int64_t c = 0; c < 8 && j + c < w.out; ++c) a.y[(r + i) * a.ldy + j + c] = v[c];
      }
  }
};

// R rows × S strips from (r, s): vdpbf16ps of the row's bfloat16 pairs broadcast by groups and
// the strip.
struct Bf16Block {
  const uint16_t* xb;
  const QuantMatrix& w;
  float* y;
  int64_t ldy;
  template <int R, int S>
  SEQTAPE_BF16 void run(int64_t r, int64_t s) const {
    const int64_t groups = w.ld / 2;
    __m512 acc[R][S];
    for (int i = 0; i < R; ++i)
      for (int k = 0; k < S; ++k) acc[i][k] = _mm512_setzero_ps();
    const uint16_t* ws = w.bf16.data() + s * groups * 32;
    for (int64_t g = 0; g < groups; ++g) {
      __m512bh wv[S];
      for (int k = 0; k < S; ++k) wv[k] = (__m512bh)_mm512_loadu_si512(ws + (k * groups + g) * 32);
      for (int i = 0; i < R; ++i) {
        const auto xv = (__m512bh)_mm512_set1_epi32(group_of(xb + (r + i) * w.ld, g));
        for (int k = 0; k < S; ++k) acc[i][k] = _mm512_dpbf16_ps(acc[i][k], xv, wv[k]);
      }
    }
    for (int k = 0; k < S; ++k)
      for (int i = 0; i < R; ++i)
        _mm512_mask_storeu_ps(y + (r + i) * ldy + (s + k) * kQuantStrip, strip_mask(s + k, w.out),
                              acc[i][k]);
  }
};

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
  const int64_t s0 = j0 / kQuantStrip, s1 = (j1 + kQuantStrip - 1) / kQuantStrip;
  if (int8_path() == Int8Path::Vnni)
    return over_rows_and_strips<8>(n, s0, s1, VnniBlock{{xq, sx, w, y, ldy}});
  if (int8_path() == Int8Path::Avx2)
    return over_rows_and_strips<4>(n, s0, s1, Avx2Block{{xq, sx, w, y, ldy}});
#endif
  int8_portable(n, xq, sx, w, j0, j1, y, ldy);
}

void bf16_rows(int64_t n, const uint16_t* xb, const QuantMatrix& w, int64_t j0, int64_t j1,
               float* y, int64_t ldy) {
#if defined(__x86_64__)
  const int64_t s0 = j0 / kQuantStrip, s1 = (j1 + kQuantStrip - 1) / kQuantStrip;
  if (bf16_native()) return over_rows_and_strips<8>(n, s0, s1, Bf16Block{xb, w, y, ldy});
#endif
  bf16_portable(n, xb, w, j0, j1, y, ldy);
}

}  // namespace seqtape::quant_kernels
