#pragma once
// Sampling: a list of warpers (top-k, temperature, top-p) narrows and weighs the tokens a draw
// may pick, then the Sampler draws from the renormalized weights. Warpers shape the draw only;
// the score uses the processed logits (infer/processors.h), so temperature 0, top-k 1 and greedy
// agree in tokens and score.
//
// Dimension key: V vocabulary.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tensor/rng.h"

namespace seqtape {

// The tokens a draw may pick: order[0, size), best first once sorted, with their weights
// (unnormalized probabilities; 0 outside the support).
struct SamplingSupport {
  std::span<const float> logits;  // processed [V]
  std::vector<int32_t> order;     // [V]
  int64_t size = 0;
  bool sorted = false;
  std::vector<double> weight;  // [V]
  double total = 0;            // Σ weight over order[0, size)
  // Keeps the k best candidates (higher logit, then lower id), sorted best first.
  void keep_best(int64_t k);
};

class LogitsWarper {
 public:
  virtual ~LogitsWarper() = default;
  virtual void apply(SamplingSupport& s) const = 0;
};

// The k most likely tokens.
class TopK : public LogitsWarper {
 public:
  explicit TopK(int64_t k) : k_(k) {}
  void apply(SamplingSupport& s) const override;

 private:
  int64_t k_;
};

// Weighs the support by softmax(logits / T); T = 0 keeps only the best token.
class Temperature : public LogitsWarper {
 public:
  explicit Temperature(double t) : t_(t) {}
  void apply(SamplingSupport& s) const override;

 private:
  double t_;
};

// The smallest most-likely prefix of the (weighed, sorted) support whose probability reaches p;
// always at least one token.
class TopP : public LogitsWarper {
 public:
  explicit TopP(double p) : p_(p) {}
  void apply(SamplingSupport& s) const override;

 private:
  double p_;
};

using LogitsWarperList = std::vector<std::unique_ptr<LogitsWarper>>;
// Top-k (when k > 0), temperature, then top-p (when p < 1): the order they must run in.
LogitsWarperList make_warpers(double temperature, int64_t top_k, double top_p);

// Draws from softmax(logits / T) restricted by the warpers, renormalized. Ties are broken by the
// lower id. Reuses its buffers: no allocation per call.
class Sampler {
 public:
  Sampler(int64_t vocab_size, LogitsWarperList warpers);
  // Probabilities [V] (zero outside the support).
  const std::vector<double>& distribution(std::span<const float> logits);
  int32_t sample(std::span<const float> logits, Rng& rng);

 private:
  LogitsWarperList warpers_;
  SamplingSupport s_;
};

}  // namespace seqtape
