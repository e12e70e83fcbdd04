#pragma once
// The metrics an evaluation reports, by name: `seqtape eval` (its --json keys), periodic
// evaluation during training and --best-metric read this one table, so a new metric is a field
// of EvalSummary, its computation in CorpusMetrics and one row here.

#include <string>
#include <string_view>
#include <vector>

#include "eval/metrics.h"

namespace seqtape::metrics {

// Everything one evaluation scores: the teacher-forced figures of a model over every line, and
// the scores of its decoded outputs.
struct Scores {
  double loss = 0;            // cross-entropy per label token
  double token_accuracy = 0;  // argmax == label, per label token, 0..1
  EvalSummary decoded;
};

struct Metric {
  const char* name;  // --best-metric's value
  const char* key;   // the key in `seqtape eval --json`
  bool lower_is_better;
  bool teacher_forced;  // from the teacher-forced pass, not from decoded outputs
  double (*value)(const Scores& s);
};

// In the order --best-metric lists them.
const std::vector<Metric>& metric_registry();
// The metric called `name`, or nullptr.
const Metric* find_metric(std::string_view name);
// "loss, chrf, bleu, ..." in registry order.
std::string metric_names(const char* separator = ", ");

}  // namespace seqtape::metrics
