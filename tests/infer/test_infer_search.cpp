// Search strategies over the decode session: greedy, beam (against brute force), sampling
// (against its distribution), the logit processors, every stop reason, batches, streaming.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "infer/model.h"
#include "infer/output_text.h"
#include "infer/search.h"
#include "infer/session.h"
#include "tests/infer/fixtures.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

using test_util::test_vocab;

ModelConfig small_config(Arch arch, const Vocab& v, uint64_t seed) {
  return test_util::tiny_config(arch, v.size(), NormPlacement::Post, seed, /*max_positions=*/40);
}

// A random-init training model and the inference view of its weights (kept alive together).
// Like a trained model, it does not emit <pad>, <bos>, <unk> or <sep> (their output bias is
// very negative), so the generated text is never empty.
struct Models {
  std::unique_ptr<TransformerModel> net;
  std::unique_ptr<InferenceModel> m;
};
Models make(Arch arch, uint64_t seed, const Vocab& v = test_vocab()) {
  Models out;
  out.net = make_model(small_config(arch, v, seed));
  Tensor& bias = out.net->parameter("out_proj.bias").mutable_value();
  for (std::string_view s : {kPadToken, kBosToken, kUnkToken, kSepToken})
    if (auto id = v.find(s)) bias.set(*id, -30.0);
  out.m = std::make_unique<InferenceModel>(out.net->config(), v, test_util::weights_of(*out.net),
                                           "live model");
  return out;
}

std::vector<std::vector<int32_t>> inputs_for(Arch arch) {
  if (arch == Arch::Seq2Seq) return {{5, 6, 6, 7, 8, 9, 2}, {12, 2}, {10, 11, 13, 2}};
  return {{5, 6, 6, 7, 4}, {12, 4}, {10, 11, 13, 4}};
}

GenerateOptions fixed_length(int64_t n) {
  GenerateOptions o;
  o.min_new = o.max_new = n;
  return o;
}

// ---- greedy, beam 1, top-k 1, temperature 0 ------------------------------------------------

TEST(InferSearch, BeamOneTopKOneAndTemperatureZeroAreGreedy) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    Models mm = make(arch, 21);
    const auto in = inputs_for(arch);
    GenerateOptions g;
    g.max_new = 12;
    auto greedy = generate(*mm.m, in, g);
    auto beam1 = generate(*mm.m, in, g, BeamSearch());
    GenerateOptions k1 = g;
    k1.sample = true;
    k1.top_k = 1;
    k1.temperature = 1.3;
    auto topk = generate(*mm.m, in, k1);
    GenerateOptions t0 = g;
    t0.sample = true;
    t0.temperature = 0;
    auto temp0 = generate(*mm.m, in, t0);
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(beam1[i].tokens, greedy[i].tokens);
      EXPECT_NEAR(beam1[i].score, greedy[i].score, 1e-9);
      EXPECT_EQ(beam1[i].stop_reason, greedy[i].stop_reason);
      EXPECT_EQ(beam1[i].cache_lengths, greedy[i].cache_lengths);
      EXPECT_EQ(topk[i].tokens, greedy[i].tokens);
      EXPECT_NEAR(topk[i].score, greedy[i].score, 1e-9);
      EXPECT_EQ(temp0[i].tokens, greedy[i].tokens);
      EXPECT_NEAR(temp0[i].score, greedy[i].score, 1e-9);
      EXPECT_LE(greedy[i].score, 0.0);
    }
  }
}

// ---- batches -------------------------------------------------------------------------------

TEST(InferSearch, BatchEqualsEachAlone) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    Models mm = make(arch, 8);
    const auto in = inputs_for(arch);
    GenerateOptions greedy;
    greedy.max_new = 10;
    GenerateOptions beam = greedy;
    beam.beam = 3;
    beam.n_best = 3;
    GenerateOptions sample = greedy;
    sample.sample = true;
    sample.temperature = 0.9;
    sample.top_p = 0.95;
    sample.seed = 42;
    // One row ends early (end token 9 = 好 for greedy) while the others continue.
    GenerateOptions early = greedy;
    early.end_ids = {2, generate(*mm.m, {in[1]}, greedy)[0].tokens.at(1)};
    for (const GenerateOptions* o : {&greedy, &beam, &sample, &early}) {
      auto batch = generate(*mm.m, in, *o);
      for (size_t i = 0; i < in.size(); ++i) {
        auto alone = generate(*mm.m, {in[i]}, *o);
        EXPECT_EQ(batch[i].tokens, alone[0].tokens) << "input " << i;
        EXPECT_NEAR(batch[i].score, alone[0].score, 1e-5);
        EXPECT_EQ(batch[i].stop_reason, alone[0].stop_reason);
        EXPECT_EQ(batch[i].cache_lengths, alone[0].cache_lengths);
        ASSERT_EQ(batch[i].n_best.size(), alone[0].n_best.size());
        for (size_t k = 0; k < batch[i].n_best.size(); ++k)
          EXPECT_EQ(batch[i].n_best[k].tokens, alone[0].n_best[k].tokens);
      }
    }
    auto e = generate(*mm.m, in, early);
    EXPECT_EQ(e[1].stop_reason, StopReason::Eos);
    EXPECT_EQ(e[1].tokens.size(), 1u);
  }
}

