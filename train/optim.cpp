#include "train/optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tensor/cpu_path.h"
#include "tensor/kernels.h"
#include "tensor/profile.h"
#include "train/flat_params.h"

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
// operation), so a path never changes a bit. The 4-float loop was bound by its divisions and
// square roots: 0.9-1.0 ms for the short model's 1.4M parameters on one thread.
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

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::Sgd;
  if (name == "momentum") return OptimizerKind::Momentum;
  if (name == "adam") return OptimizerKind::Adam;
  if (name == "adamw") return OptimizerKind::AdamW;
  fail("optimizer", "unknown optimizer '" + name + "' (known: sgd, momentum, adam, adamw)");
}

std::string optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::Sgd:
      return "sgd";
    case OptimizerKind::Momentum:
      return "momentum";
    case OptimizerKind::Adam:
      return "adam";
    case OptimizerKind::AdamW:
      return "adamw";
  }
  return "?";
}

Optimizer::Optimizer(NamedParams params, OptimizerConfig cfg)
    : params_(std::move(params)), cfg_(cfg) {
  // The moments lie back to back in parameter order in one buffer each, like FlatParams' values
  // and gradients, so that a flat model is updated in one pass.
  int64_t total = 0;
  for (const auto& named : params_) total += named.second.numel();
  const DType dt = params_.empty() ? DType::F32 : params_.front().second.dtype();
  auto moments = [&](std::vector<Tensor>& into) {
    const Tensor flat = Tensor::zeros({total}, dt);
    int64_t off = 0;
    for (const auto& named : params_) {
      if (named.second.dtype() != dt) fail("optimizer", "parameters of mixed dtypes");
      into.push_back(Tensor::view_of(flat, off, named.second.shape()));
      off += named.second.numel();
    }
  };
  if (cfg_.kind != OptimizerKind::Sgd) moments(m_);
  if (cfg_.kind == OptimizerKind::Adam || cfg_.kind == OptimizerKind::AdamW) moments(v_);
}

template <typename T>
void Optimizer::update(T* w, const T* graw, T* m, T* v, int64_t n, double lr, double grad_scale,
                       double bc1, double bc2) const {
  const T gs = static_cast<T>(grad_scale);
  // The clipping scale is applied as the gradient is read, not in a pass of its own.
  auto g = [graw, gs](int64_t j) { return graw[j] * gs; };
  const T l2 = cfg_.kind == OptimizerKind::AdamW ? T(0) : static_cast<T>(cfg_.weight_decay);
  switch (cfg_.kind) {
    case OptimizerKind::Sgd:  // W ← W − η·∂L/∂W (the reference's update)
      for (int64_t j = 0; j < n; ++j) w[j] -= static_cast<T>(lr) * (g(j) + l2 * w[j]);
      break;
    case OptimizerKind::Momentum:  // u ← μ·u + g;  W ← W − η·u
      for (int64_t j = 0; j < n; ++j) {
        m[j] = static_cast<T>(cfg_.momentum) * m[j] + g(j) + l2 * w[j];
        w[j] -= static_cast<T>(lr) * m[j];
      }
      break;
    case OptimizerKind::Adam:
    case OptimizerKind::AdamW: {  // bias-corrected moments; AdamW decays W directly
      const T b1 = static_cast<T>(cfg_.beta1), b2 = static_cast<T>(cfg_.beta2);
      const AdamConsts<T> a{
          gs,
          l2,
          b1,
          b2,
          1 - b1,
          1 - b2,
          static_cast<T>(lr / bc1),
          static_cast<T>(1 / std::sqrt(bc2)),
          cfg_.kind == OptimizerKind::AdamW ? static_cast<T>(lr * cfg_.weight_decay) : T(0),
          static_cast<T>(cfg_.eps)};
      if constexpr (std::is_same_v<T, float>)
        SEQTAPE_ON_PATH(adam, adam_portable<float>, w, graw, m, v, n, a);
      else
        adam_portable(w, graw, m, v, n, a);
      break;
    }
  }
}

void Optimizer::step(double lr, double grad_scale) {
  profile::Scope prof("optimizer");
  ++t_;
  if (params_.empty()) return;
  const double bc1 = 1 - std::pow(cfg_.beta1, static_cast<double>(t_));
  const double bc2 = 1 - std::pow(cfg_.beta2, static_cast<double>(t_));
  int64_t nv = 0, ng = 0;
  const void* wflat = flat_span(params_, false, &nv);
  const void* gflat = wflat ? flat_span(params_, true, &ng) : nullptr;
  dispatch(params_.front().second.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto moment = [](std::vector<Tensor>& ms, size_t i) {
      return ms.empty() ? nullptr : ms[i].template data<T>();
    };
    // Element by element: split over the pool's threads when big (kernels::parallel_range).
    const double cost = cfg_.kind == OptimizerKind::Adam || cfg_.kind == OptimizerKind::AdamW
                            ? kernels::kCostTranscendental
                            : 2 * kernels::kCostSimple;
    auto update_all = [&](T* w, const T* g, T* m, T* v, int64_t n) {
      kernels::parallel_range(n, cost, [&](int64_t j0, int64_t j1) {
        update<T>(w + j0, g + j0, m ? m + j0 : nullptr, v ? v + j0 : nullptr, j1 - j0, lr,
                  grad_scale, bc1, bc2);
      });
    };
    if (gflat && ng == nv) {  // one pass over the flat buffers (FlatParams)
      update_all(static_cast<T*>(const_cast<void*>(wflat)), static_cast<const T*>(gflat),
                 moment(m_, 0), moment(v_, 0), nv);
      return;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      Var& p = params_[i].second;
      if (!p.requires_grad() || !p.has_grad()) continue;
      update_all(p.mutable_value().template data<T>(), p.grad().template data<T>(), moment(m_, i),
                 moment(v_, i), p.numel());
    }
  });
}

