#include "nn/module.h"

#include <cmath>

namespace seqtape {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

Var Module::register_parameter(const std::string& name, Shape shape, DType dtype, ParamInit init) {
  for (const auto& e : entries_)
    if (e.name == name) fail("Module", "duplicate registration of '" + name + "'");
  Var v(Tensor::zeros(std::move(shape), dtype), /*requires_grad=*/true);
  entries_.push_back({name, v, init, nullptr});
  return v;
}

void Module::register_module(const std::string& name, Module& child) {
  for (const auto& e : entries_)
    if (e.name == name) fail("Module", "duplicate registration of '" + name + "'");
  entries_.push_back({name, Var(), ParamInit{}, &child});
}

void Module::collect(
    const std::string& prefix,
    const std::function<void(const std::string&, const Var&, const ParamInit&)>& fn) const {
  for (const auto& e : entries_) {
    if (e.child)
      e.child->collect(join(prefix, e.name), fn);
    else
      fn(join(prefix, e.name), e.param, e.init);
  }
}

void Module::visit(const std::string& path,
                   const std::function<void(const std::string&, Module&)>& fn) {
  fn(path, *this);
  for (auto& e : entries_)
    if (e.child) e.child->visit(join(path, e.name), fn);
}

void Module::visit_modules(const std::function<void(const std::string&, Module&)>& fn) {
  visit("", fn);
}

std::vector<std::pair<std::string, Var>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Var>> out;
  collect("",
          [&](const std::string& n, const Var& v, const ParamInit&) { out.emplace_back(n, v); });
  return out;
}

bool Module::has_parameter(const std::string& name) const {
  bool found = false;
  collect("", [&](const std::string& n, const Var&, const ParamInit&) { found |= n == name; });
  return found;
}

Var Module::parameter(const std::string& name) const {
  Var found;
  collect("", [&](const std::string& n, const Var& v, const ParamInit&) {
    if (n == name) found = v;
  });
  if (!found.defined()) fail("Module::parameter", "no parameter named '" + name + "'");
  return found;
}

size_t Module::num_parameters() const {
  size_t n = 0;
  collect("", [&](const std::string&, const Var& v, const ParamInit&) {
    n += static_cast<size_t>(v.numel());
  });
  return n;
}

void Module::zero_grad() {
  collect("", [](const std::string&, const Var& v, const ParamInit&) {
    if (v.has_grad()) Var(v).zero_grad();
  });
}

void Module::set_training(bool training) {
  visit_modules([training](const std::string&, Module& m) { m.training_ = training; });
}

size_t Module::set_requires_grad(const std::string& prefix, bool requires_grad) {
  size_t matched = 0;
  collect("", [&](const std::string& n, const Var& v, const ParamInit&) {
    bool hit = prefix.empty() || n == prefix ||
               (n.size() > prefix.size() && n.compare(0, prefix.size(), prefix) == 0 &&
                n[prefix.size()] == '.');
    if (hit) {
      Var(v).set_requires_grad(requires_grad);
      ++matched;
    }
  });
  if (matched == 0)
    fail("Module::set_requires_grad", "no parameter name starts with '" + prefix + "'");
  return matched;
}

void Module::init_parameters(uint64_t seed) {
  Rng rng(seed);
  collect("", [&](const std::string&, const Var& v, const ParamInit& init) {
    Tensor& t = Var(v).mutable_value();
    dispatch(t.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* p = t.data<T>();
      const int64_t n = t.numel();
      switch (init.kind) {
        case ParamInit::Kind::Zeros:
          for (int64_t i = 0; i < n; ++i) p[i] = T(0);
          break;
        case ParamInit::Kind::Ones:
          for (int64_t i = 0; i < n; ++i) p[i] = T(1);
          break;
        case ParamInit::Kind::Normal:
          for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(init.stddev * rng.normal());
          break;
        case ParamInit::Kind::XavierUniform: {
          const double limit = std::sqrt(6.0 / static_cast<double>(init.fan_in + init.fan_out));
          for (int64_t i = 0; i < n; ++i)
            p[i] = static_cast<T>((2.0 * rng.uniform() - 1.0) * limit);
          break;
        }
      }
    });
  });
}

}  // namespace seqtape
