// The mask words many Philox blocks at a time: the blocks are independent, so each round runs
// over all lanes at once (32×32→64-bit multiplies, vpmuludq), where one block at a time stays
// scalar and costs more than the memory pass that dropout is. GCC leaves the plain lane loop
// scalar on its AVX2/AVX-512 targets, so those paths are written with intrinsics; the plain
// loop serves the portable path.
#include "tensor/philox.h"

#include "tensor/cpu_path.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace seqtape::philox {

namespace {

constexpr int kLanes = 16;
constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

// kLanes blocks from first_block into out (block l's words at out[4l .. 4l+3]).
void lanes_portable(uint64_t first_block, uint32_t k0, uint32_t k1, uint32_t* __restrict out) {
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t b = first_block + uint64_t(l);
    c0[l] = uint32_t(b), c1[l] = uint32_t(b >> 32), c2[l] = 0, c3[l] = 0;
  }
  for (int round = 0; round < 10; ++round) {
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = kM0 * c0[l], p1 = kM1 * c2[l];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0, c1[l] = uint32_t(p1), c2[l] = n2, c3[l] = uint32_t(p0);
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int l = 0; l < kLanes; ++l)
    out[4 * l] = c0[l], out[4 * l + 1] = c1[l], out[4 * l + 2] = c2[l], out[4 * l + 3] = c3[l];
}

#if defined(__x86_64__)
// hi and lo halves of m·c for the eight 32-bit lanes of c: the even lanes' products from one
// vpmuludq, the odd lanes' from another over c shifted down.
__attribute__((target("avx2"))) inline void mulhilo8(__m256i m, __m256i c, __m256i& hi,
                                                     __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(c, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

__attribute__((target("avx2"))) void lanes_avx2(uint64_t first_block, uint32_t k0, uint32_t k1,
                                                uint32_t* __restrict out) {
  const __m256i m0 = _mm256_set1_epi32(int(kM0)), m1 = _mm256_set1_epi32(int(kM1));
  for (int half = 0; half < kLanes; half += 8) {
    alignas(32) uint32_t lo32[8], hi32[8];
    for (int l = 0; l < 8; ++l) {
      const uint64_t b = first_block + uint64_t(half + l);
      lo32[l] = uint32_t(b), hi32[l] = uint32_t(b >> 32);
    }
    __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo32));
    __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi32));
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    uint32_t a = k0, b = k1;
    for (int round = 0; round < 10; ++round) {
      __m256i hi0, lo0, hi1, lo1;
      mulhilo8(m0, c0, hi0, lo0);
      mulhilo8(m1, c2, hi1, lo1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int(a)));
      c1 = lo1;
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int(b)));
      c3 = lo0;
      a += kW0;
      b += kW1;
    }
    // [c0 c1 c2 c3] lanes → blocks of four words: interleave pairs, then pairs of pairs.
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    const __m256i b0 = _mm256_unpacklo_epi64(t0, t2), b1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i b2 = _mm256_unpacklo_epi64(t1, t3), b3 = _mm256_unpackhi_epi64(t1, t3);
    // b0 holds blocks 0 and 4, b1 blocks 1 and 5, b2 blocks 2 and 6, b3 blocks 3 and 7.
    __m256i* o = reinterpret_cast<__m256i*>(out + 4 * half);
    _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(b0, b1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(b2, b3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(b0, b1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(b2, b3, 0x31));
  }
}

// The same over sixteen blocks in 512-bit registers, with the zero-masked forms of the
// intrinsics (GCC 12's unmasked ones start from an undefined register, which -Wuninitialized
// reports).
constexpr __mmask8 k8 = 0xFF;
constexpr __mmask16 k16 = 0xFFFF;
__attribute__((target("avx512f"))) inline void mulhilo16(__m512i m, __m512i c, __m512i& hi,
                                                         __m512i& lo) {
  const __m512i even = _mm512_maskz_mul_epu32(k8, c, m);
  const __m512i odd = _mm512_maskz_mul_epu32(k8, _mm512_maskz_srli_epi64(k8, c, 32), m);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_maskz_slli_epi64(k8, odd, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_maskz_srli_epi64(k8, even, 32), odd);
}

