// `seqtape train`.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <new>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "cli/output_paths.h"
#include "eval/metric_registry.h"
#include "io/envelope.h"
#include "model/memory_budget.h"
#include "tensor/profile.h"
#include "train/trainer.h"

namespace seqtape::cli {

namespace {

struct TrainArgs {
  TrainOptions o;
  std::string config_file, preset = "default", optimizer = "adam", schedule = "auto";
  ConfigFlags model_flags;  // --d-model, --heads, ...: one per field of model/config.h's table
  double weight_decay = 0;
  CLI::Option *lr_o, *preset_o;
  CLI::App* app = nullptr;  // the subcommand, to ask which flags were given
  bool no_progress = false;
  bool profile = false;
  std::string too_long = "error";
  std::string time_limit;
  std::string tokenizer;  // both sides, unless --src-tokenizer / --tgt-tokenizer say otherwise
  double bucket_mb = 4;
  bool no_overlap = false;
  double collective_timeout = 300;
  // oneDNN's float32 products where this build has it: as reproducible and resumable as
  // OpenBLAS's (each route's bits depend on --threads only), and the faster of the two in
  // bench_train's training steps (docs/cli.md, "Matrix products").
  std::string matmul = kernels::onednn_info().built ? "onednn" : "openblas";
  std::string precision = "f32";
};

// "90", "90s", "20m", "1.5h" -> seconds; a usage error otherwise.
double parse_duration(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : 0;
  if (used == 0 || scale == 0 || !(v > 0) || !std::isfinite(v))
    throw UsageError("--time-limit must be a duration > 0 such as 90s, 20m or 1.5h (got '" + text +
                     "')");
  return v * scale;
}

// A bad --config file is a data error; a bad preset name or flag value (checked here by
// validating the result) is a usage error.
ModelConfig build_config(TrainArgs& a) {
  ModelConfig c;
  if (!a.config_file.empty()) {
    if (a.preset_o->count()) throw UsageError("give --config or --preset, not both");
    const std::string text = read_user_file(a.config_file, "configuration file", kMaxConfigBytes);
    try {
      const nlohmann::json j = nlohmann::json::parse(text);
      // Without vocab_size the vocabulary gives it; a given one must agree with it (train()).
      a.o.model_vocab_size_given = j.is_object() && j.contains("vocab_size");
      c = ModelConfig::from_json(j, /*need_vocab_size=*/false);
    } catch (const nlohmann::json::exception& e) {
      fail(a.config_file, std::string("invalid JSON: ") + e.what());
    } catch (const Error& e) {
      fail(a.config_file, e.what());  // name the file the bad value is in
    }
  }
  try {
    if (a.config_file.empty()) c = preset(a.preset, 0);  // vocab_size: from the vocabulary
    a.model_flags.apply(c);
    c.validate(/*need_vocab_size=*/false);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return c;
}

// Flag values CLI11 cannot check by itself; each is a usage error naming the flag.
void check_training_flags(const TrainOptions& o, double weight_decay) {
  if (o.steps < 0 || !(o.epochs >= 0 && std::isfinite(o.epochs)))
    throw UsageError("--steps and --epochs must be >= 0");
  if (o.steps == 0 && o.epochs == 0 && o.time_limit <= 0)
    throw UsageError("give --steps N, --epochs N or --time-limit T");
  // CLI11 saturates an out-of-range integer to INT64_MAX instead of refusing it.
  if (o.steps > TrainOptions::kMaxSteps || o.epochs > 1e9)
    throw UsageError("--steps must be at most 10^12 and --epochs at most 10^9");
  if (!(o.schedule.lr > 0 && std::isfinite(o.schedule.lr)))
    throw UsageError("--lr must be a finite number > 0");
  if (!(o.clip >= 0 && std::isfinite(o.clip))) throw UsageError("--clip must be >= 0");
  if (o.threads < 0) throw UsageError("--threads must be >= 0");
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1))
    throw UsageError("--label-smoothing must be in [0, 1)");
  if (!(o.valid_fraction >= 0 && o.valid_fraction < 1))
    throw UsageError("--valid-fraction must be in [0, 1)");
  if (o.schedule.warmup < 0 || o.valid_max < 0 || o.eval_every < 0 || o.save_every < 0 ||
      o.eval_max < 0 || !(weight_decay >= 0 && std::isfinite(weight_decay)))
    throw UsageError(
        "--warmup, --valid-max, --eval-every, --save-every, --eval-max and --weight-decay "
        "must be >= 0");
}

// The optimization, data-order, logging and checkpointing flags.
void add_training_options(CLI::App& sub, TrainArgs& a) {
  sub.add_option("--steps", a.o.steps,
                 "optimizer steps (default: from --epochs; with neither, until --time-limit)");
  sub.add_option("--epochs", a.o.epochs,
                 "passes over the training data (used when --steps is not given)");
  sub.add_option("--batch", a.o.batch, "examples per batch")
      ->capture_default_str()
      ->check(at_least(1));
  sub.add_option("--batch-tokens", a.o.batch_tokens,
                 "batches of about N padded tokens from length-sorted pools instead of --batch "
                 "examples (0: off)")
      ->capture_default_str()
      ->check(at_least(0));
  sub.add_option("--accum", a.o.accum,
                 "gradient accumulation: each step sums the gradients of K batches (the mean "
                 "over all their label tokens)")
      ->capture_default_str()
      ->check(in_range(1, TrainOptions::kMaxAccum));
  a.lr_o = sub.add_option("--lr", a.o.schedule.lr, "learning rate (peak, with --warmup)")
               ->capture_default_str();
  sub.add_option("--warmup", a.o.schedule.warmup,
                 "warmup steps (linear, from 0 to --lr), then the --schedule")
      ->capture_default_str();
  sub.add_option("--schedule", a.schedule,
                 "learning rate after warmup: constant | inv-sqrt (inverse square root) | wsd "
                 "(warmup-stable-decay: --lr, then a straight line to --min-lr over the last "
                 "--decay-fraction of the budget) | cosine | linear (to --min-lr at the end of the "
                 "budget). The budget is --steps or --epochs, else the --time-limit (wall clock, "
                 "counted over --resume). auto: wsd when the model is chosen for the data (see "
                 "--preset), else inv-sqrt with --warmup, constant without")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "constant", "inv-sqrt", "wsd", "cosine", "linear"}));
  sub.add_option("--decay-fraction", a.o.schedule.decay_fraction,
                 "wsd: the last fraction of the budget, in (0, 1], over which the rate decays")
      ->capture_default_str();
  sub.add_option("--min-lr", a.o.schedule.min_lr,
                 "wsd, cosine, linear: the rate at the end of the budget, in [0, --lr]")
      ->capture_default_str();
  sub.add_option("--optimizer", a.optimizer, optimizer_names(" | "))->capture_default_str();
  sub.add_option("--weight-decay", a.weight_decay,
                 "weight decay: decoupled in adamw and lion, an L2 term in the others");
  sub.add_option("--clip", a.o.clip, "max global gradient norm (0: off)")->capture_default_str();
  sub.add_option("--label-smoothing", a.o.label_smoothing, "cross-entropy label smoothing")
      ->capture_default_str();
  sub.add_option("--seed", a.o.seed, "seed of data order, split and dropout")
      ->capture_default_str();
  sub.add_option("--threads", a.o.threads,
                 "threads for BLAS and the other ops of a step (0: OpenBLAS's default)")
      ->capture_default_str();
  sub.add_option("--too-long", a.too_long,
                 "an example longer than max_positions: error (naming file:line), skip, or "
                 "truncate (validation examples are skipped, not truncated)")
      ->capture_default_str()
      ->check(CLI::IsMember({"error", "skip", "truncate"}));
  sub.add_option("--valid-fraction", a.o.valid_fraction, "fraction of --data held out")
      ->capture_default_str();
  sub.add_option("--valid-max", a.o.valid_max, "at most this many held out")->capture_default_str();
  sub.add_option("--log-every", a.o.log_every, "log a metrics row every N steps")
      ->capture_default_str()
      ->check(at_least(1));
  sub.add_option("--eval-every", a.o.eval_every, "evaluate every N steps (0: at the end)")
      ->capture_default_str();
  sub.add_option("--save-every", a.o.save_every, "checkpoint every N steps (and at the end)")
      ->capture_default_str();
  sub.add_option("--eval-max", a.o.eval_max,
                 "validation sources greedily decoded for the metrics (exact match, chrF, BLEU, "
                 "TER, WER, PER, CER, SER)")
      ->capture_default_str();
  sub.add_flag("--resume", a.o.resume,
               "continue from <out>/checkpoint.bin: the data, model, batches and optimizer must be "
               "the run's own (a difference is named); --steps, --epochs, --time-limit and how to "
               "log, evaluate, save and compute may change");
  sub.add_flag("--overwrite", a.o.overwrite,
               "replace the run already in --out: once the new run is set up, the old run's "
               "checkpoints (checkpoint.bin, best.bin, checkpoint-STEP.bin), metrics.csv, "
               "loss.svg and spm.model are removed");
  sub.add_option("--time-limit", a.time_limit,
                 "stop training after this wall-clock time (90s, 20m, 1.5h), then save and "
                 "evaluate; alone (no --steps or --epochs) it sets the length of the run");
  sub.add_option(
      "--best-metric", a.o.best_metric,
      "keep best.bin, the checkpoint of the best evaluation: " + metrics::metric_names(" | ") +
          " (loss and the error rates lower, the others higher; needs --eval-every)");
  sub.add_option("--patience", a.o.patience,
                 "stop after N evaluations without improving --best-metric (0: off)")
      ->capture_default_str();
  sub.add_option("--keep-last", a.o.keep_last,
                 "also keep the last N periodic checkpoints as checkpoint-STEP.bin (0: none)")
      ->capture_default_str();
  sub.add_option("--average-last", a.o.average_last,
                 "at the end, write average.bin, the mean of the weights of the last N "
                 "checkpoint-STEP.bin (keeps at least N; see --save-every) (0: none)")
      ->capture_default_str()
      ->check(in_range(0, 1000000));
  sub.add_option("--matmul", a.matmul,
                 "library for the float matrix products: onednn (the default where this build has "
                 "oneDNN), openblas, or auto (per shape, whichever was faster when first timed in "
                 "this process; not bit-reproducible across runs)")
      ->capture_default_str();
  sub.add_option("--precision", a.precision,
                 "f32, or bf16: mixed precision, matrix-product operands rounded to bfloat16 on "
                 "the CPU's bf16 units (oneDNN) with float32 accumulation, weights, optimizer, "
                 "softmax, LayerNorm, loss and checkpoints")
      ->capture_default_str();
  sub.add_flag("--no-progress", a.no_progress, "plain log lines even on a terminal");
  sub.add_flag("--anomaly", a.o.anomaly,
               "check every op's result and name the first non-finite one");
  sub.add_flag("--profile", a.profile,
               "print the time per op kind (forward, backward), optimizer, clipping, data and "
               "allocation as a share of the step");
  CLI::App& dp = *sub.add_option_group(
      "data-parallel",
      "--ranks N, or under mpirun -np N: every rank trains on 1/N of each global batch");
  a.o.ranks = 0;  // chosen (train()), unless given
  dp.add_option("--ranks", a.o.ranks,
                "train as N data-parallel ranks that are threads of this process, each with "
                "1/N of --threads (without mpirun; 2 ranks of 1 thread train small models "
                "faster than 1 process of 2 threads). 0: 1, except when no model flag is "
                "given and --time-limit is: then one rank per thread, at most 4")
      ->capture_default_str()
      ->check(in_range(0, 256));
  dp.add_option("--bucket-mb", a.bucket_mb, "gradient allreduce bucket size in MiB, in (0, 1024]")
      ->capture_default_str();
  dp.add_flag("--no-overlap", a.no_overlap,
              "start the gradient allreduce after backward, not during it (for measuring)");
  dp.add_option("--check-sync", a.o.check_sync,
                "every N steps compare a checksum of the parameters across ranks and stop on a "
                "difference (0: off)")
      ->capture_default_str()
      ->check(at_least(0));
  dp.add_option("--collective-timeout", a.collective_timeout,
                "seconds a collective may wait for the other ranks before the job is stopped "
                "(0: no limit)")
      ->capture_default_str();
}

