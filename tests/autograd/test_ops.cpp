// Behaviour of the tape and the ops beyond their Jacobians: values, accumulation, frozen
// leaves, no-grad scopes, tape reuse, masked rows, loss stability, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "autograd/ops.h"

namespace seqtape {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor randn(Shape s, uint64_t seed, DType d = DType::F32) {
  Rng r(seed);
  Tensor t = Tensor::empty(std::move(s), d);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, r.normal());
  return t;
}

class OpsTest : public ::testing::Test {
 protected:
  void SetUp() override { Tape::current().clear(); }
  void TearDown() override { Tape::current().clear(); }
};

TEST_F(OpsTest, MatmulMatchesNaiveLoopsForEveryTransposeAndBatch) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t B = 3, M = 4, K = 5, N = 6;
      Tensor a = randn(ta ? Shape{B, K, M} : Shape{B, M, K}, 1);
      Tensor b = randn(tb ? Shape{B, N, K} : Shape{B, K, N}, 2);
      Var c = matmul(Var(a), Var(b), ta, tb);
      ASSERT_EQ(c.shape(), (Shape{B, M, N}));
      for (int64_t z = 0; z < B; ++z)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) {
              double av = ta ? a.get(z * K * M + k * M + i) : a.get(z * M * K + i * K + k);
              double bv = tb ? b.get(z * N * K + j * K + k) : b.get(z * K * N + k * N + j);
              s += av * bv;
            }
            EXPECT_NEAR(c.value().get(z * M * N + i * N + j), s, 1e-4);
          }
    }
}

TEST_F(OpsTest, SharedWeightMatmulEqualsPerBatchProducts) {
  Tensor a = randn({2, 3, 4}, 3), w = randn({4, 5}, 4);
  Var c = matmul(Var(a), Var(w));
  for (int64_t z = 0; z < 2; ++z) {
    Var cz = matmul(slice(Var(a), 0, z, z + 1), Var(w));  // [1,3,5]
    for (int64_t i = 0; i < 15; ++i) EXPECT_FLOAT_EQ(cz.value().get(i), c.value().get(z * 15 + i));
  }
}

TEST_F(OpsTest, RepeatedEmbeddingRowReceivesTheSumOfItsUses) {
  // 今天天气很好: 天 (id 4) is used twice; its row's gradient is the sum of both positions.
  Var w(randn({10, 4}, 5), true);
  Var e = embedding(w, {3, 4, 4, 5, 6, 7, 2}, {7});
  Tensor up = randn({7, 4}, 6);
  Tape::current().backward(e, up);
  for (int64_t j = 0; j < 4; ++j) {
    EXPECT_FLOAT_EQ(w.grad().get(4 * 4 + j), up.get(1 * 4 + j) + up.get(2 * 4 + j));
    EXPECT_FLOAT_EQ(w.grad().get(3 * 4 + j), up.get(0 * 4 + j));
    EXPECT_EQ(w.grad().get(8 * 4 + j), 0.0);  // 的 unused
  }
}

// float gelu (vectorized, tensor/kernels_exp.h) against the double op (std::erfc), forward and
// backward, the gradient written once and then accumulated (x used twice). Below −4, where
// float's 1 + erf(x/√2) has lost most of Φ's digits, Φ keeps them.
TEST_F(OpsTest, FloatGeluFollowsTheDoubleOpIntoTheTail) {
  const int64_t n = 1801;
  std::vector<float> xs(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    xs[size_t(i)] = static_cast<float>(-12.0 + 18.0 * double(i) / double(n - 1));
  Tensor w = randn({n}, 9);
  Var xf(Tensor::from(xs, {n}), true);
  Var yf = gelu(xf);
  Tape::current().backward(sum(yf * Var(w)) + sum(gelu(xf)));
  Tensor xd_t = Tensor::empty({n}, DType::F64), wd = Tensor::empty({n}, DType::F64);
  for (int64_t i = 0; i < n; ++i) {
    xd_t.set(i, xs[size_t(i)]);
    wd.set(i, w.get(i));
  }
  Tape::current().clear();
  Var xd(xd_t, true);
  Var yd = gelu(xd);
  Tape::current().backward(sum(yd * Var(wd)) + sum(gelu(xd)));
  double worst_tail = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = xs[size_t(i)], y = yf.value().get(i), ye = yd.value().get(i);
    const double g = xf.grad().get(i), ge = xd.grad().get(i);
    ASSERT_LE(std::fabs(y - ye), 3e-7 * std::fabs(x) + 1e-12) << "x = " << x;
    ASSERT_LE(std::fabs(g - ge), 1e-6 * (1 + std::fabs(w.get(i)))) << "x = " << x;
    if (x < -4) {
      worst_tail = std::max(worst_tail, std::fabs(y - ye) / std::fabs(ye));
      ASSERT_LE(std::fabs(y - ye), 1e-5 * std::fabs(ye)) << "x = " << x;
      ASSERT_LE(std::fabs(g - ge), 1e-5 * std::fabs(ge)) << "x = " << x;
    }
  }
  std::printf("float gelu below -4: worst relative error %.3g\n", worst_tail);
}

