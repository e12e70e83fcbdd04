// The logit processors and the list that runs them.
//
// Dimension key: V vocabulary, G tokens generated so far.
#include "infer/processors.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace seqtape {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

void RepetitionPenalty::apply(std::span<float> logits, std::span<const int32_t> generated) const {
  if (penalty_ == 1.f || generated.empty()) return;
  thread_local std::vector<uint8_t> seen;
  seen.assign(logits.size(), 0);
  for (int32_t t : generated) {
    if (t < 0 || size_t(t) >= logits.size() || seen[size_t(t)]) continue;
    seen[size_t(t)] = 1;
    float& l = logits[size_t(t)];
    // A tiny penalty would lift a positive logit to +inf, and the step's log-probabilities to
    // NaN: it stops at the largest float instead (still the sure choice).
    l = l > 0 ? std::min(l / penalty_, std::numeric_limits<float>::max()) : l * penalty_;
  }
}

void NoRepeatNgram::apply(std::span<float> logits, std::span<const int32_t> generated) const {
  const size_t G = generated.size(), n = size_t(n_);
  if (n_ < 1 || G < n) return;  // no complete n-gram yet, nothing can repeat one
  // The n-1 most recent tokens; any earlier n-gram starting with them bans its last token.
  const int32_t* tail = generated.data() + (G - (n - 1));
  for (size_t i = 0; i + n <= G; ++i)
    if (std::equal(tail, tail + (n - 1), generated.data() + i)) {
      const int32_t banned = generated[i + n - 1];
      if (banned >= 0 && size_t(banned) < logits.size()) logits[size_t(banned)] = kNegInf;
    }
}

void MinNewTokens::apply(std::span<float> logits, std::span<const int32_t> generated) const {
  if (static_cast<int64_t>(generated.size()) >= min_new_) return;
  for (int32_t e : end_ids_) logits[size_t(e)] = kNegInf;
}

void SuppressTokens::apply(std::span<float> logits, std::span<const int32_t>) const {
  for (int32_t t : ids_) logits[size_t(t)] = kNegInf;
}

double LogitsProcessorList::process(const float* raw, std::span<float> out,
                                    std::span<const int32_t> generated) const {
  std::copy(raw, raw + out.size(), out.begin());
  for (const auto& p : list_) p->apply(out, generated);
  float mx = *std::max_element(out.begin(), out.end());
  if (mx == kNegInf) {  // every token forbidden: lift the forbidding processors for this step
    std::copy(raw, raw + out.size(), out.begin());
    for (const auto& p : list_)
      if (!p->forbids()) p->apply(out, generated);
    mx = *std::max_element(out.begin(), out.end());
  }
  double s = 0;
  for (float x : out) s += std::exp(static_cast<double>(x) - static_cast<double>(mx));
  return static_cast<double>(mx) + std::log(s);
}

LogitsProcessorList make_processors(const GenerateOptions& o, const std::vector<int32_t>& end_ids) {
  LogitsProcessorList list;
  if (o.repetition_penalty != 1.0)
    list.add(std::make_unique<RepetitionPenalty>(o.repetition_penalty));
  if (o.no_repeat_ngram > 0) list.add(std::make_unique<NoRepeatNgram>(o.no_repeat_ngram));
  if (o.min_new > 0) list.add(std::make_unique<MinNewTokens>(o.min_new, end_ids));
  if (!o.suppress_ids.empty()) list.add(std::make_unique<SuppressTokens>(o.suppress_ids));
  return list;
}

}  // namespace seqtape
