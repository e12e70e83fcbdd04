#pragma once
// TrainingLog: what a training run reports as it goes — metrics.csv (one row per logged step
// and per evaluation), the progress bar on a terminal or plain log lines otherwise, and
// loss.svg at the end.

#include <chrono>
#include <cstdint>
#include <fstream>
#include <ostream>
#include <string>

#include "train/evaluate.h"

namespace seqtape {

// What one optimizer step produced.
struct StepStats {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int64_t label_tokens = 0;
};

// metrics.csv's columns: the first eight as before; the validation metrics after them.
inline constexpr const char* kMetricsHeader =
    "step,kind,loss,lr,grad_norm,tokens_per_s,elapsed_s,exact_match,token_accuracy,chrf,bleu,"
    "cer,ser,wer,per,ter";

class TrainingLog {
 public:
  // Appends to <out_dir>/metrics.csv when `append` and the file exists (a resumed run),
  // otherwise starts it with its header. Steps first_step..total_steps are expected; a row is
  // logged every log_every steps, at the first and at the last. bar: a progress bar on stderr.
  // An empty out_dir writes no files (the data-parallel ranks other than 0).
  // until_time_limit > 0: the run has no step total and ends after that many seconds, so
  // progress and ETA are measured against the time and no step total is shown.
  TrainingLog(const std::string& out_dir, bool append, bool bar, int64_t log_every,
              int64_t first_step, int64_t total_steps, std::ostream& log,
              double until_time_limit = 0);

  void step(const StepStats& s);
  // A validation row; `announce` also reports it in the log (evaluations between steps).
  void evaluation(int64_t step, const EvalResult& ev, bool announce);
  // Ends the progress bar's line, so that a message starts on a fresh one.
  void break_line() const;

  double seconds() const;                     // since construction
  int64_t tokens() const { return tokens_; }  // label tokens of the steps logged
  // Closes metrics.csv and draws loss.svg from it (each write checked: an Error names the
  // file); returns the two paths for the log.
  std::string finish();

 private:
  void progress(const StepStats& s, double elapsed, double tps) const;
  void plain_line(const StepStats& s, double elapsed, double tps) const;
  std::string step_of(int64_t step) const;  // "120/4000", or "120" when run to the time limit
  void check_written();                     // an Error naming metrics.csv when a write failed

  std::string metrics_path_, svg_path_;
  std::ofstream metrics_;
  bool bar_;
  int64_t log_every_, first_step_, total_steps_;
  std::ostream& log_;
  bool until_time_limit_;  // no step total: progress is elapsed / time_limit_
  double time_limit_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  int64_t tokens_ = 0;
  double window_loss_ = 0;  // mean loss over the steps since the last logged row
  int64_t window_n_ = 0;
};

}  // namespace seqtape
