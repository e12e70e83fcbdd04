// generate(): a strategy over a SearchContext and a Stepper; and encode_input().
//
// Dimension key: B inputs, V vocabulary.
#include "infer/search.h"

namespace seqtape {

std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt) {
  return generate(model, inputs, opt, *make_strategy(opt));
}

std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt, const SearchStrategy& strategy) {
  const SearchContext context(model, inputs, opt);
  Stepper st(model, opt, inputs.size());
  return strategy.run(context, st);
}

std::vector<int32_t> encode_input(const InferenceModel& model, const Tokenizer& tok,
                                  std::string_view text, std::string_view context) {
  return encode_input(model, CharCodec(tok.vocab()), text, context);
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
