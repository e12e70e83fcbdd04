#pragma once
// Logit processors: small classes that edit one hypothesis' logits before its token is chosen,
// built as a list from the options (as CTranslate2's LogitsProcessor and HF's
// LogitsProcessorList). They change the score: log p(v) is taken under softmax of the processed
// logits. Adding one is a new class here plus one line in make_processors().
//
// Sampling's temperature, top-k and top-p only shape the draw, not the score: they are warpers
// in infer/sampler.h.
//
// Dimension key: V vocabulary, G tokens generated so far.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "infer/options.h"

namespace seqtape {

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // Edits logits [V] of a hypothesis that has generated `generated` [G] (the prompt or source
  // excluded).
  virtual void apply(std::span<float> logits, std::span<const int32_t> generated) const = 0;
  // True for a processor that only forbids tokens (sets −∞): when the forbidding processors
  // together leave no token, they are lifted for that step.
  virtual bool forbids() const { return true; }
};

// Each distinct generated token once: a positive logit is divided by the penalty, a negative one
// multiplied.
class RepetitionPenalty : public LogitsProcessor {
 public:
  explicit RepetitionPenalty(double penalty) : penalty_(static_cast<float>(penalty)) {}
  void apply(std::span<float> logits, std::span<const int32_t> generated) const override;
  bool forbids() const override { return false; }

 private:
  float penalty_;
};

// −∞ for every token that would complete an n-gram already present in the generated tokens.
class NoRepeatNgram : public LogitsProcessor {
 public:
  explicit NoRepeatNgram(int64_t n) : n_(n) {}
  void apply(std::span<float> logits, std::span<const int32_t> generated) const override;

 private:
  int64_t n_;
};

// −∞ for the end tokens while fewer than min_new tokens are generated.
class MinNewTokens : public LogitsProcessor {
 public:
  MinNewTokens(int64_t min_new, std::vector<int32_t> end_ids)
      : min_new_(min_new), end_ids_(std::move(end_ids)) {}
  void apply(std::span<float> logits, std::span<const int32_t> generated) const override;

 private:
  int64_t min_new_;
  std::vector<int32_t> end_ids_;
};

// −∞ for every suppressed token.
class SuppressTokens : public LogitsProcessor {
 public:
  explicit SuppressTokens(std::vector<int32_t> ids) : ids_(std::move(ids)) {}
  void apply(std::span<float> logits, std::span<const int32_t> generated) const override;

 private:
  std::vector<int32_t> ids_;
};

// The processors in the order they run.
class LogitsProcessorList {
 public:
  void add(std::unique_ptr<LogitsProcessor> p) { list_.push_back(std::move(p)); }
  size_t size() const { return list_.size(); }
  // out [V] = the processed `raw` [V]; if every token ended up −∞, the forbidding processors
  // are lifted for this step. Returns log Σ exp(out): log p(v) = out[v] − the result.
  double process(const float* raw, std::span<float> out, std::span<const int32_t> generated) const;

 private:
  std::vector<std::unique_ptr<LogitsProcessor>> list_;
};

// The list the options ask for (an option at its "off" value adds nothing). end_ids: the end
// tokens in use.
LogitsProcessorList make_processors(const GenerateOptions& o, const std::vector<int32_t>& end_ids);

}  // namespace seqtape
