#pragma once
// What `seqtape train --data D --time-limit T` chooses when the user gives no model (no
// --preset, no --config, no model flag): a model and its training settings sized for the data
// and the budget. The rule (docs/recipes.md, "Defaults that fit the data"):
//
//   - the model is the largest rung of a ladder of encoder-decoders (d64 2+2 ... d512 6+6)
//     that the budget trains on at least kMinTokensPerParam label tokens per parameter (the
//     compute-optimal trade of model size against tokens seen, as in Hoffmann et al. 2022,
//     at half their ratio for these small models) and whose parameters are at most
//     kMaxParamsPerToken per label token of the training data (small data, small model);
//   - the estimate is a fixed rate of parameter-tokens per second per thread, never a timing,
//     so the same command picks the same model on every run (it errs small on a fast CPU);
//   - the GELU activation, dropout 0.1, label smoothing 0.1, token batches sized to the data,
//     a warmup of 5% of the estimated steps (at most 400), and the warmup-stable-decay schedule
//     keyed to the budget.
//
// Only what the user left out is chosen; --resume takes the run's own choice from its
// checkpoint, whatever the time limit is now.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/config.h"

namespace seqtape {

// Which of the run's values are left to the data and the budget (TrainOptions::auto_fill).
struct AutoFill {
  bool model = false;
  bool batch = false;  // neither --batch nor --batch-tokens was given
  bool label_smoothing = false;
  bool warmup = false;
  bool schedule = false;
  bool precision = false;  // neither --precision nor --matmul was given
  bool any() const { return model || batch || label_smoothing || warmup || schedule; }
};

struct AutoInput {
  int64_t examples = 0;
  int64_t label_tokens = 0;  // of one pass over the training data (targets and end markers)
  double seconds = 0;        // the time budget
  int threads = 1;           // of every rank together (a rank is worth at least a thread)
  bool bf16 = false;         // products in bfloat16 (--precision bf16)
  // --batch-tokens when given (0: chosen), for the estimate of the steps that sets the warmup
  int64_t batch_tokens = 0;
  int ranks = 1;  // data-parallel ranks (mpirun -np N), for the log line
};

struct AutoChoice {
  ModelConfig model;  // a rung of the ladder, GELU, dropout 0.1, vocab_size 0 (the vocabulary)
  int64_t batch_tokens = 0;
  int64_t warmup = 0;
  double label_smoothing = 0.1;
  double epochs = 0;    // the passes over the data the estimate expects within the budget
  std::string summary;  // one log line naming the choice and why
};

inline constexpr double kMinTokensPerParam = 10;
inline constexpr double kMaxParamsPerToken = 10;
// The largest batch the defaults choose, in padded positions (--batch-tokens). A budget of
// minutes trains a small model for few steps, and there more, smaller steps learn more from the
// same tokens: against 4096, the recipes' runs (docs/recipes.md) gained on phrase translation
// and lost nothing on grapheme-to-phoneme, at about the same tokens per second.
inline constexpr int64_t kMaxBatchTokens = 2048;

AutoChoice choose_auto(const AutoInput& in);

struct TrainOptions;

// Fills what o.auto_fill leaves to the data (the training pairs' label tokens) and o.time_limit.
void apply_auto(TrainOptions& o, const AutoChoice& c);

// The training settings the defaults fill, as o holds them after apply_auto, each given one
// marked "(given)": the second half of the log's line (fill_auto in trainer.cpp).
std::string auto_settings(const TrainOptions& o);

// Fills what o.auto_fill leaves open from the record a run stored in its checkpoint (the
// checkpoint's "run" object), so that a resumed run keeps the choice it was started with.
void apply_auto_record(TrainOptions& o, const nlohmann::json& run, const std::string& ckpt_path);

}  // namespace seqtape
