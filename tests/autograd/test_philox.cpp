// The counter-based dropout generator: Philox4x32-10 against the published known-answer
// vectors, the vectorized lanes against the one-block reference, the keep rate, and dropout's
// forward, backward and the fused attention drawing one and the same mask.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "autograd/philox.h"

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

// The backward regenerates the forward's mask: for y = dropout(x) and loss = sum(y ⊙ c),
// dx = c ⊙ keep, so dx is zero exactly where y is and c·scale elsewhere.
TEST(DropoutOp, BackwardUsesTheForwardMask) {
  Tape::current().clear();
  const int64_t n = 5000;
  std::vector<float> ones(size_t(n), 1.0f), c(ones.size());
  for (int64_t i = 0; i < n; ++i) c[size_t(i)] = 1.0f + float(i % 13);
  Var x(Tensor::from(ones, {n}), true);
  const Var cw(Tensor::from(c, {n}), false);
  Rng r(2024);
  Var y = dropout(x, 0.2, true, r);
  Tape::current().backward(sum(mul(y, cw)));
  const float* yv = y.value().data<float>();
  const float* g = x.grad().data<float>();
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(g[i], yv[i] * c[size_t(i)]) << "element " << i;
    kept += yv[i] != 0.0f;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, n);
  Tape::current().clear();
}

// The fused attention's dropout is dropout(softmax(...)) with the same draw: output and every
// gradient equal those of the unfused graph seeded alike, in float64.
TEST(DropoutOp, FusedAttentionDropsAsTheUnfusedGraph) {
  const int64_t B = 2, T = 5, C = 8, H = 2, Dh = C / H;
  auto make = [](uint64_t seed) {
    Rng r(seed);
    std::vector<double> v(size_t(B * T * C));
    for (double& e : v) e = r.normal();
    return Var(Tensor::from(v, {B, T, C}), true);
  };
  auto run = [&](bool fused, double p = 0.4) {
    Tape::current().clear();
    Var q = make(1), k = make(2), v = make(3);
    const Var w = make(4);
    Rng r(77);
    Var ctx;
    if (fused) {
      ctx = attention(q, k, v, H, nullptr, nullptr, p, &r);
    } else {
      auto split = [&](const Var& t) { return permute(reshape(t, {B, T, H, Dh}), {0, 2, 1, 3}); };
      Var s = mul(matmul(split(q), split(k), false, true), 1.0 / std::sqrt(double(Dh)));
      Var p = dropout(softmax(s), 0.4, true, r);
      ctx = reshape(permute(matmul(p, split(v)), {0, 2, 1, 3}), {B, T, C});
    }
    Tape::current().backward(sum(mul(ctx, w)));
    std::vector<double> out;
    for (const Tensor* t : {&ctx.value(), &q.grad(), &k.grad(), &v.grad()})
      out.insert(out.end(), t->data<double>(), t->data<double>() + t->numel());
    Tape::current().clear();
    return out;
  };
  const std::vector<double> fused = run(true), plain = run(false);
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_NEAR(fused[i], plain[i], 1e-12) << "element " << i;
  }
  const std::vector<double> again = run(true);
  EXPECT_EQ(fused, again);         // same seed, same bits
  EXPECT_NE(fused, run(true, 0));  // and the dropout did drop something
}

}  // namespace
}  // namespace seqtape
