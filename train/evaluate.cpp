#include "train/evaluate.h"

#include <algorithm>

#include "eval/metrics.h"
#include "infer/search.h"
#include "nn/loss.h"
#include "train/model_io.h"

namespace seqtape {

std::vector<std::vector<int32_t>> greedy_uncached(TransformerModel& model, const Vocab& vocab,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int64_t max_new) {
  return model.greedy_uncached(prompts, {vocab.bos_id(), vocab.eos_id(), vocab.pad_id()}, max_new);
}

double validation_loss(TransformerModel& model, const EncodedPairs& data, int64_t batch,
                       int32_t pad_id, double* token_accuracy) {
  NoGradGuard no_grad;
  TrainingModeGuard eval_mode(model, false);
  Rng rng(0);  // unused: no dropout in evaluation mode
  double loss_sum = 0;
  int64_t tokens = 0;
  metrics::TokenAccuracy acc;
  for (const Batch& b : batches_in_order(data, batch, pad_id)) {
    const Var logits = model.logits(b, rng);  // [B, T, V]
    loss_sum += sequence_loss(logits, b.labels).item() * static_cast<double>(b.n_label_tokens);
    tokens += b.n_label_tokens;
    if (token_accuracy) {
      const std::vector<double> l = logits.value().to_vector();
      const auto V = static_cast<size_t>(logits.value().dim(-1));
      std::vector<int32_t> argmax(b.labels.size());
      for (size_t i = 0; i < argmax.size(); ++i) {
        const auto row = l.begin() + static_cast<std::ptrdiff_t>(i * V);
        argmax[i] =
            static_cast<int32_t>(std::max_element(row, row + static_cast<std::ptrdiff_t>(V)) - row);
      }
      acc.add(argmax, b.labels, kIgnoreIndex);
    }
  }
  if (token_accuracy) *token_accuracy = acc.value();
  return tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
}

InferenceModel inference_view(const TransformerModel& model, const Vocab& vocab) {
  return InferenceModel(model.config(), vocab, named_tensors(model), "the training model",
                        WeightLayout::Decode);
}

std::vector<std::vector<int32_t>> greedy_decodes(const InferenceModel& model,
                                                 const EncodedPairs& data, int64_t batch,
                                                 const std::vector<size_t>& which) {
  std::vector<std::vector<int32_t>> out;
  for (size_t s = 0; s < which.size(); s += static_cast<size_t>(batch)) {
    const size_t e = std::min(which.size(), s + static_cast<size_t>(batch));
    std::vector<std::vector<int32_t>> chunk;
    int64_t longest = 0;
    for (size_t k = s; k < e; ++k) {
      chunk.push_back(data.prompt(which[k]));
      longest = std::max<int64_t>(longest, static_cast<int64_t>(data.target(which[k]).size()));
    }
    GenerateOptions greedy;
    greedy.max_new = 2 * longest + 8;
    for (GenerateResult& got : generate(model, chunk, greedy)) out.push_back(std::move(got.tokens));
  }
  return out;
}

metrics::Scores EvalResult::scores() const {
  metrics::Scores s;
  s.loss = loss, s.token_accuracy = token_accuracy;
  s.decoded.segments = examples, s.decoded.exact = exact_match;
  s.decoded.chrf = chrf, s.decoded.bleu = bleu, s.decoded.ter = ter;
  s.decoded.wer = wer, s.decoded.per = per, s.decoded.cer = cer, s.decoded.ser = ser;
  return s;
}

EvalResult evaluate(TransformerModel& model, const TextCodec& tok,
                    const std::vector<TextPair>& data, int64_t batch, int64_t eval_max) {
  EvalResult r;
  if (data.empty()) return r;
  const Vocab& vocab = tok.vocab();
  const EncodedPairs encoded = encode_pairs(model.config().arch, tok, data, "validation");
  r.loss = validation_loss(model, encoded, batch, vocab.pad_id(), &r.token_accuracy);
  std::vector<SourceGroup> groups = group_sources(data, "validation", false);
  groups.resize(std::min(groups.size(), static_cast<size_t>(std::max<int64_t>(0, eval_max))));
  std::vector<size_t> firsts;
  for (const SourceGroup& g : groups) firsts.push_back(g.first);
  const auto decoded = greedy_decodes(inference_view(model, vocab), encoded, batch, firsts);
  metrics::CorpusMetrics scores(metrics::ErrorUnit::kCharacters);
  int64_t hits = 0;
  for (size_t k = 0; k < decoded.size(); ++k) {
    const SourceGroup& g = groups[k];
    bool hit = false;
    for (size_t i = g.first; i < g.first + g.count; ++i)
      hit = hit || decoded[k] == encoded.target(i);
    hits += hit;
    r.hypotheses.push_back(tok.decode(decoded[k]));
    scores.add(r.hypotheses.back(), references_of(data, g));
    if (r.samples.size() < 3) r.samples.emplace_back(data[g.first].source, r.hypotheses.back());
  }
  r.examples = static_cast<int64_t>(decoded.size());
  r.exact_match = r.examples ? static_cast<double>(hits) / static_cast<double>(r.examples) : 0.0;
  const metrics::EvalSummary sum = scores.summary();
  r.chrf = sum.chrf, r.bleu = sum.bleu, r.ter = sum.ter, r.cer = sum.cer, r.ser = sum.ser;
  r.wer = sum.wer, r.per = sum.per;
  return r;
}

}  // namespace seqtape
