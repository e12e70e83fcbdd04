#include "model/config.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <type_traits>

#include "tensor/tensor.h"

namespace seqtape {

namespace {

// A value and its name; the norm kinds and activations are named by their rows (model/kinds.h).
template <typename E>
struct EnumRow {
  E id;
  const char* name;
};
template <typename E>
struct EnumNames;
template <>
struct EnumNames<Arch> {
  static constexpr const char* what = "arch";
  static constexpr EnumRow<Arch> table[] = {{Arch::Seq2Seq, "seq2seq"},
                                            {Arch::DecoderOnly, "decoder_only"}};
};
template <>
struct EnumNames<Activation> {
  static constexpr const char* what = "activation";
  static constexpr const auto& table = kActivations;
};
template <>
struct EnumNames<NormPlacement> {
  static constexpr const char* what = "norm";
  static constexpr EnumRow<NormPlacement> table[] = {
      {NormPlacement::Post, "post"}, {NormPlacement::Pre, "pre"}, {NormPlacement::None, "none"}};
};
template <>
struct EnumNames<NormKind> {
  static constexpr const char* what = "norm_kind";
  static constexpr const auto& table = kNormKinds;
};
template <>
struct EnumNames<PosEncoding> {
  static constexpr const char* what = "pos_encoding";
  static constexpr EnumRow<PosEncoding> table[] = {{PosEncoding::Sinusoidal, "sinusoidal"},
                                                   {PosEncoding::Learned, "learned"},
                                                   {PosEncoding::None, "none"}};
};

template <typename E>
const char* enum_name(E e) {
  for (const auto& r : EnumNames<E>::table)
    if (r.id == e) return r.name;
  return "?";
}

template <typename E>
E parse_enum(const std::string& s) {
  std::string known;
  for (const auto& r : EnumNames<E>::table) {
    if (s == r.name) return r.id;
    known += known.empty() ? "" : ", ";
    known += r.name;
  }
  fail(std::string("ModelConfig.") + EnumNames<E>::what,
       "unknown value '" + s + "' (expected one of: " + known + ")");
}

[[noreturn]] void bad_field(const char* field, const std::string& value, const std::string& rule) {
  fail(std::string("ModelConfig.") + field + " = " + value, rule);
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
const char* to_string(NormKind k) {
  return enum_name(k);
}
NormKind parse_norm_kind(const std::string& s) {
  return parse_enum<NormKind>(s);
}

namespace {

template <typename T>
constexpr ConfigField::Kind kind_of() {
  if constexpr (std::is_same_v<T, int64_t>)
    return ConfigField::Kind::Int;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return ConfigField::Kind::UInt;
  else if constexpr (std::is_same_v<T, double>)
    return ConfigField::Kind::Real;
  else if constexpr (std::is_same_v<T, bool>)
    return ConfigField::Kind::Bool;
  else {
    static_assert(std::is_enum_v<T>, "a ModelConfig field of an unsupported type");
    return ConfigField::Kind::Enum;
  }
}

// A bound as written in a rule: integers in full ("2097152"), others as short as exact.
std::string bound(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

template <auto M>
nlohmann::json get_member(const ModelConfig& c) {
  using T = std::remove_cvref_t<decltype(c.*M)>;
  if constexpr (std::is_enum_v<T>)
    return enum_name(c.*M);
  else
    return c.*M;
}

template <auto M>
void set_member(ModelConfig& c, const nlohmann::json& v) {
  using T = std::remove_cvref_t<decltype(c.*M)>;
  if constexpr (std::is_enum_v<T>)
    c.*M = parse_enum<T>(v.get<std::string>());
  else
    c.*M = v.get<T>();
}

// One row: kind, choices and accessors follow from the member's type.
template <auto M>
ConfigField field(const char* key, const char* flag, const char* help, double lo = 0, double hi = 0,
                  bool lo_open = false, bool hi_open = false) {
  using T = std::remove_cvref_t<decltype(std::declval<ModelConfig>().*M)>;
  ConfigField f{key, flag, help, kind_of<T>(), lo, hi, lo_open, hi_open};
  if constexpr (std::is_enum_v<T>)
    for (const auto& r : EnumNames<T>::table) f.choices.emplace_back(r.name);
  f.get = &get_member<M>;
  f.set = &set_member<M>;
  return f;
}

// Upper bounds: positions and widths index int32 tables and int64 buffers with room to spare;
// beyond these a model is no longer small enough for this toolkit (the memory budget check in
// model/memory_budget.h refuses what the machine cannot hold well before them).
constexpr double kMaxVocab = 1 << 21;  // token ids are int32
constexpr double kMaxWidth = 1 << 16;
constexpr double kMaxLayers = 1024;

// Unset (-1) unless given: a config that does not give it is written without it, as before the
// field existed, and its attention weights take dropout's rate.
ConfigField attention_dropout_field() {
  ConfigField f = field<&ModelConfig::attention_dropout>(
      "attention_dropout", "--attention-dropout",
      "dropout probability on the attention weights (default: --dropout's)", 0, 1, false, true);
  f.is_set = [](const ModelConfig& c) { return c.attention_dropout != -1.0; };
  return f;
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  using M = ModelConfig;
  static const std::vector<ConfigField> fields = {
      field<&M::arch>("arch", "--arch", "architecture"),
      field<&M::vocab_size>("vocab_size", "",
                            "vocabulary size (given by the vocabulary when absent)", 2, kMaxVocab),
      field<&M::d_model>("d_model", "--d-model", "model width", 1, kMaxWidth),
      field<&M::n_heads>("n_heads", "--heads", "attention heads", 1, 1024),
      field<&M::n_encoder_layers>("n_encoder_layers", "--enc-layers", "encoder layers", 0,
                                  kMaxLayers),
      field<&M::n_decoder_layers>("n_decoder_layers", "--dec-layers", "decoder layers", 0,
                                  kMaxLayers),
      field<&M::d_ff>("d_ff", "--ffn", "feed-forward width", 1, 4 * kMaxWidth),
      field<&M::activation>("activation", "--activation", "feed-forward activation"),
      field<&M::norm>("norm", "--norm", "LayerNorm placement"),
      field<&M::norm_kind>("norm_kind", "--norm-kind", "the norm's kind"),
      field<&M::pos_encoding>("pos_encoding", "--pos", "positional encoding"),
      field<&M::pe_base>("pe_base", "--pe-base", "sinusoidal PE base (the reference uses 100)", 1,
                         1e12, true, false),
      field<&M::dropout>("dropout", "--dropout", "dropout probability", 0, 1, false, true),
      attention_dropout_field(),
      field<&M::tie_output>("tie_output", "--tie", "tie the output projection to the embedding"),
      field<&M::max_positions>("max_positions", "--max-positions", "longest sequence", 1,
                               static_cast<double>(kMaxPositions)),
      field<&M::layer_norm_eps>("layer_norm_eps", "", "LayerNorm epsilon", 0, 1, true, false),
      field<&M::ffn_bias>("ffn_bias", "", "biases in the feed-forward layers"),
      field<&M::attn_bias>("attn_bias", "", "biases in the attention projections"),
      field<&M::init_seed>("init_seed", "--init-seed", "seed of the weight initialization"),
  };
  return fields;
}

const ConfigField* find_config_field(const std::string& key) {
  for (const ConfigField& f : config_fields())
    if (key == f.key) return &f;
  return nullptr;
}

std::string ConfigField::rule() const {
  switch (kind) {
    case Kind::Int:
    case Kind::Real:
      return std::string("in ") + (lo_open ? "(" : "[") + bound(lo) + ", " + bound(hi) +
             (hi_open ? ")" : "]");
    case Kind::UInt:
      return "a non-negative integer";
    case Kind::Bool:
      return "true or false";
    case Kind::Enum: {
      std::string s = "one of: ";
      for (size_t i = 0; i < choices.size(); ++i) s += (i ? ", " : "") + choices[i];
      return s;
    }
  }
  return "?";
}

void ConfigField::check_type(const nlohmann::json& v) const {
  const char* want = nullptr;
  switch (kind) {
    case Kind::Int:
      if (!v.is_number_integer()) want = "an integer";
      break;
    case Kind::UInt:
      if (!v.is_number_unsigned()) want = "a non-negative integer";
      break;
    case Kind::Real:
      if (!v.is_number()) want = "a number";
      break;
    case Kind::Bool:
      if (!v.is_boolean()) want = "a boolean";
      break;
    case Kind::Enum:
      if (!v.is_string()) want = "a string";
      break;
  }
  if (want)
    fail("ModelConfig.from_json", "key '" + std::string(key) + "' must be " + want + ", got " +
                                      v.type_name() + " " + v.dump());
}

void ModelConfig::validate(bool need_vocab_size) const {
  for (const ConfigField& f : config_fields()) {
    if (f.kind != ConfigField::Kind::Int && f.kind != ConfigField::Kind::Real) continue;
    if (!need_vocab_size && std::string_view(f.key) == "vocab_size" && vocab_size == 0) continue;
    if (f.is_set && !f.is_set(*this)) continue;
    const nlohmann::json j = f.get(*this);
    const double v = j.get<double>();
    const std::string shown =
        f.kind == ConfigField::Kind::Int ? std::to_string(j.get<int64_t>()) : num(v);
    const bool below = f.lo_open ? !(v > f.lo) : !(v >= f.lo);
    const bool above = f.hi_open ? !(v < f.hi) : !(v <= f.hi);
    if (below || above || !std::isfinite(v)) bad_field(f.key, shown, "must be " + f.rule());
  }
  if (d_model % n_heads != 0)
    bad_field("d_model", std::to_string(d_model),
              "must be divisible by n_heads (" + std::to_string(n_heads) + ")");
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
}

nlohmann::json ModelConfig::to_json(bool unset_as_null) const {
  nlohmann::json j = nlohmann::json::object();
  for (const ConfigField& f : config_fields()) {
    if (!f.is_set || f.is_set(*this))
      j[f.key] = f.get(*this);
    else if (unset_as_null)
      j[f.key] = nullptr;
  }
  return j;
}

void ModelConfig::apply_json(const nlohmann::json& j) {
  if (!j.is_object()) fail("ModelConfig.from_json", "expected a JSON object");
  for (const auto& item : j.items()) {
    const ConfigField* f = find_config_field(item.key());
    if (!f) fail("ModelConfig.from_json", "unknown key '" + item.key() + "'");
    if (f->is_set && item.value().is_null()) {
      f->set(*this, f->get(ModelConfig{}));  // the default: unset
      continue;
    }
    f->check_type(item.value());
    f->set(*this, item.value());
  }
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j, bool need_vocab_size) {
  ModelConfig c;
  c.apply_json(j);
  c.validate(need_vocab_size);
  return c;
}

namespace {

// Each preset is the defaults of ModelConfig (which are the `default` model) plus overrides,
// written as the JSON a --config file would hold.
struct Preset {
  const char* name;
  const char* overrides;
};
constexpr Preset kPresets[] = {
    {"seed",
     R"({"d_model": 4, "n_heads": 1, "n_encoder_layers": 2, "n_decoder_layers": 2, "d_ff": 16,
         "pe_base": 100.0})"},
    {"default", "{}"},
    {"small", "{}"},
    {"medium", R"({"d_model": 256, "n_encoder_layers": 3, "n_decoder_layers": 3, "d_ff": 1024})"},
    {"lm", R"({"arch": "decoder_only", "n_encoder_layers": 0})"},
};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig preset(const std::string& name, int vocab_size) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig c;
    c.vocab_size = vocab_size;
    c.apply_json(nlohmann::json::parse(p.overrides));
    c.validate(vocab_size != 0);
    return c;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  fail("preset", "unknown model preset '" + name + "' (known: " + known + ")");
}

}  // namespace seqtape
