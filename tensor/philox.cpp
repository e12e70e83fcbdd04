// A mask's keep bits, eight Philox blocks (64 half-words) per 64-bit word of bits, many blocks
// at a time: the blocks are independent, so each round runs over all lanes at once. Each block
// sits in a 64-bit lane whose low half is the state word, so one vpmuludq gives a lane's whole
// 32×32→64-bit product (hi and lo with no shuffles) and the garbage it leaves in the high half
// is never read; four words of bits are made side by side to hide the multiplies' latency. GCC
// leaves the plain loop scalar, so the AVX2/AVX-512 paths are written with intrinsics; the plain
// loop over block4x32_10 is the reference and the portable path. Then the keep factors that
// the passes over the bits read, expanded from them a chunk at a time.
#include "tensor/philox.h"

#include "tensor/cpu_path.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace seqtape::philox {

namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
constexpr int kGroup = 4;  // words of bits made side by side

// Bit j of a word of bits from its eight blocks' words w[l][r] (block l, word r): the half-word
// of word 2h + q / 2 of block l, low half first, for j = 32h + 4l + q (DropoutMask's comment).
uint64_t bits_of_blocks(const Block* w, uint16_t t) {
  uint64_t b = 0;
  for (int j = 0; j < 64; ++j) {
    const int h = j / 32, l = (j % 32) / 4, q = j % 4;
    const uint32_t word = w[l][size_t(2 * h + q / 2)];
    b |= uint64_t(uint16_t(word >> (16 * (q % 2))) >= t) << j;
  }
  return b;
}

void bits_portable(uint64_t first_word, int64_t n_words, uint32_t k0, uint32_t k1, uint16_t t,
                   uint64_t* out) {
  for (int64_t u = 0; u < n_words; ++u) {
    Block w[8];
    for (uint64_t l = 0; l < 8; ++l) {
      const uint64_t c = 8 * (first_word + uint64_t(u)) + l;
      w[l] = block4x32_10({uint32_t(c), uint32_t(c >> 32), 0, 0}, k0, k1);
    }
    out[u] = bits_of_blocks(w, t);
  }
}

#if defined(__x86_64__)
// The keep bits of 32 half-words: words r, r + 1 of four blocks (lo_a, hi_a), half-word 4l + q at
// bit 4l + q, then of the next four (lo_b, hi_b) at bit 16 + 4l + q. x >= t is max(x, t) == x;
// packs puts each 128-bit lane's bytes side by side, and the permute restores their order.
__attribute__((target("avx2"))) inline uint64_t keep32_avx2(__m256i lo_a, __m256i hi_a,
                                                            __m256i lo_b, __m256i hi_b, __m256i t) {
  const __m256i x = _mm256_blend_epi32(lo_a, _mm256_slli_epi64(hi_a, 32), 0xAA);
  const __m256i y = _mm256_blend_epi32(lo_b, _mm256_slli_epi64(hi_b, 32), 0xAA);
  const __m256i kx = _mm256_cmpeq_epi16(_mm256_max_epu16(x, t), x);
  const __m256i ky = _mm256_cmpeq_epi16(_mm256_max_epu16(y, t), y);
  const __m256i k = _mm256_permute4x64_epi64(_mm256_packs_epi16(kx, ky), 0xD8);
  return uint64_t(uint32_t(_mm256_movemask_epi8(k)));
}

// kGroup words of bits from first_word: per word, its 8 blocks in two registers of 4 lanes.
__attribute__((target("avx2"))) void group_avx2(uint64_t first_word, uint32_t k0, uint32_t k1,
                                                uint16_t threshold, uint64_t* out) {
  const __m256i t = _mm256_set1_epi16(short(threshold));
  constexpr int kRegs = 2 * kGroup;
  const __m256i m0 = _mm256_set1_epi64x(kM0), m1 = _mm256_set1_epi64x(kM1);
  __m256i c0[kRegs], c1[kRegs], c2[kRegs], c3[kRegs];
  for (int g = 0; g < kRegs; ++g) {
    const int64_t b = int64_t(8 * first_word) + 4 * g;
    c0[g] = _mm256_setr_epi64x(b, b + 1, b + 2, b + 3);
    c1[g] = _mm256_srli_epi64(c0[g], 32);
    c2[g] = c3[g] = _mm256_setzero_si256();
  }
  for (int round = 0; round < 10; ++round) {
    const __m256i a = _mm256_set1_epi64x(k0), b = _mm256_set1_epi64x(k1);
    for (int g = 0; g < kRegs; ++g) {
      const __m256i p0 = _mm256_mul_epu32(c0[g], m0), p1 = _mm256_mul_epu32(c2[g], m1);
      c0[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[g]), a);
      c2[g] = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[g]), b);
      c1[g] = p1, c3[g] = p0;
    }
    k0 += kW0, k1 += kW1;
  }
  for (int u = 0; u < kGroup; ++u) {
    const int g = 2 * u;
    out[u] = keep32_avx2(c0[g], c1[g], c0[g + 1], c1[g + 1], t) |
             keep32_avx2(c2[g], c3[g], c2[g + 1], c3[g + 1], t) << 32;
  }
}