std::vector<NamedTensor> Optimizer::state() const {
  std::vector<NamedTensor> s;
  const bool adam = cfg_.kind == OptimizerKind::Adam || cfg_.kind == OptimizerKind::AdamW;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!m_.empty()) s.push_back({params_[i].first + (adam ? ".m" : ".momentum"), m_[i]});
    if (adam) s.push_back({params_[i].first + ".v", v_[i]});
  }
  return s;
}

void Optimizer::load_state(const std::vector<NamedTensor>& state, int64_t steps) {
  std::vector<NamedTensor> want = this->state();
  if (state.size() != want.size())
    fail("optimizer state", "has " + std::to_string(state.size()) + " tensors, " +
                                optimizer_name(cfg_.kind) + " over this model needs " +
                                std::to_string(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    if (state[i].name != want[i].name || state[i].value.shape() != want[i].value.shape() ||
        state[i].value.dtype() != want[i].value.dtype())
      fail("optimizer state", "tensor '" + state[i].name + "' " +
                                  shape_str(state[i].value.shape()) + " does not match '" +
                                  want[i].name + "' " + shape_str(want[i].value.shape()));
  }
  // state() returned the live buffers: copy into them.
  for (size_t i = 0; i < want.size(); ++i)
    std::memcpy(want[i].value.raw(), state[i].value.raw(), want[i].value.nbytes());
  t_ = steps;
}

double LrSchedule::at(int64_t step, double fraction) const {
  const double s = static_cast<double>(std::max<int64_t>(step, 1));
  const double w = static_cast<double>(warmup);
  if (kind == Kind::Constant || (kind == Kind::WarmupInvSqrt && warmup <= 0)) return lr;
  if (kind == Kind::WarmupInvSqrt) return lr * std::min(s / w, std::sqrt(w / s));
  const double f = std::clamp(fraction, 0.0, 1.0);
  double base = lr;
  if (kind == Kind::Linear) base = min_lr + (lr - min_lr) * (1 - f);
  if (kind == Kind::Cosine) base = min_lr + (lr - min_lr) * 0.5 * (1 + std::cos(M_PI * f));
  if (kind == Kind::Wsd && f > 1 - decay_fraction)
    base = min_lr + (lr - min_lr) * (1 - f) / decay_fraction;
  // Warmup scales the whole curve, so that a short budget still ends at min_lr.
  return warmup > 0 && s < w ? min_lr + (base - min_lr) * (s / w) : base;
}

namespace {
constexpr std::pair<LrSchedule::Kind, const char*> kScheduleNames[] = {
    {LrSchedule::Kind::Constant, "constant"},
    {LrSchedule::Kind::WarmupInvSqrt, "inv-sqrt"},
    {LrSchedule::Kind::Wsd, "wsd"},
    {LrSchedule::Kind::Cosine, "cosine"},
    {LrSchedule::Kind::Linear, "linear"}};
}  // namespace

LrSchedule::Kind parse_schedule(const std::string& name) {
  for (const auto& [k, n] : kScheduleNames)
    if (name == n) return k;
  fail("schedule", "unknown learning-rate schedule '" + name +
                       "' (expected constant, inv-sqrt, wsd, cosine or linear)");
}

std::string schedule_name(LrSchedule::Kind k) {
  for (const auto& [kind, n] : kScheduleNames)
    if (kind == k) return n;
  return "?";
}

double grad_global_norm(const NamedParams& params) {
  profile::Scope prof("clip (grad norm)");
  int64_t n = 0;
  if (const void* flat = flat_span(params, true, &n)) {
    // One pass over the flat gradient (FlatParams); only a non-finite sum looks for its parameter
    // in the loop below.
    double sq = 0;
    dispatch(params.front().second.dtype(), [&](auto tag) {
      using T = decltype(tag);
      sq = kernels::sum_squares<T>(static_cast<const T*>(flat), n);
    });
    if (std::isfinite(sq)) return std::sqrt(sq);
  }
  double sq = 0;
  for (const auto& np : params) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda.
    const std::string& name = np.first;
    const Var& p = np.second;
    if (!p.has_grad()) continue;
    double local = 0;
    dispatch(p.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* g = p.grad().template data<T>();
      local = kernels::sum_squares<T>(g, p.numel());
    });
    if (!std::isfinite(local)) fail("gradient", "non-finite gradient in parameter '" + name + "'");
    sq += local;
  }
  return std::sqrt(sq);
}

double clip_grad_norm(const NamedParams& params, double max_norm) {
  if (!(max_norm > 0)) fail("clip_grad_norm", "max_norm must be > 0");
  const double norm = grad_global_norm(params);
  if (!std::isfinite(norm)) fail("clip_grad_norm", "global gradient norm is not finite");
  if (norm <= max_norm) return norm;
  profile::Scope prof("clip (scale)");
  const double scale = clip_scale(norm, max_norm);
  for (const auto& [name, p] : params) {
    if (!p.has_grad()) continue;
    Tensor g = p.grad();  // shares the gradient's storage
    dispatch(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* d = g.template data<T>();
      kernels::parallel_range(g.numel(), kernels::kCostSimple, [d, scale](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) d[j] *= static_cast<T>(scale);
      });
    });
  }
  return norm;
}

}  // namespace seqtape
