#pragma once
// Search strategies: the SearchStrategy interface that generate() runs, the three strategies
// (greedy, sampling, beam search), and the SearchContext they share: the checked inputs, the
// processors, the stop check and the tracing and streaming hooks. A strategy makes the search of
// one input (a RowSearch, infer/row_search.h); run() steps those of every input together, and
// the server's continuous scheduler steps them as requests come and go. The strategies are
// registered by name (strategy_registry(), infer/strategy.cpp): make_strategy() picks the first
// the options select, and a trace describes one by its name and the options it reads.
//
// Dimension key: B inputs, K beam size, V vocabulary.

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infer/model.h"
#include "infer/options.h"
#include "infer/output_text.h"
#include "infer/processors.h"
#include "infer/row_search.h"
#include "infer/stepper.h"
#include "tensor/rng.h"

namespace seqtape {

// What every strategy needs, derived once from the model, inputs and options.
struct SearchContext {
  const InferenceModel& model;
  const GenerateOptions& opt;
  const std::vector<std::vector<int32_t>>& inputs;
  int64_t V = 0;
  std::vector<int32_t> end_ids;
  std::vector<uint8_t> is_end;                   // [V]
  std::vector<std::string> pieces;               // [V] text of each token (specials: "")
  std::vector<std::string> first_pieces;         // [V] the same before any text token (TextCodec)
  std::vector<int64_t> limit;                    // [B] max new tokens (max_new, positions)
  std::vector<std::vector<int32_t>> first_feed;  // [B] <bos>, or the prompt
  int64_t capacity = 0;                          // positions a row may process
  LogitsProcessorList processors;

  // Checks the options and inputs (Error naming what is wrong).
  SearchContext(const InferenceModel& m, const std::vector<std::vector<int32_t>>& in,
                const GenerateOptions& o);
  std::vector<std::vector<int32_t>> sources() const;  // the encoder's (Seq2Seq), else none

  // A hypothesis of `input` selected `token`: appends it to tokens and text unless it is an end
  // token; returns why the hypothesis ended (end token, stop string, length limit), if it did.
  std::optional<StopReason> extend(size_t input, int32_t token, std::vector<int32_t>& tokens,
                                   OutputText& text) const;
  // Tracing: the CallEvent of one row of a call (raw and processed logits [V]).
  void report_call(const Stepper& st, size_t input, int64_t round, int32_t row,
                   std::span<const int32_t> fed, const float* raw, std::span<const float> processed,
                   double log_normalizer) const;
  void report_select(const SelectEvent& e) const {
    if (opt.on_select) opt.on_select(e);
  }
  void stream(size_t input, int32_t token, const std::string& text, bool done) const {
    if (opt.on_stream) opt.on_stream(StreamEvent{int64_t(input), token, text, done});
  }
};

// score / length^α, length counting the end token of a hypothesis that ended with one.
double normalized_score(double score, size_t n_tokens, StopReason r, double alpha);

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // Session rows one input needs (beam search: K).
  virtual int64_t rows_per_input(const GenerateOptions& o) const {
    (void)o;
    return 1;
  }
  // The search of input `input` of the context on `rows` (rows_per_input() rows the caller
  // has begun or admitted, empty).
  virtual std::unique_ptr<RowSearch> start(const SearchContext& c, size_t input,
                                           std::span<const int32_t> rows) const = 0;
  // Decodes every input of the context together: begins the stepper's session with
  // rows_per_input() rows per input and steps all the searches until each is done (or
  // opt.cancel says stop).
  std::vector<GenerateResult> run(const SearchContext& c, Stepper& st) const;
  // Its name in the registry (the trace's "kind").
  virtual std::string_view name() const = 0;
  // Tracing: the trace's "search" object: kind, beam_size and the values of the options its
  // registry row lists.
  nlohmann::json describe(const GenerateOptions& o) const;
  // Tracing: true when a row holds one of several hypotheses of an input, re-gathered after
  // every call (a selection then names the row that continues it).
  virtual bool per_hypothesis() const { return false; }
};

// One row per input, one token chosen per call (greedy and sampling).
class SingleRowSearch : public SearchStrategy {
 public:
  // Chooses a token from one row's processed logits [V]; rng is that input's Rng(seed).
  using Picker = std::function<int32_t(std::span<const float> processed, Rng& rng)>;
  std::unique_ptr<RowSearch> start(const SearchContext& c, size_t input,
                                   std::span<const int32_t> rows) const final;

 protected:
  virtual Picker picker(const GenerateOptions& o, int64_t V) const = 0;
};

// The most likely token (the lowest id among equals).
class GreedySearch : public SingleRowSearch {
 public:
  std::string_view name() const override { return "greedy"; }

 protected:
  Picker picker(const GenerateOptions& o, int64_t V) const override;
};

// A draw from the processed logits shaped by top-k, temperature and top-p (infer/sampler.h).
class SamplingSearch : public SingleRowSearch {
 public:
  std::string_view name() const override { return "sample"; }

 protected:
  Picker picker(const GenerateOptions& o, int64_t V) const override;
};

// K = opt.beam hypotheses per input on K rows (see infer/search.h for the ranking).
class BeamSearch : public SearchStrategy {
 public:
  int64_t rows_per_input(const GenerateOptions& o) const override { return o.beam; }
  std::unique_ptr<RowSearch> start(const SearchContext& c, size_t input,
                                   std::span<const int32_t> rows) const override;
  std::string_view name() const override { return "beam"; }
  bool per_hypothesis() const override { return true; }
};

// A strategy registered by name: when the options select it, how to make it, and the decoding
// options (fields of infer/options.h's table) it reads.
struct StrategyEntry {
  std::string_view name;                      // SearchStrategy::name()
  bool (*selects)(const GenerateOptions& o);  // asked in the registry's order; the last: always
  std::unique_ptr<SearchStrategy> (*make)();
  std::vector<std::string_view> options;  // shown by describe()
};
// sample, then beam (beam > 1), then greedy.
const std::vector<StrategyEntry>& strategy_registry();
const StrategyEntry* find_strategy(std::string_view name);  // nullptr when not registered

// The first registered strategy the options select.
std::unique_ptr<SearchStrategy> make_strategy(const GenerateOptions& o);

}  // namespace seqtape
