// Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"): the update is the
// sign of an interpolation between the momentum and the gradient, so every element moves by the
// learning rate exactly; one state tensor "<param>.m", decoupled weight decay.
#include <cmath>

#include "train/optim.h"

namespace seqtape {

namespace {

class Lion : public ElementwiseOptimizer<Lion> {
 public:
  Lion(NamedParams params, const OptimizerConfig& cfg)
      : ElementwiseOptimizer(std::move(params), cfg, {".m"}) {}

  // c ← β1·m + (1 − β1)·g;  W ← W − η·(sign(c) + λ·W);  m ← β2·m + (1 − β2)·g
  template <typename T>
  void apply(T* w, const T* graw, T* m, T*, int64_t n, const StepArgs& s) const {
    const OptimizerConfig& c = config();
    const T gs = static_cast<T>(s.grad_scale), lr = static_cast<T>(s.lr);
    const T b1 = static_cast<T>(c.beta1), b2 = static_cast<T>(c.beta2);
    const T decay = static_cast<T>(s.lr * c.weight_decay);
    for (int64_t j = 0; j < n; ++j) {
      const T gj = graw[j] * gs;
      const T cj = b1 * m[j] + (1 - b1) * gj;
      const T sign = cj > 0 ? T(1) : cj < 0 ? T(-1) : T(0);
      w[j] -= decay * w[j] + lr * sign;
      m[j] = b2 * m[j] + (1 - b2) * gj;
    }
  }
};

}  // namespace

std::unique_ptr<Optimizer> make_lion(NamedParams params, const OptimizerConfig& cfg) {
  return std::make_unique<Lion>(std::move(params), cfg);
}

}  // namespace seqtape