TEST_F(OpsTest, ValueUsedTwiceAccumulates) {
  Var x(Tensor::from(std::vector<float>{3.0f}, {1}), true);
  Var y = x * x + x;  // dy/dx = 2x + 1 = 7
  Tape::current().backward(sum(y));
  EXPECT_FLOAT_EQ(x.grad().get(0), 7.0f);
}

TEST_F(OpsTest, GradientsAccumulateAcrossBackwardsUntilZeroGrad) {
  Var x(Tensor::from(std::vector<float>{1.f, 2.f}, {2}), true);
  Var y = sum(x * 3.0);
  Tape::current().backward(y);
  Tape::current().backward(y);
  EXPECT_FLOAT_EQ(x.grad().get(0), 6.f);
  x.zero_grad();
  Tape::current().backward(y);
  EXPECT_FLOAT_EQ(x.grad().get(1), 3.f);
}

TEST_F(OpsTest, BackwardTwiceGivesBitIdenticalGradients) {
  Var w(randn({6, 5}, 7), true), b(randn({5}, 8), true), g(randn({5}, 9), true),
      be(randn({5}, 10), true);
  Tensor x = randn({4, 6}, 11);
  Var h = layer_norm(gelu(matmul(Var(x), w) + b), g, be);
  Var loss = cross_entropy(h, {0, 3, -100, 4});
  Tape::current().backward(loss);
  std::vector<Tensor> first = {w.grad().clone(), b.grad().clone(), g.grad().clone(),
                               be.grad().clone()};
  for (Var* v : {&w, &b, &g, &be}) v->zero_grad();
  Tape::current().backward(loss);
  std::vector<Tensor> second = {w.grad(), b.grad(), g.grad(), be.grad()};
  for (size_t k = 0; k < first.size(); ++k)
    EXPECT_EQ(0, std::memcmp(first[k].raw(), second[k].raw(), first[k].nbytes())) << "param " << k;
}

TEST_F(OpsTest, ZeroUpstreamGivesExactlyZeroGradients) {
  Var a(randn({3, 4}, 12), true), b(randn({4, 2}, 13), true);
  Var y = softmax(tanh(matmul(a, b)));
  Tape::current().backward(y, Tensor::zeros({3, 2}, DType::F32));
  for (Var* v : {&a, &b})
    for (int64_t i = 0; i < v->numel(); ++i) EXPECT_EQ(v->grad().get(i), 0.0);
}

TEST_F(OpsTest, FrozenLeafGetsNoGradientAndNoNodeIsRecordedForIt) {
  Var frozen(randn({4, 4}, 14), false), trained(randn({4, 3}, 15), true);
  Var x(randn({2, 4}, 16));
  Var h = tanh(matmul(x, frozen));  // nothing here requires grad: no nodes
  EXPECT_EQ(Tape::current().size(), 0u);
  Var y = sum(matmul(h, trained));
  EXPECT_EQ(Tape::current().size(), 2u);
  Tape::current().backward(y);
  EXPECT_FALSE(frozen.has_grad());
  EXPECT_TRUE(trained.has_grad());
}

