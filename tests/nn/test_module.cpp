#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/transformer.h"

namespace seqtape {
namespace {

ModelConfig tiny(NormPlacement norm = NormPlacement::Post) {
  ModelConfig c;
  c.vocab_size = 7;
  c.d_model = 4;
  c.n_heads = 2;
  c.n_encoder_layers = 1;
  c.n_decoder_layers = 1;
  c.d_ff = 8;
  c.norm = norm;
  c.init_seed = 3;
  return c;
}

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, v] : m.named_parameters()) out.push_back(n);
  return out;
}

TEST(Module, Seq2SeqParameterNamesAreExact) {
  Seq2Seq model(tiny());
  std::vector<std::string> expected = {"embed.weight"};
  auto attn = [&](const std::string& p) {
    for (const char* s : {"wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo"})
      expected.push_back(p + "." + s);
  };
  auto norm = [&](const std::string& p) {
    expected.push_back(p + ".gamma");
    expected.push_back(p + ".beta");
  };
  auto ffn = [&](const std::string& p) {
    for (const char* s : {"w1", "b1", "w2", "b2"}) expected.push_back(p + "." + s);
  };
  attn("encoder.layers.0.self_attn");
  norm("encoder.layers.0.norm1");
  ffn("encoder.layers.0.ffn");
  norm("encoder.layers.0.norm2");
  attn("decoder.layers.0.self_attn");
  norm("decoder.layers.0.norm1");
  attn("decoder.layers.0.cross_attn");
  norm("decoder.layers.0.norm2");
  ffn("decoder.layers.0.ffn");
  norm("decoder.layers.0.norm3");
  expected.push_back("out_proj.weight");
  expected.push_back("out_proj.bias");
  EXPECT_EQ(names_of(model), expected);
  EXPECT_EQ(expected.size(), 45u);

  EXPECT_EQ(model.parameter("embed.weight").shape(), (Shape{7, 4}));
  EXPECT_EQ(model.parameter("decoder.layers.0.ffn.w1").shape(), (Shape{4, 8}));
  EXPECT_EQ(model.parameter("decoder.layers.0.ffn.w2").shape(), (Shape{8, 4}));
  EXPECT_EQ(model.parameter("out_proj.weight").shape(), (Shape{4, 7}));
  EXPECT_EQ(model.parameter("out_proj.bias").shape(), (Shape{7}));
  EXPECT_THROW(model.parameter("decoder.layers.3.ffn.w1"), Error);
  for (const auto& [n, v] : model.named_parameters()) {
    EXPECT_TRUE(v.is_leaf()) << n;
    EXPECT_TRUE(v.requires_grad()) << n;
  }
  size_t scalars = 0;
  for (const auto& [n, v] : model.named_parameters()) scalars += static_cast<size_t>(v.numel());
  EXPECT_EQ(model.num_parameters(), scalars);
}

