// Greedy and sampling: one row per input, one token chosen per call.
//
// Dimension key: B inputs (= rows), V vocabulary.
#include <algorithm>
#include <memory>
#include <numeric>

#include "infer/sampler.h"
#include "infer/strategy.h"

namespace seqtape {

namespace {

struct Row {
  std::vector<int32_t> tokens;
  OutputText text;
  double score = 0;
  bool done = false;
  StopReason reason = StopReason::Length;
  std::vector<int64_t> lens;  // cache length at each step
  Rng rng;
};

int32_t argmax(std::span<const float> l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());  // first max
}

// One loop of the search: the rows still decoding, their pending tokens, the working buffer.
class SingleRowRun {
 public:
  SingleRowRun(const SearchContext& c, Stepper& st, SingleRowSearch::Picker pick)
      : c_(c),
        st_(st),
        pick_(std::move(pick)),
        rows_(c.inputs.size()),
        pending_(c.inputs.size()),
        work_(size_t(c.V)) {
    active_.resize(c.inputs.size());
    std::iota(active_.begin(), active_.end(), 0);
    st_.begin(c.sources(), active_, c.capacity);
    for (size_t i = 0; i < rows_.size(); ++i) {
      rows_[i].text = OutputText(&c.opt.stop_strings);
      rows_[i].rng = Rng(c.opt.seeds.empty() ? c.opt.seed : c.opt.seeds[i]);
    }
    feed_.reserve(rows_.size());
  }

  std::vector<GenerateResult> run() {
    for (int64_t round = 0; !active_.empty(); ++round) {
      if (c_.opt.cancel && c_.opt.cancel()) {
        cancel();
        break;
      }
      const float* logits = call(round);
      for (size_t i = 0; i < active_.size(); ++i)
        select(round, active_[i], logits + i * size_t(c_.V));
      std::erase_if(active_, [&](int32_t r) { return rows_[size_t(r)].done; });
    }
    return results();
  }

 private:
  void cancel() {
    for (int32_t r : active_) {
      Row& w = rows_[size_t(r)];
      w.done = true;
      w.reason = StopReason::Cancelled;
      c_.stream(size_t(r), -1, w.text.finish_stream(), true);
    }
  }

  // The first call prefills (<bos> or the prompt); later ones feed each row's pending token.
  const float* call(int64_t round) {
    if (round == 0) {
      std::vector<std::vector<int32_t>> lists;
      for (int32_t r : active_) lists.push_back(c_.first_feed[size_t(r)]);
      return st_.prefill(active_, lists);
    }
    feed_.clear();
    for (int32_t r : active_) feed_.push_back(pending_[size_t(r)]);
    return st_.step(active_, feed_);
  }

  // Processes row r's logits, picks its token, and checks whether it ended.
  void select(int64_t round, int32_t row, const float* raw) {
    const size_t r = size_t(row);
    Row& w = rows_[r];
    w.lens.push_back(st_.length(row));
    const double lse = c_.processors.process(raw, work_, w.tokens);
    if (c_.opt.on_call)
      c_.report_call(st_, r, round, row,
                     round == 0 ? std::span<const int32_t>(c_.first_feed[r])
                                : std::span<const int32_t>(&pending_[r], 1),
                     raw, work_, lse);
    const int32_t tok = pick_(work_, w.rng);
    w.score += static_cast<double>(work_[size_t(tok)]) - lse;
    pending_[r] = tok;
    if (std::optional<StopReason> end = c_.extend(r, tok, w.tokens, w.text)) {
      w.done = true;
      w.reason = *end;
    }
    c_.report_select({int64_t(r), round, row, w.done ? -1 : row, tok, w.score, w.done, w.reason});
    if (c_.opt.on_stream)
      c_.stream(r, tok, w.done ? w.text.finish_stream() : w.text.take_stream(), w.done);
  }

  std::vector<GenerateResult> results() {
    std::vector<GenerateResult> out(rows_.size());
    for (size_t i = 0; i < rows_.size(); ++i) {
      Row& w = rows_[i];
      GenerateResult& g = out[i];
      g.tokens = std::move(w.tokens);
      g.text = w.text.text();
      g.score = w.score;
      g.normalized_score =
          normalized_score(g.score, g.tokens.size(), w.reason, c_.opt.length_penalty);
      g.stop_reason = w.reason;
      g.cache_lengths = std::move(w.lens);
      g.n_best.push_back({g.tokens, g.text, g.score, g.normalized_score, g.stop_reason});
      g.max_abs_delta = st_.delta(i);
    }
    return out;
  }

  const SearchContext& c_;
  Stepper& st_;
  SingleRowSearch::Picker pick_;
  std::vector<Row> rows_;
  std::vector<int32_t> active_, pending_, feed_;
  std::vector<float> work_;  // [V] processed logits of one row
};

}  // namespace

std::vector<GenerateResult> SingleRowSearch::run(const SearchContext& c, Stepper& st) const {
  return SingleRowRun(c, st, picker(c.opt, c.V)).run();
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