TEST_F(OpsTest, NoGradScopeRecordsNothing) {
  Var w(randn({3, 3}, 17), true);
  {
    NoGradGuard g;
    Var y = sum(exp(w));
    EXPECT_FALSE(y.requires_grad());
  }
  EXPECT_EQ(Tape::current().size(), 0u);
  Var y = sum(exp(w));
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(Tape::current().size(), 2u);
}

TEST_F(OpsTest, BackwardOnAClearedTapeIsAClearError) {
  Var w(randn({3}, 18), true);
  Var y = sum(w * w);
  Tape::current().clear();
  try {
    Tape::current().backward(y);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cleared"), std::string::npos) << e.what();
  }
}

TEST_F(OpsTest, TapeIsReusedEveryStepWithoutGrowingMemory) {
  Var w(randn({16, 16}, 19), true);
  Tensor x = randn({8, 16}, 20);
  size_t cap = 0, bytes = 0;
  for (int step = 0; step < 50; ++step) {
    Tape::current().clear();
    w.zero_grad();
    Var loss = mean(relu(matmul(Var(x), w)));
    Tape::current().backward(loss);
    if (step == 5) {
      cap = Tape::current().capacity();
      bytes = pool_bytes_in_use();
    }
    if (step > 5) {
      EXPECT_EQ(Tape::current().capacity(), cap);
      EXPECT_EQ(pool_bytes_in_use(), bytes) << "step " << step;
    }
  }
}

TEST_F(OpsTest, FullyMaskedAttentionRowHasNoNaNForwardOrBackward) {
  Var s(randn({2, 3, 3}, 21), true);
  Mask m({2, 1, 3}, {0, 0, 1, 1, 1, 1});  // batch 1: every key masked
  Var p = softmax(masked_fill(s, m, -kInf));
  Var v(randn({2, 3, 4}, 22), true);
  Var out = matmul(p, v);
  Tape::current().backward(sum(out));
  for (const Tensor* t : {&p.value(), &out.value(), &s.grad(), &v.grad()})
    for (int64_t i = 0; i < t->numel(); ++i) EXPECT_TRUE(std::isfinite(t->get(i)));
  for (int64_t i = 9; i < 18; ++i) EXPECT_EQ(p.value().get(i), 0.0);  // masked batch: no weight
  EXPECT_NEAR(p.value().get(0) + p.value().get(1) + p.value().get(2), 1.0, 1e-6);
}

TEST_F(OpsTest, CrossEntropyIsStableAndShiftInvariant) {
  Tensor x = randn({4, 7}, 23);
  std::vector<int32_t> t = {1, 6, 0, 3};
  double base = cross_entropy(Var(x), t).item();
  Tensor big = x.clone(), shifted = x.clone();
  for (int64_t i = 0; i < x.numel(); ++i) {
    big.set(i, x.get(i) * 1e4);
    shifted.set(i, x.get(i) + 1000.0);
  }
  Var lb(big, true);
  Var loss_big = cross_entropy(lb, t);
  Tape::current().backward(loss_big);
  EXPECT_TRUE(std::isfinite(loss_big.item()));
  for (int64_t i = 0; i < big.numel(); ++i) EXPECT_TRUE(std::isfinite(lb.grad().get(i)));
  EXPECT_NEAR(cross_entropy(Var(shifted), t).item(), base, 1e-4);
}

TEST_F(OpsTest, CrossEntropyAllIgnoredIsZeroWithZeroGradients) {
  Var x(randn({3, 5}, 24), true);
  Var loss = cross_entropy(x, {-100, -100, -100});
  EXPECT_EQ(loss.item(), 0.0);
  Tape::current().backward(loss);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(x.grad().get(i), 0.0);
}

TEST_F(OpsTest, CrossEntropyMatchesTheReferenceArithmetic) {
  // −log p(target) averaged over non-ignored rows: logits with p(target) = 0.131 give 2.03.
  double p = 0.131;
  // two classes: logit difference d with sigmoid(d) = p
  double d = std::log(p / (1 - p));
  Var x(Tensor::from(std::vector<double>{d, 0.0, d, 0.0}, {2, 2}));
  double l = cross_entropy(x, {0, -100}).item();
  EXPECT_NEAR(l, 2.03, 0.005);
}

