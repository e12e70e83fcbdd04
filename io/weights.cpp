#include "io/weights.h"

#include <nlohmann/json.hpp>

#include "model/param_names.h"

namespace seqtape {

ModelConfig checkpoint_config(const Checkpoint& c, const std::string& where) {
  return config_from_json(c.config_json, where);
}

ModelConfig config_from_json(const std::string& text, const std::string& where) {
  try {
    return ModelConfig::from_json(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    fail(where, std::string("invalid configuration: ") + e.what());
  } catch (const Error& e) {
    fail(where, std::string("invalid configuration: ") + e.what());
  }
}

namespace {

std::map<std::string, const Tensor*> by_name(const std::vector<NamedTensor>& params,
                                             const std::string& where) {
  std::map<std::string, const Tensor*> out;
  for (const NamedTensor& p : params) {
    if (!p.value.defined()) fail(where, "parameter '" + p.name + "' is undefined");
    if (!out.emplace(p.name, &p.value).second)
      fail(where, "parameter '" + p.name + "' appears twice");
  }
  return out;
}

}  // namespace

std::map<std::string, const Tensor*> check_parameters(
    const ModelConfig& cfg, const std::vector<NamedTensor>& params, const std::string& where,
    const std::map<std::string, Shape>& held_elsewhere) {
  const std::vector<ParamSpec> specs = parameter_specs(cfg);
  std::map<std::string, const Tensor*> given = by_name(params, where);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : given) shapes.emplace(name, t->shape());
  for (const auto& [name, shape] : held_elsewhere)
    if (!shapes.emplace(name, shape).second) fail(where, "parameter '" + name + "' appears twice");
  // Names and shapes first, so the message names the first problem in model order.
  std::map<std::string, Shape> wanted;
  for (const ParamSpec& s : specs) {
    wanted.emplace(s.name, s.shape);
    auto it = shapes.find(s.name);
    if (it == shapes.end())
      fail(where, "missing parameter '" + s.name + "' " + shape_str(s.shape) + " (the " +
                      to_string(cfg.arch) + " configuration needs it; " +
                      std::to_string(shapes.size()) + " parameters given, " +
                      std::to_string(specs.size()) + " expected)");
    if (it->second != s.shape)
      fail(where, "parameter '" + s.name + "' has shape " + shape_str(it->second) +
                      ", which does not match the configuration's " + shape_str(s.shape));
  }
  for (const auto& [name, shape] : shapes)
    if (!wanted.count(name))
      fail(where, "unexpected parameter '" + name + "' " + shape_str(shape) +
                      " (not part of this " + to_string(cfg.arch) + " configuration)");
  for (const auto& [name, t] : given) check_finite(*t, name, where);
  return given;
}

}  // namespace seqtape