TEST(Module, NamesFollowTheConfig) {
  ModelConfig c = tiny(NormPlacement::Pre);
  c.pos_encoding = PosEncoding::Learned;
  c.tie_output = true;
  c.attn_bias = false;
  c.ffn_bias = false;
  Seq2Seq pre(c);
  auto names = names_of(pre);
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_EQ(names[0], "embed.weight");
  EXPECT_EQ(names[1], "pos.weight");
  EXPECT_TRUE(has("encoder.final_norm.gamma"));
  EXPECT_TRUE(has("decoder.final_norm.beta"));
  EXPECT_FALSE(has("out_proj.weight"));  // tied to embed.weight
  EXPECT_TRUE(has("out_proj.bias"));
  EXPECT_FALSE(has("encoder.layers.0.self_attn.bq"));
  EXPECT_FALSE(has("decoder.layers.0.ffn.b1"));
  EXPECT_EQ(pre.parameter("pos.weight").shape(), (Shape{c.max_positions, 4}));

  ModelConfig n = tiny(NormPlacement::None);
  Seq2Seq none(n);
  for (const auto& name : names_of(none)) EXPECT_EQ(name.find("norm"), std::string::npos) << name;

  ModelConfig lm = tiny();
  lm.arch = Arch::DecoderOnly;
  lm.n_encoder_layers = 0;
  DecoderOnly dec(lm);
  auto dn = names_of(dec);
  std::vector<std::string> expected = {"embed.weight",
                                       "decoder.layers.0.self_attn.wq",
                                       "decoder.layers.0.self_attn.bq",
                                       "decoder.layers.0.self_attn.wk",
                                       "decoder.layers.0.self_attn.bk",
                                       "decoder.layers.0.self_attn.wv",
                                       "decoder.layers.0.self_attn.bv",
                                       "decoder.layers.0.self_attn.wo",
                                       "decoder.layers.0.self_attn.bo",
                                       "decoder.layers.0.norm1.gamma",
                                       "decoder.layers.0.norm1.beta",
                                       "decoder.layers.0.ffn.w1",
                                       "decoder.layers.0.ffn.b1",
                                       "decoder.layers.0.ffn.w2",
                                       "decoder.layers.0.ffn.b2",
                                       "decoder.layers.0.norm2.gamma",
                                       "decoder.layers.0.norm2.beta",
                                       "out_proj.weight",
                                       "out_proj.bias"};
  EXPECT_EQ(dn, expected);
  EXPECT_THROW(Seq2Seq{lm}, Error);  // wrong arch
  EXPECT_THROW(DecoderOnly{tiny()}, Error);
}

TEST(Module, TiedOutputSharesTheEmbedding) {
  ModelConfig c = tiny();
  c.tie_output = true;
  Seq2Seq model(c, DType::F64);
  Rng rng(0);
  std::vector<int32_t> src = {1, 2, 3}, tgt = {1, 4}, labels = {4, 2};
  Var loss = sequence_loss(model.forward(src, 1, 3, {3}, tgt, 2, {2}, rng), labels);
  Tape::current().backward(loss);
  Var e = model.parameter("embed.weight");
  ASSERT_TRUE(e.has_grad());
  // Every row receives gradient through the output projection, not only the used ids.
  double row6 = 0;
  for (int j = 0; j < 4; ++j) row6 += std::abs(e.grad().get(6 * 4 + j));
  EXPECT_GT(row6, 0.0);
  Tape::current().clear();
}

std::vector<double> flat_params(const Module& m) {
  std::vector<double> out;
  for (const auto& [n, v] : m.named_parameters())
    for (double x : v.value().to_vector()) out.push_back(x);
  return out;
}

TEST(Module, DeterministicSeededInit) {
  ModelConfig c = tiny();
  c.init_seed = 11;
  Seq2Seq a(c), b(c);
  EXPECT_EQ(flat_params(a), flat_params(b));
  c.init_seed = 12;
  Seq2Seq d(c);
  EXPECT_NE(flat_params(a), flat_params(d));

  // Documented inits: gamma 1, beta 0, biases 0, Xavier bound on projections.
  EXPECT_EQ(a.parameter("encoder.layers.0.norm1.gamma").value().to_vector(),
            std::vector<double>(4, 1.0));
  EXPECT_EQ(a.parameter("encoder.layers.0.norm1.beta").value().to_vector(),
            std::vector<double>(4, 0.0));
  EXPECT_EQ(a.parameter("out_proj.bias").value().to_vector(), std::vector<double>(7, 0.0));
  const double limit = std::sqrt(6.0 / (4 + 8));
  double maxabs = 0;
  for (double x : a.parameter("encoder.layers.0.ffn.w1").value().to_vector())
    maxabs = std::max(maxabs, std::abs(x));
  EXPECT_LE(maxabs, limit);
  EXPECT_GT(maxabs, 0.0);

  // float64 draws the same numbers as float32.
  c.init_seed = 11;
  Seq2Seq a64(c, DType::F64);
  auto p32 = flat_params(a), p64 = flat_params(a64);
  ASSERT_EQ(p32.size(), p64.size());
  for (size_t i = 0; i < p32.size(); ++i) EXPECT_NEAR(p32[i], p64[i], 1e-6);
}

