#pragma once
// The training loop: data → batches → teacher-forced forward → cross-entropy → backward →
// clip → optimizer step, with checkpoints, metrics (train/training_log.h) and validation
// (train/evaluate.h). Used by `seqtape train` and by the tests.
//
// Files written in the output directory:
//   checkpoint.bin   the latest good checkpoint (atomic replace; see io/checkpoint.h)
//   metrics.csv      one row per logged step and per evaluation
//   loss.svg         the training and validation loss curves
//   config.json      the model configuration; vocab.txt the vocabulary

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "model/config.h"
#include "nn/transformer.h"
#include "tensor/matmul_backend.h"
#include "text/tokenizer.h"
#include "train/auto_defaults.h"
#include "train/data_check.h"
#include "train/dataset.h"
#include "train/dist.h"
#include "train/evaluate.h"
#include "train/grad_reducer.h"
#include "train/optim.h"
#include "train/training_log.h"

namespace seqtape {

struct TrainOptions {
  std::string data;        // TSV of source<TAB>target
  std::string valid_data;  // optional TSV; otherwise held out of `data`
  std::string vocab;       // optional vocabulary file; otherwise built from the data
  // The tokenizer of each side: "chars", "words" (whitespace-separated symbols, learned from the
  // data), "spm" (--vocab DIR), or "" (spm with --vocab DIR, chars otherwise). The model shares
  // one vocabulary between the sides: a side of chars matches only its one-character tokens.
  std::string src_tokenizer, tgt_tokenizer;
  std::string out_dir;
  ModelConfig model;                    // vocab_size is filled from the vocabulary...
  bool model_vocab_size_given = false;  // ...and must equal it when this is set (--config)
  // What the data and the time limit choose (train/auto_defaults.h), in place of `model`,
  // `batch_tokens`, `label_smoothing`, the schedule's warmup and kind, and `precision`.
  AutoFill auto_fill;
  // 0: derived from epochs; with neither (and a time_limit), kMaxSteps: until the time limit.
  int64_t steps = 0;
  double epochs = 0;
  static constexpr int64_t kMaxSteps = 1'000'000'000'000;
  int64_t batch = 32;
  // > 0: batches of about this many padded tokens from length-bucketed examples instead of
  // `batch` examples (LoaderOptions::batch_tokens).
  int64_t batch_tokens = 0;
  // Gradient accumulation: each step sums the gradients of `accum` batches, each loss scaled
  // so that the gradient is the mean over all their label tokens (one batch of them all).
  int64_t accum = 1;
  // Its bound: a step holds its `accum` batches at once (their label tokens weight the
  // losses), so an unbounded count grew memory until the machine killed the run.
  static constexpr int64_t kMaxAccum = 4096;
  DType dtype = DType::F32;  // of the model's parameters (float64 for the equivalence tests)
  OptimizerConfig optim;
  // With a budget schedule (wsd, cosine, linear) the learning rate follows the fraction of the
  // run's steps used, or of its time_limit when the run has no step total.
  LrSchedule schedule;
  double clip = 1.0;  // max global gradient norm; 0 disables clipping
  double label_smoothing = 0.0;
  uint64_t seed = 1;
  int threads = 0;  // OpenBLAS threads; 0 keeps the library's default
  // Which library runs the float products, in which precision (tensor/matmul_backend.h).
  // A combination this build or CPU cannot run falls back (bf16 to float32, oneDNN to
  // OpenBLAS) and the log says what oneDNN reported and what the run uses instead.
  kernels::MatmulBackend matmul = kernels::MatmulBackend::OpenBLAS;
  kernels::Precision precision = kernels::Precision::F32;
  // An example longer than the model's max_positions: an error naming file:line, or skipped,
  // or truncated (train/data_check.h; validation examples are skipped rather than truncated,
  // since their references are compared as text).
  TooLong too_long = TooLong::kError;
  double valid_fraction = 0.1;  // held out when no valid_data is given ...
  int64_t valid_max = 500;      // ... at most this many examples
  int64_t log_every = 50;
  int64_t eval_every = 0;  // 0: evaluate at the end only
  int64_t save_every = 500;
  int64_t eval_max = 500;  // examples decoded for exact match
  bool resume = false;
  bool overwrite = false;  // replace the run in out_dir (otherwise refused unless resuming)
  // Seconds of training (wall clock, counted over --resume: a checkpoint keeps the run's time)
  // before saving and stopping; 0 off.
  double time_limit = 0;
  // best.bin: the checkpoint at the best evaluation by this metric ("" none; loss, chrf, bleu,
  // exact, ter). patience: stop after this many evaluations without improvement (0 off).
  std::string best_metric;
  int64_t patience = 0;
  int64_t keep_last = 0;  // also keep the last N periodic checkpoints as checkpoint-STEP.bin
  // At the end, average.bin: the mean of the last N checkpoint-STEP.bin (at least N are kept).
  int64_t average_last = 0;
  int progress = -1;     // -1: a progress bar when stderr is a terminal; 0 off; 1 on
  bool anomaly = false;  // name the first op whose result went non-finite
  // Test hook: called after each step's loss is known, before backward (may poison data).
  std::function<void(int64_t step, TransformerModel&)> before_backward;
  // Called on rank 0 after every step with its statistics and the label tokens per second so
  // far (the Python module's callback). Returning true ends the run after this step as a time
  // limit does: saved and evaluated.
  std::function<bool(const StepStats&, double tokens_per_second)> on_step;