__attribute__((target("avx512f"))) void lanes_avx512(uint64_t first_block, uint32_t k0, uint32_t k1,
                                                     uint32_t* __restrict out) {
  static_assert(kLanes == 16);
  const __m512i m0 = _mm512_set1_epi32(int(kM0)), m1 = _mm512_set1_epi32(int(kM1));
  alignas(64) uint32_t lo32[16], hi32[16];
  for (int l = 0; l < 16; ++l) {
    const uint64_t b = first_block + uint64_t(l);
    lo32[l] = uint32_t(b), hi32[l] = uint32_t(b >> 32);
  }
  __m512i c0 = _mm512_load_si512(lo32), c1 = _mm512_load_si512(hi32);
  __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    mulhilo16(m0, c0, hi0, lo0);
    mulhilo16(m1, c2, hi1, lo1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(int(k0)));
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(int(k1)));
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  const __m512i t0 = _mm512_maskz_unpacklo_epi32(k16, c0, c1),
                t1 = _mm512_maskz_unpackhi_epi32(k16, c0, c1);
  const __m512i t2 = _mm512_maskz_unpacklo_epi32(k16, c2, c3),
                t3 = _mm512_maskz_unpackhi_epi32(k16, c2, c3);
  // 128-bit lane k of b_j holds block 4k + j: a 4×4 transpose of lanes puts blocks in order.
  const __m512i b0 = _mm512_maskz_unpacklo_epi64(k8, t0, t2),
                b1 = _mm512_maskz_unpackhi_epi64(k8, t0, t2);
  const __m512i b2 = _mm512_maskz_unpacklo_epi64(k8, t1, t3),
                b3 = _mm512_maskz_unpackhi_epi64(k8, t1, t3);
  const __m512i x0 = _mm512_maskz_shuffle_i32x4(k16, b0, b1, 0x44),
                x1 = _mm512_maskz_shuffle_i32x4(k16, b2, b3, 0x44);
  const __m512i x2 = _mm512_maskz_shuffle_i32x4(k16, b0, b1, 0xEE),
                x3 = _mm512_maskz_shuffle_i32x4(k16, b2, b3, 0xEE);
  _mm512_storeu_si512(out, _mm512_maskz_shuffle_i32x4(k16, x0, x1, 0x88));
  _mm512_storeu_si512(out + 16, _mm512_maskz_shuffle_i32x4(k16, x0, x1, 0xDD));
  _mm512_storeu_si512(out + 32, _mm512_maskz_shuffle_i32x4(k16, x2, x3, 0x88));
  _mm512_storeu_si512(out + 48, _mm512_maskz_shuffle_i32x4(k16, x2, x3, 0xDD));
}
#endif

void lanes(uint64_t first_block, uint32_t k0, uint32_t k1, uint32_t* out) {
#if defined(__x86_64__)
  if (kernels::cpu_path() == kernels::CpuPath::Avx512)
    return lanes_avx512(first_block, k0, k1, out);
  if (kernels::cpu_path() == kernels::CpuPath::Avx2) return lanes_avx2(first_block, k0, k1, out);
#endif
  lanes_portable(first_block, k0, k1, out);
}

// Keep bits of 64·n_words words at w (word j kept when w[j] >= t), into out.
void keep_bits_portable(const uint32_t* w, int64_t n_words, uint32_t t, uint64_t* out) {
  for (int64_t u = 0; u < n_words; ++u) {
    uint64_t b = 0;
    for (int j = 0; j < 64; ++j) b |= uint64_t(w[64 * u + j] >= t) << j;
    out[u] = b;
  }
}

template <typename T>
void expand_portable(const uint64_t* bits, int64_t n_words, T scale, T* out) {
  for (int64_t u = 0; u < n_words; ++u)
    for (int j = 0; j < 64; ++j) out[64 * u + j] = (bits[u] >> j) & 1 ? scale : T(0);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void keep_bits_avx2(const uint32_t* w, int64_t n_words, uint32_t t,
                                                    uint64_t* out) {
  // No unsigned compare in AVX2: w >= t is (w ^ sign) > ((t - 1) ^ sign) signed, for t > 0.
  if (t == 0) {
    for (int64_t u = 0; u < n_words; ++u) out[u] = ~uint64_t(0);
    return;
  }
  const __m256i sign = _mm256_set1_epi32(int(0x80000000u));
  const __m256i tm = _mm256_set1_epi32(int((t - 1) ^ 0x80000000u));
  for (int64_t u = 0; u < n_words; ++u) {
    uint64_t b = 0;
    for (int g = 0; g < 8; ++g) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * u + 8 * g));
      const __m256i gt = _mm256_cmpgt_epi32(_mm256_xor_si256(x, sign), tm);
      b |= uint64_t(uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(gt)))) << (8 * g);
    }
    out[u] = b;
  }
}

