#pragma once
// Optimizers, learning-rate schedules and gradient clipping over named parameters.
// They read each parameter's gradient and update its value in place; the tape is not
// involved. Optimizer state is exported as named tensors ("<param>.m", "<param>.v",
// "<param>.momentum") so checkpoints can store and validate it.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "io/checkpoint.h"

namespace seqtape {

using NamedParams = std::vector<std::pair<std::string, Var>>;

enum class OptimizerKind { Sgd, Momentum, Adam, AdamW };
OptimizerKind parse_optimizer(const std::string& name);  // "sgd" | "momentum" | "adam" | "adamw"
std::string optimizer_name(OptimizerKind k);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Adam;
  double momentum = 0.9;                         // Momentum
  double beta1 = 0.9, beta2 = 0.98, eps = 1e-9;  // Adam(W)
  double weight_decay = 0.0;  // AdamW: decoupled; others: ignored unless > 0 (L2 added to grad)
};

class Optimizer {
 public:
  Optimizer(NamedParams params, OptimizerConfig cfg);
  // One update with learning rate lr, from the gradients now held by the parameters times
  // grad_scale (the clipping factor, see clip_scale). Parameters without a gradient (frozen,
  // or unused this step) are left alone.
  void step(double lr, double grad_scale = 1.0);
  int64_t steps() const { return t_; }
  const OptimizerConfig& config() const { return cfg_; }

  // m and v: views into one buffer each, in parameter order.
  std::vector<NamedTensor> state() const;
  // Restores state(); every tensor must match a parameter's name and shape.
  void load_state(const std::vector<NamedTensor>& state, int64_t steps);

 private:
  template <typename T>
  void update(T* w, const T* g, T* m, T* v, int64_t n, double lr, double grad_scale, double bc1,
              double bc2) const;
  NamedParams params_;
  OptimizerConfig cfg_;
  std::vector<Tensor> m_, v_;  // first moment / momentum buffer, second moment
  int64_t t_ = 0;
};

// Learning rate at a step (1-based) and a fraction of the run's budget used (0 at the start, 1
// when the steps or the --time-limit run out; see the trainer). Constant and WarmupInvSqrt (linear
// warmup then inverse square root decay, the Transformer schedule, peaking at `lr` after `warmup`
// steps) ignore the fraction; the budget schedules warm up linearly over `warmup` steps and then
// follow the fraction down to `min_lr`, so that a run keyed to a time budget reaches its floor when
// the time runs out, as Cramming (Geiping & Goldstein, 2022) does:
//   Wsd     warmup-stable-decay: `lr` until the last `decay_fraction` of the budget, then a
//           straight line down to min_lr
//   Cosine  half a cosine from `lr` at fraction 0 to min_lr at fraction 1
//   Linear  a straight line from `lr` at fraction 0 to min_lr at fraction 1
struct LrSchedule {
  enum class Kind { Constant, WarmupInvSqrt, Wsd, Cosine, Linear } kind = Kind::Constant;
  double lr = 1e-3;
  int64_t warmup = 0;
  double decay_fraction = 0.2;  // Wsd
  double min_lr = 0;            // Wsd, Cosine, Linear
  double at(int64_t step, double fraction = 0) const;
  bool uses_budget() const {
    return kind == Kind::Wsd || kind == Kind::Cosine || kind == Kind::Linear;
  }
};
// "constant" | "inv-sqrt" | "wsd" | "cosine" | "linear"; an Error naming the choices otherwise.
LrSchedule::Kind parse_schedule(const std::string& name);
std::string schedule_name(LrSchedule::Kind k);

// Global L2 norm of all gradients. Throws an Error naming the first parameter with a
// non-finite gradient.
double grad_global_norm(const NamedParams& params);
// The factor that brings a global norm down to max_norm (1 when it is already below).
inline double clip_scale(double norm, double max_norm) {
  return norm > max_norm ? max_norm / (norm + 1e-12) : 1.0;
}
// Scales every gradient so the global norm is at most max_norm; returns the norm before.
// A non-finite norm is an error, never a silent skip.
double clip_grad_norm(const NamedParams& params, double max_norm);

}  // namespace seqtape
