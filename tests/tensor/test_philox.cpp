// The counter-based dropout generator: Philox4x32-10 against the published known-answer
// vectors, the vectorized keep bits against the one-block reference, the keep rate, and masks
// that do not depend on how the range is cut into chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/philox.h"

namespace seqtape {
namespace {

using philox::Block;
using philox::DropoutMask;

// Random123's kat_vectors for philox4x32_10: zeros, all ones, and the digits of pi.
TEST(Philox, MatchesTheKnownAnswerVectors) {
  EXPECT_EQ(philox::block4x32_10({0, 0, 0, 0}, 0, 0),
            (Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox::block4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu,
                                 0xffffffffu),
            (Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox::block4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u,
                                 0x299f31d0u),
            (Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// The keep bits of a mask: n elements' bits (DropoutMask::bits over whole words of 64).
std::vector<uint64_t> keep_bits(const DropoutMask& m, int64_t n) {
  std::vector<uint64_t> bits(size_t(DropoutMask::bit_words(n)));
  m.bits(0, int64_t(bits.size()), bits.data());
  return bits;
}

// Element 64u + 32h + 4l + q's bit is half q mod 2 of word 2h + q / 2 of block 8u + l against
// the threshold, on this CPU's path (run with SEQTAPE_ISA=avx2 and portable for the others),
// over more words than the vector paths make at once, with a tail, from a first word whose
// blocks cross into the counter's second word.
TEST(Philox, KeepBitsAreTheHalfWordsAgainstTheThreshold) {
  for (double p : {0.1, 0.5, 0.9}) {
    const DropoutMask m = DropoutMask::make(p, 0x0123456789abcdefull);
    const uint64_t first = (uint64_t(1) << 29) - 5;
    std::vector<uint64_t> bits(11);
    m.bits(first, 11, bits.data());
    for (uint64_t u = 0; u < 11; ++u)
      for (int j = 0; j < 64; ++j) {
        const int h = j / 32, l = (j % 32) / 4, q = j % 4;
        const uint64_t c = 8 * (first + u) + uint64_t(l);
        const Block w =
            philox::block4x32_10({uint32_t(c), uint32_t(c >> 32), 0, 0}, 0x89abcdefu, 0x01234567u);
        const uint16_t half = uint16_t(w[size_t(2 * h + q / 2)] >> (16 * (q % 2)));
        ASSERT_EQ((bits[u] >> j) & 1, uint64_t(half >= m.threshold))
            << "p " << p << " word " << u << " bit " << j;
      }
  }
}

// The keep factors are the scale where a bit is set and 0 where not, from any first word.
TEST(Philox, KeepFactorsFollowTheBits) {
  const std::vector<uint64_t> bits = {0x8000000000000001ull, 0x0123456789abcdefull, ~0ull, 0};
  std::vector<float> f(3 * 64);
  std::vector<double> d(3 * 64);
  philox::expand_keep(bits.data(), 1, 3, 1.25f, f.data());
  philox::expand_keep(bits.data(), 1, 3, 2.5, d.data());
  for (size_t i = 0; i < f.size(); ++i) {
    const bool kept = (bits[1 + i / 64] >> (i % 64)) & 1;
    ASSERT_EQ(f[i], kept ? 1.25f : 0.0f) << "element " << i;
    ASSERT_EQ(d[i], kept ? 2.5 : 0.0) << "element " << i;
  }
}

// The keep rate is 1 - p to within 5 standard deviations over 2^20 elements, for several p and
// fixed keys (deterministic: these keys pass, and a biased threshold or word would not).
TEST(Philox, DropoutKeepsOneMinusPOfTheElements) {
  const int64_t n = int64_t(1) << 20;
  for (double p : {0.1, 0.3, 0.5}) {
    const DropoutMask m = DropoutMask::make(p, 0x5eed0000ull + uint64_t(p * 100));
    int64_t kept = 0;
    for (uint64_t b : keep_bits(m, n)) kept += __builtin_popcountll(b);
    const double sd = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(double(kept) / double(n), 1 - p, 5 * sd) << "p " << p;
  }
}

// Any chunking of [0, n) reads the same bits (threads split the ranges anywhere), and the
// product is x·scale where kept, 0 where not.
TEST(Philox, ChunksAnywhereGiveTheSameMask) {
  const DropoutMask m = DropoutMask::make(0.5, 99);
  const int64_t n = 1000;
  const std::vector<uint64_t> bits = keep_bits(m, n);
  const philox::KeepBits keep{bits.data()};
  std::vector<float> x(size_t(n), 1.0f), whole(x.size()), pieces(x.size());
  keep.apply<float>(0, n, 2.0f, x.data(), whole.data());
  for (int64_t i0 = 0; i0 < n; i0 += 7)
    keep.apply<float>(i0, std::min(n, i0 + 7), 2.0f, x.data(), pieces.data());
  EXPECT_EQ(whole, pieces);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(whole[size_t(i)], (bits[size_t(i / 64)] >> (i % 64)) & 1 ? 2.0f : 0.0f) << i;
}

}  // namespace
}  // namespace seqtape
