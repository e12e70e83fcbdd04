#pragma once
// A run directory that cannot be lost or mixed (issue 10, item 6).
//
// RunDir takes an exclusive flock(2) on <out>/.seqtape.lock for the life of the object, so a
// second process writing the same run stops at once (an Error naming the lock file, exit 3),
// and refuses an --out that already holds a run (checkpoint.bin) unless the caller resumes it
// or asked to overwrite it.
//
// run_record() / check_resume() keep what a run was started with in the checkpoint (its
// metrics_json): the model configuration, the optimizer and data-order options and an XXH3-64
// fingerprint of every data file, so that `--resume` with something changed names each
// difference. The schedule length (--steps, --epochs, --time-limit) may change.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace seqtape {

struct TrainOptions;

class RunDir {
 public:
  RunDir(const std::string& out_dir, bool resume, bool overwrite);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  const std::string& lock_path() const { return lock_path_; }

 private:
  std::string lock_path_;
  int fd_ = -1;
};

// XXH3-64 of bytes, as 16 hex digits.
std::string text_fingerprint(std::string_view bytes);
// XXH3-64 of a file's bytes, as 16 hex digits; throws an Error naming an unreadable file.
std::string file_fingerprint(const std::string& path);

// The record of a run's options and data, as stored in the checkpoint. `model_json` is the
// model configuration with its vocab_size filled in; `vocab` the vocabulary's tokens.
nlohmann::json run_record(const TrainOptions& opt, const std::string& model_json,
                          const std::string& vocab_fingerprint);

// Throws an Error naming the checkpoint and every difference between the stored record and
// the current one (nothing to check for checkpoints written before records existed: "{}").
void check_resume(const nlohmann::json& stored, const nlohmann::json& now,
                  const std::string& ckpt_path);

}  // namespace seqtape
