#pragma once
// The one description of a model's structure: which stacks it has, the layers of each, every
// layer's residual sublayers in order (self-attention, cross-attention, feed-forward) with the
// norm that goes with each, and the parameters each part owns. nn/ builds its modules from it,
// infer/ loads and runs by iterating it, and parameter_specs() and the memory budget count it.
// Tape-free, so both sides read the same list.
//
// Dimension key: V vocabulary, C d_model, F d_ff, P max_positions.

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/param_names.h"

namespace seqtape {

enum class SublayerKind { SelfAttention, CrossAttention, FeedForward };

// One residual sublayer: its module's name in the layer ("self_attn", "cross_attn", "ffn") and
// the name of its norm ("norm1", ...; empty with norm placement none).
struct SublayerDesc {
  SublayerKind kind = SublayerKind::SelfAttention;
  std::string name;
  std::string norm;
};

// A layer: its path ("decoder.layers.3") and its sublayers in execution (and parameter) order.
struct LayerDesc {
  std::string path;
  std::vector<SublayerDesc> sublayers;
};

// A stack of layers: "encoder" or "decoder", and the name of the norm after its last layer
// ("final_norm", pre-norm only; else empty).
struct StackDesc {
  std::string name;
  std::vector<LayerDesc> layers;
  std::string final_norm;
};

// What every layer of a model shares, and its stacks in parameter order (the encoder, for
// Seq2Seq only; then the decoder).
struct ModelBlocks {
  NormPlacement placement = NormPlacement::Post;
  Activation activation = Activation::Relu;
  std::vector<StackDesc> stacks;
  const StackDesc* encoder() const;  // nullptr for DecoderOnly
  const StackDesc& decoder() const;
};

// The description of a valid configuration.
ModelBlocks model_blocks(const ModelConfig& cfg);
// One stack of it ("encoder" or "decoder"), for the code that builds one stack at a time.
StackDesc stack_blocks(const ModelConfig& cfg, const char* stack);

// The parameters of one part, relative to its path ("wq" [C, C], "gamma" [C], ...), in
// registration order: of a sublayer's module, and of one norm (none with placement none).
std::vector<ParamSpec> sublayer_params(const ModelConfig& cfg, SublayerKind kind);
std::vector<ParamSpec> norm_params(const ModelConfig& cfg);

// "<parent>.<leaf>": a dotted parameter path.
std::string dotted(const std::string& parent, const std::string& leaf);

}  // namespace seqtape
