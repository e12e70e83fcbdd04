// Greedy, beam search and sampling over DecodeSession, with the logit processors, stop
// conditions, streaming and cache verification.
//
// Dimension key: B inputs, K beam size, R = B·K rows (beam) or B rows, V vocabulary.
#include "infer/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "infer/output_text.h"

namespace seqtape {

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::Eos:
      return "eos";
    case StopReason::Length:
      return "length";
    case StopReason::StopString:
      return "stop_string";
    case StopReason::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

void GenerateOptions::validate() const {
  auto bad = [](const char* name, const std::string& value, const char* why) {
    fail("generate", std::string("option ") + name + " = " + value + " " + why);
  };
  auto num = [](double v) {
    std::string s = std::to_string(v);
    return s;
  };
  if (beam < 1) bad("beam", std::to_string(beam), "must be at least 1");
  if (n_best < 1 || n_best > beam)
    bad("n_best", std::to_string(n_best),
        ("must be in [1, beam = " + std::to_string(beam) + "]").c_str());
  if (!std::isfinite(length_penalty)) bad("length_penalty", num(length_penalty), "must be finite");
  if (!(temperature >= 0) || !std::isfinite(temperature))
    bad("temperature", num(temperature), "must be a finite number >= 0");
  if (top_k < 0) bad("top_k", std::to_string(top_k), "must be >= 0 (0 = off)");
  if (!(top_p > 0 && top_p <= 1)) bad("top_p", num(top_p), "must be in (0, 1]");
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    bad("repetition_penalty", num(repetition_penalty), "must be a finite number > 0 (1 = off)");
  if (no_repeat_ngram < 0)
    bad("no_repeat_ngram", std::to_string(no_repeat_ngram), "must be >= 0 (0 = off)");
  if (max_new < 1) bad("max_new", std::to_string(max_new), "must be at least 1");
  if (min_new < 0 || min_new > max_new)
    bad("min_new", std::to_string(min_new),
        ("must be in [0, max_new = " + std::to_string(max_new) + "]").c_str());
  if (sample && beam > 1)
    bad("beam", std::to_string(beam), "cannot be combined with sampling (use beam 1)");
  for (const std::string& s : stop_strings)
    if (s.empty()) bad("stop_strings", "\"\"", "holds an empty string");
}

Strategy strategy_of(const GenerateOptions& opt) {
  if (opt.sample) return Strategy::Sample;
  return opt.beam > 1 ? Strategy::Beam : Strategy::Greedy;
}

// ---- logit processors ---------------------------------------------------------------------

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> generated,
                              double penalty) {
  if (penalty == 1.0 || generated.empty()) return;
  thread_local std::vector<uint8_t> seen;
  seen.assign(logits.size(), 0);
  const auto p = static_cast<float>(penalty);
  for (int32_t t : generated) {
    if (t < 0 || static_cast<size_t>(t) >= logits.size() || seen[static_cast<size_t>(t)]) continue;
    seen[static_cast<size_t>(t)] = 1;
    float& l = logits[static_cast<size_t>(t)];
    l = l > 0 ? l / p : l * p;
  }
}

void block_repeated_ngrams(std::span<float> logits, std::span<const int32_t> generated, int64_t n) {
  const auto G = static_cast<int64_t>(generated.size());
  if (n < 1 || G < n) return;  // no complete n-gram yet, nothing can repeat one
  // The n-1 most recent tokens; any earlier n-gram starting with them bans its last token.
  const int32_t* tail = generated.data() + (G - (n - 1));
  for (int64_t i = 0; i + n <= G; ++i)
    if (std::equal(tail, tail + (n - 1), generated.data() + i)) {
      const int32_t banned = generated[static_cast<size_t>(i + n - 1)];
      if (banned >= 0 && static_cast<size_t>(banned) < logits.size())
        logits[static_cast<size_t>(banned)] = -std::numeric_limits<float>::infinity();
    }
}

