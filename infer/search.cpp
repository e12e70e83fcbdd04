// generate(): a strategy over a SearchContext and a Stepper; and encode_input().
//
// Dimension key: B inputs, V vocabulary.
#include "infer/search.h"

#include <algorithm>

namespace seqtape {

std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt) {
  return generate(model, inputs, opt, *make_strategy(opt));
}

namespace {

// num_samples K > 1: every input K times in one batch, draw k seeded with seed + k; each input's
// draws become its n_best (draw order) and draw 0 its result.
std::vector<GenerateResult> generate_samples(const InferenceModel& model,
                                             const std::vector<std::vector<int32_t>>& inputs,
                                             const GenerateOptions& opt,
                                             const SearchStrategy& strategy) {
  opt.validate();
  if (!opt.seeds.empty() && opt.seeds.size() != inputs.size())
    fail("generate", "option seeds has " + std::to_string(opt.seeds.size()) + " entries for " +
                         std::to_string(inputs.size()) + " inputs");
  const auto K = static_cast<size_t>(opt.num_samples);
  GenerateOptions each = opt;
  each.num_samples = 1;
  each.seeds.clear();
  std::vector<std::vector<int32_t>> rows;
  for (size_t i = 0; i < inputs.size(); ++i)
    for (size_t k = 0; k < K; ++k) {
      rows.push_back(inputs[i]);
      each.seeds.push_back((opt.seeds.empty() ? opt.seed : opt.seeds.at(i)) + k);
    }
  std::vector<GenerateResult> draws = generate(model, rows, each, strategy);
  std::vector<GenerateResult> out(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    out[i] = draws[i * K];
    out[i].n_best.clear();
    for (size_t k = 0; k < K; ++k) {
      const GenerateResult& d = draws[i * K + k];
      out[i].n_best.push_back({d.tokens, d.text, d.score, d.normalized_score, d.stop_reason});
      out[i].max_abs_delta = std::max(out[i].max_abs_delta, d.max_abs_delta);
    }
  }
  return out;
}

}  // namespace

std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt, const SearchStrategy& strategy) {
  if (opt.num_samples > 1) return generate_samples(model, inputs, opt, strategy);
  const SearchContext context(model, inputs, opt);
  Stepper st(model, opt, inputs.size());
  return strategy.run(context, st);
}

std::vector<int32_t> encode_input(const InferenceModel& model, const TextCodec& tok,
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