// ---- beam search ---------------------------------------------------------------------------

// log-probabilities of every position of [<bos>, seq...] (teacher forced, one prefill)
std::vector<std::vector<double>> log_probs(const InferenceModel& m, const std::vector<int32_t>& src,
                                           const std::vector<int32_t>& seq) {
  const int64_t V = m.config().vocab_size;
  DecodeSession s(m);
  std::vector<int32_t> feed = {m.vocab().bos_id()};
  feed.insert(feed.end(), seq.begin(), seq.end());
  s.begin({src}, {0}, static_cast<int64_t>(feed.size()));
  const std::vector<int32_t> row = {0};
  const float* l = s.prefill(row, {feed}, true);
  std::vector<std::vector<double>> out;
  for (size_t t = 0; t < feed.size(); ++t) {
    const float* r = l + static_cast<int64_t>(t) * V;
    double mx = *std::max_element(r, r + V), sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(r[v] - mx);
    std::vector<double> lp(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) lp[static_cast<size_t>(v)] = r[v] - mx - std::log(sum);
    out.push_back(lp);
  }
  return out;
}

TEST(InferSearch, LargeBeamFindsTheBruteForceBestOnATinyVocabulary) {
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "a", "b"});  // V = 5
  Models mm = make(Arch::Seq2Seq, 4, v);
  const std::vector<int32_t> src = {3, 4, 3, 2};
  const int64_t max_new = 4;
  for (double alpha : {0.0, 1.0, 2.0}) {
    SCOPED_TRACE(alpha);
    // Every hypothesis: ended by <eos> at step 1..4, or 4 non-<eos> tokens (length).
    double best = -INFINITY;
    std::vector<int32_t> best_seq;
    std::function<void(std::vector<int32_t>&)> walk = [&](std::vector<int32_t>& seq) {
      auto lp = log_probs(*mm.m, src, seq);
      double prefix = 0;
      for (size_t t = 0; t < seq.size(); ++t) prefix += lp[t][static_cast<size_t>(seq[t])];
      const double with_eos = prefix + lp[seq.size()][2];
      const double n_eos = with_eos / std::pow(static_cast<double>(seq.size() + 1), alpha);
      if (n_eos > best) best = n_eos, best_seq = seq, best_seq.push_back(-1);
      if (static_cast<int64_t>(seq.size()) + 1 == max_new) {
        for (int32_t t : {0, 1, 3, 4}) {
          const double s = prefix + lp[seq.size()][static_cast<size_t>(t)];
          const double n = s / std::pow(static_cast<double>(max_new), alpha);
          if (n > best) best = n, best_seq = seq, best_seq.push_back(t);
        }
        return;
      }
      for (int32_t t : {0, 1, 3, 4}) {
        seq.push_back(t);
        walk(seq);
        seq.pop_back();
      }
    };
    std::vector<int32_t> seq;
    walk(seq);
    if (best_seq.back() == -1) best_seq.pop_back();  // ended by <eos>

    GenerateOptions o;
    o.beam = 400;  // more than all 341 hypotheses: the search is exhaustive
    o.n_best = 400;
    o.max_new = max_new;
    o.length_penalty = alpha;
    auto r = generate(*mm.m, {src}, o);
    EXPECT_NEAR(r[0].normalized_score, best, 1e-5);
    EXPECT_EQ(r[0].tokens, best_seq);
    EXPECT_EQ(r[0].n_best.size(), 341u);
  }
}