Sampler::Sampler(int64_t vocab_size)
    : order_(static_cast<size_t>(vocab_size)), probs_(static_cast<size_t>(vocab_size)) {}

const std::vector<double>& Sampler::distribution(std::span<const float> logits, double temperature,
                                                 int64_t top_k, double top_p) {
  const auto V = static_cast<int64_t>(logits.size());
  if (static_cast<int64_t>(probs_.size()) != V) {
    order_.resize(logits.size());
    probs_.resize(logits.size());
  }
  std::fill(probs_.begin(), probs_.end(), 0.0);
  int64_t m = 0;  // tokens with a finite logit
  for (int64_t v = 0; v < V; ++v)
    if (std::isfinite(logits[static_cast<size_t>(v)]))
      order_[static_cast<size_t>(m++)] = static_cast<int32_t>(v);
  if (m == 0) {  // nothing allowed: fall back to token 0 rather than divide by zero
    order_[0] = 0;
    probs_[0] = 1;
    support_ = 1;
    return probs_;
  }
  auto better = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  if (temperature == 0) {  // greedy: the lowest id among the maxima
    const int32_t best = *std::min_element(order_.begin(), order_.begin() + m, better);
    order_[0] = best;
    probs_[static_cast<size_t>(best)] = 1;
    support_ = 1;
    return probs_;
  }
  int64_t kept = top_k > 0 ? std::min(top_k, m) : m;
  std::partial_sort(order_.begin(), order_.begin() + kept, order_.begin() + m, better);
  const double top = static_cast<double>(logits[static_cast<size_t>(order_[0])]) / temperature;
  double sum = 0;
  for (int64_t i = 0; i < kept; ++i) {
    const size_t v = static_cast<size_t>(order_[static_cast<size_t>(i)]);
    probs_[v] = std::exp(static_cast<double>(logits[v]) / temperature - top);
    sum += probs_[v];
  }
  if (top_p < 1) {  // smallest prefix of the sorted support whose mass reaches top_p
    double cum = 0;
    int64_t j = 0;
    while (j < kept) {
      cum += probs_[static_cast<size_t>(order_[static_cast<size_t>(j)])] / sum;
      ++j;
      if (cum >= top_p) break;
    }
    for (int64_t i = j; i < kept; ++i)
      probs_[static_cast<size_t>(order_[static_cast<size_t>(i)])] = 0;
    kept = j;
    sum = 0;
    for (int64_t i = 0; i < kept; ++i)
      sum += probs_[static_cast<size_t>(order_[static_cast<size_t>(i)])];
  }
  for (int64_t i = 0; i < kept; ++i)
    probs_[static_cast<size_t>(order_[static_cast<size_t>(i)])] /= sum;
  support_ = kept;
  return probs_;
}

int32_t Sampler::sample(std::span<const float> logits, double temperature, int64_t top_k,
                        double top_p, Rng& rng) {
  distribution(logits, temperature, top_k, top_p);
  if (support_ == 1) return order_[0];
  const double u = rng.uniform();
  double acc = 0;
  for (int64_t i = 0; i < support_; ++i) {
    acc += probs_[static_cast<size_t>(order_[static_cast<size_t>(i)])];
    if (u < acc) return order_[static_cast<size_t>(i)];
  }
  return order_[static_cast<size_t>(support_ - 1)];  // u within rounding of 1
}

// ---- shared machinery ---------------------------------------------------------------------

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// What every strategy needs, derived once from the model, inputs and options.
struct Plan {
  const InferenceModel& model;
  const GenerateOptions& opt;
  const std::vector<std::vector<int32_t>>& inputs;
  int64_t V = 0;
  std::vector<int32_t> end_ids;
  std::vector<uint8_t> is_end;                   // [V]
  std::vector<std::string> pieces;               // [V] text of each token (specials: "")
  std::vector<int64_t> limit;                    // [B] max new tokens (max_new, positions)
  std::vector<std::vector<int32_t>> first_feed;  // [B] <bos>, or the prompt
  int64_t capacity = 0;                          // positions a row may process

