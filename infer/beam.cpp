// Beam search: K hypotheses per input on K rows. Each call expands every live hypothesis
// (expand), keeps the best (K − ended) candidates of each input (select), and re-gathers the
// rows' caches by parent; finalize ranks the ended hypotheses.
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
  int32_t row = -1;
  StopReason reason = StopReason::Length;
};

struct Source {
  std::vector<Hyp> alive, ended;
  std::vector<int64_t> lens;  // cache length at each step
  bool cancelled = false;
};

struct Cand {
  double score;
  int32_t hyp, token;
};

class BeamRun {
 public:
  BeamRun(const SearchContext& c, Stepper& st)
      : c_(c),
        st_(st),
        K_(c.opt.beam),
        src_(c.inputs.size()),
        parent_(c.inputs.size() * size_t(K_)),
        idx_(size_t(c.V)),
        work_(size_t(c.V)) {
    std::vector<int32_t> row_source(parent_.size());
    for (size_t r = 0; r < row_source.size(); ++r) row_source[r] = static_cast<int32_t>(r / K_);
    st_.begin(c.sources(), row_source, c.capacity);
    for (size_t b = 0; b < src_.size(); ++b) {
      Hyp h;
      h.text = OutputText(&c.opt.stop_strings);
      h.row = static_cast<int32_t>(int64_t(b) * K_);
      src_[b].alive.push_back(std::move(h));
    }
  }

  std::vector<GenerateResult> run() {
    for (int64_t round = 0;; ++round) {
      const float* logits = call(round);
      if (!logits) break;
      std::fill(parent_.begin(), parent_.end(), -1);
      int64_t at = 0;  // logits row of the next live hypothesis
      for (size_t b = 0; b < src_.size(); ++b) {
        if (src_[b].alive.empty()) continue;
        src_[b].lens.push_back(st_.length(src_[b].alive[0].row));
        expand(b, round, logits, at);
        select(b, round);
      }
      st_.reorder(parent_);  // beams continue their parents' caches; cross K/V stay per source
    }
    std::vector<GenerateResult> out(src_.size());
    for (size_t b = 0; b < src_.size(); ++b) out[b] = finalize(b);
    return out;
  }

 private:
  // Feeds every live hypothesis (the first call prefills); nullptr when none is left or the
  // run is cancelled.
  const float* call(int64_t round) {
    active_.clear();
    feed_.clear();
    for (const Source& s : src_)
      for (const Hyp& h : s.alive) {
        active_.push_back(h.row);
        if (!h.tokens.empty()) feed_.push_back(h.tokens.back());
      }
    if (active_.empty()) return nullptr;
    if (c_.opt.cancel && c_.opt.cancel()) {
      cancel();
      return nullptr;
    }
    if (round > 0) return st_.step(active_, feed_);
    std::vector<std::vector<int32_t>> lists;
    for (int32_t r : active_) lists.push_back(c_.first_feed[size_t(r / K_)]);
    return st_.prefill(active_, lists);
  }

  void cancel() {
    for (Source& s : src_) {
      if (s.alive.empty()) continue;
      for (Hyp& h : s.alive) {
        h.reason = StopReason::Cancelled;
        s.ended.push_back(std::move(h));
      }
      s.alive.clear();
      s.cancelled = true;
    }
  }

  // The candidates of input b: for each live hypothesis (logits rows at, at + 1, ...), its
  // best (K − ended) tokens by processed logit, scored by the summed log-probability.
  void expand(size_t b, int64_t round, const float* logits, int64_t& at) {
    Source& s = src_[b];
    const int64_t slots = K_ - static_cast<int64_t>(s.ended.size());
    const int64_t take = std::min<int64_t>(slots, c_.V);
    cands_.clear();
    for (size_t hi = 0; hi < s.alive.size(); ++hi, ++at) {
      const Hyp& h = s.alive[hi];
      const float* raw = logits + at * c_.V;
      const double lse = c_.processors.process(raw, work_, h.tokens);
      if (c_.opt.on_call)
        c_.report_call(st_, b, round, h.row,
                       round == 0 ? std::span<const int32_t>(c_.first_feed[b])
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

  // Keeps input b's best (K − ended) candidates: each ends or continues on the next free row
  // of the input, whose parent is the row it came from.
  void select(size_t b, int64_t round) {
    Source& s = src_[b];
    const size_t slots = size_t(K_) - s.ended.size();
    std::sort(cands_.begin(), cands_.end(), [](const Cand& a, const Cand& c) {
      if (a.score != c.score) return a.score > c.score;
      return a.hyp != c.hyp ? a.hyp < c.hyp : a.token < c.token;
    });
    if (cands_.size() > slots) cands_.resize(slots);
    std::vector<Hyp> next;
    for (const Cand& c : cands_) {
      const Hyp& from = s.alive[size_t(c.hyp)];
      Hyp h = from;
      h.score = c.score;
      if (std::optional<StopReason> end = c_.extend(b, c.token, h.tokens, h.text)) {
        h.reason = *end;
        c_.report_select({int64_t(b), round, from.row, -1, c.token, c.score, true, h.reason});
        s.ended.push_back(std::move(h));
        continue;
      }
      h.row = static_cast<int32_t>(int64_t(b) * K_ + int64_t(next.size()));
      parent_[size_t(h.row)] = from.row;
      c_.report_select(
          {int64_t(b), round, from.row, h.row, c.token, c.score, false, StopReason::Length});
      next.push_back(std::move(h));
    }
    s.alive = std::move(next);
  }

  // Input b's result: its ended hypotheses ranked by normalized score (then score), best first.
  GenerateResult finalize(size_t b) {
    Source& s = src_[b];
    GenerateResult g;
    g.max_abs_delta = st_.delta(b);
    if (s.cancelled) g.stop_reason = StopReason::Cancelled;
    if (s.ended.empty()) {
      c_.stream(b, -1, "", true);
      return g;
    }
    std::vector<Hypothesis> all;
    for (Hyp& h : s.ended)
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
    if (!s.cancelled) g.stop_reason = best.stop_reason;
    const size_t steps = best.tokens.size() + (best.stop_reason == StopReason::Eos ? 1 : 0);
    g.cache_lengths.assign(s.lens.begin(), s.lens.begin() + long(std::min(steps, s.lens.size())));
    all.resize(std::min(all.size(), size_t(c_.opt.n_best)));
    g.n_best = std::move(all);
    c_.stream(b, -1, g.text, true);
    return g;
  }

  const SearchContext& c_;
  Stepper& st_;
  const int64_t K_;
  std::vector<Source> src_;
  std::vector<int32_t> active_, feed_, parent_, idx_;
  std::vector<float> work_;  // [V] processed logits of one hypothesis
  std::vector<Cand> cands_;
};

}  // namespace

std::vector<GenerateResult> BeamSearch::run(const SearchContext& c, Stepper& st) const {
  return BeamRun(c, st).run();
}

}  // namespace seqtape
