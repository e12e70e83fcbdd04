#include "nn/config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autograd/tensor.h"

namespace seqtape {

namespace {

template <typename E>
struct EnumNames;
template <>
struct EnumNames<Arch> {
  static constexpr const char* what = "arch";
  static constexpr std::pair<Arch, const char*> table[] = {{Arch::Seq2Seq, "seq2seq"},
                                                           {Arch::DecoderOnly, "decoder_only"}};
};
template <>
struct EnumNames<Activation> {
  static constexpr const char* what = "activation";
  static constexpr std::pair<Activation, const char*> table[] = {
      {Activation::Relu, "relu"}, {Activation::Gelu, "gelu"}, {Activation::Tanh, "tanh"}};
};
template <>
struct EnumNames<NormPlacement> {
  static constexpr const char* what = "norm";
  static constexpr std::pair<NormPlacement, const char*> table[] = {
      {NormPlacement::Post, "post"}, {NormPlacement::Pre, "pre"}, {NormPlacement::None, "none"}};
};
template <>
struct EnumNames<PosEncoding> {
  static constexpr const char* what = "pos_encoding";
  static constexpr std::pair<PosEncoding, const char*> table[] = {
      {PosEncoding::Sinusoidal, "sinusoidal"},
      {PosEncoding::Learned, "learned"},
      {PosEncoding::None, "none"}};
};

template <typename E>
const char* enum_name(E e) {
  for (const auto& [v, n] : EnumNames<E>::table)
    if (v == e) return n;
  return "?";
}

template <typename E>
E parse_enum(const std::string& s) {
  std::string known;
  for (const auto& [v, n] : EnumNames<E>::table) {
    if (s == n) return v;
    known += known.empty() ? "" : ", ";
    known += n;
  }
  throw Error(std::string("ModelConfig.") + EnumNames<E>::what + ": unknown value '" + s +
              "' (expected one of: " + known + ")");
}

[[noreturn]] void bad_field(const char* field, const std::string& value, const std::string& rule) {
  throw Error(std::string("ModelConfig.") + field + " = " + value + ": " + rule);
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

const char* to_string(Arch a) {
  return enum_name(a);
}
const char* to_string(Activation a) {
  return enum_name(a);
}
const char* to_string(NormPlacement n) {
  return enum_name(n);
}
const char* to_string(PosEncoding p) {
  return enum_name(p);
}
Arch parse_arch(const std::string& s) {
  return parse_enum<Arch>(s);
}
Activation parse_activation(const std::string& s) {
  return parse_enum<Activation>(s);
}
NormPlacement parse_norm_placement(const std::string& s) {
  return parse_enum<NormPlacement>(s);
}
PosEncoding parse_pos_encoding(const std::string& s) {
  return parse_enum<PosEncoding>(s);
}

void ModelConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    if (v < 1) bad_field(field, std::to_string(v), "must be positive");
  };
  if (vocab_size < 2) bad_field("vocab_size", std::to_string(vocab_size), "must be at least 2");
  positive("d_model", d_model);
  positive("n_heads", n_heads);
  if (d_model % n_heads != 0)
    bad_field("d_model", std::to_string(d_model),
              "must be divisible by n_heads (" + std::to_string(n_heads) + ")");
  positive("d_ff", d_ff);
  positive("max_positions", max_positions);
  if (n_encoder_layers < 0)
    bad_field("n_encoder_layers", std::to_string(n_encoder_layers), "must not be negative");
  if (n_decoder_layers < 0)
    bad_field("n_decoder_layers", std::to_string(n_decoder_layers), "must not be negative");
  if (arch == Arch::Seq2Seq) {
    if (n_encoder_layers < 1)
      bad_field("n_encoder_layers", std::to_string(n_encoder_layers),
                "arch seq2seq needs at least 1 encoder layer");
    if (n_decoder_layers < 1)
      bad_field("n_decoder_layers", std::to_string(n_decoder_layers),
                "arch seq2seq needs at least 1 decoder layer");
  } else {
    if (n_decoder_layers < 1)
      bad_field("n_decoder_layers", std::to_string(n_decoder_layers),
                "arch decoder_only needs at least 1 decoder layer");
    if (n_encoder_layers != 0)
      bad_field("n_encoder_layers", std::to_string(n_encoder_layers),
                "arch decoder_only has no encoder; must be 0");
  }
  if (!(pe_base > 1.0) || !std::isfinite(pe_base))
    bad_field("pe_base", num(pe_base), "must be a finite number greater than 1");
  if (!(dropout >= 0.0 && dropout < 1.0)) bad_field("dropout", num(dropout), "must be in [0, 1)");
  if (!(layer_norm_eps > 0.0) || !std::isfinite(layer_norm_eps))
    bad_field("layer_norm_eps", num(layer_norm_eps), "must be a finite positive number");
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j;
  j["arch"] = to_string(arch);
  j["vocab_size"] = vocab_size;
  j["d_model"] = d_model;
  j["n_heads"] = n_heads;
  j["n_encoder_layers"] = n_encoder_layers;
  j["n_decoder_layers"] = n_decoder_layers;
  j["d_ff"] = d_ff;
  j["activation"] = to_string(activation);
  j["norm"] = to_string(norm);
  j["pos_encoding"] = to_string(pos_encoding);
  j["pe_base"] = pe_base;
  j["dropout"] = dropout;
  j["tie_output"] = tie_output;
  j["max_positions"] = max_positions;
  j["layer_norm_eps"] = layer_norm_eps;
  j["ffn_bias"] = ffn_bias;
  j["attn_bias"] = attn_bias;
  j["init_seed"] = init_seed;
  return j;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("ModelConfig.from_json: expected a JSON object");
  ModelConfig c;
  auto wrong = [](const std::string& key, const char* want, const nlohmann::json& v) {
    throw Error("ModelConfig.from_json: key '" + key + "' must be " + want + ", got " +
                v.type_name() + " " + v.dump());
  };
  for (const auto& item : j.items()) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda.
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    auto as_int = [&](int64_t& out) {
      if (!v.is_number_integer()) wrong(key, "an integer", v);
      out = v.get<int64_t>();
    };
    auto as_double = [&](double& out) {
      if (!v.is_number()) wrong(key, "a number", v);
      out = v.get<double>();
    };
    auto as_bool = [&](bool& out) {
      if (!v.is_boolean()) wrong(key, "a boolean", v);
      out = v.get<bool>();
    };
    auto as_enum = [&](auto& out) {
      if (!v.is_string()) wrong(key, "a string", v);
      out = parse_enum<std::remove_reference_t<decltype(out)>>(v.get<std::string>());
    };
    if (key == "arch")
      as_enum(c.arch);
    else if (key == "vocab_size")
      as_int(c.vocab_size);
    else if (key == "d_model")
      as_int(c.d_model);
    else if (key == "n_heads")
      as_int(c.n_heads);
    else if (key == "n_encoder_layers")
      as_int(c.n_encoder_layers);
    else if (key == "n_decoder_layers")
      as_int(c.n_decoder_layers);
    else if (key == "d_ff")
      as_int(c.d_ff);
    else if (key == "activation")
      as_enum(c.activation);
    else if (key == "norm")
      as_enum(c.norm);
    else if (key == "pos_encoding")
      as_enum(c.pos_encoding);
    else if (key == "pe_base")
      as_double(c.pe_base);
    else if (key == "dropout")
      as_double(c.dropout);
    else if (key == "tie_output")
      as_bool(c.tie_output);
    else if (key == "max_positions")
      as_int(c.max_positions);
    else if (key == "layer_norm_eps")
      as_double(c.layer_norm_eps);
    else if (key == "ffn_bias")
      as_bool(c.ffn_bias);
    else if (key == "attn_bias")
      as_bool(c.attn_bias);
    else if (key == "init_seed") {
      if (!v.is_number_unsigned()) wrong(key, "a non-negative integer", v);
      c.init_seed = v.get<uint64_t>();
    } else {
      throw Error("ModelConfig.from_json: unknown key '" + key + "'");
    }
  }
  c.validate();
  return c;
}

