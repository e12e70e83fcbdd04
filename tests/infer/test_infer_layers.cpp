// infer/layers alone: the attention block against attention written out in double precision,
// and rows at different positions fed in one call against each row fed alone (what a batched
// engine relies on).

#include <gtest/gtest.h>

#include <cmath>

#include "infer/layers.h"
#include "infer/model.h"
#include "infer/session.h"
#include "tests/infer/fixtures.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

using test_util::test_vocab;

// y [n, out] = x·W + b in double, W [in, out] (Training layout).
std::vector<double> affine(const std::vector<double>& x, int64_t n, const Tensor& w,
                           const Tensor& b) {
  const int64_t in = w.shape()[0], out = w.shape()[1];
  std::vector<double> y(size_t(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.defined() ? b.data<float>()[o] : 0.0;
      for (int64_t k = 0; k < in; ++k) s += x[size_t(i * in + k)] * w.data<float>()[k * out + o];
      y[size_t(i * out + o)] = s;
    }
  return y;
}

TEST(InferLayers, CachedSelfAttentionBlockMatchesAttentionInDouble) {
  ModelConfig cfg = test_util::tiny_config(Arch::DecoderOnly, test_vocab().size(),
                                           NormPlacement::Post, 5, /*max_positions=*/8);
  auto net = make_model(cfg);
  const InferenceModel m(cfg, test_vocab(), test_util::weights_of(*net), "live model");
  const SublayerParams& P = m.decoder_layers()[0].sublayer(SublayerKind::SelfAttention);
  const BlockShape d = BlockShape::of(cfg, MatrixLayout::InOut);
  const int64_t C = d.C, H = d.H, Dh = d.Dh, n = 3, cap = 4;

  // Two positions already cached (keys and values from earlier rows), three new ones.
  std::vector<double> prev(size_t(2 * C)), x0(size_t(n * C));
  for (size_t i = 0; i < prev.size(); ++i) prev[i] = std::sin(0.7 * double(i) + 0.3);
  for (size_t i = 0; i < x0.size(); ++i) x0[i] = std::cos(1.3 * double(i));
  const std::vector<double> pk = affine(prev, 2, P.attn.wk, P.attn.bk);
  const std::vector<double> pv = affine(prev, 2, P.attn.wv, P.attn.bv);
  std::vector<float> kc(size_t(H * (cap + 1) * Dh)), vc(kc.size());  // [H, Tc, Dh]
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t e = 0; e < Dh; ++e) {
        kc[size_t((h * (cap + 1) + t) * Dh + e)] = float(pk[size_t(t * C + h * Dh + e)]);
        vc[size_t((h * (cap + 1) + t) * Dh + e)] = float(pv[size_t(t * C + h * Dh + e)]);
      }

  std::vector<float> x(x0.begin(), x0.end()), in(x.size()), q(x.size()), k(x.size()), v(x.size()),
      ctx(x.size()), out(x.size()), hid(size_t(n * d.F)), scores(size_t(n * 5));
  const BlockScratch s{in.data(),  q.data(),   k.data(),   v.data(),
                       ctx.data(), out.data(), hid.data(), scores.data()};
  AttentionGroup g;
  g.first = 0;
  g.count = n;
  g.k = kc.data();
  g.v = vc.data();
  g.head_stride = (cap + 1) * Dh;
  g.row_stride = Dh;
  g.n_keys = 2 + n;
  g.append = true;
  attention_block(d, P.attn, P.norm, x.data(), n, true, {&g, 1}, s, {});

  // The same in double: keys = the cached two, then the three new; query t sees 3 + t keys.
  std::vector<double> q0 = affine(x0, n, P.attn.wq, P.attn.bq);
  std::vector<double> keys = pk, vals = pv;
  for (double e : affine(x0, n, P.attn.wk, P.attn.bk)) keys.push_back(e);
  for (double e : affine(x0, n, P.attn.wv, P.attn.bv)) vals.push_back(e);
  std::vector<double> c(size_t(n * C), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> w;
      double mx = -1e300, z = 0;
      for (int64_t j = 0; j <= 2 + t; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < Dh; ++e)
          dot += q0[size_t(t * C + h * Dh + e)] * keys[size_t(j * C + h * Dh + e)];
        w.push_back(dot / std::sqrt(double(Dh)));
        mx = std::max(mx, w.back());
      }
      for (double& e : w) z += (e = std::exp(e - mx));
      for (size_t j = 0; j < w.size(); ++j)
        for (int64_t e = 0; e < Dh; ++e)
          c[size_t(t * C + h * Dh + e)] += w[j] / z * vals[j * size_t(C) + size_t(h * Dh + e)];
    }
  const std::vector<double> o = affine(c, n, P.attn.wo, P.attn.bo);
  for (int64_t t = 0; t < n; ++t) {  // post-norm: LN(x + o)
    double mean = 0, var = 0;
    for (int64_t e = 0; e < C; ++e) mean += x0[size_t(t * C + e)] + o[size_t(t * C + e)];
    mean /= double(C);
    for (int64_t e = 0; e < C; ++e)
      var += std::pow(x0[size_t(t * C + e)] + o[size_t(t * C + e)] - mean, 2);
    var /= double(C);
    for (int64_t e = 0; e < C; ++e) {
      const double y = (x0[size_t(t * C + e)] + o[size_t(t * C + e)] - mean) /
                           std::sqrt(var + cfg.layer_norm_eps) * P.norm.gamma.data<float>()[e] +
                       P.norm.beta.data<float>()[e];
      EXPECT_NEAR(x[size_t(t * C + e)], y, 1e-5) << "position " << t << " channel " << e;
    }
  }
  // The new keys were appended to the cache after the two old ones.
  for (int64_t h = 0; h < H; ++h)
    for (int64_t e = 0; e < Dh; ++e)
      EXPECT_NEAR(kc[size_t((h * (cap + 1) + 4) * Dh + e)], keys[size_t(4 * C + h * Dh + e)], 1e-5);
}

// Rows at different positions, fed together, give what each gives fed alone.
TEST(InferLayers, RowsAtDifferentPositionsInOneCallEqualEachAlone) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    ModelConfig cfg = test_util::tiny_config(arch, test_vocab().size(), NormPlacement::Pre, 9,
                                             /*max_positions=*/16);
    auto net = make_model(cfg);
    const InferenceModel m(cfg, test_vocab(), test_util::weights_of(*net), "live model",
                           WeightLayout::Decode);
    const std::vector<std::vector<int32_t>> src = {{5, 6, 7, 2}, {8, 2}};
    const std::vector<std::vector<int32_t>> prompts = {{1, 9, 10, 11, 12}, {1, 13}};
    const std::vector<int32_t> next = {6, 7};
    const int64_t V = cfg.vocab_size;
    const auto sources = [&](std::vector<std::vector<int32_t>> s) {
      return arch == Arch::Seq2Seq ? s : std::vector<std::vector<int32_t>>{};
    };
    DecodeSession both(m);
    both.begin(sources(src), {0, 1}, 8);
    const std::vector<int32_t> rows = {0, 1};
    both.prefill(rows, prompts);  // rows now hold 5 and 2 positions
    const float* together = both.step(rows, next);
    for (int32_t r : rows) {
      DecodeSession alone(m);
      alone.begin(sources({src[size_t(r)]}), {0}, 8);
      const std::vector<int32_t> row = {0};
      alone.prefill(row, {prompts[size_t(r)]});
      const float* l = alone.step(row, std::span<const int32_t>(&next[size_t(r)], 1));
      for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(together[r * V + v], l[v], 1e-5) << r;
    }
  }
}

}  // namespace
}  // namespace seqtape