// The same with 8 lanes: one register per word of bits. The zero-masked forms of the intrinsics:
// GCC 12's unmasked ones start from an undefined register, which -Wuninitialized reports.
constexpr __mmask8 k8 = 0xFF;
__attribute__((target("avx512f,avx512bw"))) void group_avx512(uint64_t first_word, uint32_t k0,
                                                              uint32_t k1, uint16_t threshold,
                                                              uint64_t* out) {
  const __m512i t = _mm512_set1_epi16(short(threshold));
  const __m512i m0 = _mm512_set1_epi64(kM0), m1 = _mm512_set1_epi64(kM1);
  __m512i c0[kGroup], c1[kGroup], c2[kGroup], c3[kGroup];
  for (int g = 0; g < kGroup; ++g) {
    const int64_t b = int64_t(8 * (first_word + uint64_t(g)));
    c0[g] = _mm512_add_epi64(_mm512_set1_epi64(b), _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    c1[g] = _mm512_maskz_srli_epi64(k8, c0[g], 32);
    c2[g] = c3[g] = _mm512_setzero_si512();
  }
  for (int round = 0; round < 10; ++round) {
    const __m512i a = _mm512_set1_epi64(k0), b = _mm512_set1_epi64(k1);
    for (int g = 0; g < kGroup; ++g) {
      const __m512i p0 = _mm512_maskz_mul_epu32(k8, c0[g], m0),
                    p1 = _mm512_maskz_mul_epu32(k8, c2[g], m1);
      c0[g] = _mm512_ternarylogic_epi64(_mm512_maskz_srli_epi64(k8, p1, 32), c1[g], a,
                                        0x96);  // a ^ b ^ c
      c2[g] = _mm512_ternarylogic_epi64(_mm512_maskz_srli_epi64(k8, p0, 32), c3[g], b, 0x96);
      c1[g] = p1, c3[g] = p0;
    }
    k0 += kW0, k1 += kW1;
  }
  for (int g = 0; g < kGroup; ++g) {
    const __m512i x =
        _mm512_mask_blend_epi32(0xAAAA, c0[g], _mm512_maskz_slli_epi64(k8, c1[g], 32));
    const __m512i y =
        _mm512_mask_blend_epi32(0xAAAA, c2[g], _mm512_maskz_slli_epi64(k8, c3[g], 32));
    out[g] = uint64_t(_mm512_cmpge_epu16_mask(x, t)) | uint64_t(_mm512_cmpge_epu16_mask(y, t))
                                                           << 32;
  }
}

bool has_avx512bw() {
  static const bool bw = __builtin_cpu_supports("avx512bw");
  return bw;
}
#endif

template <typename T>
void expand_portable(const uint64_t* bits, int64_t n_words, T scale, T* out) {
  for (int64_t u = 0; u < n_words; ++u)
    for (int j = 0; j < 64; ++j) out[64 * u + j] = (bits[u] >> j) & 1 ? scale : T(0);
}

#if defined(__x86_64__)
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
  const uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  int64_t u = 0;
#if defined(__x86_64__)
  if (kernels::cpu_path() == kernels::CpuPath::Avx512 && has_avx512bw()) {
    for (; u + kGroup <= n_words; u += kGroup)
      group_avx512(first_word + uint64_t(u), k0, k1, threshold, out + u);
  } else if (kernels::cpu_path() != kernels::CpuPath::Portable) {
    for (; u + kGroup <= n_words; u += kGroup)
      group_avx2(first_word + uint64_t(u), k0, k1, threshold, out + u);
  }
#endif
  bits_portable(first_word + uint64_t(u), n_words - u, k0, k1, threshold, out + u);
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

}  // namespace seqtape::philox