TEST(InferSearch, NBestIsSortedDistinctAndScored) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    Models mm = make(arch, 13);
    GenerateOptions o;
    o.beam = 6;
    o.n_best = 6;
    o.max_new = 8;
    o.length_penalty = 0.7;
    auto r = generate(*mm.m, inputs_for(arch), o);
    for (const GenerateResult& g : r) {
      ASSERT_EQ(g.n_best.size(), 6u);
      std::set<std::vector<int32_t>> seen;
      for (size_t k = 0; k < g.n_best.size(); ++k) {
        const Hypothesis& h = g.n_best[k];
        if (k) {
          EXPECT_GE(g.n_best[k - 1].normalized_score, h.normalized_score);
        }
        const double len =
            static_cast<double>(h.tokens.size() + (h.stop_reason == StopReason::Eos ? 1 : 0));
        EXPECT_NEAR(h.normalized_score, h.score / std::pow(len, 0.7), 1e-9);
        EXPECT_TRUE(seen.insert(h.tokens).second) << "duplicate hypothesis";
      }
      EXPECT_EQ(g.tokens, g.n_best[0].tokens);
      EXPECT_EQ(g.score, g.n_best[0].score);
    }
  }
}

// ---- sampling ------------------------------------------------------------------------------

// softmax(logits / T) on the top-k, then the smallest top-p prefix, renormalized — written
// independently of Sampler.
std::vector<double> expected_distribution(const std::vector<float>& l, double T, int64_t k,
                                          double p) {
  std::vector<int> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  if (k > 0) order.resize(static_cast<size_t>(k));
  std::vector<double> q;
  double z = 0;
  for (int i : order) q.push_back(std::exp(l[i] / T)), z += q.back();
  size_t keep = 0;
  double cum = 0;
  while (keep < q.size()) {
    cum += q[keep++] / z;
    if (cum >= p) break;
  }
  double z2 = 0;
  for (size_t i = 0; i < keep; ++i) z2 += q[i];
  std::vector<double> out(l.size(), 0.0);
  for (size_t i = 0; i < keep; ++i) out[static_cast<size_t>(order[i])] = q[i] / z2;
  return out;
}

TEST(InferSampling, FrequenciesMatchTheTruncatedSoftmax) {
  const std::vector<float> logits = {1.2f, -0.3f, 2.0f, 0.7f, 1.9f, -1.5f, 0.1f, 1.0f};
  struct Case {
    double T;
    int64_t k;
    double p;
  };
  for (Case c : {Case{1.0, 0, 1.0}, Case{0.7, 5, 1.0}, Case{1.5, 0, 0.8}, Case{0.8, 6, 0.9}}) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " k " + std::to_string(c.k) + " p " +
                 std::to_string(c.p));
    const auto want = expected_distribution(logits, c.T, c.k, c.p);
    Sampler s(8, make_warpers(c.T, c.k, c.p));
    const auto& got = s.distribution(logits);
    for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
    Rng rng(2024);
    const int n = 20000;
    std::vector<int> count(8, 0);
    for (int i = 0; i < n; ++i) ++count[static_cast<size_t>(s.sample(logits, rng))];
    double chi2 = 0;
    int df = -1;
    for (size_t i = 0; i < 8; ++i) {
      if (want[i] == 0) {
        EXPECT_EQ(count[i], 0) << "token " << i << " is outside the support";
        continue;
      }
      const double e = n * want[i];
      chi2 += (count[i] - e) * (count[i] - e) / e;
      ++df;
    }
    // 99.9th percentile of chi-square with df <= 7 is <= 24.32: a conservative bound.
    EXPECT_LT(chi2, 24.32) << "df " << df;
  }
  Sampler s(3, make_warpers(1.0, 0, 1e-9));
  const std::vector<float> flat = {0.f, 0.f, 0.f};
  EXPECT_EQ(s.distribution(flat)[0], 1.0);  // top-p keeps at least one token
}

TEST(InferSampling, SeededAndReproducible) {
  Models mm = make(Arch::DecoderOnly, 5);
  GenerateOptions o = fixed_length(15);
  o.sample = true;
  o.temperature = 1.2;
  o.seed = 99;
  auto a = generate(*mm.m, inputs_for(Arch::DecoderOnly), o);
  auto b = generate(*mm.m, inputs_for(Arch::DecoderOnly), o);
  o.seed = 100;
  auto c = generate(*mm.m, inputs_for(Arch::DecoderOnly), o);
  bool differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    differs = differs || a[i].tokens != c[i].tokens;
  }
  EXPECT_TRUE(differs);
}

// ---- processors ----------------------------------------------------------------------------