TEST_F(OpsTest, DropoutIsIdentityInEvalAndSeededInTraining) {
  Var x(Tensor::full({1000}, 1.0, DType::F32));
  Rng r1(5), r2(5);
  EXPECT_EQ(dropout(x, 0.5, false, r1).impl(), x.impl());
  Var a = dropout(x, 0.25, true, r1), b = dropout(x, 0.25, true, r2);
  int zeros = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a.value().get(i), b.value().get(i));
    zeros += a.value().get(i) == 0.0;
    if (a.value().get(i) != 0.0) {
      EXPECT_NEAR(a.value().get(i), 1 / 0.75, 1e-6);
    }
  }
  EXPECT_NEAR(zeros / 1000.0, 0.25, 0.05);
}

TEST_F(OpsTest, LayerNormNormalizesRows) {
  Var x(randn({3, 8}, 25));
  Var y =
      layer_norm(x, Var(Tensor::full({8}, 1.0, DType::F32)), Var(Tensor::zeros({8}, DType::F32)));
  for (int r = 0; r < 3; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < 8; ++j) m += y.value().get(r * 8 + j);
    m /= 8;
    for (int j = 0; j < 8; ++j) v += std::pow(y.value().get(r * 8 + j) - m, 2);
    EXPECT_NEAR(m, 0.0, 1e-5);
    EXPECT_NEAR(v / 8, 1.0, 1e-3);
  }
}

// ---- bad input: an Error naming the op and the shapes, never a crash -----------------
void expect_error(const std::function<void()>& f, std::vector<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "expected seqtape::Error";
  } catch (const Error& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "'" << n << "' not in: " << e.what();
  }
}

TEST_F(OpsTest, BadInputsGiveErrorsNamingOpAndShapes) {
  Var a(randn({2, 3}, 1)), b(randn({4, 5}, 2)), c(randn({2, 4}, 3)),
      d64(randn({2, 3}, 4, DType::F64));
  expect_error([&] { matmul(a, b); }, {"matmul", "[2,3]", "[4,5]"});
  expect_error(
      [&] {
        matmul(Var(randn({2, 3, 4}, 1)), Var(randn({3, 4, 5}, 2)));
      },
      {"matmul", "batch"});
  expect_error([&] { add(a, c); }, {"add", "[2,3]", "[2,4]"});
  expect_error([&] { mul(a, d64); }, {"mul", "float32", "float64"});
  expect_error(
      [&] {
        embedding(Var(randn({10, 4}, 1)), {3, 10}, {2});
      },
      {"embedding", "10", "position 1"});
  expect_error([&] { embedding(Var(randn({10, 4}, 1)), {-1}, {1}); }, {"embedding", "-1"});
  expect_error([&] { sum(a, 2); }, {"sum", "axis 2", "[2,3]"});
  expect_error([&] { transpose(a, 0, -3); }, {"transpose", "axis -3"});
  expect_error([&] { reshape(a, {4, 2}); }, {"reshape", "[2,3]", "[4,2]"});
  expect_error([&] { slice(a, 1, 2, 5); }, {"slice", "[2, 5)", "[2,3]"});
  expect_error([&] { concat({a, c}, 0); }, {"concat", "[2,3]", "[2,4]"});
  expect_error([&] { cross_entropy(a, {0, 3}); }, {"cross_entropy", "target 3"});
  expect_error([&] { cross_entropy(a, {0}); }, {"cross_entropy", "1 targets"});
  expect_error([&] { masked_fill(a, Mask::causal(3), 0); }, {"masked_fill", "[3,3]", "[2,3]"});
  expect_error([&] { layer_norm(a, Var(randn({2}, 1)), Var(randn({3}, 1))); },
               {"layer_norm", "[2]"});
  expect_error([&] { permute(a, {0, 0}); }, {"permute", "not a permutation"});
  expect_error([&] { Tape::current().backward(Var(randn({3}, 1), true)); },
               {"backward", "not a scalar"});
  expect_error([&] { a.value().data<double>(); }, {"float32", "float64"});
}

