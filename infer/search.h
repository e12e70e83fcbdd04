#pragma once
// Generation: greedy, beam search and sampling, all driving DecodeSession::prefill/step, with
// the logit processors (repetition penalty, no-repeat n-gram, min new tokens), several end
// tokens, stop strings, cancellation, streaming and a stop reason on every result.
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
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/rng.h"
#include "infer/model.h"
#include "infer/session.h"
#include "train/tokenizer.h"

namespace seqtape {

enum class StopReason { Eos, Length, StopString, Cancelled };
const char* to_string(StopReason r);  // "eos", "length", "stop_string", "cancelled"

// One streaming callback per chosen token (greedy, sampling); for beam search one event with
// the best hypothesis' text when the input is done. text holds only complete UTF-8 characters
// that are final; the concatenation of an input's texts equals its result text.
struct StreamEvent {
  int64_t input = 0;
  int32_t token = -1;  // the chosen token; -1 on a final event that chose none
  std::string_view text;
  bool done = false;  // last event of this input
};

// Tracing hooks (infer/trace.h). A CallEvent for every row a model call fed, in row order,
// once its logits are processed; a SelectEvent for every token kept from that call (greedy and
// sampling: one per call; beam search: zero or more, one per surviving or ended candidate).
struct CallEvent {
  int64_t input = 0;
  int64_t round = 0;  // 0 = the prefill
  int32_t row = 0;
  bool prefill = false;
  std::span<const int32_t> fed;
  int64_t cache_before = 0, cache_after = 0;  // the row's processed positions
  std::span<const float> logits;              // raw [V]
  std::span<const float> processed;           // after the logit processors [V]
  double log_normalizer = 0;  // log Σ exp(processed): log p(v) = processed[v] − log_normalizer
  double max_abs_delta = -1;  // verify_cache: this row's |cached − uncached| this call; else -1
};
struct SelectEvent {
  int64_t input = 0;
  int64_t round = 0;
  int32_t from_row = 0;  // the row whose call produced the token
  int32_t to_row = -1;   // the row that continues the hypothesis; -1 when it ended
  int32_t token = 0;
  double score = 0;  // the hypothesis' summed log-probability, this token included
  bool stopped = false;
  StopReason reason = StopReason::Length;  // when stopped
};

struct GenerateOptions {
  int64_t beam = 1;               // K; > 1 selects beam search
  int64_t n_best = 1;             // hypotheses returned per input (<= beam)
  double length_penalty = 1.0;    // α of score / length^α (beam ranking)
  bool sample = false;            // draw tokens instead of taking the best
  double temperature = 1.0;       // sampling: logits / T; 0 = greedy
  int64_t top_k = 0;              // sampling: keep the k most likely (0 = all)
  double top_p = 1.0;             // sampling: smallest set with probability >= p, in (0, 1]
  uint64_t seed = 0;              // sampling: every input draws from Rng(seed)
  double repetition_penalty = 1;  // > 0; 1 = off
  int64_t no_repeat_ngram = 0;    // 0 = off
  int64_t min_new = 0;            // end tokens are blocked before this many new tokens
  int64_t max_new = 64;           // also capped by max_positions
  std::vector<int32_t> end_ids;   // empty: {<eos>}
  std::vector<std::string> stop_strings;
  bool use_cache = true;      // false: recompute the whole prefix every step
  bool verify_cache = false;  // also run the other mode and report the max |Δ| of the logits
  std::function<void(const StreamEvent&)> on_stream;
  std::function<bool()> cancel;  // asked before every step; true stops all unfinished inputs
  std::function<void(const CallEvent&)> on_call;      // tracing
  std::function<void(const SelectEvent&)> on_select;  // tracing
  AttentionObserver on_attention;                     // tracing: the decoding session's weights

  // Error naming the offending option and its value.
  void validate() const;
};

struct Hypothesis {
  std::vector<int32_t> tokens;
  std::string text;
  double score = 0;             // Σ log-prob
  double normalized_score = 0;  // score / length^α
  StopReason stop_reason = StopReason::Length;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string text;
  double score = 0;
  double normalized_score = 0;
  StopReason stop_reason = StopReason::Length;
  // Positions held by the cache when each token was selected (prompt of n: n, n+1, ...;
  // Seq2Seq: 1, 2, ...). One entry per decode step of this result.
  std::vector<int64_t> cache_lengths;
  std::vector<Hypothesis> n_best;  // best first (beam search; greedy/sampling: the result)
  double max_abs_delta = -1;       // verify_cache: max |cached − uncached| logit; else -1
};

enum class Strategy { Greedy, Beam, Sample };
Strategy strategy_of(const GenerateOptions& opt);  // sample ? Sample : beam > 1 ? Beam : Greedy

std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt);
// The same with the strategy chosen explicitly (e.g. Beam with beam 1).
std::vector<GenerateResult> generate(const InferenceModel& model,
                                     const std::vector<std::vector<int32_t>>& inputs,
                                     const GenerateOptions& opt, Strategy strategy);

// Text → model input: Seq2Seq text + <eos>, DecoderOnly text + <sep> (the text alone when the
// vocabulary has no <sep>, as in datasets/f15). Errors for empty text,
// characters the vocabulary cannot encode (without <unk>), and inputs longer than
// max_positions.
std::vector<int32_t> encode_input(const InferenceModel& model, const Tokenizer& tok,
                                  std::string_view text, std::string_view context = "input");

// ---- logit processors (exposed for tests) -------------------------------------------------

// Each distinct token of `generated` once: a positive logit is divided by penalty, a
// negative one multiplied.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> generated,
                              double penalty);
// Sets to −∞ every token that would complete an n-gram already present in `generated`.
void block_repeated_ngrams(std::span<float> logits, std::span<const int32_t> generated, int64_t n);

// Sampling over softmax(logits / T) restricted to the top-k tokens, then to the smallest
// most-likely set whose probability reaches top_p (always at least one token), renormalized.
// Ties are broken by the lower id. Reuses its buffers: no allocation per call.
class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);
  // Probabilities [V] (zero outside the support). T = 0: all mass on the argmax.
  const std::vector<double>& distribution(std::span<const float> logits, double temperature,
                                          int64_t top_k, double top_p);
  int32_t sample(std::span<const float> logits, double temperature, int64_t top_k, double top_p,
                 Rng& rng);

 private:
  std::vector<int32_t> order_;
  std::vector<double> probs_;
  int64_t support_ = 0;  // order_[0 .. support_) carry the mass
};

}  // namespace seqtape