  Plan(const InferenceModel& m, const std::vector<std::vector<int32_t>>& in,
       const GenerateOptions& o)
      : model(m), opt(o), inputs(in), V(m.config().vocab_size) {
    o.validate();
    const int64_t P = m.config().max_positions;
    const Vocab& vocab = m.vocab();
    end_ids = o.end_ids.empty() ? std::vector<int32_t>{vocab.eos_id()} : o.end_ids;
    is_end.assign(static_cast<size_t>(V), 0);
    for (int32_t e : end_ids) {
      if (e < 0 || e >= V)
        fail("generate", "end token id " + std::to_string(e) + " outside the vocabulary [0, " +
                             std::to_string(V) + ")");
      is_end[static_cast<size_t>(e)] = 1;
    }
    Tokenizer tok(vocab);
    for (int32_t v = 0; v < V; ++v) pieces.push_back(tok.decode(std::span<const int32_t>(&v, 1)));
    if (in.empty()) fail("generate", "no inputs");
    for (size_t i = 0; i < in.size(); ++i) {
      const std::string what = "input " + std::to_string(i);
      const auto n = static_cast<int64_t>(in[i].size());
      if (n == 0) fail("generate", what + " is empty");
      if (n > P)
        fail("generate", what + " has " + std::to_string(n) + " tokens, more than max_positions " +
                             std::to_string(P));
      for (int32_t id : in[i])
        if (id < 0 || id >= V)
          fail("generate", what + " holds id " + std::to_string(id) +
                               " outside the vocabulary [0, " + std::to_string(V) + ")");
      if (m.seq2seq()) {
        limit.push_back(std::min(o.max_new, P));  // selecting token k processes k positions
        first_feed.push_back({vocab.bos_id()});
        capacity = std::max(capacity, limit.back());
      } else {
        limit.push_back(std::min(o.max_new, P - n + 1));  // k-th new token: n + k − 1 positions
        first_feed.push_back(in[i]);
        capacity = std::max(capacity, n + limit.back() - 1);
      }
    }
  }

  std::vector<std::vector<int32_t>> sources() const {
    return model.seq2seq() ? inputs : std::vector<std::vector<int32_t>>{};
  }
};

// The session that decodes, plus (verify_cache) one in the other mode fed the same tokens,
// whose logits are compared at every step.
class Stepper {
 public:
  Stepper(const InferenceModel& m, const GenerateOptions& o, size_t n_inputs)
      : main_(m, o.use_cache ? CacheMode::Cached : CacheMode::Uncached), V_(m.config().vocab_size) {
    if (o.verify_cache) check_.emplace(m, o.use_cache ? CacheMode::Uncached : CacheMode::Cached);
    if (o.on_attention) main_.set_attention_observer(o.on_attention);
    delta_.assign(n_inputs, o.verify_cache ? 0.0 : -1.0);
  }
  void begin(const std::vector<std::vector<int32_t>>& sources,
             const std::vector<int32_t>& row_source, int64_t capacity) {
    main_.begin(sources, row_source, capacity);
    if (check_) check_->begin(sources, row_source, capacity);
    row_delta_.assign(row_source.size(), -1.0);
  }
  const float* prefill(std::span<const int32_t> rows,
                       const std::vector<std::vector<int32_t>>& tokens) {
    const float* a = main_.prefill(rows, tokens);
    if (check_) compare(rows, a, check_->prefill(rows, tokens));
    return a;
  }
  const float* step(std::span<const int32_t> rows, std::span<const int32_t> tokens) {
    const float* a = main_.step(rows, tokens);
    if (check_) compare(rows, a, check_->step(rows, tokens));
    return a;
  }
  void reorder(std::span<const int32_t> parent) {
    main_.reorder(parent);
    if (check_) check_->reorder(parent);
  }
  int64_t length(int32_t row) const { return main_.length(row); }
  double delta(size_t input) const { return delta_[input]; }
  // verify_cache: the row's max |Δ| in the last call that fed it; else -1.
  double row_delta(int32_t row) const { return row_delta_[static_cast<size_t>(row)]; }

