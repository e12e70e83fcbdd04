#include "train/optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/kernels.h"
#include "tensor/profile.h"
#include "train/flat_params.h"

namespace seqtape {

Optimizer::Optimizer(NamedParams params, OptimizerConfig cfg,
                     std::vector<std::string> state_suffixes)
    : params_(std::move(params)), cfg_(std::move(cfg)), suffixes_(std::move(state_suffixes)) {
  if (suffixes_.size() > 2) fail("optimizer", "at most two state tensors per parameter");
  int64_t total = 0;
  for (const auto& named : params_) total += named.second.numel();
  const DType dt = params_.empty() ? DType::F32 : params_.front().second.dtype();
  for (size_t k = 0; k < suffixes_.size(); ++k) {
    const Tensor flat = Tensor::zeros({total}, dt);
    std::vector<Tensor>& views = state_.emplace_back();
    int64_t off = 0;
    for (const auto& named : params_) {
      if (named.second.dtype() != dt) fail("optimizer", "parameters of mixed dtypes");
      views.push_back(Tensor::view_of(flat, off, named.second.shape()));
      off += named.second.numel();
    }
  }
}

double Optimizer::cost_per_element() const {
  return 2 * kernels::kCostSimple;
}

uint64_t Optimizer::state_bytes_per_parameter() const {
  const DType dt = params_.empty() ? DType::F32 : params_.front().second.dtype();
  return suffixes_.size() * dtype_size(dt);
}

void Optimizer::step(double lr, double grad_scale) {
  profile::Scope prof("optimizer");
  ++t_;
  if (params_.empty()) return;
  const StepArgs args{t_, lr, grad_scale};
  int64_t nv = 0, ng = 0;
  const void* wflat = flat_span(params_, false, &nv);
  const void* gflat = wflat ? flat_span(params_, true, &ng) : nullptr;
  dispatch(params_.front().second.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto state = [&](size_t k, size_t i) -> T* {
      return k < state_.size() ? state_[k][i].template data<T>() : nullptr;
    };
    // Element by element: split over the pool's threads when big (kernels::parallel_range).
    auto update_all = [&](T* w, const T* g, T* s0, T* s1, int64_t n) {
      kernels::parallel_range(n, cost_per_element(), [&](int64_t j0, int64_t j1) {
        update(w + j0, g + j0, s0 ? s0 + j0 : nullptr, s1 ? s1 + j0 : nullptr, j1 - j0, args);
      });
    };
    if (gflat && ng == nv) {  // one pass over the flat buffers (FlatParams)
      update_all(static_cast<T*>(const_cast<void*>(wflat)), static_cast<const T*>(gflat),
                 state(0, 0), state(1, 0), nv);
      return;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      Var& p = params_[i].second;
      if (!p.requires_grad() || !p.has_grad()) continue;
      update_all(p.mutable_value().template data<T>(), p.grad().template data<T>(), state(0, i),
                 state(1, i), p.numel());
    }
  });
}

std::vector<NamedTensor> Optimizer::state() const {
  std::vector<NamedTensor> s;
  for (size_t i = 0; i < params_.size(); ++i)
    for (size_t k = 0; k < suffixes_.size(); ++k)
      s.push_back({params_[i].first + suffixes_[k], state_[k][i]});
  return s;
}

void Optimizer::load_state(const std::vector<NamedTensor>& state, int64_t steps) {
  std::vector<NamedTensor> want = this->state();
  if (state.size() != want.size())
    fail("optimizer state", "has " + std::to_string(state.size()) + " tensors, " + cfg_.kind +
                                " over this model needs " + std::to_string(want.size()));
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
