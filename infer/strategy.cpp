// SearchContext (inputs, processors, stop check, hooks) and the choice of strategy.
//
// Dimension key: B inputs, V vocabulary.
#include "infer/strategy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "text/tokenizer.h"

namespace seqtape {

namespace {

void check_inputs(const InferenceModel& m, const std::vector<std::vector<int32_t>>& in) {
  const int64_t P = m.config().max_positions, V = m.config().vocab_size;
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
        fail("generate", what + " holds id " + std::to_string(id) + " outside the vocabulary [0, " +
                             std::to_string(V) + ")");
  }
}

// Token ids an option names (end tokens, ...) must be in the vocabulary.
void check_token_ids(const std::string& what, const std::vector<int32_t>& ids, int64_t V) {
  for (int32_t id : ids)
    if (id < 0 || id >= V)
      fail("generate", what + " id " + std::to_string(id) + " outside the vocabulary [0, " +
                           std::to_string(V) + ")");
}

}  // namespace

SearchContext::SearchContext(const InferenceModel& m, const std::vector<std::vector<int32_t>>& in,
                             const GenerateOptions& o)
    : model(m), opt(o), inputs(in), V(m.config().vocab_size) {
  o.validate();
  const Vocab& vocab = m.vocab();
  end_ids = o.end_ids.empty() ? std::vector<int32_t>{vocab.eos_id()} : o.end_ids;
  is_end.assign(size_t(V), 0);
  check_token_ids("end token", end_ids, V);
  check_token_ids("suppressed token", o.suppress_ids, V);
  for (int32_t e : end_ids) is_end[size_t(e)] = 1;
  const TextCodec& codec = m.codec();
  // Special tokens (<unk>, <sep>, ...) stay in `tokens` but never reach the text.
  for (int32_t v = 0; v < V; ++v) {
    const bool special = vocab.is_special(v);
    pieces.push_back(special ? std::string() : codec.token_text(v, false));
    first_pieces.push_back(special ? std::string() : codec.token_text(v, true));
  }
  check_inputs(m, in);
  if (!o.seeds.empty() && o.seeds.size() != in.size())
    fail("generate", "option seeds has " + std::to_string(o.seeds.size()) + " entries for " +
                         std::to_string(in.size()) + " inputs");
  const int64_t P = m.config().max_positions;
  for (const std::vector<int32_t>& input : in) {
    const auto n = static_cast<int64_t>(input.size());
    if (m.seq2seq()) {
      limit.push_back(std::min(o.max_new, P));  // selecting token k processes k positions
      first_feed.push_back({vocab.bos_id()});
      capacity = std::max(capacity, limit.back());
    } else {
      limit.push_back(std::min(o.max_new, P - n + 1));  // k-th new token: n + k − 1 positions
      first_feed.push_back(input);
      capacity = std::max(capacity, n + limit.back() - 1);
    }
  }
  processors = make_processors(o, end_ids);
}

std::vector<std::vector<int32_t>> SearchContext::sources() const {
  return model.seq2seq() ? inputs : std::vector<std::vector<int32_t>>{};
}

std::optional<StopReason> SearchContext::extend(size_t input, int32_t token,
                                                std::vector<int32_t>& tokens,
                                                OutputText& text) const {
  if (is_end[size_t(token)]) return StopReason::Eos;
  // `first` of TextCodec::token_text: no text token yet (SentencePiece drops its leading space).
  const Vocab& vocab = model.vocab();
  const bool first =
      std::ranges::all_of(tokens, [&](int32_t t) { return is_control_token(vocab, t); });
  tokens.push_back(token);
  if (text.append((first ? first_pieces : pieces)[size_t(token)])) return StopReason::StopString;
  if (static_cast<int64_t>(tokens.size()) >= limit[input]) return StopReason::Length;
  return std::nullopt;
}

void SearchContext::report_call(const Stepper& st, size_t input, int64_t round, int32_t row,
                                std::span<const int32_t> fed, const float* raw,
                                std::span<const float> processed, double log_normalizer) const {
  if (!opt.on_call) return;
  const int64_t after = st.length(row);
  opt.on_call({int64_t(input), round, row, round == 0, fed, after - int64_t(fed.size()), after,
               std::span<const float>(raw, size_t(V)), processed, log_normalizer,
               st.row_delta(row)});
}

double normalized_score(double score, size_t n_tokens, StopReason r, double alpha) {
  const auto len = static_cast<double>(n_tokens + (r == StopReason::Eos ? 1 : 0));
  return len > 0 ? score / std::pow(len, alpha) : score;
}

std::vector<GenerateResult> SearchStrategy::run(const SearchContext& c, Stepper& st) const {
  const int64_t K = rows_per_input(c.opt);
  std::vector<int32_t> row_source(c.inputs.size() * size_t(K));
  for (size_t r = 0; r < row_source.size(); ++r) row_source[r] = static_cast<int32_t>(r / K);
  st.begin(c.sources(), row_source, c.capacity);
  std::vector<std::unique_ptr<RowSearch>> searches;
  DecodeLoop loop(st, c.V);
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    std::vector<int32_t> rows(static_cast<size_t>(K));
    std::iota(rows.begin(), rows.end(), static_cast<int32_t>(int64_t(i) * K));
    searches.push_back(start(c, i, rows));
    loop.add(searches.back().get());
  }
  while (!loop.empty()) {
    if (c.opt.cancel && c.opt.cancel()) {
      for (RowSearch* s : loop.live()) s->cancel();
      break;
    }
    loop.step();
  }
  std::vector<GenerateResult> out;
  for (auto& s : searches) out.push_back(s->result(st));
  return out;
}

nlohmann::json SearchStrategy::describe(const GenerateOptions& o) const {
  nlohmann::json j = {{"kind", name()}, {"beam_size", rows_per_input(o)}};
  if (const StrategyEntry* e = find_strategy(name()))
    for (std::string_view field : e->options)
      j[std::string(option_json(field))] = option_value(*find_decoding_option(field), o);
  return j;
}

namespace {

template <class S>
std::unique_ptr<SearchStrategy> make_search() {
  return std::make_unique<S>();
}

}  // namespace

// A new strategy: its file (a SearchStrategy and a factory) and a row here, before the rows
// whose selection would shadow it.
const std::vector<StrategyEntry>& strategy_registry() {
  static const std::vector<StrategyEntry> rows = {
      {"sample",
       [](const GenerateOptions& o) { return o.sample; },
       make_search<SamplingSearch>,
       {"temperature", "top_k", "top_p", "seed"}},
      {"beam",
       [](const GenerateOptions& o) { return o.beam > 1; },
       make_search<BeamSearch>,
       {"length_penalty"}},
      {"greedy", [](const GenerateOptions&) { return true; }, make_search<GreedySearch>, {}},
  };
  return rows;
}

const StrategyEntry* find_strategy(std::string_view name) {
  for (const StrategyEntry& e : strategy_registry())
    if (e.name == name) return &e;
  return nullptr;
}

std::unique_ptr<SearchStrategy> make_strategy(const GenerateOptions& o) {
  for (const StrategyEntry& e : strategy_registry())
    if (e.selects(o)) return e.make();
  fail("generate", "no search strategy is registered for these options");
}

}  // namespace seqtape