 private:
  void compare(std::span<const int32_t> rows, const float* a, const float* b) {
    for (size_t i = 0; i < rows.size(); ++i) {
      double& d = delta_[static_cast<size_t>(main_.source_of(rows[i]))];
      double& rd = row_delta_[static_cast<size_t>(rows[i])];
      rd = 0;
      for (int64_t v = 0; v < V_; ++v) {
        const auto k = static_cast<int64_t>(i) * V_ + v;
        const double e = std::fabs(static_cast<double>(a[k]) - static_cast<double>(b[k]));
        d = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(d, e);
        rd = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(rd, e);
      }
    }
  }

  DecodeSession main_;
  std::optional<DecodeSession> check_;
  int64_t V_;
  std::vector<double> delta_;
  std::vector<double> row_delta_;
};

// Tracing: the CallEvent of one row of a call (see CallEvent in search.h).
void report_call(const Plan& p, const Stepper& st, size_t input, int64_t round, int32_t row,
                 std::span<const int32_t> fed, const float* raw, const std::vector<float>& work,
                 double lse) {
  if (!p.opt.on_call) return;
  const int64_t after = st.length(row);
  p.opt.on_call({static_cast<int64_t>(input), round, row, round == 0, fed,
                 after - static_cast<int64_t>(fed.size()), after,
                 std::span<const float>(raw, static_cast<size_t>(p.V)), work, lse,
                 st.row_delta(row)});
}

// Applies the processors to one hypothesis' logits (a copy, `l`); `raw` is the unprocessed
// row. Returns the log-sum-exp of the processed logits (log-prob = l[v] − lse).
double process(const Plan& p, const float* raw, std::vector<float>& l,
               const std::vector<int32_t>& generated) {
  const GenerateOptions& o = p.opt;
  std::copy(raw, raw + p.V, l.begin());
  apply_repetition_penalty(l, generated, o.repetition_penalty);
  block_repeated_ngrams(l, generated, o.no_repeat_ngram);
  if (static_cast<int64_t>(generated.size()) < o.min_new)
    for (int32_t e : p.end_ids) l[static_cast<size_t>(e)] = kNegInf;
  float mx = *std::max_element(l.begin(), l.end());
  if (mx == kNegInf) {  // every token blocked: lift the blocks for this step
    std::copy(raw, raw + p.V, l.begin());
    apply_repetition_penalty(l, generated, o.repetition_penalty);
    mx = *std::max_element(l.begin(), l.end());
  }
  double s = 0;
  for (float x : l) s += std::exp(static_cast<double>(x) - static_cast<double>(mx));
  return static_cast<double>(mx) + std::log(s);
}

int32_t argmax(const std::vector<float>& l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());  // first max
}

double normalized(double score, const std::vector<int32_t>& tokens, StopReason r, double alpha) {
  const auto len = static_cast<double>(tokens.size() + (r == StopReason::Eos ? 1 : 0));
  return len > 0 ? score / std::pow(len, alpha) : score;
}

void emit(const GenerateOptions& o, size_t input, int32_t token, const std::string& text,
          bool done) {
  if (o.on_stream) o.on_stream(StreamEvent{static_cast<int64_t>(input), token, text, done});
}

// ---- greedy and sampling: one row per input -----------------------------------------------

