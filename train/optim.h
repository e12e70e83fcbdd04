#pragma once
// Optimizers, learning-rate schedules and gradient clipping over named parameters.
// They read each parameter's gradient and update its value in place; the tape is not
// involved. Optimizer state is exported as named tensors ("<param>.m", "<param>.v",
// "<param>.momentum") so checkpoints can store and validate it. The kinds: optim_sgd.cpp,
// optim_adam.cpp, optim_lion.cpp, listed in optim_registry.cpp.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/tape.h"
#include "io/checkpoint.h"

namespace seqtape {

using NamedParams = std::vector<std::pair<std::string, Var>>;

struct OptimizerConfig {
  std::string kind = "adam";                     // a name in optimizer_kinds()
  double momentum = 0.9;                         // momentum
  double beta1 = 0.9, beta2 = 0.98, eps = 1e-9;  // adam, adamw; lion (beta1, beta2)
  // adamw, lion: decoupled; the others: an L2 term added to the gradient when > 0
  double weight_decay = 0.0;
};

// The interface every optimizer kind implements, one class per kind. The base class owns what
// all kinds share: the parameters, the step count, the state buffers (each state tensor kind
// lies back to back in parameter order in one buffer, like FlatParams' values, so that a flat
// model is updated in one pass), the walk over flat or separate parameters, and the state's
// checkpoint names "<param><suffix>" in parameter order.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update with learning rate lr, from the gradients now held by the parameters times
  // grad_scale (the clipping factor, see clip_scale). Parameters without a gradient (frozen,
  // or unused this step) are left alone.
  void step(double lr, double grad_scale = 1.0);
  int64_t steps() const { return t_; }
  const OptimizerConfig& config() const { return cfg_; }

  // The state tensors: views into the live buffers, per parameter in suffix order.
  std::vector<NamedTensor> state() const;
  // Restores state(); every tensor must match a parameter's name and shape.
  void load_state(const std::vector<NamedTensor>& state, int64_t steps);
  // Bytes of state kept per parameter element.
  uint64_t state_bytes_per_parameter() const;

  // What one update of elements [0, n) needs: the step (1-based, already counted), the rate
  // and the clipping scale, applied as the gradient is read rather than in a pass of its own.
  struct StepArgs {
    int64_t t;
    double lr, grad_scale;
  };

 protected:
  // state_suffixes: the state tensors kept per parameter (at most two), e.g. {".m", ".v"}.
  Optimizer(NamedParams params, OptimizerConfig cfg, std::vector<std::string> state_suffixes);
  // Updates n elements of weights w from raw gradients g, with the state buffers s0 and s1
  // (null when the kind keeps fewer). Called on disjoint ranges from several threads.
  virtual void update(float* w, const float* g, float* s0, float* s1, int64_t n,
                      const StepArgs& a) const = 0;
  virtual void update(double* w, const double* g, double* s0, double* s1, int64_t n,
                      const StepArgs& a) const = 0;
  // The kernels::parallel_range cost of one element's update.
  virtual double cost_per_element() const;

 private:
  NamedParams params_;
  OptimizerConfig cfg_;
  std::vector<std::string> suffixes_;
  std::vector<std::vector<Tensor>> state_;  // [suffix][parameter]
  int64_t t_ = 0;
};

// Implements both dtypes' update() with one template: Kind has
// `template <typename T> void apply(T* w, const T* g, T* s0, T* s1, int64_t n, const StepArgs&)`.
template <class Kind>
class ElementwiseOptimizer : public Optimizer {
 protected:
  using Optimizer::Optimizer;
  void update(float* w, const float* g, float* s0, float* s1, int64_t n,
              const StepArgs& a) const override {
    static_cast<const Kind*>(this)->template apply<float>(w, g, s0, s1, n, a);
  }
  void update(double* w, const double* g, double* s0, double* s1, int64_t n,
              const StepArgs& a) const override {
    static_cast<const Kind*>(this)->template apply<double>(w, g, s0, s1, n, a);
  }
};

// The registry of optimizer kinds (train/optim_registry.cpp): a new kind is its class in a file
// of its own, a factory declared and listed there, and its test.
struct OptimizerKind {
  const char* name;  // the --optimizer value and the checkpoint's optimizer_name
  const char* help;
  int state_tensors;       // per parameter, each of the parameter's shape and dtype
  const char* state_noun;  // in the memory budget's message, e.g. "Adam state"
  std::unique_ptr<Optimizer> (*make)(NamedParams params, const OptimizerConfig& cfg);
};
const std::vector<OptimizerKind>& optimizer_kinds();
// The kind named `name`; an Error naming the known ones otherwise.
const OptimizerKind& find_optimizer(const std::string& name);
// "sgd, momentum, adam, adamw, ..." in registry order.
std::string optimizer_names(const char* separator = ", ");
std::unique_ptr<Optimizer> make_optimizer(NamedParams params, const OptimizerConfig& cfg);

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
