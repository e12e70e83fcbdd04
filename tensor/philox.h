#pragma once
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a counter-based generator, four 32-bit words from a 128-bit counter and a 64-bit
// key in ten rounds of multiplies and xors. Any element's random half-word is a pure function of
// (key, index), so a dropout mask needs no sequential draws: its bits are made on any thread, in
// any chunking. Made once, as one keep bit per element (DropoutMask::bits), they are what the
// forward and the backward read: a word costs several times the memory pass that applies it.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

namespace seqtape::philox {

using Block = std::array<uint32_t, 4>;

// One Philox4x32-10 block: counter c, key (k0, k1).
inline Block block4x32_10(Block c, uint32_t k0, uint32_t k1) {
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = kM0 * c[0], p1 = kM1 * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1,
         uint32_t(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Inverted dropout's mask, as a function: element i is kept when its 16-bit half-word is at least
// `threshold` (= round(p·2¹⁶), so P(keep) = 1 − p to within 2⁻¹⁷; a half-word rather than a whole
// one makes each Philox block serve eight elements, and the words are the cost). Element i =
// 64u + 32h + 4l + q takes half q mod 2 (the low one first) of word 2h + q / 2 of the block whose
// counter is 8u + l (64 bits over the first two counter words): each 64-bit word u of bits comes
// from eight consecutive blocks, in the order the vector lanes make them.
struct DropoutMask {
  uint64_t key = 0;
  uint16_t threshold = 0;

  static DropoutMask make(double p, uint64_t key) {
    const double t = std::round(p * 65536.0);
    return {key, t >= 65535.0 ? uint16_t(65535) : static_cast<uint16_t>(t)};
  }
  // The keep bits of elements [64·first_word, 64·(first_word + n_words)): bit j of out[u] is
  // element 64·(first_word + u) + j's. The forward makes them once and keeps them; its passes
  // and the backward's read them.
  void bits(uint64_t first_word, int64_t n_words, uint64_t* out) const;
  static int64_t bit_words(int64_t n) { return (n + 63) / 64; }
};

// Element i's keep factor, scale or 0, as the keep bits say: kept when bit i mod 64 of word i / 64
// is set. out gets 64·n_words factors from word first_word on.
void expand_keep(const uint64_t* bits, int64_t first_word, int64_t n_words, float scale,
                 float* out);
void expand_keep(const uint64_t* bits, int64_t first_word, int64_t n_words, double scale,
                 double* out);

// A mask's keep bits (DropoutMask::bits), read where dropout is applied: element i is scaled by
// `scale` when kept and zeroed when not. The factors are expanded a chunk at a time onto the
// stack, so the loops over them are plain products that vectorize.
struct KeepBits {
  static constexpr int64_t kChunk = 256;  // factors expanded at once, on the stack

  const uint64_t* bits = nullptr;

  // Calls f(i, n, k) over [i0, i1) in chunks: k[j] is element (i + j)'s keep factor, j < n.
  template <typename T, typename F>
  void for_each_chunk(int64_t i0, int64_t i1, T scale, F&& f) const {
    alignas(64) T k[kChunk];
    for (int64_t s = i0; s < i1;) {
      const int64_t first = s / 64, e = std::min(i1, first * 64 + kChunk);
      expand_keep(bits, first, (e - first * 64 + 63) / 64, scale, k);
      f(s, e - s, k + (s - first * 64));
      s = e;
    }
  }
  // out[i] = x[i]·keep(i) over [i0, i1) (out may be x). A dropped inf or NaN gives NaN, as x·0
  // did when the mask was a tensor.
  template <typename T>
  void apply(int64_t i0, int64_t i1, T scale, const T* x, T* out) const {
    for_each_chunk(i0, i1, scale, [&](int64_t s, int64_t n, const T* k) {
      const T* xs = x + s;
      T* os = out + s;
      for (int64_t j = 0; j < n; ++j) os[j] = xs[j] * k[j];
    });
  }
  // d[i] += g[i]·keep(i) over [i0, i1).
  template <typename T>
  void apply_add(int64_t i0, int64_t i1, T scale, const T* g, T* d) const {
    for_each_chunk(i0, i1, scale, [&](int64_t s, int64_t n, const T* k) {
      const T* gs = g + s;
      T* ds = d + s;
      for (int64_t j = 0; j < n; ++j) ds[j] += gs[j] * k[j];
    });
  }
  // out[i] = a[i] + b[i]·keep(i) over [i0, i1) (out may be a or b): a residual add of the
  // dropped b, with the bits of apply followed by an add.
  template <typename T>
  void add_apply(int64_t i0, int64_t i1, T scale, const T* a, const T* b, T* out) const {
    for_each_chunk(i0, i1, scale, [&](int64_t s, int64_t n, const T* k) {
      const T* as = a + s;
      const T* bs = b + s;
      T* os = out + s;
      for (int64_t j = 0; j < n; ++j) os[j] = as[j] + bs[j] * k[j];
    });
  }
  // The gradient of a dropped input from the gradient v(i) of its dropped value, over [i0, i1):
  // d[i] += v(i)·keep(i), or, when fresh (d uninitialized), d[i] = 0 + that: the zero turns −0
  // into +0 as apply_add into a zeroed gradient would, so the bits are those of the unfused
  // dropout's backward.
  template <typename T, typename V>
  void write_grad(int64_t i0, int64_t i1, T scale, V&& v, T* d, bool fresh) const {
    for_each_chunk(i0, i1, scale, [&](int64_t s, int64_t n, const T* k) {
      T* ds = d + s;
      if (fresh)
        for (int64_t j = 0; j < n; ++j) ds[j] = T(0) + v(s + j) * k[j];
      else
        for (int64_t j = 0; j < n; ++j) ds[j] += v(s + j) * k[j];
    });
  }
};

}  // namespace seqtape::philox
