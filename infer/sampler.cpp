// The sampling warpers and the Sampler.
//
// Dimension key: V vocabulary.
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>

namespace seqtape {

void SamplingSupport::keep_best(int64_t k) {
  k = std::min(k, size);
  if (!sorted || k < size) {
    auto better = [this](int32_t a, int32_t b) {
      const float la = logits[size_t(a)], lb = logits[size_t(b)];
      return la > lb || (la == lb && a < b);
    };
    if (!sorted) std::partial_sort(order.begin(), order.begin() + k, order.begin() + size, better);
    sorted = true;
    size = k;
  }
}

void TopK::apply(SamplingSupport& s) const {
  s.keep_best(k_);
}

void Temperature::apply(SamplingSupport& s) const {
  if (t_ == 0) {  // greedy: the lowest id among the maxima
    s.keep_best(1);
    s.weight[size_t(s.order[0])] = 1;
    s.total = 1;
    return;
  }
  s.keep_best(s.size);
  // exp((l − max) / T): the best weighs 1 and the rest less, for any T > 0. (As l/T − max/T, a
  // subnormal T made both terms infinite and every weight NaN: garbage text, no error.)
  const double top = static_cast<double>(s.logits[size_t(s.order[0])]);
  s.total = 0;
  for (int64_t i = 0; i < s.size; ++i) {
    const size_t v = size_t(s.order[size_t(i)]);
    s.weight[v] = std::exp((static_cast<double>(s.logits[v]) - top) / t_);
    s.total += s.weight[v];
  }
}

void TopP::apply(SamplingSupport& s) const {
  if (p_ >= 1) return;
  double cum = 0;
  int64_t j = 0;
  while (j < s.size) {
    cum += s.weight[size_t(s.order[size_t(j)])] / s.total;
    ++j;
    if (cum >= p_) break;
  }
  for (int64_t i = j; i < s.size; ++i) s.weight[size_t(s.order[size_t(i)])] = 0;
  s.size = j;
  s.total = 0;
  for (int64_t i = 0; i < s.size; ++i) s.total += s.weight[size_t(s.order[size_t(i)])];
}

LogitsWarperList make_warpers(double temperature, int64_t top_k, double top_p) {
  LogitsWarperList list;
  if (top_k > 0) list.push_back(std::make_unique<TopK>(top_k));
  list.push_back(std::make_unique<Temperature>(temperature));
  if (top_p < 1) list.push_back(std::make_unique<TopP>(top_p));
  return list;
}

Sampler::Sampler(int64_t vocab_size, LogitsWarperList warpers) : warpers_(std::move(warpers)) {
  s_.order.resize(size_t(vocab_size));
  s_.weight.resize(size_t(vocab_size));
}

const std::vector<double>& Sampler::distribution(std::span<const float> logits) {
  s_.logits = logits;
  s_.order.resize(logits.size());
  s_.weight.assign(logits.size(), 0.0);
  s_.size = 0;
  s_.sorted = false;
  for (size_t v = 0; v < logits.size(); ++v)  // tokens with a finite logit
    if (std::isfinite(logits[v])) s_.order[size_t(s_.size++)] = static_cast<int32_t>(v);
  if (s_.size == 0) {  // nothing allowed: fall back to token 0 rather than divide by zero
    s_.order[0] = 0;
    s_.weight[0] = 1;
    s_.size = 1;
    return s_.weight;
  }
  for (const auto& w : warpers_) w->apply(s_);
  for (int64_t i = 0; i < s_.size; ++i) s_.weight[size_t(s_.order[size_t(i)])] /= s_.total;
  return s_.weight;
}

int32_t Sampler::sample(std::span<const float> logits, Rng& rng) {
  distribution(logits);
  if (s_.size == 1) return s_.order[0];
  const double u = rng.uniform();
  double acc = 0;
  for (int64_t i = 0; i < s_.size; ++i) {
    acc += s_.weight[size_t(s_.order[size_t(i)])];
    if (u < acc) return s_.order[size_t(i)];
  }
  return s_.order[size_t(s_.size - 1)];  // u within rounding of 1
}

}  // namespace seqtape
