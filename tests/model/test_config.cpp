#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace seqtape {
namespace {

ModelConfig valid() {
  return preset("default", 10);
}

// Expects validate() to throw an Error whose message contains `field`.
void expect_rejected(const std::function<void(ModelConfig&)>& edit, const std::string& field) {
  ModelConfig c = valid();
  edit(c);
  try {
    c.validate();
    FAIL() << "config with bad " << field << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos)
        << "message '" << e.what() << "' does not name " << field;
  }
}

TEST(ModelConfig, ValidationNamesTheField) {
  EXPECT_NO_THROW(valid().validate());
  expect_rejected([](ModelConfig& c) { c.vocab_size = 1; }, "vocab_size");
  expect_rejected([](ModelConfig& c) { c.d_model = 0; }, "d_model");
  expect_rejected([](ModelConfig& c) { c.n_heads = 0; }, "n_heads");
  expect_rejected([](ModelConfig& c) { c.n_heads = 3; }, "d_model");
  expect_rejected([](ModelConfig& c) { c.n_heads = 3; }, "n_heads");
  expect_rejected([](ModelConfig& c) { c.d_ff = -1; }, "d_ff");
  expect_rejected([](ModelConfig& c) { c.n_encoder_layers = 0; }, "n_encoder_layers");
  expect_rejected([](ModelConfig& c) { c.n_decoder_layers = 0; }, "n_decoder_layers");
  expect_rejected([](ModelConfig& c) { c.max_positions = 0; }, "max_positions");
  expect_rejected([](ModelConfig& c) { c.pe_base = 1.0; }, "pe_base");
  expect_rejected([](ModelConfig& c) { c.dropout = 1.0; }, "dropout");
  expect_rejected([](ModelConfig& c) { c.dropout = -0.1; }, "dropout");
  expect_rejected([](ModelConfig& c) { c.layer_norm_eps = 0.0; }, "layer_norm_eps");
  // Decoder-only: no encoder layers allowed, at least one decoder layer required.
  expect_rejected(
      [](ModelConfig& c) {
        c.arch = Arch::DecoderOnly;
        c.n_encoder_layers = 2;
      },
      "n_encoder_layers");
  expect_rejected(
      [](ModelConfig& c) {
        c.arch = Arch::DecoderOnly;
        c.n_encoder_layers = 0;
        c.n_decoder_layers = 0;
      },
      "n_decoder_layers");
}

TEST(ModelConfig, JsonRoundTrip) {
  ModelConfig c = valid();
  c.arch = Arch::DecoderOnly;
  c.n_encoder_layers = 0;
  c.n_decoder_layers = 3;
  c.activation = Activation::Gelu;
  c.norm = NormPlacement::Pre;
  c.pos_encoding = PosEncoding::Learned;
  c.pe_base = 123.5;
  c.dropout = 0.25;
  c.tie_output = true;
  c.max_positions = 77;
  c.layer_norm_eps = 1e-6;
  c.ffn_bias = false;
  c.attn_bias = false;
  c.init_seed = 987654321;
  nlohmann::json j = c.to_json();
  EXPECT_EQ(j["arch"], "decoder_only");
  EXPECT_EQ(j["activation"], "gelu");
  EXPECT_EQ(j["norm"], "pre");
  EXPECT_EQ(j["pos_encoding"], "learned");
  // Through text, as a checkpoint stores it.
  ModelConfig r = ModelConfig::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(r.to_json(), j);
  EXPECT_EQ(r.arch, c.arch);
  EXPECT_EQ(r.n_decoder_layers, 3);
  EXPECT_EQ(r.activation, c.activation);
  EXPECT_EQ(r.norm, c.norm);
  EXPECT_EQ(r.pos_encoding, c.pos_encoding);
  EXPECT_DOUBLE_EQ(r.pe_base, 123.5);
  EXPECT_DOUBLE_EQ(r.dropout, 0.25);
  EXPECT_TRUE(r.tie_output);
  EXPECT_EQ(r.max_positions, 77);
  EXPECT_DOUBLE_EQ(r.layer_norm_eps, 1e-6);
  EXPECT_FALSE(r.ffn_bias);
  EXPECT_FALSE(r.attn_bias);
  EXPECT_EQ(r.init_seed, 987654321u);
}

