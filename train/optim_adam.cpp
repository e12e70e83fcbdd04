// Adam (Kingma & Ba, 2015) with an L2 term, and AdamW (Loshchilov & Hutter, 2019) with decoupled
// weight decay: bias-corrected first and second moments, state "<param>.m" and "<param>.v".
#include <cmath>
#include <type_traits>

#include "tensor/cpu_path.h"
#include "tensor/kernels.h"
#include "train/optim.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace seqtape {

namespace {

// Adam's (and AdamW's) update with its constants in T: the loop (the float one vectorized by
// the compiler for the baseline x86-64, 4 floats at a time), or for floats 16 (AVX-512) or 8
// (AVX2) elements at a time with the rest through the loop. Each element only multiplies, adds,
// subtracts, divides and takes a square root, in the same order on every path, each rounded once
// (this file is compiled with -ffp-contract=off, so no multiply and add become one fused
// operation), so a path never changes a bit. The vector paths exist because the plain loop is
// bound by its divisions and square roots.
template <typename T>
struct AdamConsts {
  T gs, l2, b1, b2, c1, c2, step, denom_c, decay, eps;  // c1 = 1 − b1, c2 = 1 − b2
};
using AdamF32 = AdamConsts<float>;

template <typename T>
void adam_portable(T* w, const T* graw, T* m, T* v, int64_t n, const AdamConsts<T>& a) {
  for (int64_t j = 0; j < n; ++j) {
    const T gj = graw[j] * a.gs + a.l2 * w[j];
    m[j] = a.b1 * m[j] + a.c1 * gj;
    v[j] = a.b2 * v[j] + a.c2 * gj * gj;
    w[j] -= a.decay * w[j];
    w[j] -= a.step * m[j] / (std::sqrt(v[j]) * a.denom_c + a.eps);
  }
}

#if defined(__x86_64__)
// The zero-masked AVX-512 square root: GCC 12's unmasked one starts from an undefined register,
// which -Wmaybe-uninitialized reports.
__attribute__((target("avx512f"))) inline __m512 sqrt16(__m512 x) {
  return _mm512_maskz_sqrt_ps(static_cast<__mmask16>(0xFFFF), x);
}

// One vector path: V the vector type, L its lanes, P the intrinsics' prefix (_mm512 or _mm256),
// SQRT its square root.
#define SEQTAPE_ADAM_PATH(ns, isa, V, L, P, SQRT)                                                  \
  namespace ns {                                                                                   \
  __attribute__((target(isa))) void adam(float* w, const float* graw, float* m, float* v,          \
                                         int64_t n, const AdamF32& a) {                            \
    const V gs = P##_set1_ps(a.gs), l2 = P##_set1_ps(a.l2), b1 = P##_set1_ps(a.b1),                \
            b2 = P##_set1_ps(a.b2), c1 = P##_set1_ps(a.c1), c2 = P##_set1_ps(a.c2),                \
            step = P##_set1_ps(a.step), dc = P##_set1_ps(a.denom_c), decay = P##_set1_ps(a.decay), \
            eps = P##_set1_ps(a.eps);                                                              \
    int64_t j = 0;                                                                                 \
    for (; j + L <= n; j += L) {                                                                   \
      V wj = P##_loadu_ps(w + j);                                                                  \
      const V gj = P##_add_ps(P##_mul_ps(P##_loadu_ps(graw + j), gs), P##_mul_ps(l2, wj));         \
      const V mj = P##_add_ps(P##_mul_ps(b1, P##_loadu_ps(m + j)), P##_mul_ps(c1, gj));            \
      const V vj =                                                                                 \
          P##_add_ps(P##_mul_ps(b2, P##_loadu_ps(v + j)), P##_mul_ps(P##_mul_ps(c2, gj), gj));     \
      P##_storeu_ps(m + j, mj);                                                                    \
      P##_storeu_ps(v + j, vj);                                                                    \
      wj = P##_sub_ps(wj, P##_mul_ps(decay, wj));                                                  \
      wj = P##_sub_ps(                                                                             \
          wj, P##_div_ps(P##_mul_ps(step, mj), P##_add_ps(P##_mul_ps(SQRT(vj), dc), eps)));        \
      P##_storeu_ps(w + j, wj);                                                                    \
    }                                                                                              \
    adam_portable<float>(w + j, graw + j, m + j, v + j, n - j, a);                                 \
  }                                                                                                \
  }
SEQTAPE_ADAM_PATH(avx512, "avx512f", __m512, 16, _mm512, sqrt16)
SEQTAPE_ADAM_PATH(avx2, "avx2", __m256, 8, _mm256, _mm256_sqrt_ps)
#undef SEQTAPE_ADAM_PATH
#endif

}  // namespace

class Adam : public ElementwiseOptimizer<Adam> {
 public:
  Adam(NamedParams params, const OptimizerConfig& cfg, bool decoupled)
      : ElementwiseOptimizer(std::move(params), cfg, {".m", ".v"}), decoupled_(decoupled) {}

  template <typename T>
  void apply(T* w, const T* graw, T* m, T* v, int64_t n, const StepArgs& s) const {
    const OptimizerConfig& c = config();
    const double bc1 = 1 - std::pow(c.beta1, static_cast<double>(s.t));
    const double bc2 = 1 - std::pow(c.beta2, static_cast<double>(s.t));
    const T b1 = static_cast<T>(c.beta1), b2 = static_cast<T>(c.beta2);
    const AdamConsts<T> a{static_cast<T>(s.grad_scale),
                          decoupled_ ? T(0) : static_cast<T>(c.weight_decay),
                          b1,
                          b2,
                          1 - b1,
                          1 - b2,
                          static_cast<T>(s.lr / bc1),
                          static_cast<T>(1 / std::sqrt(bc2)),
                          decoupled_ ? static_cast<T>(s.lr * c.weight_decay) : T(0),
                          static_cast<T>(c.eps)};
    if constexpr (std::is_same_v<T, float>)
      SEQTAPE_ON_PATH(adam, adam_portable<float>, w, graw, m, v, n, a);
    else
      adam_portable(w, graw, m, v, n, a);
  }

 protected:
  double cost_per_element() const override { return kernels::kCostTranscendental; }

 private:
  bool decoupled_;  // AdamW: decay W directly instead of adding an L2 term to the gradient
};

std::unique_ptr<Optimizer> make_adam(NamedParams params, const OptimizerConfig& cfg) {
  return std::make_unique<Adam>(std::move(params), cfg, false);
}

std::unique_ptr<Optimizer> make_adamw(NamedParams params, const OptimizerConfig& cfg) {
  return std::make_unique<Adam>(std::move(params), cfg, true);
}

}  // namespace seqtape
