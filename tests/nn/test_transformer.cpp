#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/loss.h"
#include "nn/transformer.h"

namespace seqtape {
namespace {

ModelConfig small_cfg(Arch arch = Arch::Seq2Seq, NormPlacement norm = NormPlacement::Post) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = arch == Arch::Seq2Seq ? 2 : 0;
  c.n_decoder_layers = 2;
  c.d_ff = 16;
  c.norm = norm;
  c.max_positions = 16;
  c.init_seed = 5;
  return c;
}

// Logits [B, T, V] at (b, t, :).
std::vector<double> row(const Var& logits, int64_t b, int64_t t) {
  const int64_t T = logits.dim(1), V = logits.dim(2);
  std::vector<double> out;
  for (int64_t v = 0; v < V; ++v) out.push_back(logits.value().get((b * T + t) * V + v));
  return out;
}

void expect_rows_near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

TEST(Seq2Seq, Shapes) {
  Seq2Seq model(small_cfg());
  Rng rng(0);
  NoGradGuard ng;
  std::vector<int32_t> src = {3, 4, 4, 5, 6, 7, 2, 3, 4, 6, 7, 2, 0, 0};  // [2, 7]
  std::vector<int32_t> tgt = {1, 3, 4, 4, 5, 1, 3, 4, 6, 7};              // [2, 5]
  Var mem = model.encode(src, 2, 7, {7, 5}, rng);
  EXPECT_EQ(mem.shape(), (Shape{2, 7, 8}));
  Var logits = model.decode(mem, {7, 5}, tgt, 2, 5, {5, 5}, rng);
  EXPECT_EQ(logits.shape(), (Shape{2, 5, 11}));
  Var both = model.forward(src, 2, 7, {7, 5}, tgt, 2 * 0 + 5, {5, 5}, rng);
  EXPECT_EQ(both.shape(), (Shape{2, 5, 11}));
  EXPECT_EQ(both.value().to_vector(), logits.value().to_vector());
}

TEST(Seq2Seq, RejectsBadInputsNamingTheValue) {
  Seq2Seq model(small_cfg());
  Rng rng(0);
  auto msg = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = msg([&] { model.encode({3, 11, 2}, 1, 3, {3}, rng); });
  EXPECT_NE(m.find("11"), std::string::npos) << m;
  EXPECT_NE(m.find("[0,1]"), std::string::npos) << m;
  m = msg([&] { model.encode({3, 4, 2}, 1, 3, {4}, rng); });
  EXPECT_NE(m.find("length[0] = 4"), std::string::npos) << m;
  m = msg([&] { model.encode({3, 4}, 1, 3, {3}, rng); });
  EXPECT_NE(m.find("expected B*T"), std::string::npos) << m;
  std::vector<int32_t> longsrc(17, 3);
  m = msg([&] { model.encode(longsrc, 1, 17, {17}, rng); });
  EXPECT_NE(m.find("max_positions"), std::string::npos) << m;
  m = msg([&] { model.encode({3, -1, 2}, 1, 3, {3}, rng); });
  EXPECT_NE(m.find("-1"), std::string::npos) << m;
  EXPECT_THROW(sequence_loss(model.forward({3, 2}, 1, 2, {2}, {1, 3}, 2, {2}, rng), {3}), Error);
  EXPECT_THROW(sequence_loss(model.forward({3, 2}, 1, 2, {2}, {1, 3}, 2, {2}, rng), {3, 11}),
               Error);
  Tape::current().clear();
}

// A sequence padded to a longer width (with its length given), alone or beside a longer
// sequence, gives the same logits at its valid positions as the unpadded sequence.
void check_padding_invariance(NormPlacement norm) {
  Seq2Seq model(small_cfg(Arch::Seq2Seq, norm));
  Rng rng(0);
  NoGradGuard ng;
  const std::vector<int32_t> src = {3, 4, 5, 2}, tgt = {1, 3, 4};
  Var ref = model.forward(src, 1, 4, {4}, tgt, 3, {3}, rng);  // [1, 3, V]

  // Padded to S = 7, T = 6 with pad id 0, in a batch after a longer sequence.
  std::vector<int32_t> src2 = {6, 7, 8, 9, 10, 6, 2,  //
                               3, 4, 5, 2, 0,  0, 0};
  std::vector<int32_t> tgt2 = {1, 6, 7, 8, 9, 10,  //
                               1, 3, 4, 0, 0, 0};
  Var padded = model.forward(src2, 2, 7, {7, 4}, tgt2, 6, {6, 3}, rng);  // [2, 6, V]
  for (int64_t t = 0; t < 3; ++t) expect_rows_near(row(padded, 1, t), row(ref, 0, t), 1e-5);

  // Pad ids do not matter either.
  std::vector<int32_t> src3 = src2, tgt3 = tgt2;
  for (int i = 11; i < 14; ++i) src3[i] = 9;
  for (int i = 9; i < 12; ++i) tgt3[i] = 5;
  Var other = model.forward(src3, 2, 7, {7, 4}, tgt3, 6, {6, 3}, rng);
  for (int64_t t = 0; t < 3; ++t) expect_rows_near(row(other, 1, t), row(ref, 0, t), 1e-5);
}

TEST(Seq2Seq, PaddingInvariancePostNorm) {
  check_padding_invariance(NormPlacement::Post);
}
TEST(Seq2Seq, PaddingInvariancePreNorm) {
  check_padding_invariance(NormPlacement::Pre);
}

TEST(Seq2Seq, CausalDecoder) {
  Seq2Seq model(small_cfg());
  Rng rng(0);
  NoGradGuard ng;
  const std::vector<int32_t> src = {3, 4, 5, 2};
  std::vector<int32_t> tgt = {1, 3, 4, 5, 6};
  Var a = model.forward(src, 1, 4, {4}, tgt, 5, {5}, rng);
  tgt[3] = 9;  // change a future token
  Var b = model.forward(src, 1, 4, {4}, tgt, 5, {5}, rng);
  for (int64_t t = 0; t < 3; ++t) expect_rows_near(row(a, 0, t), row(b, 0, t), 1e-6);
  double diff = 0;
  for (int64_t t = 3; t < 5; ++t)
    for (size_t v = 0; v < 11; ++v) diff += std::abs(row(a, 0, t)[v] - row(b, 0, t)[v]);
  EXPECT_GT(diff, 1e-4);  // later positions do see it
}

TEST(DecoderOnly, ShapesCausalityAndPadding) {
  DecoderOnly model(small_cfg(Arch::DecoderOnly));
  Rng rng(0);
  NoGradGuard ng;
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 1, 2, 0, 0, 0};
  Var a = model.forward(tok, 2, 5, {5, 2}, rng);
  EXPECT_EQ(a.shape(), (Shape{2, 5, 11}));
  std::vector<int32_t> changed = tok;
  changed[4] = 9;  // last token of row 0
  Var b = model.forward(changed, 2, 5, {5, 2}, rng);
  for (int64_t t = 0; t < 4; ++t) expect_rows_near(row(a, 0, t), row(b, 0, t), 1e-6);
  Var alone = model.forward({1, 2}, 1, 2, {2}, rng);
  for (int64_t t = 0; t < 2; ++t) expect_rows_near(row(a, 1, t), row(alone, 0, t), 1e-5);
}