// attention_dropout: unset (a config written before the field existed, or one that does not give
// it) it is dropout's and is written as before, without the key; a value of its own is written
// and wins; null (as the run record writes an unset field) unsets it.
TEST(ModelConfig, AttentionDropoutFollowsDropoutUnlessGiven) {
  ModelConfig c = valid();
  c.dropout = 0.1;
  EXPECT_DOUBLE_EQ(c.attn_dropout(), 0.1);
  nlohmann::json j = c.to_json();
  EXPECT_FALSE(j.contains("attention_dropout"));
  EXPECT_TRUE(c.to_json(/*unset_as_null=*/true).at("attention_dropout").is_null());
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(j).attn_dropout(), 0.1);
  j["attention_dropout"] = 0.0;
  ModelConfig own = ModelConfig::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_DOUBLE_EQ(own.dropout, 0.1);
  EXPECT_DOUBLE_EQ(own.attn_dropout(), 0.0);
  EXPECT_DOUBLE_EQ(own.to_json().at("attention_dropout").get<double>(), 0.0);
  j["attention_dropout"] = nullptr;
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(j).attn_dropout(), 0.1);
  expect_rejected([](ModelConfig& m) { m.attention_dropout = 1.0; }, "attention_dropout");
  expect_rejected([](ModelConfig& m) { m.attention_dropout = -0.5; }, "attention_dropout");
}

void expect_json_error(nlohmann::json j, const std::string& needle) {
  try {
    ModelConfig::from_json(j);
    FAIL() << "accepted " << j.dump();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not contain " << needle;
  }
}

TEST(ModelConfig, JsonErrorsNameTheKey) {
  nlohmann::json base = valid().to_json();
  auto with = [&](const std::string& k, nlohmann::json v) {
    nlohmann::json j = base;
    j[k] = v;
    return j;
  };
  expect_json_error(with("d_modle", 4), "d_modle");
  expect_json_error(with("d_model", "64"), "d_model");
  expect_json_error(with("d_model", 4.5), "d_model");
  expect_json_error(with("dropout", "0.1"), "dropout");
  expect_json_error(with("attention_dropout", 1.5), "attention_dropout");
  expect_json_error(with("dropout", nullptr), "dropout");  // null unsets only what can be unset
  expect_json_error(with("tie_output", 1), "tie_output");
  expect_json_error(with("activation", "swish"), "activation");
  expect_json_error(with("arch", 3), "arch");
  expect_json_error(with("init_seed", -1), "init_seed");
  expect_json_error(with("n_heads", 5), "n_heads");  // fails validation
  expect_json_error(nlohmann::json::array(), "object");
}

TEST(ModelConfig, Presets) {
  ModelConfig s = preset("seed", 10);
  EXPECT_EQ(s.arch, Arch::Seq2Seq);
  EXPECT_EQ(s.vocab_size, 10);
  EXPECT_EQ(s.d_model, 4);
  EXPECT_EQ(s.n_heads, 1);
  EXPECT_EQ(s.n_encoder_layers, 2);
  EXPECT_EQ(s.n_decoder_layers, 2);
  EXPECT_EQ(s.d_ff, 16);
  EXPECT_EQ(s.activation, Activation::Relu);
  EXPECT_EQ(s.norm, NormPlacement::Post);
  EXPECT_EQ(s.pos_encoding, PosEncoding::Sinusoidal);
  EXPECT_DOUBLE_EQ(s.pe_base, 100.0);
  EXPECT_DOUBLE_EQ(s.dropout, 0.0);

  ModelConfig d = preset("default", 12);
  EXPECT_EQ(d.d_model, 64);
  EXPECT_EQ(d.n_heads, 4);
  EXPECT_EQ(d.d_ff, 256);
  EXPECT_DOUBLE_EQ(d.pe_base, 10000.0);
  ModelConfig m = preset("medium", 12);
  EXPECT_EQ(m.d_model, 256);
  EXPECT_EQ(m.n_encoder_layers, 3);
  EXPECT_EQ(m.n_decoder_layers, 3);
  EXPECT_EQ(m.d_ff, 1024);
  ModelConfig lm = preset("lm", 12);
  EXPECT_EQ(lm.arch, Arch::DecoderOnly);
  EXPECT_EQ(lm.n_encoder_layers, 0);
  EXPECT_EQ(lm.n_decoder_layers, 2);
  EXPECT_NO_THROW(preset("small", 12));

  try {
    preset("huge", 10);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& n : preset_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace seqtape
