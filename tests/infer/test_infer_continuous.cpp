// Continuous batching in infer/: a DecodeSession opened empty takes rows as inputs arrive
// (admit) and gives them back (release); RowSearches of different inputs, options and
// strategies join a running DecodeLoop at any step and leave when done. Every input gives, to
// the bit, what generate() gives it alone. On the wide model (tests/infer/wide_model.h), Decode
// layout, Seq2Seq and decoder-only.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "infer/row_search.h"
#include "infer/search.h"
#include "infer/session.h"
#include "infer/strategy.h"
#include "tests/infer/wide_model.h"

namespace seqtape {
namespace {

using test_util::make_wide;
using test_util::varied_inputs;
using test_util::Wide;

const char* arch_name(Arch a) {
  return a == Arch::Seq2Seq ? "seq2seq" : "decoder-only";
}

// The first call of a row: <bos> (Seq2Seq) or its prompt.
std::vector<int32_t> first_feed(const InferenceModel& m, const std::vector<int32_t>& input) {
  return m.seq2seq() ? std::vector<int32_t>{m.vocab().bos_id()} : input;
}

std::vector<int32_t> source_of(const InferenceModel& m, const std::vector<int32_t>& input) {
  return m.seq2seq() ? input : std::vector<int32_t>{};
}

// Logits [V] of `input` after its first call and after feeding `then`, alone in a begun session.
std::vector<std::vector<float>> alone_logits(const InferenceModel& m,
                                             const std::vector<int32_t>& input,
                                             const std::vector<int32_t>& then) {
  const int64_t V = m.config().vocab_size;
  DecodeSession s(m);
  std::vector<std::vector<int32_t>> sources;
  if (m.seq2seq()) sources.push_back(input);
  s.begin(sources, {0}, 32);
  const std::vector<int32_t> row = {0};
  std::vector<std::vector<float>> out;
  const float* l = s.prefill(row, {first_feed(m, input)});
  out.emplace_back(l, l + V);
  for (int32_t t : then) {
    l = s.step(row, std::span<const int32_t>(&t, 1));
    out.emplace_back(l, l + V);
  }
  return out;
}

TEST(InferContinuous, AdmittedRowsGiveTheBitsOfARowAlone) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    SCOPED_TRACE(arch_name(arch));
    Wide w = make_wide(arch, 11);
    const InferenceModel& m = *w.m;
    const int64_t V = m.config().vocab_size;
    const auto in = varied_inputs(arch);
    const std::vector<int32_t> then = {7, 8, 9, 10};
    DecodeSession s(m);
    s.open(3, 32);
    EXPECT_EQ(s.free_rows(), 3);
    // Input 1 starts alone; input 3 joins at its second step (a prefill beside a step); input 1
    // leaves and input 4 takes its row.
    const std::vector<int32_t> a = s.admit(source_of(m, in[1]));
    ASSERT_EQ(a, std::vector<int32_t>{0});
    const auto want1 = alone_logits(m, in[1], then), want3 = alone_logits(m, in[3], then),
               want4 = alone_logits(m, in[4], then);
    const float* l = s.prefill(a, {first_feed(m, in[1])});
    EXPECT_EQ(std::vector<float>(l, l + V), want1[0]);
    const std::vector<int32_t> b = s.admit(source_of(m, in[3]));
    ASSERT_EQ(b, std::vector<int32_t>{1});
    const std::vector<int32_t> both = {0, 1};
    l = s.prefill(both, {{then[0]}, first_feed(m, in[3])});
    EXPECT_EQ(std::vector<float>(l, l + V), want1[1]);
    EXPECT_EQ(std::vector<float>(l + V, l + 2 * V), want3[0]);
    const std::vector<int32_t> toks = {then[1], then[0]};
    l = s.step(both, toks);
    EXPECT_EQ(std::vector<float>(l, l + V), want1[2]);
    EXPECT_EQ(std::vector<float>(l + V, l + 2 * V), want3[1]);
    s.release(a);
    EXPECT_EQ(s.free_rows(), 2);
    const std::vector<int32_t> c = s.admit(source_of(m, in[4]));
    ASSERT_EQ(c, std::vector<int32_t>{0});  // the lowest free row, its cache reused
    EXPECT_EQ(s.length(0), 0);
    const std::vector<int32_t> rows = {1, 0};
    l = s.prefill(rows, {{then[1]}, first_feed(m, in[4])});
    EXPECT_EQ(std::vector<float>(l, l + V), want3[2]);
    EXPECT_EQ(std::vector<float>(l + V, l + 2 * V), want4[0]);