// What every data-parallel rank's own error says first.
std::string rank_prefix(const Communicator& comm) {
  return comm.who() + ": ";
}

int train_and_report(const TrainArgs& a, const TrainOptions& o);

// The files a run writes into --out (and --overwrite replaces) are never its --data or --valid.
// (--vocab and --config are written back there with what was read from them.)
void check_train_outputs(const TrainOptions& o) {
  namespace fs = std::filesystem;
  const std::vector<FlagPath> inputs = {{"--data", o.data}, {"--valid", o.valid_data}};
  std::vector<std::string> names = {"checkpoint.bin", "best.bin",    "config.json", "vocab.txt",
                                    "spm.model",      "metrics.csv", "loss.svg"};
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(o.out_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("checkpoint-") && name.ends_with(".bin")) names.push_back(name);
  }
  for (const std::string& name : names)
    check_not_an_input({"--out", (fs::path(o.out_dir) / name).string()}, inputs);
}

// No model given at all and a time budget: the data and the time choose the model and the
// training settings the user left out (train/auto_defaults.h).
AutoFill auto_fill_of(const TrainArgs& a, const TrainOptions& o) {
  AutoFill f;
  if (a.preset_o->count() || !a.config_file.empty() || a.model_flags.any_given() ||
      o.time_limit <= 0 || o.steps != 0 || o.epochs != 0)
    return f;
  auto given = [&](const char* flag) { return a.app->count(flag) > 0; };
  f.model = true;
  f.batch = !given("--batch") && !given("--batch-tokens");
  f.label_smoothing = !given("--label-smoothing");
  f.warmup = !given("--warmup");
  f.schedule = a.schedule == "auto";
  f.precision = !given("--precision") && !given("--matmul");
  return f;
}

