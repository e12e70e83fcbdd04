#pragma once
// Checks of `seqtape generate`'s inputs that bound what a run may cost, kept apart from the
// command's flow: --stop text, the decoding memory, and the size of a --trace.

#include <string>
#include <vector>

#include "infer/model.h"
#include "infer/search.h"

namespace seqtape::cli {

// Every --stop text must be valid UTF-8 (output is cut before it, in whole characters):
// UsageError naming the first bad byte.
void check_stop_strings(const std::vector<std::string>& stops);

// Refuses (Error "<doing>: too large for this machine: ...", exit 3) decoding `inputs` inputs
// at once, the longest of `input_tokens` tokens, when the weights, the KV cache of their rows
// (each input's beams or --num-samples draws, x length) and the logits need more memory than
// is available (model/memory_budget.h).
void check_decoding_budget(const InferenceModel& model, size_t input_tokens,
                           const GenerateOptions& o, const std::string& doing = "generate",
                           size_t inputs = 1);

// A --trace records every attention weight of every step: its size grows with the square of
// the length. Refuses (UsageError) a run that could record more than kMaxTraceWeights.
inline constexpr uint64_t kMaxTraceWeights = 1'000'000;  // about 25 MB of trace JSON
uint64_t trace_attention_weights(const ModelConfig& c, size_t input_tokens,
                                 const GenerateOptions& o);
void check_trace_size(const InferenceModel& model, size_t input_tokens, const GenerateOptions& o);

}  // namespace seqtape::cli