// Each byte of the bits becomes eight lanes: broadcast, isolate one bit per lane, compare.
__attribute__((target("avx2"))) void expand_avx2(const uint64_t* bits, int64_t n_words, float scale,
                                                 float* out) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t u = 0; u < n_words; ++u)
    for (int g = 0; g < 8; ++g) {
      const __m256i b = _mm256_set1_epi32(int((bits[u] >> (8 * g)) & 0xFF));
      const __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(b, lane_bit), lane_bit);
      _mm256_storeu_ps(out + 64 * u + 8 * g, _mm256_and_ps(_mm256_castsi256_ps(on), s));
    }
}

__attribute__((target("avx512f"))) void keep_bits_avx512(const uint32_t* w, int64_t n_words,
                                                         uint32_t t, uint64_t* out) {
  const __m512i tv = _mm512_set1_epi32(int(t));
  for (int64_t u = 0; u < n_words; ++u) {
    uint64_t b = 0;
    for (int g = 0; g < 4; ++g)
      b |= uint64_t(_mm512_cmpge_epu32_mask(_mm512_loadu_si512(w + 64 * u + 16 * g), tv))
           << (16 * g);
    out[u] = b;
  }
}

__attribute__((target("avx512f"))) void expand_avx512(const uint64_t* bits, int64_t n_words,
                                                      float scale, float* out) {
  const __m512 s = _mm512_set1_ps(scale);
  for (int64_t u = 0; u < n_words; ++u)
    for (int g = 0; g < 4; ++g)
      _mm512_storeu_ps(out + 64 * u + 16 * g,
                       _mm512_maskz_mov_ps(__mmask16(bits[u] >> (16 * g)), s));
}

__attribute__((target("avx512f"))) void expand_avx512(const uint64_t* bits, int64_t n_words,
                                                      double scale, double* out) {
  const __m512d s = _mm512_set1_pd(scale);
  for (int64_t u = 0; u < n_words; ++u)
    for (int g = 0; g < 8; ++g)
      _mm512_storeu_pd(out + 64 * u + 8 * g, _mm512_maskz_mov_pd(__mmask8(bits[u] >> (8 * g)), s));
}
#endif

}  // namespace

void DropoutMask::bits(uint64_t first_word, int64_t n_words, uint64_t* out) const {
  constexpr int64_t kWordsPerChunk = kChunk / 64;
  alignas(64) uint32_t w[kChunk];
  for (int64_t u = 0; u < n_words; u += kWordsPerChunk) {
    const int64_t n = std::min(kWordsPerChunk, n_words - u);
    words(16 * (first_word + uint64_t(u)), 16 * n, w);  // 64 words are 16 blocks
#if defined(__x86_64__)
    if (kernels::cpu_path() == kernels::CpuPath::Avx512) {
      keep_bits_avx512(w, n, threshold, out + u);
      continue;
    }
    if (kernels::cpu_path() == kernels::CpuPath::Avx2) {
      keep_bits_avx2(w, n, threshold, out + u);
      continue;
    }
#endif
    keep_bits_portable(w, n, threshold, out + u);
  }
}

void expand_keep(const uint64_t* bits, int64_t first_word, int64_t n_words, float scale,
                 float* out) {
#if defined(__x86_64__)
  if (kernels::cpu_path() == kernels::CpuPath::Avx512)
    return expand_avx512(bits + first_word, n_words, scale, out);
  if (kernels::cpu_path() == kernels::CpuPath::Avx2)
    return expand_avx2(bits + first_word, n_words, scale, out);
#endif
  expand_portable(bits + first_word, n_words, scale, out);
}

void expand_keep(const uint64_t* bits, int64_t first_word, int64_t n_words, double scale,
                 double* out) {
#if defined(__x86_64__)
  if (kernels::cpu_path() == kernels::CpuPath::Avx512)
    return expand_avx512(bits + first_word, n_words, scale, out);
#endif
  expand_portable(bits + first_word, n_words, scale, out);
}

void DropoutMask::words(uint64_t first_block, int64_t blocks, uint32_t* out) const {
  const uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  int64_t b = 0;
  for (; b + kLanes <= blocks; b += kLanes) lanes(first_block + uint64_t(b), k0, k1, out + 4 * b);
  for (; b < blocks; ++b) {
    const Block w = block4x32_10(
        {uint32_t(first_block + uint64_t(b)), uint32_t((first_block + uint64_t(b)) >> 32), 0, 0},
        k0, k1);
    for (int j = 0; j < 4; ++j) out[4 * b + j] = w[size_t(j)];
  }
}

}  // namespace seqtape::philox
