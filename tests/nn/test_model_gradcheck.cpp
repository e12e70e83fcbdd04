#include <gtest/gtest.h>

#include "nn/loss.h"
#include "nn/model_gradcheck.h"
#include "nn/transformer.h"

namespace seqtape {
namespace {

ModelConfig tiny(Arch arch, NormPlacement norm) {
  return tiny_gradcheck_config(arch, norm);
}

void expect_all_pass(const ModelConfig& c, size_t expected_rows) {
  ModelGradcheckOptions opt;  // eps 1e-6, 20 coords, |a-n| <= 1e-5 + 1e-3·|n|
  auto rows = gradcheck_config(c, opt);
  EXPECT_EQ(rows.size(), expected_rows);
  for (const auto& r : rows) {
    EXPECT_TRUE(r.pass) << r.name << " max_abs " << r.max_abs_err << " max_rel " << r.max_rel_err;
    EXPECT_EQ(r.coords_checked, std::min<int64_t>(20, shape_numel(r.shape))) << r.name;
  }
  EXPECT_TRUE(all_passed(rows)) << format_gradcheck(rows);
}

TEST(ModelGradcheck, Seq2SeqPostNorm) {
  expect_all_pass(tiny(Arch::Seq2Seq, NormPlacement::Post), 45);
}

TEST(ModelGradcheck, Seq2SeqPreNorm) {
  expect_all_pass(tiny(Arch::Seq2Seq, NormPlacement::Pre), 49);
}

TEST(ModelGradcheck, DecoderOnly) {
  expect_all_pass(tiny(Arch::DecoderOnly, NormPlacement::Post), 19);
}

TEST(ModelGradcheck, VariantsGeluTanhLearnedTiedNoNorm) {
  ModelConfig a = tiny(Arch::Seq2Seq, NormPlacement::None);
  a.activation = Activation::Gelu;
  a.pos_encoding = PosEncoding::Learned;
  a.tie_output = true;
  a.max_positions = 8;
  expect_all_pass(a, 1 + 1 + 12 + 20 + 1);  // embed, pos, enc, dec, out_proj.bias
  ModelConfig b = tiny(Arch::DecoderOnly, NormPlacement::Pre);
  b.activation = Activation::Tanh;
  b.attn_bias = false;
  b.ffn_bias = false;
  expect_all_pass(b, 1 + 4 + 2 + 2 + 2 + 2 + 2);
}

// Every norm kind of model/kinds.h, in the fused post-norm residual and in pre-norm with the
// final norms: a kind without beta has one parameter less per norm.
TEST(ModelGradcheck, EveryNormKind) {
  for (const NormKindRow& k : kNormKinds) {
    SCOPED_TRACE(k.name);
    const size_t no_beta = k.beta ? 0 : 1;
    ModelConfig a = tiny(Arch::Seq2Seq, NormPlacement::Post);
    a.norm_kind = k.id;
    expect_all_pass(a, 45 - 5 * no_beta);  // five norms
    ModelConfig b = tiny(Arch::DecoderOnly, NormPlacement::Pre);
    b.norm_kind = k.id;
    expect_all_pass(b, 19 + 2 - 3 * no_beta);  // a final norm; three norms
  }
}

// Every activation of model/kinds.h: a gated one has w3 (and b3 with ffn_bias) in every
// feed-forward.
TEST(ModelGradcheck, EveryActivation) {
  for (const ActivationRow& k : kActivations) {
    SCOPED_TRACE(k.name);
    const size_t gated = k.gated ? 1 : 0;
    ModelConfig a = tiny(Arch::Seq2Seq, NormPlacement::Post);
    a.activation = k.id;
    expect_all_pass(a, 45 + 2 * 2 * gated);  // w3 and b3 in two feed-forwards
    ModelConfig b = tiny(Arch::DecoderOnly, NormPlacement::Post);
    b.activation = k.id;
    b.ffn_bias = false;
    expect_all_pass(b, 19 - 2 + gated);  // w1, w2 (and w3) without biases
  }
}

// The checker must catch a wrong gradient: a loss term that reads a weight outside the tape
// has a numeric derivative but no analytic one.
TEST(ModelGradcheck, DetectsAMissingGradient) {
  Seq2Seq model(tiny(Arch::Seq2Seq, NormPlacement::Post), DType::F64);
  Rng rng(0);
  Var w = model.parameter("decoder.layers.0.ffn.b2");
  auto rows = model_gradcheck(model, [&] {
    Var logits = model.forward({3, 4, 2}, 1, 3, {3}, {1, 3, 4}, 3, {3}, rng);
    double hidden = 0;
    for (double x : w.value().to_vector()) hidden += 5 * x * x + x;  // off the tape
    return add(sequence_loss(logits, {3, 4, 2}), hidden);
  });
  for (const auto& r : rows)
    EXPECT_EQ(r.pass, r.name != "decoder.layers.0.ffn.b2") << r.name << " " << r.max_abs_err;
}

TEST(ModelGradcheck, RejectsFloat32) {
  Seq2Seq m32(tiny(Arch::Seq2Seq, NormPlacement::Post));
  EXPECT_THROW(model_gradcheck(m32, [] { return Var(); }), Error);
}

}  // namespace
}  // namespace seqtape
