#pragma once
// The OpenAI-compatible side of `seqtape serve`: POST /v1/completions bodies translated into a
// GenerateRequest (the checks are serve/request.cpp's, with the errors renamed to the OpenAI
// field), and the completion objects, stream chunks, model list and error bodies of OpenAI's
// API reference. docs/serving.md documents the mapping.
//
//   prompt (a string or a list)  → input / inputs (seq2seq: the source)
//   max_tokens (default 16)      → max_new
//   temperature (default 1)      → > 0: sample at that temperature; 0: greedy (the default
//                                  when seqtape.beam > 1)
//   top_p, seed                  → the same, when sampling
//   n                            → sampling: num_samples; beam: n_best; greedy: 1 only
//   stop (a string or a list)    → stop
//   stream, stream_options.include_usage, user (taken, unused)
//   seqtape: {beam, length_penalty, top_k, repetition_penalty, no_repeat_ngram, min_new, end,
//             suppress, no_cache, verify_cache, timeout_ms}: generate's own options and the
//             deadline, as /v1/generate names them
//
// Dimension key: B prompts, N choices per prompt.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/options.h"
#include "serve/request.h"

namespace seqtape::serve {

struct CompletionRequest {
  GenerateRequest generate;
  int64_t n = 1;  // N choices per prompt
  bool include_usage = false;
};

// `model_name`: the one model /v1/models lists (a request naming another gets a RequestError
// on "model").
CompletionRequest parse_completion_request(const std::string& body, const InferenceModel& model,
                                           const Limits& limits, const std::string& model_name);

// "stop" (an end token or a stop string) or "length" (max_tokens, or the model's positions).
const char* finish_reason(StopReason r);

// The completion object of a finished request. `results[b]` and `inputs[b]` are prompt b's.
nlohmann::json completion_json(const std::string& id, int64_t created,
                               const std::string& model_name, const CompletionRequest& r,
                               const std::vector<GenerateResult>& results,
                               const std::vector<std::vector<int32_t>>& inputs);

// {prompt_tokens, completion_tokens, total_tokens} of the request's choices.
nlohmann::json completion_usage(const CompletionRequest& r,
                                const std::vector<GenerateResult>& results,
                                const std::vector<std::vector<int32_t>>& inputs);

// One streamed chunk: `choices` (each {index, text, logprobs, finish_reason}) or, for the usage
// chunk, empty choices and `usage`.
nlohmann::json completion_chunk(const std::string& id, int64_t created,
                                const std::string& model_name, nlohmann::json choices,
                                const nlohmann::json& usage = nullptr);
nlohmann::json completion_choice(int64_t index, const std::string& text, const char* finish);

// GET /v1/models.
nlohmann::json models_json(const std::string& model_name, int64_t created);

// {"error": {"message", "type", "param", "code"}} of an error answered with `status`.
nlohmann::json openai_error(int status, const std::string& field, const std::string& message);

}  // namespace seqtape::serve
