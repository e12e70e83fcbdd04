#pragma once
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a counter-based generator, four 32-bit words from a 128-bit counter and a 64-bit
// key in ten rounds of multiplies and xors. Any element's random word is a pure function of
// (key, index), so a dropout mask needs no stored floats and no sequential draws: a loop
// computes it where it is used, on any thread, in any chunking, and the backward regenerates
// exactly the forward's bits from the same key.

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

// Inverted dropout's mask, as a function: element i is kept when its 32-bit word is at least
// `threshold` (= round(p·2³²), so P(keep) = 1 − p to within 2⁻³²). Element i is word i mod 4 of
// the block whose counter is i / 4 (64 bits over the first two counter words).
struct DropoutMask {
  static constexpr int64_t kChunk = 256;  // words made at once, on the stack

  uint64_t key = 0;
  uint32_t threshold = 0;

  static DropoutMask make(double p, uint64_t key) {
    const double t = std::round(p * 4294967296.0);
    return {key, t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t)};
  }
  // The words of `blocks` consecutive blocks from first_block: 4·blocks words into out.
  void words(uint64_t first_block, int64_t blocks, uint32_t* out) const;

  // Calls f(i, n, w) over [i0, i1) in chunks: w[j] is element (i + j)'s word, j < n; element
  // i + j is kept when w[j] >= threshold. The words are made many blocks at a time (vector
  // lanes), and f's loop over them vectorizes too.
  template <typename F>
  void for_each_chunk(int64_t i0, int64_t i1, F&& f) const {
    alignas(64) uint32_t w[kChunk];
    for (int64_t s = i0; s < i1;) {
      const int64_t first = s / 4, e = std::min(i1, first * 4 + kChunk);
      words(static_cast<uint64_t>(first), (e - first * 4 + 3) / 4, w);
      f(s, e - s, w + (s - first * 4));
      s = e;
    }
  }
  // out[i] = kept ? x[i]·scale : 0 over [i0, i1) (out may be x).
  template <typename T>
  void apply(int64_t i0, int64_t i1, T scale, const T* x, T* out) const {
    for_each_chunk(i0, i1, [&](int64_t s, int64_t n, const uint32_t* w) {
      // Locals (a store through out could alias a captured scale) and a product with the keep
      // factor rather than a select: either keeps the loop scalar. A dropped inf or NaN gives
      // NaN, as x·0 did when the mask was a tensor.
      const uint32_t t = threshold;
      const T sc = scale;
      const T* xs = x + s;
      T* os = out + s;
      for (int64_t j = 0; j < n; ++j) {
        os[j] = xs[j] * (sc * static_cast<T>(w[j] >= t));
      }
    });
  }
  // d[i] += kept ? g[i]·scale : 0 over [i0, i1).
  template <typename T>
  void apply_add(int64_t i0, int64_t i1, T scale, const T* g, T* d) const {
    for_each_chunk(i0, i1, [&](int64_t s, int64_t n, const uint32_t* w) {
      const uint32_t t = threshold;
      const T sc = scale;
      const T* gs = g + s;
      T* ds = d + s;
      for (int64_t j = 0; j < n; ++j) {
        ds[j] += gs[j] * (sc * static_cast<T>(w[j] >= t));
      }
    });
  }
  // out[i] = a[i] + (kept ? b[i]·scale : 0) over [i0, i1) (out may be a or b): a residual add of
  // the dropped b, with the bits of apply followed by an add.
  template <typename T>
  void add_apply(int64_t i0, int64_t i1, T scale, const T* a, const T* b, T* out) const {
    for_each_chunk(i0, i1, [&](int64_t s, int64_t n, const uint32_t* w) {
      const uint32_t t = threshold;
      const T sc = scale;
      const T* as = a + s;
      const T* bs = b + s;
      T* os = out + s;
      for (int64_t j = 0; j < n; ++j) {
        os[j] = as[j] + bs[j] * (sc * static_cast<T>(w[j] >= t));
      }
    });
  }
  // The gradient of a dropped input from the gradient v(i) of its dropped value, over [i0, i1):
  // d[i] += kept ? v(i)·scale : 0, or, when fresh (d uninitialized), d[i] = 0 + that: the zero
  // turns −0 into +0 as apply_add into a zeroed gradient would, so the bits are those of the
  // unfused dropout's backward.
  template <typename T, typename V>
  void write_grad(int64_t i0, int64_t i1, T scale, V&& v, T* d, bool fresh) const {
    for_each_chunk(i0, i1, [&](int64_t s, int64_t n, const uint32_t* w) {
      const uint32_t t = threshold;
      const T sc = scale;
      T* ds = d + s;
      if (fresh)
        for (int64_t j = 0; j < n; ++j) ds[j] = T(0) + v(s + j) * (sc * static_cast<T>(w[j] >= t));
      else
        for (int64_t j = 0; j < n; ++j) ds[j] += v(s + j) * (sc * static_cast<T>(w[j] >= t));
    });
  }
};

}  // namespace seqtape::philox