TEST_F(OpsTest, AnomalyModeNamesTheFirstNonFiniteOp) {
  Tape::current().set_anomaly(true);
  Var x(Tensor::from(std::vector<float>{1.f, -1.f}, {2}), true);
  expect_error([&] { sum(log(x)); }, {"log", "non-finite"});
  Tape::current().set_anomaly(false);
}

}  // namespace
}  // namespace seqtape

namespace seqtape {
namespace {

// The fused attention op computes the graph the models used to build (split heads by permute,
// scaled Q·Kᵀ, masked_fill -inf, softmax, P·V, merge heads): same values and gradients. Masks:
// one per key, shared by the heads; and one per head and query row, shared by its keys (a
// broadcast key axis).
void expect_attention_matches_composed_graph(const Mask& mask) {
  const int64_t B = 2, Tq = 3, Tk = 4, H = 2, C = 6, Dh = C / H;
  Rng r(3);
  auto input = [&](Shape s) {
    Tensor t = Tensor::empty(std::move(s), DType::F64);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, r.normal());
    return Var(t, true);
  };
  Var q = input({B, Tq, C}), k = input({B, Tk, C}), v = input({B, Tk, C});
  Tensor up = Tensor::empty({B, Tq, C}, DType::F64);
  for (int64_t i = 0; i < up.numel(); ++i) up.set(i, r.normal());

  Tape& tape = Tape::current();
  tape.clear();
  Tensor weights;
  Var fused = attention(q, k, v, H, &mask, &weights);
  tape.backward(fused, up);
  const Tensor dq = q.grad().clone(), dk = k.grad().clone(), dv = v.grad().clone();
  for (Var* x : {&q, &k, &v}) x->zero_grad();
  tape.clear();

  auto split = [&](const Var& t, int64_t T) {
    return permute(reshape(t, {B, T, H, Dh}), {0, 2, 1, 3});
  };
  Var s = mul(matmul(split(q, Tq), split(k, Tk), false, true), 1.0 / std::sqrt(double(Dh)));
  Var p = softmax(masked_fill(s, mask, -kInf));
  Var ctx = reshape(permute(matmul(p, split(v, Tk)), {0, 2, 1, 3}), {B, Tq, C});
  tape.backward(ctx, up);

  auto near = [](const Tensor& a, const Tensor& b, const char* what) {
    ASSERT_EQ(a.shape(), b.shape()) << what;
    for (int64_t i = 0; i < a.numel(); ++i) EXPECT_NEAR(a.get(i), b.get(i), 1e-12) << what << i;
  };
  near(fused.value(), ctx.value(), "output");
  near(weights, p.value(), "weights");
  near(dq, q.grad(), "dq");
  near(dk, k.grad(), "dk");
  near(dv, v.grad(), "dv");
  tape.clear();
}

TEST(FusedAttention, MatchesTheComposedGraph) {
  expect_attention_matches_composed_graph(
      Mask({2, 1, 3, 4}, {0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1,     //
                          0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0}));  // a fully masked row
  SCOPED_TRACE("mask [B, H, Tq, 1]");
  expect_attention_matches_composed_graph(
      Mask({2, 2, 3, 1}, {0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0}));  // whole rows masked
}

TEST(FusedAttention, RefusesBadShapesAndMasks) {
  Var q(Tensor::zeros({2, 3, 6}, DType::F32), true), k(Tensor::zeros({2, 4, 6}, DType::F32));
  EXPECT_THROW(attention(q, k, k, 4, nullptr), Error);  // 6 not divisible by 4
  Var k5(Tensor::zeros({2, 4, 5}, DType::F32));
  EXPECT_THROW(attention(q, k5, k5, 2, nullptr), Error);
  Mask bad({3, 4}, std::vector<uint8_t>(12, 0));  // 3 rows for Tq 3 is fine; Tk 5 is not
  Mask wrong({3, 5}, std::vector<uint8_t>(15, 0));
  EXPECT_NO_THROW(attention(q, k, k, 2, &bad));
  try {
    attention(q, k, k, 2, &wrong);
    FAIL() << "a mask that does not broadcast was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3,5]"), std::string::npos) << e.what();
  }
  Tape::current().clear();
}

}  // namespace
}  // namespace seqtape