int run_train(TrainArgs& a) {
  TrainOptions o = a.o;
  if (!a.time_limit.empty()) o.time_limit = parse_duration(a.time_limit);
  check_training_flags(o, a.weight_decay);
  o.model = build_config(a);
  o.model_vocab_size_given = a.o.model_vocab_size_given;
  o.auto_fill = auto_fill_of(a, o);
  try {
    o.optim.kind = find_optimizer(a.optimizer).name;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  o.optim.weight_decay = a.weight_decay;
  o.schedule.kind = a.schedule == "auto" ? (o.schedule.warmup > 0 ? LrSchedule::Kind::WarmupInvSqrt
                                                                  : LrSchedule::Kind::Constant)
                                         : parse_schedule(a.schedule);
  if (!(o.schedule.decay_fraction > 0 && o.schedule.decay_fraction <= 1))
    throw UsageError("--decay-fraction must be in (0, 1]");
  if (!(o.schedule.min_lr >= 0 && o.schedule.min_lr <= o.schedule.lr))
    throw UsageError("--min-lr must be in [0, --lr]");
  if (a.no_progress) o.progress = 0;
  if (o.src_tokenizer.empty()) o.src_tokenizer = a.tokenizer;
  if (o.tgt_tokenizer.empty()) o.tgt_tokenizer = a.tokenizer;
  o.too_long = parse_too_long(a.too_long);
  if (o.patience < 0 || o.keep_last < 0)
    throw UsageError("--patience and --keep-last must be >= 0");
  if (o.resume && o.overwrite) throw UsageError("give --resume or --overwrite, not both");
  check_train_outputs(o);
  if (const std::string p = best_metric_problem(o); !p.empty()) throw UsageError(p);
  if (!(a.bucket_mb > 0 && a.bucket_mb <= 1024))
    throw UsageError("--bucket-mb must be a size in MiB in (0, 1024] (got " +
                     std::to_string(a.bucket_mb) + ")");
  if (!(a.collective_timeout >= 0 && std::isfinite(a.collective_timeout)))
    throw UsageError("--collective-timeout must be a number of seconds >= 0 (0: no limit)");
  auto flag = [](const char* name, auto parse, const std::string& text) {
    try {
      return parse(text);
    } catch (const Error& e) {
      throw UsageError(std::string(name) + ": " + e.what());
    }
  };
  o.matmul = flag("--matmul", kernels::parse_matmul_backend, a.matmul);
  o.precision = flag("--precision", kernels::parse_precision, a.precision);
  profile::set_enabled(a.profile);
  o.bucket_bytes = static_cast<int64_t>(a.bucket_mb * 1024 * 1024);
  o.overlap = !a.no_overlap;
  const std::shared_ptr<Communicator> comm = world_communicator();
  comm->set_timeout(a.collective_timeout);
  o.comm = comm;
  if (const std::string p = ranks_problem(o); !p.empty()) throw UsageError(rank_prefix(*comm) + p);
  if (comm->size() == 1) return train_and_report(a, o);
  // Several ranks: a rank that fails says so, naming itself, and stops the whole job (the
  // others would wait for it in the next collective); rank 0's checkpoint is written atomically
  // and stays as it was.
  const int code = run_guarded("seqtape train", [&] {
    try {
      return train_and_report(a, o);
    } catch (const UsageError& e) {
      throw UsageError(rank_prefix(*comm) + e.what());
    } catch (const Error& e) {
      throw Error(rank_prefix(*comm) + e.what());
    } catch (const std::filesystem::filesystem_error& e) {
      throw Error(rank_prefix(*comm) + e.what());
    } catch (const std::bad_alloc&) {
      throw Error(rank_prefix(*comm) +
                  "out of memory while training (use smaller sizes, or free memory)");
    } catch (const std::exception& e) {
      throw std::runtime_error(rank_prefix(*comm) + e.what());
    }
  });
  if (code != kOk && code < 128) comm->abort(code);
  comm->barrier();  // rank 0 may still be evaluating: wait for it before MPI_Finalize
  return code;
}

int train_and_report(const TrainArgs& a, const TrainOptions& o) {
  TrainReport r = train(o, std::cout);
  if (o.comm->rank() != 0) return r.stop_signal != 0 ? 128 + r.stop_signal : kOk;
  std::printf("trained steps %lld..%lld in %.2f s (%.0f tokens/s)",
              static_cast<long long>(r.first_step), static_cast<long long>(r.last_step), r.seconds,
              r.tokens_per_second);
  if (!r.losses.empty()) {
    // The last log line's loss is the mean over its logging window (the steps since the
    // previous line): name both figures.
    int64_t prev = r.first_step - 1;
    for (int64_t st = r.first_step; st < r.last_step; ++st)
      if (st % o.log_every == 0 || st == r.first_step) prev = st;
    double sum = 0;
    for (int64_t st = prev + 1; st <= r.last_step; ++st)
      sum += r.losses[static_cast<size_t>(st - r.first_step)];
    std::printf(
        "; loss of the last batch %.5f, mean over the last logging window (steps "
        "%lld..%lld) %.5f",
        r.losses.back(), static_cast<long long>(prev + 1), static_cast<long long>(r.last_step),
        sum / static_cast<double>(r.last_step - prev));
  }
  std::printf("\n");
  if (r.world_size > 1) {
    const ReducerStats& ar = r.allreduce;
    const double steps = static_cast<double>(std::max<int64_t>(1, ar.steps));
    const double step_s = r.seconds / steps;
    std::printf(
        "allreduce over %d ranks: %.2f MB of gradients per step in %lld buckets, %.1f of them "
        "started during backward; %.3f ms per step waiting for it (%.1f%% of the step), %.3f ms "
        "packing and starting\n",
        r.world_size, static_cast<double>(ar.bytes) / 1e6, static_cast<long long>(ar.buckets),
        static_cast<double>(ar.overlapped) / steps, 1e3 * ar.wait_seconds / steps,
        step_s > 0 ? 100 * ar.wait_seconds / steps / step_s : 0.0, 1e3 * ar.launch_seconds / steps);
  }
  if (a.profile) std::fputs(profile::report("training step profile").c_str(), stdout);
  if (r.stop_signal != 0) return 128 + r.stop_signal;  // 130 for SIGINT, 143 for SIGTERM
  return kOk;
}

}  // namespace