TEST(InferProcessors, RepetitionPenaltyDividesPositiveMultipliesNegativeOnce) {
  std::vector<float> l = {2.f, -1.f, 3.f, 0.5f};
  const std::vector<int32_t> gen = {0, 1, 0, 0, 1};
  RepetitionPenalty(2.0).apply(l, gen);
  EXPECT_FLOAT_EQ(l[0], 1.f);   // 2 / 2, once although generated three times
  EXPECT_FLOAT_EQ(l[1], -2.f);  // -1 · 2
  EXPECT_FLOAT_EQ(l[2], 3.f);
  EXPECT_FLOAT_EQ(l[3], 0.5f);

  // Effect on generation: a strong penalty gives more distinct tokens than none.
  Models mm = make(Arch::Seq2Seq, 17);
  GenerateOptions o = fixed_length(16);
  auto plain = generate(*mm.m, inputs_for(Arch::Seq2Seq), o);
  o.repetition_penalty = 50;
  auto pen = generate(*mm.m, inputs_for(Arch::Seq2Seq), o);
  size_t d_plain = 0, d_pen = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    d_plain += std::set<int32_t>(plain[i].tokens.begin(), plain[i].tokens.end()).size();
    d_pen += std::set<int32_t>(pen[i].tokens.begin(), pen[i].tokens.end()).size();
  }
  EXPECT_GT(d_pen, d_plain);
}

// A penalty so small that a positive logit divided by it overflows stops at the largest float:
// the token is the sure choice, and the step's log-probabilities stay finite (they were NaN, and
// generate --json printed "score": null).
TEST(InferProcessors, TinyRepetitionPenaltyKeepsLogitsFinite) {
  std::vector<float> l = {2.f, -1.f, 3.f};
  RepetitionPenalty(1e-39).apply(l, std::vector<int32_t>{0, 1});
  EXPECT_EQ(l[0], std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isfinite(l[1]));
  EXPECT_LE(l[1], 0.f);
  EXPECT_EQ(l[2], 3.f);
  Models mm = make(Arch::Seq2Seq, 17);
  GenerateOptions o = fixed_length(8);
  o.repetition_penalty = 1e-300;
  for (const GenerateResult& r : generate(*mm.m, inputs_for(Arch::Seq2Seq), o))
    EXPECT_TRUE(std::isfinite(r.score)) << r.score;
}

TEST(InferProcessors, NoRepeatNgramBlocksCompletionsAndHolds) {
  std::vector<float> l(6, 0.f);
  const std::vector<int32_t> gen = {1, 2, 3, 1, 2};  // "1 2" then "1 2": 3 would repeat "2 3"?
  NoRepeatNgram(3).apply(l, gen);                    // trigram "1 2 3" seen: block 3
  EXPECT_TRUE(std::isinf(l[3]));
  EXPECT_EQ(l[2], 0.f);
  std::vector<float> l2(6, 0.f);
  NoRepeatNgram(1).apply(l2, gen);  // unigrams: every generated token
  for (int t : {1, 2, 3}) EXPECT_TRUE(std::isinf(l2[static_cast<size_t>(t)]));

  Models mm = make(Arch::DecoderOnly, 17);
  GenerateOptions o = fixed_length(20);
  o.no_repeat_ngram = 2;
  for (const auto& g : generate(*mm.m, inputs_for(Arch::DecoderOnly), o)) {
    std::set<std::pair<int32_t, int32_t>> bigrams;
    for (size_t i = 0; i + 1 < g.tokens.size(); ++i)
      EXPECT_TRUE(bigrams.insert({g.tokens[i], g.tokens[i + 1]}).second) << "bigram repeated";
  }
}

TEST(InferProcessors, MinNewTokensBlocksEndTokensUntilEnoughAreGenerated) {
  const MinNewTokens p(2, {2, 4});
  std::vector<float> l = {1.f, 2.f, 3.f, 4.f, 5.f};
  const std::vector<int32_t> one = {1};
  p.apply(l, one);  // one token generated: both end tokens blocked
  EXPECT_TRUE(std::isinf(l[2]) && l[2] < 0);
  EXPECT_TRUE(std::isinf(l[4]) && l[4] < 0);
  EXPECT_EQ(l[3], 4.f);
  std::vector<float> l2 = {1.f, 2.f, 3.f, 4.f, 5.f};
  const std::vector<int32_t> two = {1, 3};
  p.apply(l2, two);  // two generated: nothing changes
  EXPECT_EQ(l2, (std::vector<float>{1.f, 2.f, 3.f, 4.f, 5.f}));
}