std::vector<GenerateResult> run_single(const Plan& p, Stepper& st, bool sampling) {
  const GenerateOptions& o = p.opt;
  const size_t B = p.inputs.size();
  std::vector<int32_t> row_source(B);
  std::iota(row_source.begin(), row_source.end(), 0);
  st.begin(p.sources(), row_source, p.capacity);

  struct Row {
    std::vector<int32_t> tokens;
    OutputText text;
    double score = 0;
    bool done = false;
    StopReason reason = StopReason::Length;
    std::vector<int64_t> lens;
    Rng rng;
  };
  std::vector<Row> rows(B);
  for (Row& w : rows) {
    w.text = OutputText(&o.stop_strings);
    w.rng = Rng(o.seed);
  }
  std::vector<int32_t> active = row_source, pending(B), feed;
  feed.reserve(B);
  std::vector<float> work(static_cast<size_t>(p.V));
  Sampler sampler(p.V);
  bool first = true;
  for (int64_t round = 0; !active.empty(); ++round) {
    if (o.cancel && o.cancel()) {
      for (int32_t r : active) {
        Row& w = rows[static_cast<size_t>(r)];
        w.done = true;
        w.reason = StopReason::Cancelled;
        emit(o, static_cast<size_t>(r), -1, w.text.finish_stream(), true);
      }
      break;
    }
    const float* logits;
    if (first) {
      std::vector<std::vector<int32_t>> lists;
      for (int32_t r : active) lists.push_back(p.first_feed[static_cast<size_t>(r)]);
      logits = st.prefill(active, lists);
      first = false;
    } else {
      feed.clear();
      for (int32_t r : active) feed.push_back(pending[static_cast<size_t>(r)]);
      logits = st.step(active, feed);
    }
    for (size_t i = 0; i < active.size(); ++i) {
      const auto r = static_cast<size_t>(active[i]);
      Row& w = rows[r];
      w.lens.push_back(st.length(active[i]));
      const double lse = process(p, logits + static_cast<int64_t>(i) * p.V, work, w.tokens);
      if (o.on_call)
        report_call(p, st, r, round, active[i],
                    round == 0 ? std::span<const int32_t>(p.first_feed[r])
                               : std::span<const int32_t>(&pending[r], 1),
                    logits + static_cast<int64_t>(i) * p.V, work, lse);
      const int32_t tok = sampling && o.temperature > 0
                              ? sampler.sample(work, o.temperature, o.top_k, o.top_p, w.rng)
                              : argmax(work);
      w.score += static_cast<double>(work[static_cast<size_t>(tok)]) - lse;
      pending[r] = tok;
      // The row ends with an end token, a stop string in its text, or at its length limit.
      std::optional<StopReason> end;
      if (p.is_end[static_cast<size_t>(tok)]) {
        end = StopReason::Eos;
      } else {
        w.tokens.push_back(tok);
        if (w.text.append(p.pieces[static_cast<size_t>(tok)]))
          end = StopReason::StopString;
        else if (static_cast<int64_t>(w.tokens.size()) >= p.limit[r])
          end = StopReason::Length;
      }
      if (end) {
        w.done = true;
        w.reason = *end;
      }
      if (o.on_select)
        o.on_select({static_cast<int64_t>(r), round, active[i], w.done ? -1 : active[i], tok,
                     w.score, w.done, w.reason});
      if (o.on_stream)
        emit(o, r, tok, w.done ? w.text.finish_stream() : w.text.take_stream(), w.done);
    }
    std::erase_if(active, [&](int32_t r) { return rows[static_cast<size_t>(r)].done; });
  }

  std::vector<GenerateResult> out(B);
  for (size_t i = 0; i < B; ++i) {
    Row& w = rows[i];
    GenerateResult& g = out[i];
    g.tokens = std::move(w.tokens);
    g.text = w.text.text();
    g.score = w.score;
    g.normalized_score = normalized(g.score, g.tokens, w.reason, o.length_penalty);
    g.stop_reason = w.reason;
    g.cache_lengths = std::move(w.lens);
    g.n_best.push_back({g.tokens, g.text, g.score, g.normalized_score, g.stop_reason});
    g.max_abs_delta = st.delta(i);
  }
  return out;
}

// ---- beam search --------------------------------------------------------------------------

