// Recording generate() through its observer hooks as a seqtape-trace.
//
// Dimension key: V vocabulary, H heads, Nq positions fed in a call, Nk keys.

#include "infer/trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

namespace seqtape {

namespace {

using nlohmann::json;

// What one call did for one row, kept until its selections arrive.
struct CallRecord {
  int64_t round = 0;
  bool prefill = false;
  std::vector<int32_t> fed;
  int64_t cache_before = 0, cache_after = 0;
  std::vector<float> logits;  // raw [V]
  std::vector<double> probs;  // softmax of the processed logits [V]
  double delta = -1;
  json attention = json::array();
  bool selected_any = false;
};

class Recorder {
 public:
  Recorder(const InferenceModel& m, const std::vector<int32_t>& start, const TraceOptions& o,
           bool per_hypothesis)
      : m_(m), topt_(o), per_hypothesis_(per_hypothesis) {
    seq_[0] = start;
  }

  void attention(const AttentionEvent& e) {
    if (!topt_.attention) return;
    json rows = json::array(), cols = json::array(), w = json::array();
    for (int64_t i = 0; i < e.n_queries; ++i) rows.push_back(e.first_query + i);
    for (int64_t j = 0; j < e.n_keys; ++j) cols.push_back(j);
    for (int64_t i = 0; i < e.n_queries; ++i) {
      json row = json::array();
      for (int64_t j = 0; j < e.n_keys; ++j) row.push_back(round6(e.weights[i * e.n_keys + j]));
      w.push_back(row);
    }
    using Kind = AttentionEvent::Kind;
    const bool enc = e.kind == Kind::EncoderSelf, cross = e.kind == Kind::Cross;
    const std::string name = std::string(enc ? "encoder" : "decoder") + ".layers." +
                             std::to_string(e.layer) + (cross ? ".cross_attn" : ".self_attn");
    json rec = {{"name", name},   {"layer", e.layer}, {"kind", cross ? "cross" : "self"},
                {"head", e.head}, {"rows", rows},     {"cols", cols},
                {"weights", w}};
    // The encoder runs once, before the first call: its weights go with the prefill step.
    if (enc)
      encoder_attention_.push_back(rec);
    else
      pending_attention_[e.row].push_back(rec);
  }

  void call(const CallEvent& e) {
    if (e.round != round_) {  // a new round: the rows hold what the last round's selections made
      flush_pruned();
      seq_ = next_seq_;
      next_seq_.clear();
      round_ = e.round;
    }
    CallRecord c;
    c.round = e.round;
    c.prefill = e.prefill;
    c.fed.assign(e.fed.begin(), e.fed.end());
    c.cache_before = e.cache_before;
    c.cache_after = e.cache_after;
    c.logits.assign(e.logits.begin(), e.logits.end());
    c.probs.resize(e.processed.size());
    for (size_t v = 0; v < e.processed.size(); ++v)
      c.probs[v] = std::exp(static_cast<double>(e.processed[v]) - e.log_normalizer);
    c.delta = e.max_abs_delta;
    if (e.prefill)
      for (const json& a : encoder_attention_) c.attention.push_back(a);
    auto it = pending_attention_.find(e.row);
    if (it != pending_attention_.end()) {
      for (json& a : it->second) c.attention.push_back(std::move(a));
      pending_attention_.erase(it);
    }
    calls_[e.row] = std::move(c);
  }

  void select(const SelectEvent& e) {
    CallRecord& c = calls_.at(e.from_row);
    c.selected_any = true;
    std::vector<int32_t> seq = seq_[e.from_row];
    seq.push_back(e.token);
    if (e.to_row >= 0) next_seq_[e.to_row] = seq;
    json stop = {{"stopped", e.stopped},
                 {"reason", e.stopped ? json(to_string(e.reason)) : json(nullptr)}};
    json sel = {{"id", e.token}, {"token", token(e.token)}, {"prob", c.probs[size_t(e.token)]}};
    steps_.push_back(step_json(e.from_row, c, sel, stop, seq, e.to_row, e.score));
  }

  json finish(const GenerateResult& r, const std::vector<int32_t>& input,
              const GenerateOptions& opt, const SearchStrategy& strategy) {
    flush_pruned();
    const Vocab& vocab = m_.vocab();
    const TextCodec& tok = m_.codec();
    json search = strategy.describe(opt);
    search["max_new"] = opt.max_new;
    std::vector<int32_t> tokens = r.tokens;
    if (r.stop_reason == StopReason::Eos) tokens.push_back(vocab.eos_id());
    json t = {{"format", "seqtape-trace"},
              {"version", 1},
              {"source", topt_.source},
              {"model", m_.config().to_json()},
              {"vocab", vocab.tokens()},
              {"input",
               {{"text", topt_.input_text.empty() ? tok.decode(input) : topt_.input_text},
                {"ids", input}}},
              {"search", search},
              {"steps", steps_},
              {"result",
               {{"tokens", tokens},
                {"text", r.text},
                {"stop_reason", to_string(r.stop_reason)},
                {"cache_lengths", r.cache_lengths},
                {"score", r.score},
                {"max_abs_delta", r.max_abs_delta >= 0 ? json(r.max_abs_delta) : json(nullptr)}}}};
    if (m_.seq2seq()) t["decoder_prompt"] = {vocab.bos_id()};
    return t;
  }