TEST(InferProcessors, SuppressTokensForbidsExactlyThoseTokens) {
  std::vector<float> l = {1.f, 2.f, 3.f, 4.f};
  SuppressTokens({1, 3}).apply(l, std::vector<int32_t>{});
  EXPECT_EQ(l[0], 1.f);
  EXPECT_EQ(l[2], 3.f);
  EXPECT_TRUE(std::isinf(l[1]) && l[1] < 0);
  EXPECT_TRUE(std::isinf(l[3]) && l[3] < 0);
}

TEST(InferProcessors, SuppressedTokensAreNeverGenerated) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    Models mm = make(arch, 17);
    const auto in = inputs_for(arch);
    GenerateOptions o = fixed_length(12);
    // The token greedy generates most often: suppressing it must change the output.
    std::map<int32_t, int> count;
    for (const GenerateResult& g : generate(*mm.m, in, o))
      for (int32_t t : g.tokens) ++count[t];
    ASSERT_FALSE(count.empty());
    const int32_t top = std::max_element(count.begin(), count.end(), [](auto& a, auto& b) {
                          return a.second < b.second;
                        })->first;
    o.suppress_ids = {top};
    for (int64_t beam : {1, 3}) {
      o.beam = beam;
      for (const GenerateResult& g : generate(*mm.m, in, o))
        for (const Hypothesis& h : g.n_best)
          EXPECT_EQ(std::count(h.tokens.begin(), h.tokens.end(), top), 0) << "beam " << beam;
    }
    o.beam = 1;
    o.sample = true;
    o.seed = 4;
    for (const GenerateResult& g : generate(*mm.m, in, o))
      EXPECT_EQ(std::count(g.tokens.begin(), g.tokens.end(), top), 0) << "sampling";
  }
}

TEST(InferProcessors, ListRunsInOrderAndLiftsForbiddingProcessorsWhenNothingIsLeft) {
  GenerateOptions o;
  EXPECT_EQ(make_processors(o, {2}).size(), 0u);  // every option at its "off" value
  o.repetition_penalty = 2;
  o.no_repeat_ngram = 1;
  o.min_new = 3;
  const LogitsProcessorList list = make_processors(o, {2});
  EXPECT_EQ(list.size(), 3u);
  const std::vector<float> raw = {4.f, -1.f, 2.f};
  std::vector<float> out(3);
  const std::vector<int32_t> gen = {0};
  // token 0 repeats (unigram ban), token 2 is the end token (min-new): token 1 is left.
  double lse = list.process(raw.data(), out, gen);
  EXPECT_TRUE(std::isinf(out[0]) && std::isinf(out[2]));
  EXPECT_EQ(out[1], -1.f);
  EXPECT_DOUBLE_EQ(lse, -1.0);
  // Every token forbidden: only the repetition penalty (which forbids nothing) stays.
  const std::vector<int32_t> all = {0, 1};
  lse = list.process(raw.data(), out, all);
  EXPECT_EQ(out, (std::vector<float>{2.f, -2.f, 2.f}));
  EXPECT_NEAR(lse, std::log(2 * std::exp(2.0) + std::exp(-2.0)), 1e-12);
}

// ---- sampling warpers, each alone ----------------------------------------------------------

SamplingSupport support_of(const std::vector<float>& l) {
  SamplingSupport s;
  s.logits = l;
  s.order.resize(l.size());
  std::iota(s.order.begin(), s.order.end(), 0);
  s.size = static_cast<int64_t>(l.size());
  s.weight.assign(l.size(), 0.0);
  return s;
}

TEST(InferWarpers, TopKKeepsTheKBestLowerIdFirstOnTies) {
  const std::vector<float> l = {1.f, 3.f, 2.f, 3.f, 0.f};
  SamplingSupport s = support_of(l);
  TopK(3).apply(s);
  ASSERT_EQ(s.size, 3);
  EXPECT_EQ(std::vector<int32_t>(s.order.begin(), s.order.begin() + 3),
            (std::vector<int32_t>{1, 3, 2}));
  TopK(10).apply(s);  // more than there are: unchanged
  EXPECT_EQ(s.size, 3);
}