TEST(Seq2Seq, CapturedAttentionIsMasked) {
  Seq2Seq model(small_cfg());
  model.set_capture_attention(true);
  Rng rng(0);
  NoGradGuard ng;
  std::vector<int32_t> src = {3, 4, 5, 2, 3, 2, 0, 0};
  std::vector<int32_t> tgt = {1, 3, 4, 1, 3, 0};
  model.forward(src, 2, 4, {4, 2}, tgt, 3, {3, 2}, rng);
  auto caps = model.attention_weights();
  ASSERT_EQ(caps.size(), 2u + 2u * 2u);  // 2 encoder self, 2 decoder self + 2 cross
  EXPECT_EQ(caps[0].name, "encoder.layers.0.self_attn");
  EXPECT_EQ(caps[3].name, "decoder.layers.0.cross_attn");
  for (const auto& c : caps) {
    const Shape& s = c.weights.shape();
    ASSERT_EQ(s.size(), 4u) << c.name;
    const int64_t B = s[0], H = s[1], Tq = s[2], Tk = s[3];
    EXPECT_EQ(H, 2);
    const bool causal = c.name.find("decoder") != std::string::npos &&
                        c.name.find("self_attn") != std::string::npos;
    const std::vector<int32_t>& klen =
        causal ? std::vector<int32_t>{3, 2} : std::vector<int32_t>{4, 2};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Tq; ++i) {
          double total = 0;
          for (int64_t j = 0; j < Tk; ++j) {
            double w = c.weights.get(((b * H + h) * Tq + i) * Tk + j);
            total += w;
            if (j >= klen[b] || (causal && j > i)) {
              EXPECT_EQ(w, 0.0) << c.name;
            }
          }
          EXPECT_NEAR(total, 1.0, 1e-5) << c.name;
        }
  }
}

