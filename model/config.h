#pragma once
// ModelConfig: every architectural choice of a model, typed and validated once. Modules read
// these fields directly; nothing below this struct looks an option up by string.
//
// Dimension key (used in nn/ shape comments):
//   B batch, S source length, T target length, C d_model, H heads, Dh = C / H,
//   F d_ff, V vocabulary size, P max_positions.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/kinds.h"    // NormKind, Activation
#include "tensor/tensor.h"  // Error

namespace seqtape {

enum class Arch { Seq2Seq, DecoderOnly };
// Post = the reference's "Add & Norm": x = LN(x + Sub(x)). Pre: x = x + Sub(LN(x)) with a
// final LayerNorm after each stack. None: x = x + Sub(x), no LayerNorm parameters at all.
enum class NormPlacement { Post, Pre, None };
enum class PosEncoding { Sinusoidal, Learned, None };

const char* to_string(Arch a);
const char* to_string(Activation a);
const char* to_string(NormPlacement n);
const char* to_string(PosEncoding p);
const char* to_string(NormKind k);
// Parse the JSON/CLI spelling ("seq2seq", "relu", "post", "sinusoidal", ...); throws Error
// listing the accepted names.
Arch parse_arch(const std::string& s);
Activation parse_activation(const std::string& s);
NormPlacement parse_norm_placement(const std::string& s);
PosEncoding parse_pos_encoding(const std::string& s);
NormKind parse_norm_kind(const std::string& s);

// The largest max_positions (token positions are int32 everywhere; nothing longer is trained).
inline constexpr int64_t kMaxPositions = int64_t{1} << 20;

struct ModelConfig {
  Arch arch = Arch::Seq2Seq;
  int64_t vocab_size = 0;  // V, shared by source and target
  int64_t d_model = 64;    // C
  int64_t n_heads = 4;     // H, must divide d_model
  int64_t n_encoder_layers = 2;
  int64_t n_decoder_layers = 2;
  int64_t d_ff = 256;  // F
  Activation activation = Activation::Relu;
  NormPlacement norm = NormPlacement::Post;
  NormKind norm_kind = NormKind::LayerNorm;
  PosEncoding pos_encoding = PosEncoding::Sinusoidal;
  double pe_base = 10000.0;  // sinusoidal: angle = p / pe_base^(2i/C)
  double dropout = 0.0;
  // Dropout on the attention weights; -1, unset (the default, and every config written before
  // the field existed): the same as `dropout`. attn_dropout() gives the rate in force.
  double attention_dropout = -1.0;
  bool tie_output = false;  // out_proj uses embed.weight transposed
  int64_t max_positions = 256;
  double layer_norm_eps = 1e-5;
  bool ffn_bias = true;
  bool attn_bias = true;
  uint64_t init_seed = 0;

  // Throws Error naming the offending field and its value: every numeric field within its
  // bounds (config_fields()), d_model divisible by n_heads, layers as the arch needs them.
  // need_vocab_size = false accepts vocab_size 0, meaning "taken from the vocabulary later".
  void validate(bool need_vocab_size = true) const;

  double attn_dropout() const { return attention_dropout == -1.0 ? dropout : attention_dropout; }

  // Every field, enums as their string names; a field left unset (ConfigField::is_set) is left
  // out, or written as null with unset_as_null (the run record, so that --resume compares it).
  nlohmann::json to_json(bool unset_as_null = false) const;
  // Missing keys keep their defaults; unknown keys, wrong types and bad enum names are errors
  // naming the key; null unsets a field that can be unset. The result is validated (with
  // need_vocab_size, see validate()).
  static ModelConfig from_json(const nlohmann::json& j, bool need_vocab_size = true);
  // Sets the fields `j` names (an object of config_fields() keys), without validating.
  void apply_json(const nlohmann::json& j);
};

// One row per ModelConfig field: the single list that to_json, from_json, validate (the
// bounds), the presets and the `seqtape train` flags all read. Adding a field is one row here.
struct ConfigField {
  enum class Kind { Int, UInt, Real, Bool, Enum };
  const char* key;   // JSON key, and the name in messages ("ModelConfig.<key> = ...")
  const char* flag;  // the `seqtape train` flag that overrides it; "" = JSON only
  const char* help;
  Kind kind;
  // Int / UInt / Real: the allowed range, [lo, hi] unless lo_open / hi_open. Real values
  // must also be finite.
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  // Enum: the spellings, in the enum's order.
  std::vector<std::string> choices = {};
  // Read and write the field as a JSON value; `set` expects a value of the field's kind
  // (enums as their string name, which it parses).
  nlohmann::json (*get)(const ModelConfig&) = nullptr;
  void (*set)(ModelConfig&, const nlohmann::json&) = nullptr;
  // A field that can be unset (null: always set): an unset field is left out of to_json() and of
  // the bounds check, so configs that never set it are written as before it existed.
  bool (*is_set)(const ModelConfig&) = nullptr;

  // "an integer in [1, 65536]", "a number in [0, 1)", "one of: relu, gelu, tanh", ...
  std::string rule() const;
  // Throws Error("ModelConfig.from_json: key '<key>' must be <type>, got ...") unless `v` has
  // the field's JSON type.
  void check_type(const nlohmann::json& v) const;
};
const std::vector<ConfigField>& config_fields();
// The row for `key`, or nullptr.
const ConfigField* find_config_field(const std::string& key);

// Named configurations; unknown name → Error listing the known ones.
//   seed    the reference model: Seq2Seq, C 4, H 1, 2+2 layers, F 16, relu, post-norm,
//           sinusoidal PE base 100, dropout 0
//   default copy-task model: Seq2Seq, C 64, H 4, 2+2 layers, F 256, relu, post, base 10000
//   small   same sizes as default (C 64, H 4, 2+2, F 256)
//   medium  Seq2Seq, C 256, H 4, 3+3 layers, F 1024
//   lm      DecoderOnly, C 64, H 4, 2 decoder layers, F 256
ModelConfig preset(const std::string& name, int vocab_size);
std::vector<std::string> preset_names();

}  // namespace seqtape
