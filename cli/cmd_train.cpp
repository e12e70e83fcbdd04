// `seqtape train`, `seqtape gen-copy` and `seqtape export`.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config_flags.h"
#include "nn/memory_budget.h"
#include "train/copy_task.h"
#include "train/envelope.h"
#include "train/export.h"
#include "train/trainer.h"

namespace seqtape::cli {

namespace {

struct TrainArgs {
  TrainOptions o;
  std::string config_file, preset = "default", optimizer = "adam", schedule = "constant";
  ConfigFlags model_flags;  // --d-model, --heads, ...: one per field of nn/config.h's table
  double weight_decay = 0;
  CLI::Option *lr_o, *preset_o;
  bool no_progress = false;
};

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

}  // namespace

void register_train(CLI::App& app, Runner& run) {
  auto a = std::make_shared<TrainArgs>();
  TrainOptions& o = a->o;
  o.schedule.lr = 1e-3;
  CLI::App* sub = app.add_subcommand(
      "train",
      "Train a Transformer (encoder-decoder or decoder-only) on a TSV of source<TAB>target");
  sub->add_option("--data", o.data, "training data: UTF-8 TSV, one source<TAB>target per line")
      ->required();
  sub->add_option("--valid", o.valid_data, "validation TSV (default: hold out part of --data)");
  sub->add_option("--vocab", o.vocab,
                  "vocabulary file, one token per line in id order (default: built from the data "
                  "with <pad> <bos> <eos> <unk> <sep> first)");
  sub->add_option("--out", o.out_dir, "output directory (checkpoint, metrics.csv, loss.svg)")
      ->required();
  a->preset_o =
      sub->add_option("--preset", a->preset, "model preset: seed, default, small, medium, lm")
          ->capture_default_str();
  sub->add_option("--config", a->config_file, "model configuration JSON (instead of --preset)");
  a->model_flags.add_to(sub->add_option_group("model", "override fields of the preset or config"));
  sub->add_option("--steps", o.steps, "optimizer steps (default: from --epochs)");
  sub->add_option("--epochs", o.epochs,
                  "passes over the training data (used when --steps is not given)");
  sub->add_option("--batch", o.batch, "examples per batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  a->lr_o = sub->add_option("--lr", o.schedule.lr, "learning rate (peak, with --warmup)")
                ->capture_default_str();
  sub->add_option("--warmup", o.schedule.warmup,
                  "warmup steps, then inverse-square-root decay (0: constant)")
      ->capture_default_str();
  sub->add_option("--optimizer", a->optimizer, "sgd | momentum | adam | adamw")
      ->capture_default_str();
  sub->add_option("--weight-decay", a->weight_decay, "AdamW decoupled weight decay");
  sub->add_option("--clip", o.clip, "max global gradient norm (0: off)")->capture_default_str();
  sub->add_option("--label-smoothing", o.label_smoothing, "cross-entropy label smoothing")
      ->capture_default_str();
  sub->add_option("--seed", o.seed, "seed of data order, split and dropout")->capture_default_str();
  sub->add_option("--threads", o.threads, "OpenBLAS threads (0: library default)")
      ->capture_default_str();
  sub->add_option("--valid-fraction", o.valid_fraction, "fraction of --data held out")
      ->capture_default_str();
  sub->add_option("--valid-max", o.valid_max, "at most this many held out")->capture_default_str();
  sub->add_option("--log-every", o.log_every, "log a metrics row every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--eval-every", o.eval_every, "evaluate every N steps (0: at the end)")
      ->capture_default_str();
  sub->add_option("--save-every", o.save_every, "checkpoint every N steps (and at the end)")
      ->capture_default_str();
  sub->add_option("--eval-max", o.eval_max, "validation examples greedily decoded for exact match")
      ->capture_default_str();
  sub->add_flag("--resume", o.resume, "continue from <out>/checkpoint.bin (same data and flags)");
  sub->add_flag("--no-progress", a->no_progress, "plain log lines even on a terminal");
  sub->add_flag("--anomaly", o.anomaly,
                "check every op's result and name the first non-finite one");
  sub->callback([&run, a] {
    run = [a] {
      TrainOptions o = a->o;
      if (o.steps < 0 || !(o.epochs >= 0 && std::isfinite(o.epochs)))
        throw UsageError("--steps and --epochs must be >= 0");
      if (o.steps == 0 && o.epochs == 0) throw UsageError("give --steps N or --epochs N");
      // CLI11 saturates an out-of-range integer to INT64_MAX instead of refusing it.
      if (o.steps > 1'000'000'000'000 || o.epochs > 1e9)
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
          o.eval_max < 0 || !(a->weight_decay >= 0 && std::isfinite(a->weight_decay)))
        throw UsageError(
            "--warmup, --valid-max, --eval-every, --save-every, --eval-max and --weight-decay "
            "must be >= 0");
      o.model = build_config(*a);
      o.model_vocab_size_given = a->o.model_vocab_size_given;
      try {
        o.optim.kind = parse_optimizer(a->optimizer);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
      o.optim.weight_decay = a->weight_decay;
      if (o.schedule.warmup > 0) o.schedule.kind = LrSchedule::Kind::WarmupInvSqrt;
      if (a->no_progress) o.progress = 0;
      TrainReport r = train(o, std::cout);
      std::printf("trained steps %lld..%lld in %.2f s (%.0f tokens/s); final loss %.5f\n",
                  static_cast<long long>(r.first_step), static_cast<long long>(r.last_step),
                  r.seconds, r.tokens_per_second, r.losses.empty() ? 0.0 : r.losses.back());
      return kOk;
    };
  });
}

void register_gen_copy(CLI::App& app, Runner& run) {
  struct Args {
    std::string out;
    CopyTaskOptions o;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("gen-copy",
                                     "Generate the copy task: random strings of Chinese "
                                     "characters, held-out split disjoint from training");
  sub->add_option("--out", a->out, "directory for train.tsv, valid.tsv, vocab.txt")->required();
  sub->add_option("--train", a->o.n_train, "training strings")->capture_default_str();
  sub->add_option("--valid", a->o.n_valid, "held-out strings (never in training)")
      ->capture_default_str();
  sub->add_option("--min-len", a->o.min_len, "shortest string")->capture_default_str();
  sub->add_option("--max-len", a->o.max_len, "longest string")->capture_default_str();
  sub->add_option("--seed", a->o.seed, "random seed")->capture_default_str();
  sub->callback([&run, a] {
    run = [a] {
      check_memory_budget(copy_task_memory(a->o), "gen-copy");
      CopyTask t;
      try {
        t = generate_copy_task(a->o);  // its errors are all about the flags
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
      write_copy_task(a->out, t, a->o.alphabet);
      std::printf(
          "wrote %zu training and %zu held-out strings to %s/{train,valid}.tsv and vocab.txt\n",
          t.train.size(), t.valid.size(), a->out.c_str());
      return kOk;
    };
  });
}

void register_export(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, out;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("export",
                                     "Write a checkpoint's weights as safetensors plus config.json "
                                     "and vocab.txt (readable by numpy/PyTorch)");
  sub->add_option("--model", a->model, "checkpoint.bin written by seqtape train")->required();
  sub->add_option("--out", a->out, "output directory")->required();
  sub->callback([&run, a] {
    run = [a] {
      ExportReport r = export_checkpoint(a->model, a->out);
      std::printf("wrote %zu tensors to %s, with config.json and vocab.txt\n", r.tensors,
                  r.safetensors_path.c_str());
      return kOk;
    };
  });
}

}  // namespace seqtape::cli