TEST(Seq2Seq, DropoutOnlyWhenTraining) {
  ModelConfig c = small_cfg();
  c.dropout = 0.3;
  Seq2Seq model(c);
  NoGradGuard ng;
  const std::vector<int32_t> src = {3, 4, 5, 2}, tgt = {1, 3, 4};
  model.set_training(false);
  Rng r1(1), r2(2);
  Var e1 = model.forward(src, 1, 4, {4}, tgt, 3, {3}, r1);
  Var e2 = model.forward(src, 1, 4, {4}, tgt, 3, {3}, r2);
  EXPECT_EQ(e1.value().to_vector(), e2.value().to_vector());
  model.set_training(true);
  Rng r3(1), r4(1);
  Var t1 = model.forward(src, 1, 4, {4}, tgt, 3, {3}, r3);
  Var t2 = model.forward(src, 1, 4, {4}, tgt, 3, {3}, r4);
  EXPECT_EQ(t1.value().to_vector(), t2.value().to_vector());  // same rng state, same masks
  EXPECT_NE(t1.value().to_vector(), e1.value().to_vector());
}

// attention_dropout drops the attention weights alone (dropout 0 elsewhere); unset, it is
// dropout's rate, to the bit.
TEST(Seq2Seq, AttentionDropoutOfItsOwn) {
  const std::vector<int32_t> src = {3, 4, 5, 2}, tgt = {1, 3, 4};
  auto run = [&](double dropout, double attention_dropout, bool training) {
    ModelConfig c = small_cfg();
    c.dropout = dropout;
    c.attention_dropout = attention_dropout;
    Seq2Seq model(c);
    model.set_training(training);
    NoGradGuard ng;
    Rng r(1);
    return model.forward(src, 1, 4, {4}, tgt, 3, {3}, r).value().to_vector();
  };
  EXPECT_NE(run(0.0, 0.3, true), run(0.0, 0.3, false));
  EXPECT_EQ(run(0.0, 0.0, true), run(0.0, 0.0, false));
  EXPECT_EQ(run(0.3, -1.0, true), run(0.3, 0.3, true));
  EXPECT_NE(run(0.3, 0.0, true), run(0.3, 0.3, true));
}

TEST(Seq2Seq, LossDecreasesOnCopySample) {
  // The reference's copy sample 今天天气很好 with the "seed" model and a few plain SGD steps.
  Seq2Seq model(preset("seed", 10));
  const std::vector<int32_t> src = {3, 4, 4, 5, 6, 7, 2}, tgt = {1, 3, 4, 4, 5, 6, 7};
  const std::vector<int32_t> labels = {3, 4, 4, 5, 6, 7, 2};
  Rng rng(0);
  Tape& tape = Tape::current();
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    tape.clear();
    model.zero_grad();
    Var loss = sequence_loss(model.forward(src, 1, 7, {7}, tgt, 7, {7}, rng), labels);
    tape.backward(loss);
    if (step == 0) first = loss.item();
    last = loss.item();
    for (auto& [n, p] : model.named_parameters()) {
      Tensor& w = Var(p).mutable_value();
      for (int64_t i = 0; i < w.numel(); ++i) w.set(i, w.get(i) - 0.1 * p.grad().get(i));
    }
  }
  tape.clear();
  EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
}

}  // namespace
}  // namespace seqtape
