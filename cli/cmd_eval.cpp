// `seqtape eval`: score a checkpoint on a TSV — teacher-forced loss and token accuracy over
// every line, then greedy or beam decodes of each source (consecutive lines with the same
// source are one source with several references; infer's batched generate, --batch-size inputs at a
// time, with a progress line on a terminal) scored against all its references by exact match,
// chrF, BLEU and TER (as sacreBLEU computes them, eval/metrics.h), WER, PER, the character
// edit rate (CER) and the sequence error rate. --out writes the hypotheses, one per source in
// data order.
// --copy-baseline scores the sources themselves as hypotheses: the floor a model has to clear.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/compute_type.h"
#include "cli/decoding_flags.h"
#include "cli/input_guards.h"
#include "cli/output_paths.h"
#include "eval/metric_registry.h"
#include "eval/metrics.h"
#include "infer/load.h"
#include "infer/model.h"
#include "infer/quant_io.h"
#include "infer/search.h"
#include "io/envelope.h"
#include "train/dataset.h"
#include "train/evaluate.h"
#include "train/model_io.h"

namespace seqtape::cli {

namespace {

struct EvalArgs {
  std::string model, data, out;
  std::string compute_type;  // of the decoding ("" when not given); the loss is float32
  DecodingFlags decoding;    // --beam and --length-penalty, from the table of decoding options
  int64_t batch = 32;
  bool json = false;
  bool copy_baseline = false;
};

// Prints the decoding metrics (and the teacher-forced ones, when there is a model).
void print_scores(const EvalArgs& a, const metrics::EvalSummary& s, const double* loss,
                  const double* accuracy, const std::string& decoding) {
  if (a.json) {
    const metrics::Scores scores{loss ? *loss : 0, accuracy ? *accuracy : 0, s};
    nlohmann::json j = {{"examples", s.segments}};
    for (const metrics::Metric& m : metrics::metric_registry())
      if (!m.teacher_forced || (loss && accuracy)) j[m.key] = m.value(scores);
    if (a.copy_baseline) {
      j["copy_baseline"] = true;
    } else {
      j["beam"] = a.decoding.o.beam;
      j["length_penalty"] = a.decoding.o.length_penalty;
    }
    std::cout << j.dump() << "\n";
    return;
  }
  std::printf("%lld sources of %s, %s\n", static_cast<long long>(s.segments), a.data.c_str(),
              decoding.c_str());
  if (loss && accuracy) std::printf("loss %.4f  token accuracy %.2f%%  ", *loss, 100 * *accuracy);
  std::printf("exact match %.2f%%\nchrF %.2f  BLEU %.2f  TER %.2f\n", 100 * s.exact, s.chrf, s.bleu,
              s.ter);
  std::printf("WER %.4f  PER %.4f  CER %.4f  SER %.4f\n", s.wer, s.per, s.cer, s.ser);
  if (!a.out.empty()) std::printf("wrote %s\n", a.out.c_str());
}

// Every source copied as its hypothesis.
int run_copy_baseline(const EvalArgs& a, const std::vector<TextPair>& pairs,
                      const std::vector<SourceGroup>& groups) {
  std::vector<std::string> sources;
  std::vector<std::vector<std::string>> references;
  std::string hyps;
  for (const SourceGroup& g : groups) {
    sources.push_back(pairs[g.first].source);
    references.push_back(references_of(pairs, g));
    hyps += sources.back() + "\n";
  }
  const metrics::EvalSummary s = metrics::copy_baseline(sources, references);
  if (!a.out.empty()) write_file_atomic(a.out, {hyps});
  print_scores(a, s, nullptr, nullptr, "copy-the-source baseline");
  return kOk;
}

// Teacher-forced loss and token accuracy with a training model built from the model's files,
// the text encoded by its own codec (the SentencePiece model it trained with, or characters).
// A quantized export's matrices enter the (float32) training model dequantized.
void teacher_forced(const EvalArgs& a, const ModelFiles& f, const std::vector<TextPair>& pairs,
                    double& loss, double& accuracy) {
  auto model = make_model(f.cfg);
  std::vector<NamedTensor> params = f.params;
  for (NamedTensor& t : dequantized(f.quantized)) params.push_back(std::move(t));
  load_params_into(*model, params, f.where);
  const EncodedPairs enc = encode_pairs(f.cfg.arch, *f.codec, pairs, a.data);
  loss = validation_loss(*model, enc, a.batch, f.vocab.pad_id(), &accuracy);
}

int run_eval(const EvalArgs& a) {
  // eval's own wording of --beam's range (docs/bad_inputs.md); then the table's checks.
  if (a.decoding.o.beam < 1) throw UsageError("--beam must be >= 1");
  check_decoding_flags(a.decoding);
  if (a.batch < 1) throw UsageError("--batch-size must be >= 1");
  if (a.copy_baseline && !a.model.empty())
    throw UsageError("--copy-baseline scores the sources themselves; drop --model");
  if (!a.copy_baseline && a.model.empty())
    throw UsageError("--model is required (or --copy-baseline)");
  if (!a.out.empty()) {
    std::vector<FlagPath> inputs = model_inputs("--model", a.model);
    inputs.push_back({"--data", a.data});
    check_not_an_input({"--out", a.out}, inputs);
  }
  const std::vector<TextPair> pairs = read_tsv(a.data);
  if (pairs.empty()) fail(a.data, "no examples to evaluate");
  const std::vector<SourceGroup> groups = group_sources(pairs, a.data, true);
  if (!a.out.empty()) check_can_save(a.out);  // before the decoding, not after it
  if (a.copy_baseline) return run_copy_baseline(a, pairs, groups);
  // Checked whole (configuration, weights, tokenizer) as the decoding model first.
  const ModelFiles f = read_model_files(a.model);
  // The teacher-forced pass feeds a decoder-only model source <sep> target: without the token
  // (the F15 model's vocabulary) a TSV pair has no meaning for it.
  if (f.cfg.arch != Arch::Seq2Seq && !f.vocab.maybe_sep_id())
    fail(f.where,
         "is a decoder-only model whose vocabulary has no <sep> token: eval scores TSV "
         "pairs as source <sep> target, which this model cannot read (decode its "
         "prompts with generate instead)");
  const InferenceModel model(f.cfg, f.vocab, f.params, f.where, WeightLayout::Decode, f.codec,
                             chosen_compute_type(a.compute_type, f.compute), f.quantized);
  GenerateOptions o = a.decoding.o;
  o.max_new = model.config().max_positions;  // capped by max_positions in any case
  // Every source encoded, and the decoding's memory (--beam hypotheses of the longest source)
  // checked, before the teacher-forced pass: a bad line or a beam too large for the machine is
  // refused at once.
  std::vector<std::vector<int32_t>> sources;  // one per source group
  size_t longest = 0;
  for (const SourceGroup& g : groups) {
    const TextPair& p = pairs[g.first];
    sources.push_back(
        encode_input(model, model.codec(), p.source, a.data + ":" + std::to_string(p.line)));
    longest = std::max(longest, sources.back().size());
  }
  // --batch-size sources decoded at once (infer's batched generate: a row decodes to the tokens it
  // gives alone), in order of length so that a batch's rows finish close together.
  const size_t batch = static_cast<size_t>(std::min<int64_t>(a.batch, int64_t(groups.size())));
  check_decoding_budget(model, longest, o, "eval", batch);
  double loss = 0, accuracy = 0;
  teacher_forced(a, f, pairs, loss, accuracy);

  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return sources[x].size() < sources[y].size(); });
  std::vector<std::string> texts(groups.size());
  const bool progress = !a.json && isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t first = 0; first < order.size(); first += batch) {
    const size_t last = std::min(order.size(), first + batch);
    std::vector<std::vector<int32_t>> chunk;
    for (size_t k = first; k < last; ++k) chunk.push_back(sources[order[k]]);
    const std::vector<GenerateResult> rs = generate(model, chunk, o);
    for (size_t k = first; k < last; ++k) texts[order[k]] = rs[k - first].text;
    if (progress) {
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\rdecoded %zu/%zu sources (%.0f%%) in %.1f s", last, order.size(),
                   100.0 * double(last) / double(order.size()), sec);
      if (last == order.size()) std::fprintf(stderr, "\n");
    }
  }
  metrics::CorpusMetrics scores(metrics::ErrorUnit::kCharacters);
  std::string hyps;
  for (size_t k = 0; k < groups.size(); ++k) {
    scores.add(texts[k], references_of(pairs, groups[k]));
    hyps += texts[k] + "\n";
  }
  if (!a.out.empty()) write_file_atomic(a.out, {hyps});
  char decoding[96] = "greedy decoding";
  if (o.beam > 1)
    std::snprintf(decoding, sizeof decoding, "beam %lld decoding, length penalty %g",
                  static_cast<long long>(o.beam), o.length_penalty);
  print_scores(a, scores.summary(), &loss, &accuracy, decoding);
  return kOk;
}

}  // namespace

