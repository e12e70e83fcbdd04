#pragma once
// Module: a node of the model tree that owns named parameters and named child modules, in
// registration order. A parameter's full name is the dotted path from the root
// (`decoder.layers.0.cross_attn.wq`); checkpoints, gradient checks and exports use it.
//
// Parameters are leaf Vars with requires_grad = true. Each records how it is initialized;
// init_parameters(seed) draws them all from one Rng in registration order, so a model is a
// pure function of (config, seed).
//
// Dimension key: none of its own (modules document theirs).

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"

namespace seqtape {

struct ParamInit {
  enum class Kind { Zeros, Ones, Normal, XavierUniform };
  Kind kind = Kind::Zeros;
  double stddev = 0.0;  // Normal: N(0, stddev²)
  int64_t fan_in = 0;   // XavierUniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out))
  int64_t fan_out = 0;

  static ParamInit zeros() { return {}; }
  static ParamInit ones() { return {Kind::Ones, 0.0, 0, 0}; }
  static ParamInit normal(double stddev) { return {Kind::Normal, stddev, 0, 0}; }
  static ParamInit xavier(int64_t in, int64_t out) { return {Kind::XavierUniform, 0.0, in, out}; }
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  // Children are registered by address: a module is never copied or moved.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  std::vector<std::pair<std::string, Var>> named_parameters() const;
  Var parameter(const std::string& name) const;  // Error if unknown
  bool has_parameter(const std::string& name) const;
  size_t num_parameters() const;  // total scalar count over all parameter tensors

  // Drops every parameter's gradient (Var::zero_grad): the next backward writes fresh ones.
  void zero_grad();
  // Training mode: dropout is active only when training (default true). Applies to the subtree.
  void set_training(bool training);
  bool training() const { return training_; }

  // Freezes (false) or unfreezes every parameter whose name is `prefix` or starts with
  // `prefix.`; an empty prefix means all. Returns how many tensors matched; Error if none.
  size_t set_requires_grad(const std::string& prefix, bool requires_grad);

  // Re-draws every parameter from Rng(seed), in registration order.
  void init_parameters(uint64_t seed);

  // Calls fn(path, module) for this module (path "") and every descendant, depth first in
  // registration order.
  void visit_modules(const std::function<void(const std::string&, Module&)>& fn);

 protected:
  // Registers a leaf parameter (zero-filled until init_parameters) and returns it; the Var
  // shares its storage with the registry, so keep it as a member.
  Var register_parameter(const std::string& name, Shape shape, DType dtype, ParamInit init);
  void register_module(const std::string& name, Module& child);

 private:
  struct Entry {
    std::string name;
    Var param;  // defined for a parameter
    ParamInit init;
    Module* child = nullptr;  // set for a child module
  };
  void collect(
      const std::string& prefix,
      const std::function<void(const std::string&, const Var&, const ParamInit&)>& fn) const;
  void visit(const std::string& path, const std::function<void(const std::string&, Module&)>& fn);

  std::vector<Entry> entries_;
  bool training_ = true;
};

// Sets a module's training mode for a scope and restores the previous one at its end.
class TrainingModeGuard {
 public:
  TrainingModeGuard(Module& m, bool training) : m_(m), prev_(m.training()) {
    m_.set_training(training);
  }
  ~TrainingModeGuard() { m_.set_training(prev_); }
  TrainingModeGuard(const TrainingModeGuard&) = delete;
  TrainingModeGuard& operator=(const TrainingModeGuard&) = delete;

 private:
  Module& m_;
  bool prev_;
};

}  // namespace seqtape