TEST(InferWarpers, TemperatureWeighsBySoftmaxOfLogitsOverT) {
  const std::vector<float> l = {1.f, 3.f, 2.f};
  SamplingSupport s = support_of(l);
  Temperature(2.0).apply(s);
  ASSERT_EQ(s.size, 3);
  EXPECT_EQ(s.order[0], 1);  // sorted best first
  const double z = std::exp(0.5) + std::exp(1.5) + std::exp(1.0);
  for (size_t v = 0; v < 3; ++v)
    EXPECT_NEAR(s.weight[v] / s.total, std::exp(l[v] / 2.0) / z, 1e-12);
  SamplingSupport g = support_of(l);
  Temperature(0).apply(g);  // greedy
  ASSERT_EQ(g.size, 1);
  EXPECT_EQ(g.order[0], 1);
  EXPECT_EQ(g.weight[1], 1.0);
}

// However small T > 0 is, the weights stay finite and the best token weighs 1: a subnormal T
// made every weight NaN (l/T − max/T was inf − inf), and sampling produced garbage.
TEST(InferWarpers, TinyTemperatureIsGreedyNotNaN) {
  const std::vector<float> l = {1.f, 3.f, 2.f, -4.f};
  for (double t : {1e-300, 1e-320, std::numeric_limits<double>::denorm_min()}) {
    SamplingSupport s = support_of(l);
    Temperature(t).apply(s);
    EXPECT_EQ(s.order[0], 1) << t;
    EXPECT_EQ(s.weight[1], 1.0) << t;
    EXPECT_EQ(s.total, 1.0) << t;
  }
  Sampler sampler(4, make_warpers(1e-320, 0, 1.0));
  Rng rng(3);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.sample(l, rng), 1);
}

TEST(InferWarpers, TopPKeepsTheSmallestPrefixReachingP) {
  const std::vector<float> l = {0.f, std::log(3.f), std::log(6.f)};  // p = 0.1, 0.3, 0.6
  for (auto [p, keep] :
       {std::pair{0.5, 1}, std::pair{0.85, 2}, std::pair{0.95, 3}, std::pair{1e-9, 1}}) {
    SamplingSupport s = support_of(l);
    Temperature(1.0).apply(s);
    TopP(p).apply(s);
    EXPECT_EQ(s.size, keep) << p;
    double total = 0;
    for (int64_t i = 0; i < s.size; ++i) total += s.weight[size_t(s.order[size_t(i)])];
    EXPECT_DOUBLE_EQ(s.total, total);
    for (int64_t i = s.size; i < 3; ++i) EXPECT_EQ(s.weight[size_t(s.order[size_t(i)])], 0.0);
  }
}

// ---- strategies and options ----------------------------------------------------------------

TEST(InferStrategies, OptionsSelectTheStrategyAndItDescribesItself) {
  GenerateOptions o;
  EXPECT_EQ(make_strategy(o)->describe(o)["kind"], "greedy");
  o.beam = 3;
  auto beam = make_strategy(o);
  EXPECT_EQ(beam->describe(o)["kind"], "beam");
  EXPECT_EQ(beam->describe(o)["beam_size"], 3);
  EXPECT_TRUE(beam->per_hypothesis());
  o.beam = 1;
  o.sample = true;
  o.top_k = 4;
  auto sampling = make_strategy(o);
  EXPECT_EQ(sampling->describe(o)["kind"], "sample");
  EXPECT_EQ(sampling->describe(o)["top_k"], 4);
  EXPECT_FALSE(sampling->per_hypothesis());
}

// Every registered strategy: its row makes it, it answers to the row's name, and its trace's
// "search" object holds exactly the kind, the beam size and the options the row lists.
TEST(InferStrategies, RegistryRowsMakeTheirStrategyAndListWhatItReads) {
  GenerateOptions o;
  o.temperature = 0.5;
  o.top_k = 4;
  o.length_penalty = 0.6;
  for (const StrategyEntry& e : strategy_registry()) {
    SCOPED_TRACE(std::string(e.name));
    EXPECT_EQ(find_strategy(e.name), &e);
    const std::unique_ptr<SearchStrategy> s = e.make();
    EXPECT_EQ(s->name(), e.name);
    const nlohmann::json j = s->describe(o);
    EXPECT_EQ(j["kind"], e.name);
    EXPECT_EQ(j.size(), 2 + e.options.size()) << j.dump();
    for (std::string_view f : e.options)
      EXPECT_EQ(j[option_json(f)], option_value(*find_decoding_option(f), o)) << f;
  }
  EXPECT_EQ(find_strategy("nope"), nullptr);
  // The first row the options select, in the registry's order: sample before beam.
  o.sample = true;
  o.beam = 2;
  EXPECT_EQ(make_strategy(o)->name(), "sample");
  o.sample = false;
  EXPECT_EQ(make_strategy(o)->name(), "beam");
  EXPECT_EQ(make_strategy(o)->describe(o)["length_penalty"], 0.6);
  o.beam = 1;
  EXPECT_EQ(make_strategy(o)->name(), "greedy");
}