 private:
  static double round6(double x) {
    const double r = std::round(x * 1e6) / 1e6;
    return r == 0 ? 0.0 : r;
  }

  std::string token(int32_t id) const { return m_.vocab().token(id); }

  json step_json(int32_t row, const CallRecord& c, const json& selected, const json& stop,
                 const std::vector<int32_t>& seq, int32_t to_row, double score) const {
    std::vector<int32_t> order(c.probs.size());
    std::iota(order.begin(), order.end(), 0);
    const auto k = static_cast<size_t>(
        std::min<int64_t>(topt_.top_candidates, static_cast<int64_t>(order.size())));
    std::partial_sort(order.begin(), order.begin() + static_cast<long>(k), order.end(),
                      [&](int32_t a, int32_t b) {
                        const double pa = c.probs[size_t(a)], pb = c.probs[size_t(b)];
                        return pa > pb || (pa == pb && a < b);
                      });
    json cands = json::array();
    for (size_t i = 0; i < k; ++i) {
      const int32_t v = order[i];
      cands.push_back({{"id", v},
                       {"token", token(v)},
                       {"prob", c.probs[size_t(v)]},
                       {"logit", c.logits[size_t(v)]}});
    }
    json fed_tokens = json::array();
    for (int32_t id : c.fed) fed_tokens.push_back(token(id));
    json s = {{"index", c.round},
              {"phase", c.prefill ? "prefill" : "decode"},
              // beam: the slot that continues the hypothesis, null when it ended here
              {"hypothesis",
               to_row >= 0 || !per_hypothesis_ ? json(to_row >= 0 ? to_row : row) : json(nullptr)},
              {"parent", row},
              {"fed", c.fed},
              {"fed_tokens", fed_tokens},
              {"cache_before", c.cache_before},
              {"cache_after", c.cache_after},
              {"logits", c.logits},
              {"candidates", cands},
              {"selected", selected},
              {"score", score},
              {"stop", stop},
              {"attention", c.attention},
              {"max_abs_delta", c.delta >= 0 ? json(c.delta) : json(nullptr)},
              {"sequence", seq},
              {"processed", c.cache_after}};
    return s;
  }

  // Beam search: a hypothesis whose call kept no candidate ends here.
  void flush_pruned() {
    for (auto& [row, c] : calls_)
      if (!c.selected_any) {
        json stop = {{"stopped", true}, {"reason", "pruned"}};
        steps_.push_back(step_json(row, c, nullptr, stop, seq_[row], -1, 0.0));
        steps_.back().erase("score");
        c.selected_any = true;
      }
    calls_.clear();
  }

  const InferenceModel& m_;
  TraceOptions topt_;
  bool per_hypothesis_ = false;  // beam search: rows hold hypotheses
  int64_t round_ = 0;
  std::map<int32_t, std::vector<int32_t>> seq_, next_seq_;  // row → prompt/<bos> + selections
  std::map<int32_t, CallRecord> calls_;                     // this round's calls, by row
  std::map<int32_t, json> pending_attention_;               // attention of calls not yet seen
  json encoder_attention_ = json::array();                  // Seq2Seq: the encoder's, once
  json steps_ = json::array();
};

}  // namespace

TracedRun generate_traced(const InferenceModel& model, const std::vector<int32_t>& input,
                          GenerateOptions opt, const SearchStrategy& strategy,
                          const TraceOptions& topt) {
  if (opt.on_call || opt.on_select || opt.on_attention)
    fail("generate_traced", "the observer hooks are already in use");
  const std::vector<int32_t> start =
      model.seq2seq() ? std::vector<int32_t>{model.vocab().bos_id()} : input;
  Recorder rec(model, start, topt, strategy.per_hypothesis());
  opt.verify_cache = topt.verify_cache && opt.use_cache;
  opt.on_attention = [&rec](const AttentionEvent& e) { rec.attention(e); };
  opt.on_call = [&rec](const CallEvent& e) { rec.call(e); };
  opt.on_select = [&rec](const SelectEvent& e) { rec.select(e); };
  TracedRun out;
  out.result = generate(model, {input}, opt, strategy).at(0);
  out.trace = rec.finish(out.result, input, opt, strategy);
  return out;
}

}  // namespace seqtape