void register_train(CLI::App& app, Runner& run, TrainStepHook on_step) {
  auto a = std::make_shared<TrainArgs>();
  TrainOptions& o = a->o;
  o.on_step = std::move(on_step);
  o.schedule.lr = 1e-3;
  CLI::App* sub = app.add_subcommand(
      "train",
      "Train a Transformer (encoder-decoder or decoder-only) on a TSV of source<TAB>target");
  a->app = sub;
  sub->add_option("--data", o.data, "training data: UTF-8 TSV, one source<TAB>target per line")
      ->required();
  sub->add_option("--valid", o.valid_data, "validation TSV (default: hold out part of --data)");
  sub->add_option("--vocab", o.vocab,
                  "a character vocabulary file, one token per line in id order, or a directory "
                  "written by `seqtape vocab` (a joint SentencePiece model, spm.model; the "
                  "checkpoint carries it) (default: characters of the data, with <pad> <bos> "
                  "<eos> <unk> <sep> first)");
  const auto tokenizers = CLI::IsMember({"chars", "words", "spm"});
  sub->add_option("--tokenizer", a->tokenizer,
                  "how both sides' text becomes tokens: chars, words (whitespace-separated "
                  "symbols, e.g. phonemes; output words joined by one space) or spm (the "
                  "SentencePiece model of --vocab DIR) (default: spm with --vocab DIR, else chars)")
      ->check(tokenizers);
  sub->add_option("--src-tokenizer", o.src_tokenizer,
                  "the source side's tokenizer (chars or words), overriding --tokenizer")
      ->check(tokenizers);
  sub->add_option("--tgt-tokenizer", o.tgt_tokenizer,
                  "the target side's tokenizer (chars or words), overriding --tokenizer; e.g. "
                  "--tgt-tokenizer words for grapheme-to-phoneme. The model shares one "
                  "vocabulary: characters of the chars side, words of the words side; the "
                  "checkpoint and exports keep the choice for generate, eval and serve")
      ->check(tokenizers);
  sub->add_option("--out", o.out_dir, "output directory (checkpoint, metrics.csv, loss.svg)")
      ->required();
  a->preset_o =
      sub->add_option("--preset", a->preset,
                      "model preset: seed, default, small, medium, lm. Default: with --time-limit "
                      "alone as the budget and no --config or model flag, a model sized for the "
                      "data and the time, with dropout, label smoothing, token batches, warmup "
                      "and the wsd schedule chosen too where not given (the log names the "
                      "choice; docs/recipes.md); otherwise `default`");
  sub->add_option("--config", a->config_file, "model configuration JSON (instead of --preset)");
  a->model_flags.add_to(sub->add_option_group("model", "override fields of the preset or config"));
  add_training_options(*sub, *a);
  sub->footer(
      "Examples:\n"
      "  seqtape train --data datasets/reference/copy.tsv --preset seed --steps 300 --lr 0.02 "
      "--out runs/ref\n"
      "  seqtape train --data train.tsv --valid valid.tsv --preset small --epochs 20 --out runs/a\n"
      "  seqtape vocab --data train.tsv --type unigram --size 4000 --out vocab/ && \\\n"
      "    seqtape train --data train.tsv --vocab vocab/ --batch-tokens 4096 --accum 2 --steps "
      "5000 --out runs/sp\n"
      "  seqtape train --data train.tsv --too-long skip --steps 1000 --out runs/b   skip examples "
      "longer than max_positions\n"
      "  seqtape train --data train.tsv --steps 2000 --out runs/a --resume     continue runs/a\n"
      "  seqtape train --data train.tsv --time-limit 30m --warmup 400 --schedule wsd --out runs/w"
      "   decay to --min-lr as the 30 minutes run out");
  sub->callback([&run, a] { run = [a] { return run_train(*a); }; });
}

}  // namespace seqtape::cli