std::vector<GenerateResult> run_beam(const Plan& p, Stepper& st) {
  const GenerateOptions& o = p.opt;
  const size_t B = p.inputs.size();
  const int64_t K = o.beam;
  const int64_t R = static_cast<int64_t>(B) * K;
  std::vector<int32_t> row_source(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) row_source[static_cast<size_t>(r)] = static_cast<int32_t>(r / K);
  st.begin(p.sources(), row_source, p.capacity);

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
  std::vector<Source> src(B);
  for (size_t b = 0; b < B; ++b) {
    Hyp h;
    h.text = OutputText(&o.stop_strings);
    h.row = static_cast<int32_t>(static_cast<int64_t>(b) * K);
    src[b].alive.push_back(std::move(h));
  }
  std::vector<int32_t> active, feed, parent(static_cast<size_t>(R)), idx(static_cast<size_t>(p.V));
  std::vector<float> work(static_cast<size_t>(p.V));
  std::vector<Cand> cands;
  bool first = true;
  for (int64_t round = 0;; ++round) {
    active.clear();
    feed.clear();
    for (const Source& s : src)
      for (const Hyp& h : s.alive) {
        active.push_back(h.row);
        if (!h.tokens.empty()) feed.push_back(h.tokens.back());
      }
    if (active.empty()) break;
    if (o.cancel && o.cancel()) {
      for (Source& s : src) {
        if (s.alive.empty()) continue;
        for (Hyp& h : s.alive) {
          h.reason = StopReason::Cancelled;
          s.ended.push_back(std::move(h));
        }
        s.alive.clear();
        s.cancelled = true;
      }
      break;
    }
    const float* logits;
    if (first) {
      std::vector<std::vector<int32_t>> lists;
      for (int32_t r : active) lists.push_back(p.first_feed[static_cast<size_t>(r / K)]);
      logits = st.prefill(active, lists);
      first = false;
    } else {
      logits = st.step(active, feed);
    }
    std::fill(parent.begin(), parent.end(), -1);
    int64_t at = 0;  // logits row of the next live hypothesis
    for (size_t b = 0; b < B; ++b) {
      Source& s = src[b];
      if (s.alive.empty()) continue;
      s.lens.push_back(st.length(s.alive[0].row));
      const int64_t slots = K - static_cast<int64_t>(s.ended.size());
      cands.clear();
      for (size_t hi = 0; hi < s.alive.size(); ++hi, ++at) {
        const Hyp& h = s.alive[hi];
        const double lse = process(p, logits + at * p.V, work, h.tokens);
        if (o.on_call)
          report_call(p, st, b, round, h.row,
                      round == 0 ? std::span<const int32_t>(p.first_feed[b])
                                 : std::span<const int32_t>(&h.tokens.back(), 1),
                      logits + at * p.V, work, lse);
        // For one hypothesis candidate order is logit order: keep its best `slots`.
        const int64_t take = std::min<int64_t>(slots, p.V);
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + take, idx.end(), [&](int32_t a, int32_t c) {
          const float la = work[static_cast<size_t>(a)], lc = work[static_cast<size_t>(c)];
          return la > lc || (la == lc && a < c);
        });
        for (int64_t j = 0; j < take; ++j) {
          const int32_t v = idx[static_cast<size_t>(j)];
          if (work[static_cast<size_t>(v)] == kNegInf) break;
          cands.push_back({h.score + (static_cast<double>(work[static_cast<size_t>(v)]) - lse),
                           static_cast<int32_t>(hi), v});
        }
      }
      std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& c) {
        if (a.score != c.score) return a.score > c.score;
        return a.hyp != c.hyp ? a.hyp < c.hyp : a.token < c.token;
      });
      if (static_cast<int64_t>(cands.size()) > slots) cands.resize(static_cast<size_t>(slots));
      std::vector<Hyp> next;
      for (const Cand& c : cands) {
        const Hyp& from = s.alive[static_cast<size_t>(c.hyp)];
        Hyp h = from;
        h.score = c.score;
        auto ended = [&](StopReason why) {
          if (o.on_select)
            o.on_select(
                {static_cast<int64_t>(b), round, from.row, -1, c.token, c.score, true, why});
        };
        if (p.is_end[static_cast<size_t>(c.token)]) {
          h.reason = StopReason::Eos;
          ended(h.reason);
          s.ended.push_back(std::move(h));
          continue;
        }
        h.tokens.push_back(c.token);
        if (h.text.append(p.pieces[static_cast<size_t>(c.token)])) {
          h.reason = StopReason::StopString;
          ended(h.reason);
          s.ended.push_back(std::move(h));
          continue;
        }
        if (static_cast<int64_t>(h.tokens.size()) >= p.limit[b]) {
          h.reason = StopReason::Length;
          ended(h.reason);
          s.ended.push_back(std::move(h));
          continue;
        }
        h.row =
            static_cast<int32_t>(static_cast<int64_t>(b) * K + static_cast<int64_t>(next.size()));
        parent[static_cast<size_t>(h.row)] = from.row;
        if (o.on_select)
          o.on_select({static_cast<int64_t>(b), round, from.row, h.row, c.token, c.score, false,
                       StopReason::Length});
        next.push_back(std::move(h));
      }
      s.alive = std::move(next);
    }
    st.reorder(parent);  // beams continue their parents' caches; cross K/V stay per source
  }

  std::vector<GenerateResult> out(B);
  for (size_t b = 0; b < B; ++b) {
    Source& s = src[b];
    GenerateResult& g = out[b];
    g.max_abs_delta = st.delta(b);
    if (s.cancelled) g.stop_reason = StopReason::Cancelled;
    if (s.ended.empty()) {
      emit(o, b, -1, "", true);
      continue;
    }
    std::vector<Hypothesis> all;
    for (Hyp& h : s.ended)
      all.push_back({h.tokens, h.text.text(), h.score,
                     normalized(h.score, h.tokens, h.reason, o.length_penalty), h.reason});
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
    g.cache_lengths.assign(s.lens.begin(),
                           s.lens.begin() + static_cast<long>(std::min(steps, s.lens.size())));
    all.resize(std::min(all.size(), static_cast<size_t>(o.n_best)));
    g.n_best = std::move(all);
    emit(o, b, -1, g.text, true);
  }
  return out;
}

}  // namespace