TEST(InferOptions, ProblemNamesTheOptionInTheCallersSpelling) {
  GenerateOptions o;
  EXPECT_FALSE(o.problem([](std::string_view n) { return std::string(n); }));
  o.beam = 2;
  o.n_best = 3;
  auto flag = [](std::string_view n) { return "--" + std::string(n); };
  EXPECT_EQ(*o.problem(flag), "--n_best must be in [1, --beam 2], got 3");
  try {
    o.validate();
    ADD_FAILURE() << "validate accepted n_best > beam";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "generate: option n_best must be in [1, beam 2], got 3");
  }
}

// ---- stop reasons --------------------------------------------------------------------------

TEST(InferStop, EveryStopReason) {
  Models mm = make(Arch::Seq2Seq, 9);
  const std::vector<std::vector<int32_t>> in = {inputs_for(Arch::Seq2Seq)[0]};
  GenerateOptions o = fixed_length(10);
  auto base = generate(*mm.m, in, o)[0];
  EXPECT_EQ(base.stop_reason, StopReason::Length);
  EXPECT_EQ(base.tokens.size(), 10u);
  EXPECT_EQ(base.cache_lengths.size(), 10u);

  // eos: a second end token that greedy picks at step 3; the end token is not in `tokens`.
  GenerateOptions e;
  e.max_new = 10;
  e.end_ids = {2, base.tokens[2]};
  auto eos = generate(*mm.m, in, e)[0];
  const size_t first = static_cast<size_t>(
      std::find(base.tokens.begin(), base.tokens.end(), base.tokens[2]) - base.tokens.begin());
  EXPECT_EQ(eos.stop_reason, StopReason::Eos);
  EXPECT_EQ(eos.tokens, std::vector<int32_t>(base.tokens.begin(), base.tokens.begin() + first));
  EXPECT_EQ(eos.cache_lengths.size(), first + 1);  // the end token was selected too

  // min_new blocks the end tokens until that many tokens exist.
  GenerateOptions mn = e;
  mn.min_new = static_cast<int64_t>(first) + 1;
  auto minr = generate(*mm.m, in, mn)[0];
  EXPECT_GE(minr.tokens.size(), first + 1);

  // stop string spanning two tokens: the text before it is returned.
  Tokenizer tok(mm.m->vocab());
  const std::string t1 = tok.decode(std::span<const int32_t>(&base.tokens[3], 1));
  const std::string t2 = tok.decode(std::span<const int32_t>(&base.tokens[4], 1));
  ASSERT_FALSE(t1.empty());
  ASSERT_FALSE(t2.empty());
  GenerateOptions ss = o;
  ss.stop_strings = {"zz-never", t1 + t2};
  auto stop = generate(*mm.m, in, ss)[0];
  const std::string full = tok.decode(base.tokens);
  EXPECT_EQ(stop.stop_reason, StopReason::StopString);
  EXPECT_EQ(stop.text, full.substr(0, full.find(t1 + t2)));
  EXPECT_LE(stop.tokens.size(), 5u);

  // cancelled: the callback says stop before the 4th step.
  int calls = 0;
  GenerateOptions c = o;
  c.cancel = [&] { return ++calls > 3; };
  auto canc = generate(*mm.m, in, c)[0];
  EXPECT_EQ(canc.stop_reason, StopReason::Cancelled);
  EXPECT_EQ(canc.tokens, std::vector<int32_t>(base.tokens.begin(), base.tokens.begin() + 3));
  c.beam = 3;
  calls = 0;
  EXPECT_EQ(generate(*mm.m, in, c)[0].stop_reason, StopReason::Cancelled);

  EXPECT_STREQ(to_string(StopReason::StopString), "stop_string");
}

TEST(InferStop, LengthIsCappedByMaxPositions) {
  Models mm = make(Arch::DecoderOnly, 9);
  GenerateOptions o = fixed_length(100);
  std::vector<int32_t> prompt(38, 12);  // max_positions 40: at most 3 new tokens
  auto r = generate(*mm.m, {prompt}, o)[0];
  EXPECT_EQ(r.tokens.size(), 3u);
  EXPECT_EQ(r.stop_reason, StopReason::Length);
  EXPECT_EQ(r.cache_lengths, (std::vector<int64_t>{38, 39, 40}));
}