    // Several inputs admitted at once (sources encoded in one pass), the second on two rows.
    DecodeSession t(m);
    t.open(4, 32);
    const std::vector<int64_t> n_rows = {1, 2};
    const auto got = t.admit({source_of(m, in[1]), source_of(m, in[3])}, n_rows);
    ASSERT_EQ(got, (std::vector<std::vector<int32_t>>{{0}, {1, 2}}));
    const std::vector<int32_t> three = {0, 2, 1};
    l = t.prefill(three, {first_feed(m, in[1]), first_feed(m, in[3]), first_feed(m, in[3])});
    EXPECT_EQ(std::vector<float>(l, l + V), want1[0]);
    EXPECT_EQ(std::vector<float>(l + V, l + 2 * V), want3[0]);
    EXPECT_EQ(std::vector<float>(l + 2 * V, l + 3 * V), want3[0]);
    EXPECT_EQ(t.free_rows(), 1);
  }
}

TEST(InferContinuous, AdmitReleaseAndReorderAreChecked) {
  Wide w = make_wide(Arch::Seq2Seq, 12);
  const InferenceModel& m = *w.m;
  DecodeSession s(m);
  s.open(2, 16);
  EXPECT_THROW(s.admit({5, 2}, 3), Error);  // 3 rows asked, 2 free
  EXPECT_THROW(s.admit({}, 1), Error);      // a seq2seq row needs its source
  const std::vector<int32_t> r = s.admit({5, 6, 2}, 2);
  ASSERT_EQ(r, (std::vector<int32_t>{0, 1}));
  EXPECT_THROW(s.admit({5, 2}), Error);  // none free
  s.release(std::span<const int32_t>(r.data(), 1));
  const int32_t t = 1;
  EXPECT_THROW(s.step(std::span<const int32_t>(r.data(), 1), std::span<const int32_t>(&t, 1)),
               Error);  // row 0 was released
  // Partial reorder: row 1 is prefilled, row 0 re-admitted takes row 1's history.
  s.prefill(std::span<const int32_t>(r.data() + 1, 1), {{1, 7, 8}});
  s.admit({5, 6, 2});  // the same source, as beams of one input share theirs
  const std::vector<int32_t> rows = {0}, parents = {1};
  s.reorder(rows, parents);
  EXPECT_EQ(s.length(0), 3);
  EXPECT_EQ(s.length(1), 3);  // unlisted: kept
  const std::vector<int32_t> both = {0, 1}, next = {9, 9};
  const int64_t V = m.config().vocab_size;
  const float* l = s.step(both, next);
  EXPECT_EQ(std::vector<float>(l, l + V), std::vector<float>(l + V, l + 2 * V));

  DecodeSession begun(m);
  begun.begin({{5, 2}}, {0}, 8);
  EXPECT_THROW(begun.admit({5, 2}), Error);  // not opened
  DecodeSession uncached(m, CacheMode::Uncached);
  EXPECT_THROW(uncached.open(2, 8), Error);
  Wide d = make_wide(Arch::DecoderOnly, 12);
  DecodeSession dec(*d.m);
  dec.open(1, 8);
  EXPECT_THROW(dec.admit({5, 4}), Error);  // a decoder-only model has no source
}

// One input of a continuous run: joins the loop at step `join` with its own options.
struct Arrival {
  int64_t join;
  size_t input;
  GenerateOptions opt;
  std::string what;
};

struct Running {
  std::vector<std::vector<int32_t>> inputs;
  std::unique_ptr<SearchContext> context;
  std::unique_ptr<RowSearch> search;
  std::vector<int32_t> rows;
  size_t arrival = 0;
};