std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt) {
  return generate(model, inputs, opt, strategy_of(opt));
}

std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt, Strategy strategy) {
  Plan plan(model, inputs, opt);
  Stepper st(model, opt, inputs.size());
  if (strategy == Strategy::Beam) return run_beam(plan, st);
  return run_single(plan, st, strategy == Strategy::Sample);
}

std::vector<int32_t> encode_input(const InferenceModel& model, const Tokenizer& tok,
                                  std::string_view text, std::string_view context) {
  const std::string where(context);
  if (text.empty()) fail(where, "empty input");
  const int64_t P = model.config().max_positions;
  // Refused before tokenizing: N characters make at least N / max_token_chars() tokens.
  const auto chars = static_cast<int64_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
  if (chars > P * static_cast<int64_t>(tok.max_token_chars()))
    fail(where, "input is " + std::to_string(chars) + " characters, too long for the model's " +
                    "max_positions " + std::to_string(P) + " (tokens of at most " +
                    std::to_string(tok.max_token_chars()) + " characters)");
  std::vector<int32_t> ids = tok.encode(text, context);
  const Vocab& v = model.vocab();
  if (model.seq2seq()) {
    ids.push_back(v.eos_id());
  } else if (v.maybe_sep_id()) {
    ids.push_back(*v.maybe_sep_id());
  }  // without a <sep> (e.g. datasets/f15) a decoder-only model continues the text itself
  if (static_cast<int64_t>(ids.size()) > P)
    fail(where, "input is " + std::to_string(ids.size()) + " tokens (with " +
                    (model.seq2seq()    ? "<eos>"
                     : v.maybe_sep_id() ? "<sep>"
                                        : "no <sep>") +
                    "), more than the model's " + "max_positions " + std::to_string(P));
  return ids;
}

}  // namespace seqtape
