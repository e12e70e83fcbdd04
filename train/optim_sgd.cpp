// Plain SGD (the reference's update) and SGD with momentum, each with an optional L2 term.
#include "train/optim.h"

namespace seqtape {

namespace {

class Sgd : public ElementwiseOptimizer<Sgd> {
 public:
  Sgd(NamedParams params, const OptimizerConfig& cfg)
      : ElementwiseOptimizer(std::move(params), cfg, {}) {}

  // W ← W − η·(g + λ·W)
  template <typename T>
  void apply(T* w, const T* graw, T*, T*, int64_t n, const StepArgs& s) const {
    const T gs = static_cast<T>(s.grad_scale), l2 = static_cast<T>(config().weight_decay);
    for (int64_t j = 0; j < n; ++j) w[j] -= static_cast<T>(s.lr) * (graw[j] * gs + l2 * w[j]);
  }
};

class Momentum : public ElementwiseOptimizer<Momentum> {
 public:
  Momentum(NamedParams params, const OptimizerConfig& cfg)
      : ElementwiseOptimizer(std::move(params), cfg, {".momentum"}) {}

  // u ← μ·u + g + λ·W;  W ← W − η·u
  template <typename T>
  void apply(T* w, const T* graw, T* u, T*, int64_t n, const StepArgs& s) const {
    const T gs = static_cast<T>(s.grad_scale), l2 = static_cast<T>(config().weight_decay);
    const T mu = static_cast<T>(config().momentum);
    for (int64_t j = 0; j < n; ++j) {
      u[j] = mu * u[j] + graw[j] * gs + l2 * w[j];
      w[j] -= static_cast<T>(s.lr) * u[j];
    }
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(NamedParams params, const OptimizerConfig& cfg) {
  return std::make_unique<Sgd>(std::move(params), cfg);
}

std::unique_ptr<Optimizer> make_momentum(NamedParams params, const OptimizerConfig& cfg) {
  return std::make_unique<Momentum>(std::move(params), cfg);
}

}  // namespace seqtape