// Steps a DecodeLoop over an opened session of `max_rows` rows, admitting each arrival at its
// step (or as soon as rows are free) and releasing finished inputs; returns each arrival's
// result and the number of model calls.
std::vector<GenerateResult> run_continuously(const InferenceModel& m,
                                             const std::vector<std::vector<int32_t>>& in,
                                             const std::vector<Arrival>& arrivals, int64_t max_rows,
                                             int64_t& calls) {
  Stepper st(m, GenerateOptions{}, 0);
  st.open(max_rows, m.config().max_positions);
  DecodeLoop loop(st, m.config().vocab_size);
  std::vector<std::unique_ptr<Running>> running;
  std::vector<GenerateResult> out(arrivals.size());
  size_t next = 0;
  calls = 0;
  for (int64_t t = 0; next < arrivals.size() || !loop.empty(); ++t) {
    while (next < arrivals.size() && arrivals[next].join <= t) {
      const Arrival& a = arrivals[next];
      const auto strategy = make_strategy(a.opt);
      const int64_t n = strategy->rows_per_input(a.opt);
      if (st.free_rows() < n) break;
      auto r = std::make_unique<Running>();
      r->inputs = {in[a.input]};
      r->context = std::make_unique<SearchContext>(m, r->inputs, a.opt);
      r->rows = st.admit(source_of(m, in[a.input]), n);
      r->search = strategy->start(*r->context, 0, r->rows);
      r->arrival = next++;
      loop.add(r->search.get());
      running.push_back(std::move(r));
    }
    if (loop.empty()) continue;
    loop.step();
    ++calls;
    for (auto& r : running)
      if (r && r->search->done()) {
        out[r->arrival] = r->search->result(st);
        st.release(r->rows);
        r.reset();
      }
  }
  return out;
}

void expect_same(const GenerateResult& got, const GenerateResult& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.score, want.score) << what;  // to the bit
  EXPECT_EQ(got.stop_reason, want.stop_reason) << what;
  EXPECT_EQ(got.cache_lengths, want.cache_lengths) << what;
  ASSERT_EQ(got.n_best.size(), want.n_best.size()) << what;
  for (size_t k = 0; k < want.n_best.size(); ++k) {
    EXPECT_EQ(got.n_best[k].tokens, want.n_best[k].tokens) << what << " hypothesis " << k;
    EXPECT_EQ(got.n_best[k].score, want.n_best[k].score) << what << " hypothesis " << k;
  }
}

// Greedy, sampling (seeded), beam and processor-laden inputs join mid-flight, share steps, and
// leave; with 6 rows some wait for rows to free up. Each equals its generate() alone.
TEST(InferContinuous, InputsJoiningMidFlightGiveWhatTheyGiveAlone) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    SCOPED_TRACE(arch_name(arch));
    Wide w = make_wide(arch, 13);
    const auto in = varied_inputs(arch);
    GenerateOptions greedy;
    greedy.max_new = 12;
    greedy.min_new = 4;
    GenerateOptions sample = greedy;
    sample.sample = true;
    sample.temperature = 1.3;
    sample.top_k = 12;
    sample.seed = 21;
    GenerateOptions beam = greedy;
    beam.beam = 3;
    beam.n_best = 3;
    beam.length_penalty = 0.7;
    GenerateOptions rules = greedy;
    rules.repetition_penalty = 1.4;
    rules.no_repeat_ngram = 2;
    GenerateOptions nucleus = sample;
    nucleus.top_k = 0;
    nucleus.top_p = 0.8;
    nucleus.seed = 5;
    const std::vector<Arrival> arrivals = {
        {0, 1, greedy, "greedy at 0"},  {0, 2, sample, "sampling at 0"},
        {2, 3, beam, "beam at 2"},      {3, 0, rules, "penalties at 3"},
        {3, 4, nucleus, "top-p at 3"},  {5, 1, sample, "sampling at 5"},
        {5, 2, beam, "beam at 5"},      {9, 4, greedy, "greedy at 9"},
        {9, 3, sample, "sampling at 9"}};
    int64_t calls = 0;
    const auto got = run_continuously(*w.m, in, arrivals, 6, calls);
    int64_t alone_calls = 0;
    for (size_t i = 0; i < arrivals.size(); ++i) {
      const GenerateResult want = generate(*w.m, {in[arrivals[i].input]}, arrivals[i].opt).at(0);
      alone_calls += static_cast<int64_t>(want.cache_lengths.size());
      expect_same(got[i], want, arrivals[i].what);
    }
    EXPECT_LT(calls, alone_calls / 2) << "the inputs should have shared most steps";
  }
}

}  // namespace
}  // namespace seqtape
