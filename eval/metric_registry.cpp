#include "eval/metric_registry.h"

namespace seqtape::metrics {

const std::vector<Metric>& metric_registry() {
  // clang-format off
  static const std::vector<Metric> kMetrics = {
      {"loss", "loss", true, true, [](const Scores& s) { return s.loss; }},
      {"chrf", "chrf", false, false, [](const Scores& s) { return s.decoded.chrf; }},
      {"bleu", "bleu", false, false, [](const Scores& s) { return s.decoded.bleu; }},
      {"exact", "exact_match", false, false, [](const Scores& s) { return s.decoded.exact; }},
      {"ter", "ter", true, false, [](const Scores& s) { return s.decoded.ter; }},
      {"wer", "wer", true, false, [](const Scores& s) { return s.decoded.wer; }},
      {"per", "per", true, false, [](const Scores& s) { return s.decoded.per; }},
      {"cer", "cer", true, false, [](const Scores& s) { return s.decoded.cer; }},
      {"ser", "ser", true, false, [](const Scores& s) { return s.decoded.ser; }},
      {"token_accuracy", "token_accuracy", false, true,
       [](const Scores& s) { return s.token_accuracy; }},
  };
  // clang-format on
  return kMetrics;
}

const Metric* find_metric(std::string_view name) {
  for (const Metric& m : metric_registry())
    if (name == m.name) return &m;
  return nullptr;
}

std::string metric_names(const char* separator) {
  std::string s;
  for (const Metric& m : metric_registry()) s += (s.empty() ? "" : separator) + std::string(m.name);
  return s;
}

}  // namespace seqtape::metrics
