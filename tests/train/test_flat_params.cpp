// FlatParams: the parameters' values and gradients in one buffer each. Training on
// them must give the same bits as on separate tensors, for every optimizer, including steps
// where a parameter gets no gradient (the optimizer then leaves it alone, as before).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "autograd/ops.h"
#include "tensor/kernels.h"
#include "train/flat_params.h"
#include "train/optim.h"

namespace seqtape {
namespace {

NamedParams make_params(uint64_t seed) {
  Rng r(seed);
  auto rnd = [&](Shape s) {
    Tensor t(s, DType::F64);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, r.uniform() - 0.5);
    return Var(t, true);
  };
  return {{"w1", rnd({3, 4})}, {"w2", rnd({4, 2})}, {"b", rnd({2})}, {"unused", rnd({5})}};
}

// A loss over the first three; with use_b false, "b" gets no gradient either.
Var loss_of(const NamedParams& p, bool use_b) {
  Var x(Tensor::from(std::vector<double>{1, -2, 0.5, 0.25, 1, -1}, {2, 3}), false);
  Var y = tanh(matmul(matmul(x, p[0].second), p[1].second));
  if (use_b)
    y = y + matmul(Var(Tensor::full({2, 1}, 1.0, DType::F64), false), reshape(p[2].second, {1, 2}));
  return sum(y * y);
}

TEST(FlatParams, ValuesMoveIntoOneBufferAndGradientsAreWrittenInPlace) {
  NamedParams p = make_params(1);
  const std::vector<double> before = p[1].second.value().to_vector();
  FlatParams flat(p);
  EXPECT_EQ(flat.values().numel(), 12 + 8 + 2 + 5);
  EXPECT_EQ(p[1].second.value().to_vector(), before);
  EXPECT_TRUE(p[1].second.value().same_storage(flat.values()));
  int64_t n = 0;
  EXPECT_EQ(flat_span(p, false, &n), flat.values().raw());
  EXPECT_EQ(n, 27);
  for (auto& [name, v] : p) EXPECT_FALSE(v.has_grad()) << name;
  Tape::current().clear();
  Tape::current().backward(loss_of(p, true));
  EXPECT_TRUE(p[0].second.has_grad());
  EXPECT_TRUE(p[0].second.grad().same_storage(flat.grads()));
  EXPECT_FALSE(p[3].second.has_grad());        // never read
  EXPECT_EQ(flat_span(p, true, &n), nullptr);  // not every parameter has a gradient
  for (auto& [name, v] : p) v.zero_grad();
  EXPECT_FALSE(p[0].second.has_grad());
  EXPECT_TRUE(p[0].second.grad().same_storage(flat.grads()));  // still pinned, marked stale
  Tape::current().clear();
}

// The same steps on flat and on separate parameters: the same bits after each one.
TEST(FlatParams, EveryOptimizerGivesTheSameBitsAsSeparateTensors) {
  for (const OptimizerKind& kind : optimizer_kinds()) {
    SCOPED_TRACE(kind.name);
    OptimizerConfig cfg;
    cfg.kind = kind.name;
    cfg.weight_decay = 0.01;
    NamedParams a = make_params(2), b = make_params(2);
    a.pop_back();  // every parameter gets a gradient: the one-pass path
    b.pop_back();
    FlatParams flat(a);
    std::unique_ptr<Optimizer> oa = make_optimizer(a, cfg), ob = make_optimizer(b, cfg);
    for (int step = 1; step <= 6; ++step) {
      const bool use_b = step % 3 != 0;  // every third step "b" gets no gradient
      for (NamedParams* ps : {&a, &b}) {
        for (auto& [name, v] : *ps) v.zero_grad();
        Tape::current().clear();
        Tape::current().backward(loss_of(*ps, use_b));
      }
      int64_t n = 0;
      EXPECT_EQ(flat_span(a, true, &n) != nullptr, use_b);
      oa->step(0.05, 0.7);
      ob->step(0.05, 0.7);
      for (size_t i = 0; i < a.size(); ++i) {
        const Tensor& x = a[i].second.value();
        const Tensor& y = b[i].second.value();
        ASSERT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << a[i].first << " step " << step;
      }
    }
    Tape::current().clear();
  }
}

// The flat update and the gradient norm split over the pool's threads when big: the same bits on
// 1 and 2 threads, for a model big enough to be split.
TEST(FlatParams, UpdateAndGradientNormGiveTheSameBitsOnOneAndTwoThreads) {
  auto train = [](int threads) {
    kernels::gemm_nt_rowwise_set_threads(threads);
    if (threads > 1) {
      EXPECT_GT(kernels::parallel_range_chunks(300000, kernels::kCostSimple), 1);
    }
    Rng r(5);
    auto rnd = [&](Shape s) {
      Tensor t(s, DType::F32);
      for (int64_t i = 0; i < t.numel(); ++i) t.set(i, r.uniform() - 0.5);
      return Var(t, true);
    };
    NamedParams p = {{"w", rnd({600, 500})}, {"b", rnd({500})}};
    FlatParams flat(p);
    OptimizerConfig cfg;
    cfg.kind = "adamw";
    cfg.weight_decay = 0.01;
    std::unique_ptr<Optimizer> opt = make_optimizer(p, cfg);
    std::vector<double> norms;
    for (int step = 0; step < 3; ++step) {
      for (auto& [name, v] : p) v.zero_grad();
      Tape::current().clear();
      Tape::current().backward(sum(tanh(p[0].second + p[1].second)));
      norms.push_back(clip_grad_norm(p, 1.0));  // the norm, and a scaling pass (norm > 1)
      opt->step(0.01);
    }
    Tape::current().clear();
    kernels::gemm_nt_rowwise_set_threads(0);
    std::vector<double> w = p[0].second.value().to_vector();
    return std::make_pair(norms, w);
  };
  const auto one = train(1), two = train(2);
  EXPECT_GT(one.first[0], 1.0);
  ASSERT_EQ(one.first.size(), two.first.size());
  for (size_t i = 0; i < one.first.size(); ++i)
    EXPECT_EQ(std::memcmp(&one.first[i], &two.first[i], sizeof(double)), 0) << "step " << i;
  ASSERT_EQ(one.second.size(), two.second.size());
  EXPECT_EQ(std::memcmp(one.second.data(), two.second.data(), one.second.size() * sizeof(double)),
            0);
}

// On flat gradients the norm is one pass over the buffer: it agrees with the norm of separate
// tensors, and a non-finite gradient is still named by its parameter.
TEST(FlatParams, GradientNormIsOnePassAndStillNamesANonFiniteGradient) {
  NamedParams a = make_params(11), b = make_params(11);
  a.pop_back();  // "unused": every parameter must get a gradient for the one pass
  b.pop_back();
  FlatParams flat(b);
  for (NamedParams* p : {&a, &b}) {
    Tape::current().backward(loss_of(*p, true));
    Tape::current().clear();
  }
  int64_t n = 0;
  ASSERT_NE(flat_span(b, true, &n), nullptr) << "not flat: the test would test nothing";
  const double separate = grad_global_norm(a), one_pass = grad_global_norm(b);
  EXPECT_GT(separate, 0.0);
  EXPECT_NEAR(one_pass, separate, 1e-14 * separate);
  Tensor g = b[1].second.grad();  // shares the gradient's storage
  g.set(3, std::numeric_limits<double>::quiet_NaN());
  try {
    grad_global_norm(b);
    FAIL() << "a NaN gradient went through";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite gradient in parameter 'w2'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace seqtape
