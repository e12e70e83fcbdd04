#pragma once
// What generate() takes and gives: the options (checked once, in problem()), the tracing and
// streaming events, and the results. See infer/search.h for the definitions of score, length
// and stop reasons.
//
// Dimension key: V vocabulary.

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "infer/layers.h"  // AttentionObserver
#include "model/memory_budget.h"
#include "text/tokenizer.h"  // Vocab

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
  int64_t beam = 1;             // K; > 1 selects beam search
  int64_t n_best = 1;           // hypotheses returned per input (<= beam)
  double length_penalty = 1.0;  // α of score / length^α (beam ranking)
  bool sample = false;          // draw tokens instead of taking the best
  double temperature = 1.0;     // sampling: logits / T; 0 = greedy
  int64_t top_k = 0;            // sampling: keep the k most likely (0 = all)
  double top_p = 1.0;           // sampling: smallest set with probability >= p, in (0, 1]
  uint64_t seed = 0;            // sampling: every input draws from Rng(seed)
  // Sampling: draws per input. Draw k of an input uses Rng(seed + k), so draw 0 is the
  // single-sample result and draw k equals a run with seed + k; the draws are the result's
  // n_best, in draw order (not ranked), and the result itself is draw 0. No on_stream.
  int64_t num_samples = 1;
  // Per input: that input's sampling seed (overrides `seed`); empty: `seed` for every input.
  std::vector<uint64_t> seeds;
  double repetition_penalty = 1;  // > 0; 1 = off
  int64_t no_repeat_ngram = 0;    // 0 = off
  int64_t min_new = 0;            // end tokens are blocked before this many new tokens
  int64_t max_new = 64;           // also capped by max_positions
  std::vector<int32_t> end_ids;   // empty: {<eos>}
  std::vector<std::string> stop_strings;
  std::vector<int32_t> suppress_ids;  // never generated (logit −∞)
  bool use_cache = true;              // false: recompute the whole prefix every step
  bool verify_cache = false;  // also run the other mode and report the max |Δ| of the logits
  std::function<void(const StreamEvent&)> on_stream;
  std::function<bool()> cancel;  // asked before every step; true stops all unfinished inputs
  std::function<void(const CallEvent&)> on_call;      // tracing
  std::function<void(const SelectEvent&)> on_select;  // tracing
  AttentionObserver on_attention;                     // tracing: the decoding session's weights

  // The first option that makes no sense, as a message that spells each option's name with
  // `name` (the CLI passes its flag names); nullopt when all are fine. The one place options
  // are checked.
  using Namer = std::function<std::string(std::string_view option)>;
  std::optional<std::string> problem(const Namer& name) const;
  // Error "generate: option <problem>" with the field names (beam, n_best, ...).
  void validate() const;
};

// The decoding options as one table (infer/options.cpp), one row per option a user sets:
// generate's and eval's flags (cli/decoding_flags.h), the server's request fields and
// /v1/completions' extension object (serve/request.cpp, serve/openai.cpp), Python's keywords
// (through the request parser), the playground (GET /v1/model) and problem() read it. The
// defaults are GenerateOptions' member initializers, read through `member`.
using OptionMember =
    std::variant<int64_t GenerateOptions::*, uint64_t GenerateOptions::*, double GenerateOptions::*,
                 bool GenerateOptions::*, std::vector<std::string> GenerateOptions::*,
                 std::vector<int32_t> GenerateOptions::*>;

struct DecodingOption {
  std::string_view field;  // the member's name: problem() names the option by it
  std::string_view json;   // the request field (and Python's keyword)
  std::string_view flag;   // generate's flag
  std::string_view help;   // generate's --help
  OptionMember member;
  // A bool member the flag or field sets to its opposite (--no-cache: use_cache = false).
  bool negated = false;
  // Acts only when sampling: given without sample, refused ("--top-k needs --sample").
  bool needs_sample = false;
  // A token-id member is given as vocabulary tokens; with keeps_eos, <eos> stays one of them.
  bool keeps_eos = false;
  // Its name in /v1/completions' body; "" for the options that go in the "seqtape" object.
  std::string_view openai;
  // The option's own check (its range or values), spelled with `name`; cross-option rules are
  // in problem().
  std::optional<std::string> (*check)(const GenerateOptions& o,
                                      const GenerateOptions::Namer& name) = nullptr;
};

const std::vector<DecodingOption>& decoding_options();
// The row of a member name ("top_k"), or nullptr.
const DecodingOption* find_decoding_option(std::string_view field);
// An option's name as a flag ("--top-k") or a request field ("top_k"): the Namers of problem().
std::string option_flag(std::string_view field);
std::string option_json(std::string_view field);
// A row's value in `o`, as JSON (the request field's type; a negated flag as given).
nlohmann::json option_value(const DecodingOption& d, const GenerateOptions& o);

// What options given by a user (a flag or field; `given` says which rows) cannot do beyond
// problem(): a sampling option without sample; verify_cache with no_cache. Spelled with `name`.
std::optional<std::string> given_problem(const GenerateOptions& o,
                                         const std::function<bool(const DecodingOption&)>& given,
                                         const GenerateOptions::Namer& name);
// A token row's member set from vocabulary tokens (end: <eos> first); returns the first token
// the vocabulary lacks, if any (the caller names where it came from).
std::optional<std::string> set_token_option(const DecodingOption& d, GenerateOptions& o,
                                            const Vocab& vocab,
                                            const std::vector<std::string>& tokens);

// New tokens decoding an input of `input_tokens` tokens can make: o.max_new, never past the
// model's max_positions (a decoder-only prompt takes its share of them).
int64_t new_tokens(const ModelConfig& c, size_t input_tokens, const GenerateOptions& o);
// What decoding `inputs` inputs at once needs in memory (model/memory_budget.h), the longest of
// `input_tokens` tokens: every input becomes o.beam hypotheses, or o.num_samples draws (one
// batch), all decoded together (`rows_are` names those rows in the message).
MemoryNeed decoding_need(const ModelConfig& c, size_t input_tokens, size_t inputs,
                         const GenerateOptions& o, const char* rows_are);

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

}  // namespace seqtape
