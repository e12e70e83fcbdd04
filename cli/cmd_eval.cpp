// `seqtape eval`: score a checkpoint on a TSV — teacher-forced loss and token accuracy, then
// greedy or beam decodes (infer's generate, one input at a time) scored by exact match, chrF,
// BLEU (as sacreBLEU computes them, train/metrics.h), token error rate over characters and
// sequence error rate. --out writes the hypotheses, one per line in data order.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "infer/model.h"
#include "infer/search.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/envelope.h"
#include "train/evaluate.h"
#include "train/metrics.h"
#include "train/model_io.h"
#include "train/weights.h"

namespace seqtape::cli {

namespace {

struct EvalArgs {
  std::string model, data, out;
  int64_t beam = 1, batch = 32;
  bool json = false;
};

// Teacher-forced loss and token accuracy with the training model built from the checkpoint.
void teacher_forced(const EvalArgs& a, const std::vector<TextPair>& pairs, double& loss,
                    double& accuracy) {
  const Checkpoint c = load_checkpoint(a.model);
  const ModelConfig cfg = checkpoint_config(c, a.model);
  auto model = make_model(cfg);
  load_params_into(*model, c.params, a.model);
  const Vocab vocab = Vocab::from_tokens(c.vocab, a.model);
  const Tokenizer tok(vocab);
  const EncodedPairs enc = encode_pairs(cfg.arch, tok, pairs, a.data);
  loss = validation_loss(*model, enc, a.batch, vocab.pad_id(), &accuracy);
}

int run_eval(const EvalArgs& a) {
  if (a.beam < 1) throw UsageError("--beam must be >= 1");
  if (a.batch < 1) throw UsageError("--batch must be >= 1");
  const std::vector<TextPair> pairs = read_tsv(a.data);
  if (pairs.empty()) fail(a.data, "no examples to evaluate");
  double loss = 0, accuracy = 0;
  teacher_forced(a, pairs, loss, accuracy);

  const InferenceModel model = InferenceModel::load(a.model);
  const Tokenizer tok(model.vocab());
  GenerateOptions o;
  o.beam = a.beam;
  o.max_new = model.config().max_positions;  // capped by max_positions in any case
  metrics::CorpusMetrics scores(metrics::ErrorUnit::kCharacters);
  std::string hyps;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const std::vector<int32_t> ids =
        encode_input(model, tok, pairs[i].source, a.data + ":" + std::to_string(i + 1));
    const GenerateResult r = generate(model, {ids}, o).at(0);
    scores.add(r.text, pairs[i].target);
    hyps += r.text + "\n";
  }
  if (!a.out.empty()) write_file_atomic(a.out, {hyps});
  const metrics::EvalSummary s = scores.summary();
  if (a.json) {
    nlohmann::json j = {{"examples", s.segments}, {"loss", loss},   {"token_accuracy", accuracy},
                        {"exact_match", s.exact}, {"chrf", s.chrf}, {"bleu", s.bleu},
                        {"ter", s.ter},           {"ser", s.ser},   {"beam", a.beam}};
    std::cout << j.dump() << "\n";
  } else {
    std::printf(
        "%lld examples of %s, %s decoding\n"
        "loss %.4f  token accuracy %.2f%%  exact match %.2f%%\n"
        "chrF %.2f  BLEU %.2f  TER %.4f  SER %.4f\n",
        static_cast<long long>(s.segments), a.data.c_str(),
        a.beam > 1 ? ("beam " + std::to_string(a.beam)).c_str() : "greedy", loss, 100 * accuracy,
        100 * s.exact, s.chrf, s.bleu, s.ter, s.ser);
    if (!a.out.empty()) std::printf("wrote %s\n", a.out.c_str());
  }
  return kOk;
}

}  // namespace

void register_eval(CLI::App& app, Runner& run) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand(
      "eval",
      "Score a checkpoint on a TSV: loss, token accuracy, exact match, chrF, BLEU, TER, SER");
  sub->add_option("--model", a->model, "checkpoint.bin (or best.bin) written by seqtape train")
      ->required();
  sub->add_option("--data", a->data, "test data: UTF-8 TSV, one source<TAB>target per line")
      ->required();
  sub->add_option("--beam", a->beam, "beam size (1 = greedy)")->capture_default_str();
  sub->add_option("--batch", a->batch, "examples per batch for the loss")->capture_default_str();
  sub->add_option("--out", a->out, "write the hypotheses here, one per line");
  sub->add_flag("--json", a->json, "print the metrics as one JSON object");
  sub->callback([&run, a] { run = [a] { return run_eval(*a); }; });
}

}  // namespace seqtape::cli
