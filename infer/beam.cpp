// Beam search: K hypotheses per input on K rows. Each call expands every live hypothesis
// (expand), keeps the best (K − ended) candidates (select), and re-gathers the rows' caches by
// parent; result() ranks the ended hypotheses.
//
// Dimension key: B inputs, K beam size, R = B·K rows, V vocabulary.
#include <algorithm>
#include <limits>
#include <numeric>

#include "infer/strategy.h"

namespace seqtape {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Hyp {
  std::vector<int32_t> tokens;
  OutputText text;
  double score = 0;
  int32_t row = -1;  // index in the input's rows
  StopReason reason = StopReason::Length;
};

struct Cand {
  double score;
  int32_t hyp, token;
};

// One input's K hypotheses on its K rows.
class Beam final : public RowSearch {
 public:
  Beam(const SearchContext& c, size_t input, std::span<const int32_t> rows)
      : c_(c),
        b_(input),
        K_(c.opt.beam),
        rows_(rows.begin(), rows.end()),
        parent_(rows.size(), -1),
        idx_(size_t(c.V)),
        work_(size_t(c.V)) {
    Hyp h;
    h.text = OutputText(&c.opt.stop_strings);
    h.row = 0;  // hypotheses name their row by its index in rows_
    alive_.push_back(std::move(h));
  }

  // Every live hypothesis: the first call prefills, later ones feed its last token.
  void feed(Feed& f) const override {
    for (const Hyp& h : alive_)
      if (round_ == 0)
        f.add(rows_[size_t(h.row)], c_.first_feed[b_]);
      else
        f.add(rows_[size_t(h.row)], std::span<const int32_t>(&h.tokens.back(), 1));
  }

  void advance(const float* logits, const Stepper& st) override {
    lens_.push_back(st.length(rows_[size_t(alive_[0].row)]));
    std::fill(parent_.begin(), parent_.end(), -1);
    expand(logits, st);
    select();
    ++round_;
  }

  // Beams continue their parents' caches; the cross K/V stay with the source.
  void reorder(std::vector<int32_t>& rows, std::vector<int32_t>& parents) const override {
    for (size_t k = 0; k < rows_.size(); ++k) {
      rows.push_back(rows_[k]);
      parents.push_back(parent_[k] < 0 ? -1 : rows_[size_t(parent_[k])]);
    }
  }

  bool done() const override { return alive_.empty(); }

  void cancel() override {
    if (alive_.empty()) return;
    for (Hyp& h : alive_) {
      h.reason = StopReason::Cancelled;
      ended_.push_back(std::move(h));
    }
    alive_.clear();
    cancelled_ = true;
  }

  // The ended hypotheses ranked by normalized score (then score), best first.
  GenerateResult result(const Stepper& st) override {
    GenerateResult g;
    g.max_abs_delta = st.delta(b_);
    if (cancelled_) g.stop_reason = StopReason::Cancelled;
    if (ended_.empty()) {
      c_.stream(b_, -1, "", true);
      return g;
    }
    std::vector<Hypothesis> all;
    for (Hyp& h : ended_)
      all.push_back({h.tokens, h.text.text(), h.score,
                     normalized_score(h.score, h.tokens.size(), h.reason, c_.opt.length_penalty),
                     h.reason});
    std::stable_sort(all.begin(), all.end(), [](const Hypothesis& a, const Hypothesis& c) {
      if (a.normalized_score != c.normalized_score) return a.normalized_score > c.normalized_score;
      return a.score > c.score;
    });
    const Hypothesis& best = all[0];
    g.tokens = best.tokens;
    g.text = best.text;
    g.score = best.score;
    g.normalized_score = best.normalized_score;
    if (!cancelled_) g.stop_reason = best.stop_reason;
    const size_t steps = best.tokens.size() + (best.stop_reason == StopReason::Eos ? 1 : 0);
    g.cache_lengths.assign(lens_.begin(), lens_.begin() + long(std::min(steps, lens_.size())));
    all.resize(std::min(all.size(), size_t(c_.opt.n_best)));
    g.n_best = std::move(all);
    c_.stream(b_, -1, g.text, true);
    return g;
  }