TEST(Module, FrozenParametersGetNoGradient) {
  Seq2Seq model(tiny());
  EXPECT_EQ(model.set_requires_grad("", false), model.named_parameters().size());
  EXPECT_EQ(model.set_requires_grad("out_proj", true), 2u);
  EXPECT_THROW(model.set_requires_grad("out_pro", true), Error);  // whole components only
  Rng rng(0);
  std::vector<int32_t> src = {3, 4, 4, 5, 2, 6, 2, 0}, tgt = {1, 3, 4, 4, 1, 6, 0, 0};
  std::vector<int32_t> labels = {3, 4, 4, 2, 6, 2, -100, -100};
  Var loss = sequence_loss(model.forward(src, 2, 4, {4, 3}, tgt, 4, {4, 2}, rng), labels);
  Tape::current().backward(loss);
  for (const auto& [n, v] : model.named_parameters()) {
    const bool trainable = n.rfind("out_proj.", 0) == 0;
    EXPECT_EQ(v.has_grad(), trainable) << n;
  }
  double g = 0;
  for (double x : model.parameter("out_proj.weight").grad().to_vector()) g += std::abs(x);
  EXPECT_GT(g, 0.0);
  Tape::current().clear();

  model.zero_grad();
  for (double x : model.parameter("out_proj.weight").grad().to_vector()) EXPECT_EQ(x, 0.0);
}

TEST(Layers, SinusoidalTableMatchesTheReference) {
  // DIGEST.md: the 7×4 table printed by the reference (d = 4, base 100).
  const double printed[7][4] = {{0.00, 1.00, 0.00, 1.00},   {0.84, 0.54, 0.10, 0.99},
                                {0.91, -0.42, 0.20, 0.98},  {0.14, -0.99, 0.30, 0.95},
                                {-0.76, -0.65, 0.39, 0.92}, {-0.96, 0.28, 0.48, 0.88},
                                {-0.28, 0.96, 0.56, 0.83}};
  for (DType dt : {DType::F32, DType::F64}) {
    Tensor t = sinusoidal_table(7, 4, 100.0, dt);
    ASSERT_EQ(t.shape(), (Shape{7, 4}));
    for (int p = 0; p < 7; ++p)
      for (int j = 0; j < 4; ++j)
        EXPECT_NEAR(t.get(p * 4 + j), printed[p][j], 0.01) << p << "," << j;
  }
  // The "seed" model's PositionalEncoding uses exactly that table.
  ModelConfig c = preset("seed", 10);
  PositionalEncoding pe(c.pos_encoding, c.max_positions, c.d_model, c.pe_base, DType::F32);
  Var rows = pe.forward(7);
  ASSERT_EQ(rows.shape(), (Shape{7, 4}));
  for (int p = 0; p < 7; ++p)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(rows.value().get(p * 4 + j), printed[p][j], 0.01);
  EXPECT_THROW(pe.forward(c.max_positions + 1), Error);
}

TEST(Layers, LinearUsesInOutLayout) {
  // The reference's output head example: h = [1,2], h·Wout = [0,1,2,3,-1,-2].
  Var h(Tensor::from(std::vector<float>{1, 2}, {1, 2}));
  Var w(Tensor::from(std::vector<float>{0, 1, 0, 1, -1, 0, 0, 0, 1, 1, 0, -1}, {2, 6}));
  Var y = linear(h, w, Var());
  EXPECT_EQ(y.value().to_vector(), (std::vector<double>{0, 1, 2, 3, -1, -2}));
}

}  // namespace
}  // namespace seqtape