std::vector<std::string> preset_names() {
  return {"seed", "default", "small", "medium", "lm"};
}

ModelConfig preset(const std::string& name, int vocab_size) {
  ModelConfig c;
  c.vocab_size = vocab_size;
  c.arch = Arch::Seq2Seq;
  c.activation = Activation::Relu;
  c.norm = NormPlacement::Post;
  c.pos_encoding = PosEncoding::Sinusoidal;
  c.dropout = 0.0;
  if (name == "seed") {
    c.d_model = 4;
    c.n_heads = 1;
    c.n_encoder_layers = 2;
    c.n_decoder_layers = 2;
    c.d_ff = 16;
    c.pe_base = 100.0;
  } else if (name == "default" || name == "small") {
    c.d_model = 64;
    c.n_heads = 4;
    c.n_encoder_layers = 2;
    c.n_decoder_layers = 2;
    c.d_ff = 256;
    c.pe_base = 10000.0;
  } else if (name == "medium") {
    c.d_model = 256;
    c.n_heads = 4;
    c.n_encoder_layers = 3;
    c.n_decoder_layers = 3;
    c.d_ff = 1024;
    c.pe_base = 10000.0;
  } else if (name == "lm") {
    c.arch = Arch::DecoderOnly;
    c.d_model = 64;
    c.n_heads = 4;
    c.n_encoder_layers = 0;
    c.n_decoder_layers = 2;
    c.d_ff = 256;
    c.pe_base = 10000.0;
  } else {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("preset: unknown model preset '" + name + "' (known: " + known + ")");
  }
  c.validate();
  return c;
}

}  // namespace seqtape
