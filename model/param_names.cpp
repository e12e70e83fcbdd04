// parameter_specs: the names of model/param_names.h composed in the models' registration order.
//
// Dimension key: V vocabulary, C d_model, F d_ff, P max_positions.
#include "model/param_names.h"

#include "model/blocks.h"

namespace seqtape {

namespace pn = param_name;

std::string norm_name(int sublayer) {
  return "norm" + std::to_string(sublayer);
}

std::string layer_name(int64_t i) {
  return "layers." + std::to_string(i);
}

std::string stack_layer_path(const char* stack, int64_t i) {
  return std::string(stack) + "." + layer_name(i);
}

namespace {

// Every parameter of one part at `path` (a sublayer's module or a norm).
void add_part(std::vector<ParamSpec>& out, const std::string& path,
              const std::vector<ParamSpec>& leaves) {
  for (const ParamSpec& p : leaves) out.push_back({dotted(path, p.name), p.shape});
}

}  // namespace

// The registration order: embedding, positions, each stack's layers (each sublayer's module,
// then its norm) and final norm, then the output projection.
std::vector<ParamSpec> parameter_specs(const ModelConfig& c) {
  std::vector<ParamSpec> s;
  s.push_back({dotted(pn::kEmbed, pn::kWeight), {c.vocab_size, c.d_model}});
  if (c.pos_encoding == PosEncoding::Learned)
    s.push_back({dotted(pn::kPos, pn::kWeight), {c.max_positions, c.d_model}});
  const std::vector<ParamSpec> norm = norm_params(c);
  for (const StackDesc& stack : model_blocks(c).stacks) {
    for (const LayerDesc& layer : stack.layers)
      for (const SublayerDesc& sub : layer.sublayers) {
        add_part(s, dotted(layer.path, sub.name), sublayer_params(c, sub.kind));
        if (!sub.norm.empty()) add_part(s, dotted(layer.path, sub.norm), norm);
      }
    if (!stack.final_norm.empty()) add_part(s, dotted(stack.name, stack.final_norm), norm);
  }
  if (!c.tie_output) s.push_back({dotted(pn::kOutProj, pn::kWeight), {c.d_model, c.vocab_size}});
  s.push_back({dotted(pn::kOutProj, pn::kBias), {c.vocab_size}});
  return s;
}

}  // namespace seqtape