namespace seqtape {
namespace {

// add_layer_norm(x, r) is layer_norm(x + r): same values and the same gradients to all four.
TEST(FusedAddLayerNorm, MatchesAddThenLayerNorm) {
  Rng rng(5);
  auto input = [&](Shape s, double lo, double hi) {
    Tensor t = Tensor::empty(std::move(s), DType::F64);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, lo + (hi - lo) * rng.uniform());
    return Var(t, true);
  };
  Var x = input({2, 3, 8}, -2, 2), r = input({2, 3, 8}, -2, 2), g = input({8}, 0.5, 1.5),
      b = input({8}, -1, 1);
  Tensor up = Tensor::empty({2, 3, 8}, DType::F64);
  for (int64_t i = 0; i < up.numel(); ++i) up.set(i, rng.normal());
  Tape& tape = Tape::current();
  tape.clear();
  Var fused = add_layer_norm(x, r, g, b);
  tape.backward(fused, up);
  std::vector<Tensor> grads;
  for (Var* v : {&x, &r, &g, &b}) {
    grads.push_back(v->grad().clone());
    v->zero_grad();
  }
  tape.clear();
  Var ref = layer_norm(add(x, r), g, b);
  tape.backward(ref, up);
  for (int64_t i = 0; i < ref.numel(); ++i)
    EXPECT_NEAR(fused.value().get(i), ref.value().get(i), 1e-12) << i;
  const Var* vars[] = {&x, &r, &g, &b};
  for (size_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < grads[k].numel(); ++i)
      EXPECT_NEAR(grads[k].get(i), vars[k]->grad().get(i), 1e-12) << "input " << k << " " << i;
  EXPECT_THROW(add_layer_norm(x, g, g, b), Error);  // residual of another shape
  tape.clear();
}

}  // namespace
}  // namespace seqtape

namespace seqtape {
namespace {

// The tape tells the leaf-use hook which node reads each leaf that wants a gradient, and calls
// the after-node hook for every node index from the last down to 0 (the data-parallel reducer
// starts a gradient bucket once backward has passed the first reader of every parameter in it).
TEST(Tape, LeafUseAndAfterNodeHooks) {
  Tape& tape = Tape::current();
  tape.clear();
  Var w1(Tensor::from(std::vector<double>{1, 2, 3, 4}, {2, 2}), true);
  Var w2(Tensor::from(std::vector<double>{0.5, -1, 2, 1}, {2, 2}), true);
  Var x(Tensor::from(std::vector<double>{1, -1}, {1, 2}), false);
  std::vector<std::pair<const VarImpl*, size_t>> uses;
  tape.set_on_leaf_use([&](const VarImpl& v, size_t node) { uses.emplace_back(&v, node); });
  Var h = matmul(x, w1);  // node 0 reads w1
  Var y = matmul(h, w2);  // node 1 reads w2
  Var z = matmul(y, w1);  // node 2 reads w1 again
  Var loss = sum(z);      // node 3
  tape.set_on_leaf_use(nullptr);
  EXPECT_EQ(tape.size(), 4u);
  // x wants no gradient: not noted.
  const std::vector<std::pair<const VarImpl*, size_t>> want = {
      {w1.impl(), 0}, {w2.impl(), 1}, {w1.impl(), 2}};
  EXPECT_EQ(uses, want);
  std::vector<size_t> seen;
  std::vector<double> w2_grad_at_1;
  tape.set_after_node([&](size_t i) {
    seen.push_back(i);
    if (i == 1) w2_grad_at_1 = w2.grad().to_vector();  // w2's gradient is final here
  });
  tape.backward(loss);
  tape.set_after_node(nullptr);
  EXPECT_EQ(seen, (std::vector<size_t>{3, 2, 1, 0}));
  EXPECT_EQ(w2_grad_at_1, w2.grad().to_vector());
  tape.clear();
}

}  // namespace
}  // namespace seqtape