  // Data-parallel training (train/dist.h): the ranks of this run; null or one rank: this
  // process alone, exactly as without MPI. Every rank loads the same data and draws the same
  // global batches; rank r trains on its rows (shard_rows) and the gradients are summed over
  // the ranks, each rank's loss weighted by its share of the global batch's label tokens.
  // Rank 0 alone writes files, logs and evaluates.
  std::shared_ptr<Communicator> comm;
  // > 1: train as this many ranks that are threads of this process (thread_ranks), each with
  // threads / ranks threads for its kernels (at least one): the data parallelism of mpirun
  // without it. Not with mpirun's ranks (comm of more than one rank). 0: chosen, one rank
  // unless auto_fill.model (then one rank per thread, at most 4; train() logs the choice).
  int ranks = 1;
  int64_t bucket_bytes = int64_t{4} << 20;  // gradient allreduce buckets (GradReducer)
  bool overlap = true;                      // start buckets during backward
  int64_t check_sync = 0;       // every N steps, stop if the ranks' parameters differ (0: off)
  bool verify_buckets = false;  // test hook: GradReducer::set_verify
};

struct TrainReport {
  int64_t first_step = 0, last_step = 0;
  std::vector<double> losses;  // one per step run by this call
  std::vector<double> lrs;     // the learning rate of each of those steps
  double seconds = 0;
  double tokens_per_second = 0;
  double padding_fraction = 0;  // of the batches' positions, over this call's steps
  EvalResult valid;
  bool valid_is_train = false;  // too little data to hold any out
  std::string checkpoint;
  std::string average;         // average.bin, with average_last
  int stop_signal = 0;         // SIGINT/SIGTERM that stopped training (saved, not evaluated)
  bool timed_out = false;      // stopped by time_limit
  bool early_stopped = false;  // stopped by patience
  double best_value = 0;       // of best_metric, at best_step (-1: no best.bin)
  int64_t best_step = -1;
  int world_size = 1;      // data-parallel ranks
  ReducerStats allreduce;  // with more than one rank
};

// "" when best_metric and patience can be used with these options, else the problem: an
// unknown metric, or one the run cannot compute (no --eval-every; a decoding metric with
// --eval-max 0). train() refuses such options; the CLI reports them as usage errors.
std::string best_metric_problem(const TrainOptions& opt);
// "" when opt.ranks can be used with opt.comm, else the problem (--ranks with mpirun's ranks).
std::string ranks_problem(const TrainOptions& opt);

TrainReport train(const TrainOptions& opt, std::ostream& log);

}  // namespace seqtape
