#pragma once
// Generation: a search strategy (infer/strategy.h: greedy, beam search, sampling) drives
// DecodeSession::prefill/step, with the logit processors (infer/processors.h), the sampling
// warpers (infer/sampler.h), several end tokens, stop strings, cancellation, streaming and a stop
// reason on every result. The options and results are in infer/options.h.
//
// Dimension key: B inputs, K beam size, V vocabulary.
//
// Definitions used throughout:
//   - Input: Seq2Seq → the encoder ids (text + <eos>); decoding starts from <bos>.
//     DecoderOnly → the prompt ids (text + <sep>), prefilled in one pass; generation follows it.
//     encode_input() makes either from text.
//   - Generated tokens exclude the end token that stopped a hypothesis; they include the token
//     that completed a stop string (the text is cut before the stop string).
//   - score = Σ log p(token) under softmax of the *processed* logits (after repetition penalty,
//     no-repeat n-gram and min-new blocking), end token included. Temperature, top-k and top-p
//     only shape sampling; they do not enter the score, so temperature 0, top-k 1 and greedy
//     agree in tokens and score.
//   - Beam ranking: normalized = score / length^α with α = length_penalty and length = the
//     number of generated tokens *counting the end token* when the hypothesis ended with one.
//   - Beam search keeps K hypotheses; each step expands the live ones and keeps the best
//     (K − ended) candidates over all of them; a candidate ending with an end token, a stop
//     string or at the length limit has ended. The search stops when all K have ended (or at
//     max length, where every live hypothesis ends with reason length). beam 1 is greedy.
//   - Repetition penalty and no-repeat n-gram look at the generated tokens only (not the
//     prompt or source).
//   - Batches: every input is decoded on its own row(s) and gets its own Rng(seed), so a batch
//     gives what each input gives alone; a finished row is no longer fed.

#include <cstdint>
#include <string_view>
#include <vector>

#include "infer/model.h"
#include "infer/options.h"
#include "infer/processors.h"
#include "infer/sampler.h"
#include "infer/session.h"
#include "infer/strategy.h"
#include "text/tokenizer.h"

namespace seqtape {

// Decodes every input with the strategy the options select (make_strategy).
std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt);
// The same with the strategy given (e.g. BeamSearch with beam 1).
std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt, const SearchStrategy& strategy);

// Text → model input: Seq2Seq text + <eos>, DecoderOnly text + <sep> (the text alone when the
// vocabulary has no <sep>, as in datasets/f15). Errors for empty text,
// characters the vocabulary cannot encode (without <unk>), and inputs longer than
// max_positions.
// tok: the model's own codec (model.codec()); another one only to test what it refuses.
std::vector<int32_t> encode_input(const InferenceModel& model, const TextCodec& tok,
                                  std::string_view text, std::string_view context = "input");

}  // namespace seqtape
