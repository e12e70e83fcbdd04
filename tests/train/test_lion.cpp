// Lion against its formula (Chen et al., 2023, Algorithm 2) written out in float64 here: a few
// steps with changing gradients, a clipping scale, decoupled weight decay and a zero gradient,
// on float64 parameters (to rounding) and on float32 ones (to float precision).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "train/optim.h"

namespace seqtape {
namespace {

constexpr int kSteps = 5;
const double kLr[kSteps] = {1e-2, 3e-3, 2e-2, 1e-3, 5e-3};

// The gradient of step t (1-based) for element j: signs and sizes change from step to step, and
// element 0 has none on the first step.
double grad_at(int t, size_t j) {
  if (t == 1 && j == 0) return 0;
  return std::sin(1.7 * static_cast<double>(t) + 0.9 * static_cast<double>(j)) *
         (j % 3 == 0 ? 1e-4 : 1.0);
}

// Runs the optimizer over parameters w0 of dtype dt; returns the weights after each step.
std::vector<std::vector<double>> run(const std::vector<double>& w0, DType dt,
                                     const OptimizerConfig& c, double scale) {
  const Shape shape{static_cast<int64_t>(w0.size())};
  Var p(dt == DType::F64 ? Tensor::from(w0, shape)
                         : Tensor::from(std::vector<float>(w0.begin(), w0.end()), shape),
        true);
  NamedParams ps = {{"w", p}};
  std::unique_ptr<Optimizer> opt = make_optimizer(ps, c);
  std::vector<std::vector<double>> out;
  for (int t = 1; t <= kSteps; ++t) {
    std::vector<double> g(w0.size());
    for (size_t j = 0; j < g.size(); ++j) g[j] = grad_at(t, j);
    const Tensor x = dt == DType::F64 ? Tensor::from(g, shape)
                                      : Tensor::from(std::vector<float>(g.begin(), g.end()), shape);
    p.zero_grad();
    Tape::current().clear();
    Tape::current().backward(sum(mul(p, Var(x))));  // ∂/∂w = x
    Tape::current().clear();
    opt->step(kLr[t - 1], scale);
    out.push_back(p.value().to_vector());
  }
  return out;
}

TEST(Lion, FollowsItsFormulaInFloat64AndFloat32) {
  OptimizerConfig c;
  c.kind = "lion";
  c.beta1 = 0.9;
  c.beta2 = 0.99;
  c.weight_decay = 0.1;
  const double scale = 0.6;
  std::vector<double> w0(37);
  for (size_t j = 0; j < w0.size(); ++j) w0[j] = std::cos(0.3 * static_cast<double>(j)) * 0.5;

  // The reference: float64, straight from the paper's update.
  std::vector<double> w = w0, m(w0.size(), 0.0);
  std::vector<std::vector<double>> want;
  for (int t = 1; t <= kSteps; ++t) {
    for (size_t j = 0; j < w.size(); ++j) {
      const double g = grad_at(t, j) * scale;
      const double u = c.beta1 * m[j] + (1 - c.beta1) * g;
      const double sign = u > 0 ? 1.0 : (u < 0 ? -1.0 : 0.0);
      w[j] = w[j] - kLr[t - 1] * (sign + c.weight_decay * w[j]);
      m[j] = c.beta2 * m[j] + (1 - c.beta2) * g;
    }
    want.push_back(w);
  }
  const auto got64 = run(w0, DType::F64, c, scale), got32 = run(w0, DType::F32, c, scale);
  for (int t = 0; t < kSteps; ++t)
    for (size_t j = 0; j < w0.size(); ++j) {
      EXPECT_NEAR(got64[t][j], want[t][j], 1e-14) << "float64 w[" << j << "] step " << t + 1;
      EXPECT_NEAR(got32[t][j], want[t][j], 1e-6) << "float32 w[" << j << "] step " << t + 1;
    }
  EXPECT_DOUBLE_EQ(got64[0][0],
                   w0[0] - kLr[0] * c.weight_decay * w0[0]);  // no gradient: decay only
}

}  // namespace
}  // namespace seqtape
