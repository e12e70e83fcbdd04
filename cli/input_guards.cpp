#include "cli/input_guards.h"

#include <algorithm>

#include "cli/commands.h"
#include "model/memory_budget.h"
#include "text/tokenizer.h"

namespace seqtape::cli {

void check_stop_strings(const std::vector<std::string>& stops) {
  for (const std::string& s : stops) {
    try {
      utf8_decode(s, "--stop");
    } catch (const Error& e) {
      throw UsageError(std::string(e.what()) + " (a stop text must be whole UTF-8 characters)");
    }
  }
}

void check_decoding_budget(const InferenceModel& model, size_t input_tokens,
                           const GenerateOptions& o, const std::string& doing, size_t inputs) {
  const bool draws = o.num_samples > 1;
  const char* what = inputs > 1 ? (draws ? "rows (inputs x draws)" : "rows (inputs x beam)")
                     : draws    ? "sampled draw(s)"
                                : "beam(s)";
  check_memory_budget(decoding_need(model.config(), input_tokens, inputs, o, what), doing);
}

uint64_t trace_attention_weights(const ModelConfig& c, size_t input_tokens,
                                 const GenerateOptions& o) {
  const auto H = static_cast<uint64_t>(c.n_heads);
  const auto S = static_cast<uint64_t>(input_tokens);
  const auto T = static_cast<uint64_t>(new_tokens(c, input_tokens, o));
  const auto K = static_cast<uint64_t>(std::max<int64_t>(o.beam, 1));
  const auto enc = static_cast<uint64_t>(c.n_encoder_layers);
  const auto dec = static_cast<uint64_t>(c.n_decoder_layers);
  // Doubles are exact here: every factor is bounded (config_fields()), the sum stays < 2^64.
  double w = 0;
  if (c.arch == Arch::Seq2Seq) {
    w += static_cast<double>(enc * H) * static_cast<double>(S * S);  // encoder, once
    // decoder step t (1..T) of each beam: t self-attention keys and S cross-attention keys
    w += static_cast<double>(K * dec * H) *
         (static_cast<double>(T) * static_cast<double>(T + 1) / 2 + static_cast<double>(T * S));
  } else {
    // the prompt's prefill (S x S / 2), then step t attends to S + t keys
    w += static_cast<double>(dec * H) * static_cast<double>(S) * static_cast<double>(S + 1) / 2;
    w += static_cast<double>(K * dec * H) *
         (static_cast<double>(T) * static_cast<double>(T + 1) / 2 + static_cast<double>(T * S));
  }
  return w >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(w);
}

void check_trace_size(const InferenceModel& model, size_t input_tokens, const GenerateOptions& o) {
  const uint64_t w = trace_attention_weights(model.config(), input_tokens, o);
  if (w > kMaxTraceWeights)
    throw UsageError("--trace: this run could record " + std::to_string(w) +
                     " attention weights (input " + std::to_string(input_tokens) +
                     " tokens, --max-new " + std::to_string(o.max_new) + ", --beam " +
                     std::to_string(o.beam) + "), more than the trace limit of " +
                     std::to_string(kMaxTraceWeights) +
                     " (about 25 MB of JSON): shorten the input or lower --max-new or --beam");
}

}  // namespace seqtape::cli
