// Dropout's forward, backward and the fused attention drawing one and the same mask from the
// counter-based generator (tensor/philox.h).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/ops.h"

namespace seqtape {
namespace {

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
