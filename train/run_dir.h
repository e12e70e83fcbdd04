#pragma once
// A run directory that cannot be lost or mixed.
//
// RunDir takes an exclusive flock(2) on <out>/.seqtape.lock for the life of the object, so a
// second process writing the same run stops at once (an Error naming the lock file, exit 3),
// and refuses an --out that already holds a run (any of its checkpoints: checkpoint.bin,
// best.bin, checkpoint-STEP.bin) unless the caller resumes it or asked to overwrite it; then
// remove_replaced_run() clears the replaced run's files, so that the new run's checkpoints are
// never mixed with the old one's.
//
// What a run was started with is kept in its checkpoints and compared on --resume by
// train/run_options.h, over the fingerprints of its files computed here.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace seqtape {

class RunDir {
 public:
  RunDir(const std::string& out_dir, bool resume, bool overwrite);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

 private:
  std::string lock_path_;
  int fd_ = -1;
};

// XXH3-64 of bytes, as 16 hex digits.
std::string text_fingerprint(std::string_view bytes);
// XXH3-64 of a file's bytes, as 16 hex digits; throws an Error naming an unreadable file.
std::string file_fingerprint(const std::string& path);

// STEP of a periodic checkpoint's file name "checkpoint-STEP.bin"; -1 for any other name.
int64_t periodic_checkpoint_step(const std::string& name);

// The checkpoint files of a run present in out_dir (checkpoint.bin, best.bin and
// checkpoint-STEP.bin), whatever they hold.
std::vector<std::string> run_checkpoint_files(const std::string& out_dir);

// --overwrite, once the new run is set up and before it writes anything: removes the files the
// replaced run wrote that the new one might not replace: its checkpoints (each only if it is a
// seqtape checkpoint), metrics.csv (only with seqtape's header), then, if these showed a run
// was there, its loss.svg and spm.model, and the temp files its killed saves left. Nothing else
// in out_dir is touched. Returns the names removed, in order; an Error names a file that could
// not be removed.
std::vector<std::string> remove_replaced_run(const std::string& out_dir);

// A save killed mid-write leaves its temp file ("<path>.tmp.<pid>.<n>", see write_file_atomic)
// behind. Removes those whose writer is gone, so repeated crashes cannot fill the disk; returns
// how many.
int remove_stale_temp_files(const std::string& path);

}  // namespace seqtape
