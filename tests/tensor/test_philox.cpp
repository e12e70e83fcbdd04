// The counter-based dropout generator: Philox4x32-10 against the published known-answer
// vectors, the vectorized lanes against the one-block reference, the keep rate, and masks that
// do not depend on how the range is cut into chunks.
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

TEST(Philox, VectorLanesGiveTheReferenceBlocks) {
  const DropoutMask m{0x0123456789abcdefull, 0};
  const uint64_t first = 0xfffffff0ull;  // crosses into the counter's second word
  std::vector<uint32_t> w(4 * 37);
  m.words(first, 37, w.data());
  for (uint64_t b = 0; b < 37; ++b) {
    const Block r = philox::block4x32_10({uint32_t(first + b), uint32_t((first + b) >> 32), 0, 0},
                                         0x89abcdefu, 0x01234567u);
    for (size_t j = 0; j < 4; ++j) ASSERT_EQ(w[4 * b + j], r[j]) << "block " << b << " word " << j;
  }
}

// The keep rate is 1 - p to within 5 standard deviations over 2^20 elements, for several p and
// fixed keys (deterministic: these keys pass, and a biased threshold or word would not).
TEST(Philox, DropoutKeepsOneMinusPOfTheElements) {
  const int64_t n = int64_t(1) << 20;
  for (double p : {0.1, 0.3, 0.5}) {
    const DropoutMask m = DropoutMask::make(p, 0x5eed0000ull + uint64_t(p * 100));
    int64_t kept = 0;
    m.for_each_chunk(0, n, [&](int64_t, int64_t cnt, const uint32_t* w) {
      for (int64_t j = 0; j < cnt; ++j) kept += w[j] >= m.threshold;
    });
    const double sd = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(double(kept) / double(n), 1 - p, 5 * sd) << "p " << p;
  }
}

// Any chunking of [0, n) sees the same words (threads split the ranges anywhere).
TEST(Philox, ChunksAnywhereGiveTheSameMask) {
  const DropoutMask m = DropoutMask::make(0.5, 99);
  const int64_t n = 1000;
  std::vector<float> x(size_t(n), 1.0f), whole(x.size()), pieces(x.size());
  m.apply<float>(0, n, 2.0f, x.data(), whole.data());
  for (int64_t i0 = 0; i0 < n; i0 += 7)
    m.apply<float>(i0, std::min(n, i0 + 7), 2.0f, x.data(), pieces.data());
  EXPECT_EQ(whole, pieces);
}

}  // namespace
}  // namespace seqtape
