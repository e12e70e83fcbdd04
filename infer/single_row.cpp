// Greedy and sampling: one row per input, one token chosen per call.
//
// Dimension key: V vocabulary.
#include <algorithm>
#include <memory>

#include "infer/sampler.h"
#include "infer/strategy.h"

namespace seqtape {

namespace {

int32_t argmax(std::span<const float> l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());  // first max
}

// One input on one row: its tokens, text, score and Rng(seed), and the token it feeds next.
class SingleRow final : public RowSearch {
 public:
  SingleRow(const SearchContext& c, size_t input, int32_t row, SingleRowSearch::Picker pick)
      : c_(c),
        input_(input),
        row_(row),
        pick_(std::move(pick)),
        text_(&c.opt.stop_strings),
        rng_(c.opt.seeds.empty() ? c.opt.seed : c.opt.seeds[input]),
        work_(size_t(c.V)) {}

  // The first call prefills (<bos> or the prompt); later ones feed the pending token.
  void feed(Feed& f) const override {
    if (round_ == 0)
      f.add(row_, c_.first_feed[input_]);
    else
      f.add(row_, std::span<const int32_t>(&pending_, 1));
  }

  // Processes the row's logits, picks its token, and checks whether it ended.
  void advance(const float* raw, const Stepper& st) override {
    lens_.push_back(st.length(row_));
    const double lse = c_.processors.process(raw, work_, tokens_);
    if (c_.opt.on_call)
      c_.report_call(st, input_, round_, row_,
                     round_ == 0 ? std::span<const int32_t>(c_.first_feed[input_])
                                 : std::span<const int32_t>(&pending_, 1),
                     raw, work_, lse);
    const int32_t tok = pick_(work_, rng_);
    score_ += static_cast<double>(work_[size_t(tok)]) - lse;
    pending_ = tok;
    if (std::optional<StopReason> end = c_.extend(input_, tok, tokens_, text_)) {
      done_ = true;
      reason_ = *end;
    }
    c_.report_select(
        {int64_t(input_), round_, row_, done_ ? -1 : row_, tok, score_, done_, reason_});
    if (c_.opt.on_stream)
      c_.stream(input_, tok, done_ ? text_.finish_stream() : text_.take_stream(), done_);
    ++round_;
  }

  bool done() const override { return done_; }

  void cancel() override {
    if (done_) return;
    done_ = true;
    reason_ = StopReason::Cancelled;
    c_.stream(input_, -1, text_.finish_stream(), true);
  }

  GenerateResult result(const Stepper& st) override {
    GenerateResult g;
    g.tokens = std::move(tokens_);
    g.text = text_.text();
    g.score = score_;
    g.normalized_score = normalized_score(g.score, g.tokens.size(), reason_, c_.opt.length_penalty);
    g.stop_reason = reason_;
    g.cache_lengths = std::move(lens_);
    g.n_best.push_back({g.tokens, g.text, g.score, g.normalized_score, g.stop_reason});
    g.max_abs_delta = st.delta(input_);
    return g;
  }

 private:
  const SearchContext& c_;
  const size_t input_;
  const int32_t row_;
  SingleRowSearch::Picker pick_;
  std::vector<int32_t> tokens_;
  OutputText text_;
  double score_ = 0;
  bool done_ = false;
  StopReason reason_ = StopReason::Length;
  std::vector<int64_t> lens_;  // cache length at each step
  Rng rng_;
  int64_t round_ = 0;
  int32_t pending_ = -1;
  std::vector<float> work_;  // [V] processed logits
};

}  // namespace

std::unique_ptr<RowSearch> SingleRowSearch::start(const SearchContext& c, size_t input,
                                                  std::span<const int32_t> rows) const {
  return std::make_unique<SingleRow>(c, input, rows[0], picker(c.opt, c.V));
}

SingleRowSearch::Picker GreedySearch::picker(const GenerateOptions&, int64_t) const {
  return [](std::span<const float> l, Rng&) { return argmax(l); };
}

SingleRowSearch::Picker SamplingSearch::picker(const GenerateOptions& o, int64_t V) const {
  if (o.temperature == 0) return [](std::span<const float> l, Rng&) { return argmax(l); };
  auto sampler = std::make_shared<Sampler>(V, make_warpers(o.temperature, o.top_k, o.top_p));
  return [sampler](std::span<const float> l, Rng& rng) { return sampler->sample(l, rng); };
}

}  // namespace seqtape
