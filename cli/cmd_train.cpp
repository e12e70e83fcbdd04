// `seqtape train`.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "autograd/profile.h"
#include "cli/commands.h"
#include "train/trainer.h"

namespace seqtape::cli {

namespace {

struct TrainArgs {
  TrainOptions o;
  std::string config_file, preset = "default", optimizer = "adam", schedule = "constant";
  std::string arch, activation, norm, pos;
  int64_t d_model = 0, heads = 0, enc_layers = 0, dec_layers = 0, ffn = 0, max_positions = 0;
  double pe_base = 0, dropout = 0, weight_decay = 0;
  bool tie = false;
  uint64_t init_seed = 0;
  CLI::Option *d_model_o, *heads_o, *enc_o, *dec_o, *ffn_o, *maxpos_o, *pe_base_o, *dropout_o,
      *tie_o, *init_seed_o, *lr_o, *preset_o;
  bool no_progress = false;
  bool profile = false;
  std::string time_limit;
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

void apply_flags(const TrainArgs& a, ModelConfig& c) {
  if (!a.arch.empty()) c.arch = parse_arch(a.arch);
  if (!a.activation.empty()) c.activation = parse_activation(a.activation);
  if (!a.norm.empty()) c.norm = parse_norm_placement(a.norm);
  if (!a.pos.empty()) c.pos_encoding = parse_pos_encoding(a.pos);
  if (a.d_model_o->count()) c.d_model = a.d_model;
  if (a.heads_o->count()) c.n_heads = a.heads;
  if (a.enc_o->count()) c.n_encoder_layers = a.enc_layers;
  if (a.dec_o->count()) c.n_decoder_layers = a.dec_layers;
  if (a.ffn_o->count()) c.d_ff = a.ffn;
  if (a.maxpos_o->count()) c.max_positions = a.max_positions;
  if (a.pe_base_o->count()) c.pe_base = a.pe_base;
  if (a.dropout_o->count()) c.dropout = a.dropout;
  if (a.tie_o->count()) c.tie_output = a.tie;
  if (a.init_seed_o->count()) c.init_seed = a.init_seed;
  if (c.arch == Arch::DecoderOnly && !a.enc_o->count()) c.n_encoder_layers = 0;
}

// A bad --config file is a data error; a bad preset name or flag value (checked here by
// validating the result) is a usage error.
ModelConfig build_config(TrainArgs& a) {
  ModelConfig c;
  if (!a.config_file.empty()) {
    if (a.preset_o->count()) throw UsageError("give --config or --preset, not both");
    std::error_code ec;
    if (std::filesystem::is_directory(a.config_file, ec))
      fail(a.config_file, "is a directory, not a configuration file");
    std::ifstream in(a.config_file);
    if (!in) fail(a.config_file, "cannot open the configuration file");
    try {
      c = ModelConfig::from_json(nlohmann::json::parse(in));
    } catch (const nlohmann::json::exception& e) {
      fail(a.config_file, std::string("invalid JSON: ") + e.what());
    } catch (const Error& e) {
      fail(a.config_file, e.what());  // name the file the bad value is in
    }
  }
  try {
    if (a.config_file.empty()) c = preset(a.preset, 2);  // vocab_size is set from the vocabulary
    apply_flags(a, c);
    c.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  return c;
}

// Flag values CLI11 cannot check by itself; each is a usage error naming the flag.
void check_training_flags(const TrainOptions& o, double weight_decay) {
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
      o.eval_max < 0 || !(weight_decay >= 0 && std::isfinite(weight_decay)))
    throw UsageError(
        "--warmup, --valid-max, --eval-every, --save-every, --eval-max and --weight-decay "
        "must be >= 0");
}

// The optimization, data-order, logging and checkpointing flags.
void add_training_options(CLI::App& sub, TrainArgs& a) {
  sub.add_option("--steps", a.o.steps, "optimizer steps (default: from --epochs)");
  sub.add_option("--epochs", a.o.epochs,
                 "passes over the training data (used when --steps is not given)");
  sub.add_option("--batch", a.o.batch, "examples per batch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  a.lr_o = sub.add_option("--lr", a.o.schedule.lr, "learning rate (peak, with --warmup)")
               ->capture_default_str();
  sub.add_option("--warmup", a.o.schedule.warmup,
                 "warmup steps, then inverse-square-root decay (0: constant)")
      ->capture_default_str();
  sub.add_option("--optimizer", a.optimizer, "sgd | momentum | adam | adamw")
      ->capture_default_str();
  sub.add_option("--weight-decay", a.weight_decay, "AdamW decoupled weight decay");
  sub.add_option("--clip", a.o.clip, "max global gradient norm (0: off)")->capture_default_str();
  sub.add_option("--label-smoothing", a.o.label_smoothing, "cross-entropy label smoothing")
      ->capture_default_str();
  sub.add_option("--seed", a.o.seed, "seed of data order, split and dropout")
      ->capture_default_str();
  sub.add_option("--threads", a.o.threads, "OpenBLAS threads (0: library default)")
      ->capture_default_str();
  sub.add_option("--valid-fraction", a.o.valid_fraction, "fraction of --data held out")
      ->capture_default_str();
  sub.add_option("--valid-max", a.o.valid_max, "at most this many held out")->capture_default_str();
  sub.add_option("--log-every", a.o.log_every, "log a metrics row every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub.add_option("--eval-every", a.o.eval_every, "evaluate every N steps (0: at the end)")
      ->capture_default_str();
  sub.add_option("--save-every", a.o.save_every, "checkpoint every N steps (and at the end)")
      ->capture_default_str();
  sub.add_option("--eval-max", a.o.eval_max, "validation examples greedily decoded for exact match")
      ->capture_default_str();
  sub.add_flag("--resume", a.o.resume, "continue from <out>/checkpoint.bin (same data and flags)");
  sub.add_flag("--overwrite", a.o.overwrite, "replace the run already in --out");
  sub.add_option("--time-limit", a.time_limit,
                 "stop training after this wall-clock time (90s, 20m, 1.5h), then save and "
                 "evaluate");
  sub.add_option("--best-metric", a.o.best_metric,
                 "keep best.bin, the checkpoint of the best evaluation: loss | chrf | bleu | exact "
                 "| ter (needs --eval-every)");
  sub.add_option("--patience", a.o.patience,
                 "stop after N evaluations without improving --best-metric (0: off)")
      ->capture_default_str();
  sub.add_option("--keep-last", a.o.keep_last,
                 "also keep the last N periodic checkpoints as checkpoint-STEP.bin (0: none)")
      ->capture_default_str();
  sub.add_flag("--no-progress", a.no_progress, "plain log lines even on a terminal");
  sub.add_flag("--anomaly", a.o.anomaly,
               "check every op's result and name the first non-finite one");
  sub.add_flag("--profile", a.profile,
               "print the time per op kind (forward, backward), optimizer, clipping, data and "
               "allocation as a share of the step");
}

int run_train(TrainArgs& a) {
  TrainOptions o = a.o;
  check_training_flags(o, a.weight_decay);
  o.model = build_config(a);
  try {
    o.optim.kind = parse_optimizer(a.optimizer);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  o.optim.weight_decay = a.weight_decay;
  if (o.schedule.warmup > 0) o.schedule.kind = LrSchedule::Kind::WarmupInvSqrt;
  if (a.no_progress) o.progress = 0;
  if (!a.time_limit.empty()) o.time_limit = parse_duration(a.time_limit);
  if (o.patience < 0 || o.keep_last < 0)
    throw UsageError("--patience and --keep-last must be >= 0");
  if (o.resume && o.overwrite) throw UsageError("give --resume or --overwrite, not both");
  if (const std::string p = best_metric_problem(o); !p.empty()) throw UsageError(p);
  profile::set_enabled(a.profile);
  TrainReport r = train(o, std::cout);
  std::printf("trained steps %lld..%lld in %.2f s (%.0f tokens/s); final loss %.5f\n",
              static_cast<long long>(r.first_step), static_cast<long long>(r.last_step), r.seconds,
              r.tokens_per_second, r.losses.empty() ? 0.0 : r.losses.back());
  if (a.profile) std::fputs(profile::report("training step profile").c_str(), stdout);
  if (r.stop_signal != 0) return 128 + r.stop_signal;  // 130 for SIGINT, 143 for SIGTERM
  return kOk;
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
  auto* g = sub->add_option_group("model", "override fields of the preset or config");
  g->add_option("--arch", a->arch, "seq2seq | decoder_only");
  a->d_model_o = g->add_option("--d-model", a->d_model, "model width");
  a->heads_o = g->add_option("--heads", a->heads, "attention heads");
  a->enc_o = g->add_option("--enc-layers", a->enc_layers, "encoder layers");
  a->dec_o = g->add_option("--dec-layers", a->dec_layers, "decoder layers");
  a->ffn_o = g->add_option("--ffn", a->ffn, "feed-forward width");
  g->add_option("--activation", a->activation, "relu | gelu | tanh");
  g->add_option("--norm", a->norm, "post | pre | none (LayerNorm placement)");
  g->add_option("--pos", a->pos, "sinusoidal | learned | none");
  a->pe_base_o =
      g->add_option("--pe-base", a->pe_base, "sinusoidal PE base (the reference uses 100)");
  a->dropout_o = g->add_option("--dropout", a->dropout, "dropout probability");
  a->tie_o = g->add_flag("--tie", a->tie, "tie the output projection to the embedding");
  a->maxpos_o = g->add_option("--max-positions", a->max_positions, "longest sequence");
  a->init_seed_o = g->add_option("--init-seed", a->init_seed, "seed of the weight initialization");
  add_training_options(*sub, *a);
  sub->callback([&run, a] { run = [a] { return run_train(*a); }; });
}

}  // namespace seqtape::cli