void register_eval(CLI::App& app, Runner& run) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = app.add_subcommand(
      "eval",
      "Score a checkpoint on a TSV: loss, token accuracy, exact match, chrF, BLEU, TER, WER, "
      "PER, CER, SER");
  sub->add_option("--model", a->model,
                  "checkpoint.bin (or best.bin) written by seqtape train, its run directory "
                  "(checkpoint.bin), or a directory written by seqtape export (required unless "
                  "--copy-baseline)");
  sub->add_option("--data", a->data,
                  "test data: UTF-8 TSV, one source<TAB>target per line; consecutive lines with "
                  "the same source are one source with several references")
      ->required();
  add_decoding_flags(sub, a->decoding, {"beam", "length_penalty"});
  add_compute_type_option(sub, a->compute_type);
  sub->add_option("--batch-size", a->batch,
                  "examples per batch, for the loss and for decoding (decoded in order of "
                  "length; each gives what it gives alone)")
      ->capture_default_str();
  // The old spelling, kept out of --help for the scripts that use it; generate says --batch-size.
  sub->add_option("--batch", a->batch)->group("");
  sub->add_option("--out", a->out, "write the hypotheses here, one per source");
  sub->add_flag("--json", a->json, "print the metrics as one JSON object");
  sub->add_flag("--copy-baseline", a->copy_baseline,
                "score the sources themselves as the hypotheses (no model): the floor a trained "
                "model has to clear");
  sub->callback([&run, a] { run = [a] { return run_eval(*a); }; });
}

}  // namespace seqtape::cli