TEST(InferOptions, NonsensicalOptionsAreErrors) {
  Models mm = make(Arch::Seq2Seq, 1);
  const std::vector<std::vector<int32_t>> in = {{5, 2}};
  auto bad = [&](auto edit) {
    GenerateOptions o;
    edit(o);
    EXPECT_THROW(generate(*mm.m, in, o), Error);
  };
  bad([](GenerateOptions& o) { o.beam = 0; });
  bad([](GenerateOptions& o) { o.top_p = 1.5; });
  bad([](GenerateOptions& o) { o.top_p = 0; });
  bad([](GenerateOptions& o) { o.temperature = -1; });
  bad([](GenerateOptions& o) { o.n_best = 2; });
  bad([](GenerateOptions& o) { o.max_new = 0; });
  bad([](GenerateOptions& o) { o.min_new = 5, o.max_new = 4; });
  bad([](GenerateOptions& o) { o.repetition_penalty = 0; });
  bad([](GenerateOptions& o) { o.sample = true, o.beam = 2; });
  bad([](GenerateOptions& o) { o.end_ids = {99}; });
  bad([](GenerateOptions& o) { o.suppress_ids = {-1}; });
  bad([](GenerateOptions& o) { o.stop_strings = {""}; });
  GenerateOptions o;
  EXPECT_THROW(generate(*mm.m, {{}}, o), Error);
  EXPECT_THROW(generate(*mm.m, {{5, 99}}, o), Error);
  EXPECT_THROW(generate(*mm.m, {std::vector<int32_t>(41, 5)}, o), Error);
}

// ---- streaming -----------------------------------------------------------------------------

TEST(InferStream, ReleasesOnlyCompleteCharactersAndHoldsStopPrefixes) {
  std::vector<std::string> stops = {"天气好"};
  OutputText t(&stops);
  std::string shown;
  t.append("\xE4\xBB");  // first two bytes of 今
  shown += t.take_stream();
  EXPECT_EQ(shown, "");
  t.append("\x8A");
  shown += t.take_stream();
  EXPECT_EQ(shown, "今");
  t.append("学习");  // a two-character token
  shown += t.take_stream();
  EXPECT_EQ(shown, "今学习");
  t.append("天");  // may begin the stop string: held back
  t.append("气");
  shown += t.take_stream();
  EXPECT_EQ(shown, "今学习");
  EXPECT_TRUE(t.append("好！"));  // stop string completed inside a token
  shown += t.finish_stream();
  EXPECT_EQ(t.text(), "今学习");
  EXPECT_EQ(shown, t.text());

  OutputText u(&stops);
  u.append("天气");
  std::string s2 = u.take_stream();
  u.append("很");  // not the stop string after all: released
  s2 += u.take_stream();
  s2 += u.finish_stream();
  EXPECT_EQ(s2, "天气很");
}

TEST(InferStream, ConcatenatedStreamEqualsFinalTextOfMultiByteTokens) {
  const Vocab v =
      Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<sep>", "今", "天", "学习", "é", "！", "気"});
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    Models mm = make(arch, 31, v);
    std::vector<std::vector<int32_t>> in = {{4, 5, 6, 2}, {7, 8, 2}};
    if (arch == Arch::DecoderOnly) in = {{4, 5, 6, 3}, {7, 8, 3}};
    for (int64_t beam : {1, 3}) {
      GenerateOptions o = fixed_length(14);
      o.beam = beam;
      o.stop_strings = {"学习学习"};
      std::map<int64_t, std::string> stream;
      std::map<int64_t, int> events;
      o.on_stream = [&](const StreamEvent& e) {
        EXPECT_EQ(utf8_find_invalid(e.text), std::string_view::npos);
        stream[e.input] += std::string(e.text);
        ++events[e.input];
      };
      auto r = generate(*mm.m, in, o);
      for (size_t i = 0; i < in.size(); ++i) {
        EXPECT_EQ(stream[static_cast<int64_t>(i)], r[i].text);
        EXPECT_FALSE(r[i].text.empty());
        if (beam == 1) {  // one event per chosen token
          EXPECT_EQ(events[static_cast<int64_t>(i)], static_cast<int>(r[i].cache_lengths.size()));
        }
      }
    }
  }
}

}  // namespace
}  // namespace seqtape
