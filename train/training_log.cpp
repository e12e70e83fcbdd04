#include "train/training_log.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/envelope.h"
#include "tensor/tensor.h"
#include "train/plot.h"

namespace seqtape {

namespace fs = std::filesystem;

namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600,
                  (static_cast<int>(s) % 3600) / 60);
  return buf;
}

// A run resumed by a seqtape that writes other metrics.csv columns (ter was the character edit
// rate before it became sacreBLEU's TER) must not append rows under the old header: the old
// file is kept beside it, renamed, and a new one is started. Returns whether it did so.
// Only a regular file is read, and only its first 4096 bytes: a metrics.csv that is a device or
// a FIFO (rows sent elsewhere) has no header to keep, and /dev/zero-like files have no line end.
bool keep_other_columns(const std::string& path, std::ostream& log) {
  if (!fs::is_regular_file(path)) return false;
  std::ifstream in(path);
  std::string header;
  for (char c; header.size() < 4096 && in.get(c) && c != '\n';) header += c;
  if ((header.empty() && !in) || header == kMetricsHeader) return false;
  in.close();
  const fs::path kept = fs::path(path).parent_path() / "metrics-old-columns.csv";
  if (fs::exists(kept))
    fail(path, "has other columns than this seqtape writes, and " + kept.string() +
                   " (where it would be kept) exists: move one of them away");
  fs::rename(path, kept);
  log << path << " had other columns (" << header << "); kept as " << kept.string()
      << ", new rows go to a new " << path << "\n";
  return true;
}

}  // namespace

TrainingLog::TrainingLog(const std::string& out_dir, bool append, bool bar, int64_t log_every,
                         int64_t first_step, int64_t total_steps, std::ostream& log,
                         double until_time_limit)
    : metrics_path_(out_dir.empty() ? "" : (fs::path(out_dir) / "metrics.csv").string()),
      svg_path_(out_dir.empty() ? "" : (fs::path(out_dir) / "loss.svg").string()),
      bar_(bar),
      log_every_(log_every),
      first_step_(first_step),
      total_steps_(total_steps),
      log_(log),
      until_time_limit_(until_time_limit > 0),
      time_limit_(until_time_limit) {
  if (metrics_path_.empty()) return;  // a data-parallel rank other than 0: no files
  if (append && fs::exists(metrics_path_) && !keep_other_columns(metrics_path_, log)) {
    metrics_.open(metrics_path_, std::ios::app);
  } else {
    metrics_.open(metrics_path_);
    metrics_ << kMetricsHeader << "\n";
  }
  if (!metrics_) fail(metrics_path_, "cannot open for writing");
  metrics_.precision(17);  // losses round-trip exactly: resumed runs are compared bit for bit
}

double TrainingLog::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void TrainingLog::step(const StepStats& s) {
  tokens_ += s.label_tokens;
  window_loss_ += s.loss;
  ++window_n_;
  const double elapsed = seconds();
  const double tps = elapsed > 0 ? static_cast<double>(tokens_) / elapsed : 0.0;
  const bool log_now = s.step % log_every_ == 0 || s.step == total_steps_ || s.step == first_step_;
  if (log_now) {
    metrics_ << s.step << ",train," << window_loss_ / static_cast<double>(window_n_) << "," << s.lr
             << "," << s.grad_norm << "," << tps << "," << elapsed << ",,,,,,,,,\n";
    check_written();
  }
  if (bar_)
    progress(s, elapsed, tps);
  else if (log_now)
    plain_line(s, elapsed, tps);
  if (log_now) window_loss_ = 0, window_n_ = 0;
}

void TrainingLog::progress(const StepStats& s, double elapsed, double tps) const {
  const double done = until_time_limit_ ? std::min(1.0, elapsed / time_limit_)
                                        : static_cast<double>(s.step - first_step_ + 1) /
                                              static_cast<double>(total_steps_ - first_step_ + 1);
  const int width = 24, fill = static_cast<int>(done * width);
  std::fprintf(stderr, "\r[%s%s] step %s  loss %.4f  %.0f tok/s  ETA %s   ",
               std::string(static_cast<size_t>(fill), '#').c_str(),
               std::string(static_cast<size_t>(width - fill), '.').c_str(), step_of(s.step).c_str(),
               s.loss, tps, fmt_seconds(done > 0 ? elapsed / done - elapsed : 0).c_str());
}

std::string TrainingLog::step_of(int64_t step) const {
  return until_time_limit_ ? std::to_string(step)
                           : std::to_string(step) + "/" + std::to_string(total_steps_);
}

void TrainingLog::plain_line(const StepStats& s, double elapsed, double tps) const {
  char buf[200];
  std::snprintf(buf, sizeof buf, "step %s  loss %.4f  lr %.2e  |g| %.3f  %.0f tok/s  elapsed %s\n",
                step_of(s.step).c_str(), window_loss_ / static_cast<double>(window_n_), s.lr,
                s.grad_norm, tps, fmt_seconds(elapsed).c_str());
  log_ << buf << std::flush;
}

void TrainingLog::evaluation(int64_t step, const EvalResult& ev, bool announce) {
  metrics_ << step << ",valid," << ev.loss << ",,,,," << ev.exact_match << "," << ev.token_accuracy
           << "," << ev.chrf << "," << ev.bleu << "," << ev.cer << "," << ev.ser << "," << ev.wer
           << "," << ev.per << "," << ev.ter << "\n";
  check_written();
  if (!announce) return;
  break_line();
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "eval at step %lld: validation loss %.4f, token accuracy %.2f%%, exact match "
                "%.2f%% of %lld, chrF %.2f, BLEU %.2f, TER %.2f, WER %.4f, PER %.4f, CER %.4f, "
                "SER %.4f\n",
                static_cast<long long>(step), ev.loss, 100 * ev.token_accuracy,
                100 * ev.exact_match, static_cast<long long>(ev.examples), ev.chrf, ev.bleu, ev.ter,
                ev.wer, ev.per, ev.cer, ev.ser);
  log_ << buf;
}

void TrainingLog::break_line() const {
  if (bar_) std::fprintf(stderr, "\n");
}

void TrainingLog::check_written() {
  if (metrics_path_.empty()) return;
  metrics_.flush();
  if (!metrics_) fail(metrics_path_, "write failed (disk full or file not writable)");
}

std::string TrainingLog::finish() {
  if (metrics_path_.empty()) return "";
  metrics_.close();
  if (metrics_.fail()) fail(metrics_path_, "write failed when closing (disk full?)");
  const std::string svg = loss_curve_svg(read_loss_series(metrics_path_), "seqtape training loss");
  write_file_atomic(svg_path_, {svg});
  return metrics_path_ + ", " + svg_path_;
}

}  // namespace seqtape
