#pragma once
// Evaluation of a training model on held-out pairs: teacher-forced loss, and infer/'s cached
// greedy decoding scored by exact match and the other metrics. The trainer calls evaluate() between
// steps and at the end; the greedy decodes are returned so that further metrics can score the same
// outputs.
//
// Dimension key: B batch, T positions, V vocabulary.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "eval/metric_registry.h"
#include "infer/model.h"
#include "nn/transformer.h"
#include "text/tokenizer.h"
#include "train/dataset.h"

namespace seqtape {

struct EvalResult {
  double loss = 0;            // teacher-forced cross-entropy per label token, over every line
  double token_accuracy = 0;  // teacher-forced argmax == label, per label token, 0..1
  double exact_match = 0;     // fraction of greedy decodes equal to one of their references
  int64_t examples = 0;       // sources decoded (consecutive lines with one source are one)
  // Scores of the greedy decodes against every reference of their source (eval/metrics.h):
  // chrF (order 6 β 2), BLEU (13a, exp smoothing) and TER as sacreBLEU computes them, 0..100;
  // WER (sources with no reference matched), PER (edits over space-separated symbols), CER
  // (edits over characters), both to the closest reference, and the sequence error rate over
  // characters (fractions).
  double chrf = 0, bleu = 0, ter = 0, wer = 0, per = 0, cer = 0, ser = 0;
  std::vector<std::string> hypotheses;  // the decoded texts, one per source, in data order
  // The first few greedy decodes, as (source, decoded text), to show what the model does.
  std::vector<std::pair<std::string, std::string>> samples;
  // The figures above as the metric registry reads them (eval/metric_registry.h).
  metrics::Scores scores() const;
};

// Greedy decoding without a cache on the training model (TransformerModel::greedy_uncached
// with the vocabulary's special ids): the reference the inference module is checked against.
// Returns the generated ids without <bos>, ending before <eos>.
std::vector<std::vector<int32_t>> greedy_uncached(TransformerModel& model, const Vocab& vocab,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int64_t max_new);

// Cross-entropy per label token over every pair, `batch` at a time, in evaluation mode;
// `token_accuracy` (optional) receives the teacher-forced argmax accuracy.
double validation_loss(TransformerModel& model, const EncodedPairs& data, int64_t batch,
                       int32_t pad_id, double* token_accuracy = nullptr);

// The training model's parameters as an InferenceModel, nothing written to a file, packed for
// decoding (WeightLayout::Decode): evaluation decodes with the decoder `seqtape generate` and
// `seqtape eval` use.
InferenceModel inference_view(const TransformerModel& model, const Vocab& vocab);

// Greedy decodes of the pairs `which` (each up to 2·|target| + 8 tokens), `batch` at a time.
std::vector<std::vector<int32_t>> greedy_decodes(const InferenceModel& model,
                                                 const EncodedPairs& data, int64_t batch,
                                                 const std::vector<size_t>& which);

// Loss over all of `data`, the decoded metrics over its first eval_max sources (group_sources,
// taken as they come: a caller checks an evaluation file's grouping up front), the text read
// through the model's codec (its SentencePiece model, or CharCodec for a character vocabulary).
EvalResult evaluate(TransformerModel& model, const TextCodec& codec,
                    const std::vector<TextPair>& data, int64_t batch, int64_t eval_max);

}  // namespace seqtape