 private:
  // The candidates: for each live hypothesis (logits rows 0, 1, ...), its best (K − ended)
  // tokens by processed logit, scored by the summed log-probability.
  void expand(const float* logits, const Stepper& st) {
    const int64_t slots = K_ - static_cast<int64_t>(ended_.size());
    const int64_t take = std::min<int64_t>(slots, c_.V);
    cands_.clear();
    for (size_t hi = 0; hi < alive_.size(); ++hi) {
      const Hyp& h = alive_[hi];
      const float* raw = logits + int64_t(hi) * c_.V;
      const double lse = c_.processors.process(raw, work_, h.tokens);
      if (c_.opt.on_call)
        c_.report_call(st, b_, round_, rows_[size_t(h.row)],
                       round_ == 0 ? std::span<const int32_t>(c_.first_feed[b_])
                                   : std::span<const int32_t>(&h.tokens.back(), 1),
                       raw, work_, lse);
      // For one hypothesis candidate order is logit order: keep its best `slots`.
      std::iota(idx_.begin(), idx_.end(), 0);
      std::partial_sort(idx_.begin(), idx_.begin() + take, idx_.end(), [&](int32_t a, int32_t c) {
        const float la = work_[size_t(a)], lc = work_[size_t(c)];
        return la > lc || (la == lc && a < c);
      });
      for (int64_t j = 0; j < take; ++j) {
        const int32_t v = idx_[size_t(j)];
        if (work_[size_t(v)] == kNegInf) break;
        cands_.push_back(
            {h.score + (static_cast<double>(work_[size_t(v)]) - lse), static_cast<int32_t>(hi), v});
      }
    }
  }

  // Keeps the best (K − ended) candidates: each ends or continues on the next free row, whose
  // parent is the row it came from.
  void select() {
    const size_t slots = size_t(K_) - ended_.size();
    const auto better = [](const Cand& a, const Cand& c) {  // a total order: no ties
      if (a.score != c.score) return a.score > c.score;
      return a.hyp != c.hyp ? a.hyp < c.hyp : a.token < c.token;
    };
    // (a big beam has up to K·min(K, V) candidates: only the kept ones are sorted)
    if (cands_.size() > slots) {
      std::nth_element(cands_.begin(), cands_.begin() + long(slots), cands_.end(), better);
      cands_.resize(slots);
    }
    std::sort(cands_.begin(), cands_.end(), better);
    std::vector<Hyp> next;
    next.reserve(cands_.size());
    for (const Cand& c : cands_) {
      const Hyp& from = alive_[size_t(c.hyp)];
      const int32_t from_row = rows_[size_t(from.row)];
      Hyp h = from;
      h.score = c.score;
      if (std::optional<StopReason> end = c_.extend(b_, c.token, h.tokens, h.text)) {
        h.reason = *end;
        c_.report_select({int64_t(b_), round_, from_row, -1, c.token, c.score, true, h.reason});
        ended_.push_back(std::move(h));
        continue;
      }
      h.row = static_cast<int32_t>(next.size());
      parent_[size_t(h.row)] = from.row;
      c_.report_select({int64_t(b_), round_, from_row, rows_[size_t(h.row)], c.token, c.score,
                        false, StopReason::Length});
      next.push_back(std::move(h));
    }
    alive_ = std::move(next);
  }

  const SearchContext& c_;
  const size_t b_;
  const int64_t K_;
  std::vector<int32_t> rows_;    // [K] the session rows of the input
  std::vector<int32_t> parent_;  // [K] index in rows_ of each row's parent after a call; -1
  std::vector<Hyp> alive_, ended_;
  std::vector<int64_t> lens_;  // cache length at each step
  bool cancelled_ = false;
  int64_t round_ = 0;
  std::vector<int32_t> idx_;
  std::vector<float> work_;  // [V] processed logits of one hypothesis
  std::vector<Cand> cands_;
};

}  // namespace

std::unique_ptr<RowSearch> BeamSearch::start(const SearchContext& c, size_t input,
                                             std::span<const int32_t> rows) const {
  return std::make_unique<Beam>(c, input, rows);
}

}  // namespace seqtape
