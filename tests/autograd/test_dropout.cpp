// Dropout's forward, backward and the fused attention drawing one and the same mask from the
// counter-based generator (tensor/philox.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/ops.h"

namespace seqtape {
namespace {

// The backward reads the forward's mask: for y = dropout(x) and loss = sum(y ⊙ c),
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

// The residual dropout fused into the add (add_dropout) and into the post-norm add_layer_norm
// gives the bits of the unfused ops seeded alike, in float32: output and every gradient, over
// rows that cross Philox's chunks (C = 37).
TEST(DropoutOp, FusedResidualDropsAsTheUnfusedOps) {
  const int64_t R = 7, C = 37;
  auto make = [](uint64_t seed, int64_t n) {
    Rng r(seed);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& e : v) e = static_cast<float>(r.normal());
    return v;
  };
  auto run = [&](bool norm, bool fused, double p) {
    Tape::current().clear();
    Var x(Tensor::from(make(1, R * C), {R, C}), true),
        y(Tensor::from(make(2, R * C), {R, C}), true);
    Var g(Tensor::from(make(3, C), {C}), true), b(Tensor::from(make(4, C), {C}), true);
    const Var w(Tensor::from(make(5, R * C), {R, C}), false);
    Rng r(77);
    Var out;
    if (norm)
      out = fused ? add_layer_norm(x, y, g, b, 1e-5, p, &r)
                  : add_layer_norm(x, dropout(y, p, true, r), g, b);
    else
      out = fused ? add_dropout(x, y, p, &r) : add(x, dropout(y, p, true, r));
    Tape::current().backward(sum(mul(out, w)));
    std::vector<float> all;
    for (const Tensor* t : {&out.value(), &x.grad(), &y.grad()})
      all.insert(all.end(), t->data<float>(), t->data<float>() + t->numel());
    if (norm)
      for (const Tensor* t : {&g.grad(), &b.grad()})
        all.insert(all.end(), t->data<float>(), t->data<float>() + t->numel());
    Tape::current().clear();
    return all;
  };
  for (bool norm : {false, true}) {
    const std::vector<float> fused = run(norm, true, 0.3), plain = run(norm, false, 0.3);
    ASSERT_EQ(fused.size(), plain.size());
    for (size_t i = 0; i < fused.size(); ++i)
      ASSERT_EQ(std::memcmp(&fused[i], &plain[i], sizeof(float)), 0)
          << (norm ? "add_layer_norm" : "add_dropout") << " element " << i << ": " << fused[i]
          << " vs " << plain[i];
    EXPECT_NE(fused, run(norm, true, 0.0));  // the dropout did drop something
  }
}

// The keep bits live in the backward's closure: while the tape holds the op they stay in use
// (one bit per element, beside the output), and clearing the tape gives them back to the pool.
TEST(DropoutOp, KeepBitsAreFreedWithTheTape) {
  Tape::current().clear();
  const int64_t n = 64 * 1000;
  Var x(Tensor::from(std::vector<float>(size_t(n), 1.0f), {n}), true);
  Var res(Tensor::from(std::vector<float>(size_t(n), 2.0f), {n}), true);
  const size_t base = pool_bytes_in_use();
  Rng r(5);
  {
    const Var y = add_dropout(x, res, 0.1, &r);
    EXPECT_GE(pool_bytes_in_use() - base, size_t(n) * sizeof(float) + size_t(n) / 8);
  }
  Tape::current().clear();
  EXPECT_EQ(pool_bytes_in_use(), base);
}

}  // namespace
}  // namespace seqtape
